//! KEY on the command line: a full key, or the short prefix the logs print, resolved to one
//! record.

use std::fmt::Write as _;

use idem_tools_runtime::store::{Record, Store};
use idem_tools_runtime::{Error, Key};

use crate::error::CliError;
use crate::output::{namespace_label, state_name};

/// Hex digits of a full key.
const FULL: usize = 64;
/// The fewest hex digits accepted as a prefix.
const MIN_PREFIX: usize = 4;
/// Candidates listed when a prefix is ambiguous.
const MAX_CANDIDATES: usize = 20;

/// A parsed KEY argument.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum KeyArg {
    /// All 64 hex digits.
    Full(Key),
    /// A prefix of 4 to 63 lowercase hex digits.
    Prefix(String),
}

/// What KEY names in the store.
#[derive(Debug)]
pub enum Found {
    /// A readable record.
    Record(Box<Record>),
    /// A full key whose record cannot be decoded; it can still be removed.
    Corrupt(Key, Error),
}

impl Found {
    /// The key found.
    pub fn key(&self) -> Key {
        match self {
            Found::Record(record) => record.key,
            Found::Corrupt(key, _) => *key,
        }
    }
}

/// Parses KEY: 4 to 64 hex digits, either case.
///
/// # Errors
/// A usage error naming what is wrong.
pub fn parse(text: &str) -> Result<KeyArg, CliError> {
    let text = text.trim().to_ascii_lowercase();
    if !text.chars().all(|c| c.is_ascii_hexdigit()) {
        return Err(CliError::usage(format!(
            "KEY {text:?} is not hexadecimal: give the full 64-digit key or the short key the \
             logs print (12 hex digits)"
        )));
    }
    match text.len() {
        FULL => Key::from_hex(&text)
            .map(KeyArg::Full)
            .map_err(|e| CliError::usage(e.to_string())),
        n if (MIN_PREFIX..FULL).contains(&n) => Ok(KeyArg::Prefix(text)),
        n => Err(CliError::usage(format!(
            "KEY has {n} hex digits: give at least {MIN_PREFIX} (the logs print 12) and at most \
             {FULL}"
        ))),
    }
}

/// Finds the record KEY names in `namespace`.
///
/// # Errors
/// Not found (with a hint when the key is in another namespace), an ambiguous prefix listing
/// the candidates, or a store error.
pub async fn resolve(store: &dyn Store, namespace: &str, arg: &KeyArg) -> Result<Found, CliError> {
    match arg {
        KeyArg::Full(key) => match store.get(namespace, key).await {
            Ok(Some(record)) => Ok(Found::Record(Box::new(record))),
            Ok(None) => Err(not_found(store, namespace, &key.to_hex()).await),
            Err(error @ Error::CorruptRecord { .. }) => Ok(Found::Corrupt(*key, error)),
            Err(error) => Err(error.into()),
        },
        KeyArg::Prefix(prefix) => {
            let mut matches: Vec<Record> = store
                .list(Some(namespace), usize::MAX)
                .await?
                .into_iter()
                .filter(|r| r.key.to_hex().starts_with(prefix.as_str()))
                .collect();
            match matches.len() {
                0 => Err(not_found(store, namespace, prefix).await),
                1 => Ok(Found::Record(Box::new(matches.remove(0)))),
                n => {
                    matches.sort_by_key(|r| r.key);
                    let mut message = format!(
                        "key prefix {prefix} is ambiguous: it matches {n} records in namespace \
                         {}; give more digits:",
                        namespace_label(namespace)
                    );
                    for r in matches.iter().take(MAX_CANDIDATES) {
                        let _ = write!(
                            message,
                            "\n  {}  {}  {}",
                            r.key,
                            r.tool,
                            state_name(r.state)
                        );
                    }
                    if n > MAX_CANDIDATES {
                        let _ = write!(message, "\n  ... and {} more", n - MAX_CANDIDATES);
                    }
                    Err(CliError::not_found(message))
                }
            }
        }
    }
}

/// "Not found", pointing at the namespaces that do hold a matching key, if any.
async fn not_found(store: &dyn Store, namespace: &str, hex: &str) -> CliError {
    let mut message = format!(
        "no live record with key {hex} in namespace {}",
        namespace_label(namespace)
    );
    // Looking elsewhere is only a hint: a failure here must not hide the answer.
    let elsewhere: Vec<String> = match store.list(None, usize::MAX).await {
        Ok(records) => {
            let mut namespaces: Vec<String> = records
                .into_iter()
                .filter(|r| r.namespace != namespace && r.key.to_hex().starts_with(hex))
                .map(|r| r.namespace)
                .collect();
            namespaces.sort();
            namespaces.dedup();
            namespaces
        }
        Err(_) => Vec::new(),
    };
    match elsewhere.first() {
        None => message.push_str(
            " (it may have expired, or been removed; `idem list` shows the live records; a \
             corrupt record is found by its full 64-digit key only)",
        ),
        Some(first) => {
            let names: Vec<String> = elsewhere.iter().map(|n| namespace_label(n)).collect();
            let _ = write!(
                message,
                "; it is in namespace {}: pass --namespace {}",
                names.join(", "),
                shell_word(first)
            );
        }
    }
    CliError::not_found(message)
}

/// `text` quoted for a POSIX shell when it needs it.
fn shell_word(text: &str) -> String {
    let plain = !text.is_empty()
        && text
            .chars()
            .all(|c| c.is_ascii_alphanumeric() || "-_.:/@+=".contains(c));
    if plain {
        text.to_owned()
    } else {
        format!("'{}'", text.replace('\'', r"'\''"))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn keys_parse_as_full_keys_or_prefixes() {
        let full = "AB".repeat(32);
        assert_eq!(
            parse(&full).ok(),
            Some(KeyArg::Full(Key::from_bytes([0xab; 32])))
        );
        assert_eq!(
            parse("0123456789AB").ok(),
            Some(KeyArg::Prefix("0123456789ab".to_owned()))
        );
        assert_eq!(parse("abcd").ok(), Some(KeyArg::Prefix("abcd".to_owned())));
    }

    #[test]
    fn bad_keys_are_usage_errors() {
        for bad in ["abc", "", "xyz123", &"a".repeat(65), "12 34"] {
            let error = parse(bad).expect_err(bad);
            assert_eq!(error.kind(), crate::error::Kind::UsageOrConnection, "{bad}");
        }
    }

    #[test]
    fn namespaces_are_quoted_for_the_shell_when_needed() {
        assert_eq!(shell_word("tenant-1"), "tenant-1");
        assert_eq!(shell_word(""), "''");
        assert_eq!(shell_word("a b"), "'a b'");
        assert_eq!(shell_word("it's"), r"'it'\''s'");
    }
}

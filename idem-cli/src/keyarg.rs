//! KEY on the command line: a full key, or the short prefix the logs print, resolved to one
//! record.

use std::fmt::Write as _;

use idem_tools_runtime::store::{Record, Store};
use idem_tools_runtime::{Error, Key};

use crate::error::CliError;
use crate::output::namespace_label;
use crate::state::State;

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
    Corrupt {
        /// The namespace it was looked up in.
        namespace: String,
        /// The key.
        key: Key,
        /// Why it cannot be decoded.
        error: Error,
    },
}

impl Found {
    /// The key found.
    pub fn key(&self) -> Key {
        match self {
            Found::Record(record) => record.key,
            Found::Corrupt { key, .. } => *key,
        }
    }

    /// The namespace of the key found.
    pub fn namespace(&self) -> &str {
        match self {
            Found::Record(record) => &record.namespace,
            Found::Corrupt { namespace, .. } => namespace,
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

impl KeyArg {
    /// The hex digits given.
    fn hex(&self) -> String {
        match self {
            KeyArg::Full(key) => key.to_hex(),
            KeyArg::Prefix(prefix) => prefix.clone(),
        }
    }
}

/// Finds the record KEY names: in `namespace` when one is given, else in every namespace.
/// `reopen` is `idem` with the options that opened the store, for the commands it suggests.
///
/// # Errors
/// Not found (with a hint when the key is in another namespace), an ambiguous KEY listing the
/// candidates with their namespaces, or a store error.
pub async fn resolve(
    store: &dyn Store,
    namespace: Option<&str>,
    arg: &KeyArg,
    reopen: &str,
) -> Result<Found, CliError> {
    if let (Some(namespace), KeyArg::Full(key)) = (namespace, arg) {
        return match get(store, namespace, key).await? {
            Some(found) => Ok(found),
            None => Err(not_found(store, Some(namespace), &key.to_hex(), reopen).await),
        };
    }
    let hex = arg.hex();
    let mut matches: Vec<Record> = store
        .list(namespace, usize::MAX)
        .await?
        .into_iter()
        .filter(|r| r.key.to_hex().starts_with(hex.as_str()))
        .collect();
    match matches.len() {
        0 => {
            // `list` skips a record it cannot decode: `get` finds one by its full key (in the
            // empty namespace when none is given).
            if let KeyArg::Full(key) = arg
                && let Some(found) = get(store, "", key).await?
            {
                return Ok(found);
            }
            Err(not_found(store, namespace, &hex, reopen).await)
        }
        1 => Ok(Found::Record(Box::new(matches.remove(0)))),
        _ => Err(ambiguous(namespace, &hex, matches)),
    }
}

/// The record of `key` in `namespace`, a corrupt one included.
async fn get(store: &dyn Store, namespace: &str, key: &Key) -> Result<Option<Found>, CliError> {
    match store.get(namespace, key).await {
        Ok(record) => Ok(record.map(|r| Found::Record(Box::new(r)))),
        Err(error @ Error::CorruptRecord { .. }) => Ok(Some(Found::Corrupt {
            namespace: namespace.to_owned(),
            key: *key,
            error,
        })),
        Err(error) => Err(error.into()),
    }
}

/// "Ambiguous", listing the candidates (namespace, tool and state included).
fn ambiguous(namespace: Option<&str>, hex: &str, mut matches: Vec<Record>) -> CliError {
    let n = matches.len();
    matches.sort_by(|a, b| a.namespace.cmp(&b.namespace).then(a.key.cmp(&b.key)));
    let mut message = match namespace {
        Some(namespace) => format!(
            "key {hex} is ambiguous: it matches {n} records in namespace {}; give more digits:",
            namespace_label(namespace)
        ),
        None => format!(
            "key {hex} is ambiguous: it matches {n} records; give more digits, or pass \
             --namespace NAMESPACE:"
        ),
    };
    for r in matches.iter().take(MAX_CANDIDATES) {
        let _ = write!(
            message,
            "\n  {}  namespace {}  {}  {}",
            r.key,
            namespace_label(&r.namespace),
            r.tool,
            State::of(r).as_str()
        );
    }
    if n > MAX_CANDIDATES {
        let _ = write!(message, "\n  ... and {} more", n - MAX_CANDIDATES);
    }
    CliError::not_found(message)
}

/// "Not found", pointing at the namespaces that do hold a matching key, if any.
async fn not_found(
    store: &dyn Store,
    namespace: Option<&str>,
    hex: &str,
    reopen: &str,
) -> CliError {
    let gone =
        format!("it may have expired, or been removed; `{reopen} list` shows the live records");
    let Some(namespace) = namespace else {
        return CliError::not_found(format!(
            "no live record with key {hex} in any namespace ({gone}; a corrupt record is found \
             by its full 64-digit key, with --namespace unless its namespace is \"\")"
        ));
    };
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
        None => {
            let _ = write!(
                message,
                " ({gone}; a corrupt record is found by its full 64-digit key only)"
            );
        }
        Some(first) => {
            let names: Vec<String> = elsewhere.iter().map(|n| namespace_label(n)).collect();
            let _ = write!(
                message,
                "; it is in namespace {}: pass --namespace {}, or leave --namespace out to look \
                 in every namespace",
                names.join(", "),
                shell_word(first)
            );
        }
    }
    CliError::not_found(message)
}

/// `text` quoted for a POSIX shell when it needs it.
pub(crate) fn shell_word(text: &str) -> String {
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

//! `idem show KEY`: one record, with its result rendered.

use std::fmt::Write as _;

use idem_tools_runtime::Store;
use idem_tools_runtime::store::{Record, RecordState};

use crate::error::CliError;
use crate::keyarg::{self, Found, KeyArg};
use crate::output::{namespace_label, record_json, state_name};
use crate::render::render;
use crate::when::{relative, rfc3339};

/// `idem show KEY`.
///
/// # Errors
/// Not found or ambiguous KEY (exit 1), a corrupt record (exit 1, saying how to remove it), or
/// a store error.
pub async fn show(
    store: &dyn Store,
    namespace: &str,
    key: &KeyArg,
    json: bool,
    now: u64,
) -> Result<String, CliError> {
    match keyarg::resolve(store, namespace, key).await? {
        Found::Record(record) if json => Ok(super::json_text(&record_json(&record))),
        Found::Record(record) => Ok(describe(&record, now)),
        Found::Corrupt(key, error) => Err(CliError::not_found(format!(
            "{error}\nthe record cannot be shown; to delete it: idem remove {key}{} --yes",
            namespace_flag(namespace)
        ))),
    }
}

/// ` --namespace NS` when `namespace` is not the default, for suggested commands.
pub(crate) fn namespace_flag(namespace: &str) -> String {
    if namespace.is_empty() {
        String::new()
    } else {
        format!(" --namespace {}", namespace_label(namespace))
    }
}

/// The record as labelled lines, its result last.
fn describe(record: &Record, now: u64) -> String {
    let mut out = String::new();
    let mut line = |label: &str, value: &str| {
        let _ = writeln!(out, "{label:<12} {value}");
    };
    line("key", &record.key.to_hex());
    line("namespace", &namespace_label(&record.namespace));
    line("tool", &record.tool);
    line("state", state_name(record.state));
    line(
        "created_at",
        &format!(
            "{} ({})",
            rfc3339(record.created_at_ms),
            relative(record.created_at_ms, now)
        ),
    );
    let expiry = match record.state {
        RecordState::InProgress => "lease ends",
        RecordState::Completed => "forgotten",
    };
    line(
        "expires_at",
        &format!(
            "{} ({expiry} {})",
            rfc3339(record.expires_at_ms),
            relative(record.expires_at_ms, now)
        ),
    );
    line("fingerprint", &record.fingerprint.to_hex());
    match &record.result {
        Some(bytes) => {
            let _ = writeln!(out, "result\n{}", render(bytes));
        }
        None => {
            let _ = writeln!(
                out,
                "result       none yet: a caller holds the claim and is running the tool\n\
                 \n\
                 If that caller crashed, the claim frees itself when the lease ends; to free it \
                 now:\n  idem remove {}{}",
                record.key.short(),
                namespace_flag(&record.namespace)
            );
        }
    }
    out
}

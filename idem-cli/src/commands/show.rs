//! `idem show KEY`: one record, with its result rendered.

use std::fmt::Write as _;

use idem_tools_runtime::Store;
use idem_tools_runtime::store::Record;

use crate::error::CliError;
use crate::keyarg::{self, Found, KeyArg, shell_word};
use crate::output::{namespace_label, record_json};
use crate::render::render;
use crate::state::{State, unreplayable_reason};
use crate::when::{relative, rfc3339};

/// `idem show KEY`, KEY looked up in `namespace` or, without one, in every namespace;
/// `reopen` is `idem` with the options that opened the store ([`Cli::reopen`]), which the
/// commands it suggests start with.
///
/// [`Cli::reopen`]: crate::args::Cli::reopen
///
/// # Errors
/// Not found or ambiguous KEY (exit 1), a corrupt record (exit 1, saying how to remove it), or
/// a store error.
pub async fn show(
    store: &dyn Store,
    namespace: Option<&str>,
    key: &KeyArg,
    json: bool,
    now: u64,
    reopen: &str,
) -> Result<String, CliError> {
    match keyarg::resolve(store, namespace, key, reopen).await? {
        Found::Record(record) if json => Ok(super::json_text(&record_json(&record))),
        Found::Record(record) => Ok(describe(&record, now, reopen)),
        Found::Corrupt {
            namespace,
            key,
            error,
        } => Err(CliError::not_found(format!(
            "{error}\nthe record cannot be shown; to delete it: {reopen} remove {key}{} --yes",
            namespace_flag(&namespace)
        ))),
    }
}

/// ` --namespace NS` (quoted for the shell) when `namespace` is not the empty one, for
/// suggested commands.
pub(crate) fn namespace_flag(namespace: &str) -> String {
    if namespace.is_empty() {
        String::new()
    } else {
        format!(" --namespace {}", shell_word(namespace))
    }
}

/// The record as labelled lines, its result last; a suggested command starts with `reopen`.
fn describe(record: &Record, now: u64, reopen: &str) -> String {
    let state = State::of(record);
    let mut out = String::new();
    let mut line = |label: &str, value: &str| {
        let _ = writeln!(out, "{label:<12} {value}");
    };
    line("key", &record.key.to_hex());
    line("namespace", &namespace_label(&record.namespace));
    line("tool", &record.tool);
    line("turn", &format!("{:?}", record.turn));
    line("state", state.as_str());
    line(
        "attempts",
        &format!(
            "{} (claims of this key by its turn since its last recorded result)",
            record.attempts
        ),
    );
    line(
        "created_at",
        &format!(
            "{} ({})",
            rfc3339(record.created_at_ms),
            relative(record.created_at_ms, now)
        ),
    );
    let expiry = match state {
        State::InProgress => "lease ends",
        _ => "forgotten",
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
    let remove = format!(
        "{reopen} remove {}{}",
        record.key.short(),
        namespace_flag(&record.namespace)
    );
    let result = record.result.as_deref().map(render).unwrap_or_default();
    let _ = match state {
        State::InProgress if record.holder_gone => writeln!(
            out,
            "result       none: the process that claimed the key is gone (it exited or was \
             killed while the tool ran)\n\nThe next call of this key claims it again at once \
             and runs the tool: check whether the action took effect before that process died."
        ),
        State::InProgress => writeln!(
            out,
            "result       none yet: a caller holds the claim and is running the tool\n\n\
             If that caller crashed, the claim frees itself when the lease ends, or sooner \
             where the store can tell that the claiming process is gone (on SQLite at the next \
             call; on Redis and PostgreSQL a reply timeout after a call finds it); to free it \
             now:\n  {remove}"
        ),
        State::Completed => writeln!(out, "result\n{result}"),
        State::Failed => writeln!(
            out,
            "result\n{result}\n\nThe tool returned this error and it was recorded (the tool \
             sets cache_errors): retries get it back, without running the tool, until the \
             record is forgotten."
        ),
        State::Interrupted => writeln!(
            out,
            "result       unknown: the call was dropped while the tool ran, so whether it took \
             effect is not known\n\nRetries are refused (they get an `interrupted` error) until \
             the record is forgotten. Check whether the action happened; if it did not and it \
             should run again:\n  {remove}"
        ),
        State::NotReplayable => writeln!(
            out,
            "result       not recorded: the tool ran, but its result could not be recorded \
             faithfully ({})\n\nRetries are told the tool already ran, without running it, \
             until the record is forgotten.",
            unreplayable_reason(record).unwrap_or_default()
        ),
        State::Unreadable => writeln!(
            out,
            "result\n{result}\n\nThis idem cannot read the record (it is corrupt, or was \
             written by a newer idem): upgrade idem, or check with the agents' version."
        ),
    };
    out
}

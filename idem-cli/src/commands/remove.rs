//! `idem remove KEY`: delete one record and its key's attempt count, after confirmation.

use idem_tools_runtime::Store;
use idem_tools_runtime::store::Removed;
use serde_json::json;

use super::show::namespace_flag;
use crate::confirm;
use crate::error::CliError;
use crate::keyarg::{self, Found, KeyArg, shell_word};
use crate::output::namespace_label;
use crate::state::State;

/// What `remove` deletes and what it keeps, whatever the record's state.
const RESETS: &str = "Removing deletes the record and the key's attempt count; the turn's count \
                      of started actions is kept.";

/// `idem remove KEY`: asks on a terminal unless `yes`; refuses without a terminal unless `yes`.
/// `reopen` is `idem` with the options that opened the store, for the commands it suggests.
///
/// # Errors
/// Not found or ambiguous KEY, a declined or impossible confirmation (exit 1), or a store error.
pub async fn remove(
    store: &dyn Store,
    namespace: Option<&str>,
    key: &KeyArg,
    yes: bool,
    json: bool,
    reopen: &str,
) -> Result<String, CliError> {
    let found = keyarg::resolve(store, namespace, key, reopen).await?;
    let (key, namespace) = (found.key(), found.namespace().to_owned());
    let state = match &found {
        Found::Record(record) => Some(State::of(record)),
        Found::Corrupt { .. } => None,
    };
    let what = match &found {
        Found::Record(record) => format!(
            "the {} record of tool `{}` with key {} in namespace {}",
            State::of(record).as_str(),
            record.tool,
            record.key,
            namespace_label(&namespace)
        ),
        Found::Corrupt { error, .. } => format!(
            "the corrupt record with key {key} in namespace {} ({error})",
            namespace_label(&namespace)
        ),
    };
    let next = state.map_or(
        "The next identical call runs the tool again.",
        State::after_removal,
    );
    if !yes {
        if !confirm::stdin_is_terminal() {
            return Err(CliError::refused(format!(
                "not removing {what} without confirmation: stdin is not a terminal; pass --yes \
                 to remove it: {} --yes\n{RESETS} {next}",
                this_command(&namespace)
            )));
        }
        let question = format!("About to remove {what}.\n{RESETS}\n{next}\nRemove it?");
        let stdin = std::io::stdin();
        let confirmed = confirm::ask(&question, &mut stdin.lock(), &mut std::io::stderr())?;
        if !confirmed {
            return Err(CliError::refused("not removed"));
        }
    }
    // The record shown is removed only if the key still holds it: one that completed or was
    // claimed again meanwhile is not what the operator confirmed.
    let live = match &found {
        Found::Record(record) => match store.remove_shown(record).await? {
            Removed::Deleted { live } => live,
            Removed::Changed => {
                return Err(CliError::refused(format!(
                    "not removed: key {key} changed since it was shown (its claim completed, or \
                     the key was claimed again); look at it again: {reopen} show {key}{}",
                    namespace_flag(&namespace)
                )));
            }
            Removed::Gone => return Err(gone(&key)),
        },
        Found::Corrupt { .. } => {
            if !store.remove(&namespace, &key).await? {
                return Err(gone(&key));
            }
            true
        }
    };
    let expired = if live {
        ""
    } else {
        " (its lease had run out since it was shown)"
    };
    if json {
        let value = json!({
            "removed": true,
            "live": live,
            "namespace": namespace,
            "key": key.to_hex(),
            "state": state.map(State::as_str),
            "attempts_deleted": match &found {
                Found::Record(record) => Some(record.attempts),
                Found::Corrupt { .. } => None,
            },
        });
        return Ok(super::json_text(&value));
    }
    let attempts = match &found {
        Found::Record(record) => format!(" ({} before removal)", record.attempts),
        Found::Corrupt { .. } => String::new(),
    };
    Ok(format!(
        "removed {what}{expired}\ndeleted: the record and the key's attempt count{attempts}; \
         kept: the turn's count of started actions\n{next}\n"
    ))
}

/// The key had nothing left to remove.
fn gone(key: &impl std::fmt::Display) -> CliError {
    CliError::not_found(format!(
        "key {key} holds no record to remove any more (its claim was given back, it expired, \
         or someone else removed it); nothing was deleted"
    ))
}

/// The command line this process runs, as a shell would take it back (the program as `idem`),
/// with `--namespace` added when the key was found in a namespace the command did not name:
/// what to run again with `--yes`.
fn this_command(namespace: &str) -> String {
    let mut words: Vec<String> = std::env::args()
        .skip(1)
        .map(|word| shell_word(&word))
        .collect();
    words.insert(0, "idem".to_owned());
    if !std::env::args().any(|word| word == "--namespace" || word.starts_with("--namespace=")) {
        words.push(namespace_flag(namespace).trim().to_owned());
    }
    words.retain(|word| !word.is_empty());
    words.join(" ")
}

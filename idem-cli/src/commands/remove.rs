//! `idem remove KEY`: delete one record, after confirmation.

use idem_tools_runtime::Store;
use idem_tools_runtime::store::RecordState;
use serde_json::json;

use super::show::namespace_flag;
use crate::confirm;
use crate::error::CliError;
use crate::keyarg::{self, Found, KeyArg};
use crate::output::{namespace_label, state_name};

/// `idem remove KEY`: asks on a terminal unless `yes`; refuses without a terminal unless `yes`.
///
/// # Errors
/// Not found or ambiguous KEY, a declined or impossible confirmation (exit 1), or a store error.
pub async fn remove(
    store: &dyn Store,
    namespace: &str,
    key: &KeyArg,
    yes: bool,
    json: bool,
) -> Result<String, CliError> {
    let found = keyarg::resolve(store, namespace, key).await?;
    let key = found.key();
    let what = match &found {
        Found::Record(record) => format!(
            "the {} record of tool `{}` with key {} in namespace {}",
            state_name(record.state),
            record.tool,
            record.key,
            namespace_label(namespace)
        ),
        Found::Corrupt(_, error) => format!(
            "the corrupt record with key {key} in namespace {} ({error})",
            namespace_label(namespace)
        ),
    };
    if !yes {
        if !confirm::stdin_is_terminal() {
            return Err(CliError::refused(format!(
                "not removing {what} without confirmation: stdin is not a terminal; pass --yes \
                 to remove it: idem remove {}{} --yes",
                key.short(),
                namespace_flag(namespace)
            )));
        }
        let consequence = match &found {
            Found::Record(record) if record.state == RecordState::Completed => {
                "\nThe tool has run; after removal the next identical call runs it AGAIN."
            }
            Found::Record(_) => {
                "\nIf its caller is still running, a retry may run the tool a second time."
            }
            Found::Corrupt(..) => "",
        };
        let question = format!("About to remove {what}.{consequence}\nRemove it?");
        let stdin = std::io::stdin();
        let confirmed = confirm::ask(&question, &mut stdin.lock(), &mut std::io::stderr())?;
        if !confirmed {
            return Err(CliError::refused("not removed"));
        }
    }
    if !store.remove(namespace, &key).await? {
        return Err(CliError::not_found(format!(
            "key {key} was gone before it could be removed (it expired, or someone else removed \
             it)"
        )));
    }
    if json {
        let value = json!({ "removed": true, "namespace": namespace, "key": key.to_hex() });
        return Ok(super::json_text(&value));
    }
    Ok(format!("removed {what}\n"))
}

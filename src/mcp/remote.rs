//! The client side: an agent written in Rust calling a tool of a remote MCP server through an
//! rmcp client, so that a retry reaches the server as a retry.
//!
//! [`with_turn`] puts the turn id ([`TURN_ID_META`]) and a key derived from the turn, the
//! tool and its arguments ([`IDEMPOTENCY_KEY_META`]) into the request's `_meta`. The same
//! call in the same turn gets the same key, so after a timeout (rmcp sends
//! `notifications/cancelled` when the call's future is dropped) the retry joins or replays the
//! first execution on an [`IdemServer`](super::IdemServer) instead of acting twice.
//!
//! ```
//! use idem_tools::Turn;
//! use rmcp::model::CallToolRequestParams;
//!
//! let turn = Turn::new("conv-42/turn-7");
//! let args = serde_json::json!({ "title": "printer on fire" });
//! let call = CallToolRequestParams::new("open_ticket")
//!     .with_arguments(args.as_object().cloned().unwrap_or_default());
//! let first = idem_tools::mcp::remote::with_turn(&turn, call.clone())?;
//! let retry = idem_tools::mcp::remote::with_turn(&turn, call)?;
//! assert_eq!(first.meta, retry.meta); // the same key: the server sees a retry
//! # Ok::<(), idem_tools::Error>(())
//! ```

use rmcp::model::{CallToolRequestParams, CallToolResult, RequestMetaObject};
use rmcp::service::{Peer, RoleClient, ServiceError};
use serde_json::Value;

use super::{IDEMPOTENCY_KEY_META, TURN_ID_META};
use crate::{Error, Key, Turn};

/// The key a call of `params` derives in `turn`: namespace, turn id, tool name and the JSON
/// arguments, in idem's canonical encoding (the order of the arguments does not matter).
///
/// # Errors
/// [`Error::Encode`] if the arguments cannot be encoded.
pub fn call_key(turn: &Turn, params: &CallToolRequestParams) -> Result<Key, Error> {
    let arguments = Value::Object(params.arguments.clone().unwrap_or_default());
    idem_tools_runtime::key::derive_key(turn.namespace(), turn.id(), &params.name, 0, &arguments)
}

/// `params` with `turn`'s id and the call's key ([`call_key`]) in its `_meta`; a key the
/// caller already put there is kept. The key covers every argument as written here, and a
/// server honours it over its own: a field the server leaves out of its key (a memo) counts in
/// this one, so a retry must repeat it. Against an idem server, the turn id alone lets the
/// server derive the key (docs/guarantees.md, "Known limits").
///
/// # Errors
/// [`Error::Encode`] if the arguments cannot be encoded.
pub fn with_turn(
    turn: &Turn,
    mut params: CallToolRequestParams,
) -> Result<CallToolRequestParams, Error> {
    let key = call_key(turn, &params)?;
    let meta = params.meta.get_or_insert_with(RequestMetaObject::default);
    meta.insert(TURN_ID_META.to_owned(), Value::from(turn.id()));
    meta.entry(IDEMPOTENCY_KEY_META.to_owned())
        .or_insert_with(|| Value::from(key.to_hex()));
    Ok(params)
}

/// Calls the tool through `peer` in the current turn ([`Turn::current`]), with
/// [`with_turn`]'s `_meta`. Wrap it in `tokio::time::timeout` and call again on timeout: the
/// retry carries the same key.
///
/// # Errors
/// rmcp's errors; an idem error (no current turn, arguments that cannot be encoded) as
/// [`ServiceError::McpError`].
pub async fn call_tool(
    peer: &Peer<RoleClient>,
    params: CallToolRequestParams,
) -> Result<CallToolResult, ServiceError> {
    let turn = Turn::current_for("idem_tools::mcp::remote::call_tool")
        .map_err(|e| ServiceError::McpError(e.into()))?;
    let params = with_turn(&turn, params).map_err(|e| ServiceError::McpError(e.into()))?;
    peer.call_tool(params).await
}

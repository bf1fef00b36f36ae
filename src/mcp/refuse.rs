//! The calls an [`IdemServer`](super::IdemServer) refuses rather than run without
//! deduplication, each a protocol error (the client's setup is at fault, not the model's
//! choice of action) that says what to change, and a warning in the server's log.

use rmcp::ErrorData;
use rmcp::model::ErrorCode;
use serde_json::json;

use super::{CLIENT_ID_HEADER, IDEMPOTENCY_EXTENSION, IDEMPOTENCY_KEY_META, TURN_ID_META};

// The refusal names the header as clients spell it.
const _: () = assert!(CLIENT_ID_HEADER.eq_ignore_ascii_case("Idem-Client-Id"));

/// The protocol error for a call to `tool` that no namespace can be given to, logged: it
/// would run with no deduplication, so it does not run.
pub(crate) fn no_client_identity(tool: &str) -> ErrorData {
    let message = format!(
        "idem refused `{tool}` and nothing ran: this request came over HTTP without a session, \
         so nothing tells which client sent it, and a retry could not be recognised as one. \
         Send an `Idem-Client-Id` header with an id unique to the agent (a random UUID \
         made at start-up, sent on every request), use HTTP sessions (protocol 2025-11-25 or \
         older, a server with sessions), or name the namespace on the server with \
         `IdemServer::with_namespace` (e.g. from the authenticated user)"
    );
    refused(
        ErrorCode::INVALID_REQUEST,
        "no_client_identity",
        tool,
        message,
    )
}

/// The protocol error for a call to the state-changing `tool` from a client that declares the
/// idempotency extension (and so was told `idempotentHint: true`) but names no action: no turn
/// id, no key. Run, it would be a new action however often it is retried, which the hint
/// denied; so it does not run.
pub(crate) fn no_turn(tool: &str) -> ErrorData {
    let message = format!(
        "idem refused `{tool}` and nothing ran: this client declares the \
         `{IDEMPOTENCY_EXTENSION}` extension, so it was told that retrying this tool is safe, \
         but the call carries neither `_meta[\"{TURN_ID_META}\"]` nor \
         `_meta[\"{IDEMPOTENCY_KEY_META}\"]`, so a retry of it could not be recognised as one. \
         Send the id of the user message being answered in `_meta[\"{TURN_ID_META}\"]` with \
         every call (the same id for every retry), or stop declaring the extension"
    );
    refused(ErrorCode::INVALID_PARAMS, "no_turn_id", tool, message)
}

/// `message` as a protocol error with `code` and `data.idem.error = kind`, logged.
fn refused(code: ErrorCode, kind: &str, tool: &str, message: String) -> ErrorData {
    tracing::warn!(tool, "{message}");
    ErrorData::new(
        code,
        message,
        Some(json!({ "idem": { "error": kind, "forModel": false, "tool": tool } })),
    )
}

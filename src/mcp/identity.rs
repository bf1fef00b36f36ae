//! Who sent a call: the namespace of its keys and budgets, on every transport rmcp serves.
//!
//! rmcp builds a new server for every HTTP request it serves statelessly (always under protocol
//! 2026-07-28, and on older protocols when the streamable HTTP server runs without sessions),
//! so nothing kept in an `IdemServer` can name the client there. The namespace comes instead,
//! in this order, from:
//!
//! 1. the rule given to [`IdemServer::with_namespace`](super::IdemServer::with_namespace)
//!    (the authenticated principal);
//! 2. the [`CLIENT_ID_HEADER`] header (HTTP), then the [`CLIENT_ID_META`] entry of the call's
//!    `_meta` (any transport), which a client sets to an id of its own: it names the client
//!    across sessions, reconnections, restarts of a stdio server and server processes sharing
//!    a store, so it wins over the connection and the session.
//!    It is an identity the client claims, not authentication: anyone who sends the same id
//!    shares the namespace (and is replayed its results);
//! 3. the connection, for a server not reached over HTTP (stdio, a pipe): one `IdemServer`
//!    serves one client for its whole life;
//! 4. the HTTP session (`Mcp-Session-Id`), for a server rmcp created for that session (it saw
//!    the session's `initialize`, and rmcp routes only that session's requests to it);
//! 5. nothing: an `#[idempotent]` tool is then refused (see
//!    [`no_client_identity`](super::refuse::no_client_identity)) rather than run with no
//!    deduplication.

use rmcp::model::ProtocolVersion;
use rmcp::service::RequestContext;
use rmcp::{ErrorData, RoleServer};

use super::server::meta_string;
use super::{CLIENT_ID_HEADER, CLIENT_ID_META, MAX_CLIENT_KEY_LEN};

/// The header rmcp's streamable HTTP server names a session with.
const SESSION_HEADER: &str = "mcp-session-id";

/// The rule that names the namespace of a call (the session or the principal).
pub(crate) type NamespaceRule =
    dyn Fn(&RequestContext<RoleServer>) -> Result<String, ErrorData> + Send + Sync + 'static;

/// The namespace of the call in `context`, or `None` if nothing identifies its client.
///
/// `connection` is the namespace of the `IdemServer` itself, used when the call did not come
/// over HTTP; `session_bound` tells whether this `IdemServer` served an `initialize` (so rmcp
/// created it for one session).
pub(crate) fn namespace_of(
    context: &RequestContext<RoleServer>,
    rule: Option<&NamespaceRule>,
    connection: &str,
    session_bound: bool,
) -> Result<Option<String>, ErrorData> {
    if let Some(rule) = rule {
        let namespace = rule(context)?;
        if namespace.is_empty() {
            return Err(ErrorData::invalid_request(
                "the idem namespace rule gave an empty namespace; refused, as it would be \
                 shared by every client",
                None,
            ));
        }
        return Ok(Some(namespace));
    }
    let parts = context.extensions.get::<http::request::Parts>();
    let mut client = match parts {
        Some(parts) => header(parts, CLIENT_ID_HEADER)?,
        None => None,
    };
    if client.is_none() {
        client = meta_string(context, CLIENT_ID_META)?;
    }
    if let Some(client) = client {
        return Ok(Some(client_namespace(&client)));
    }
    let Some(parts) = parts else {
        return Ok(Some(connection.to_owned()));
    };
    // An HTTP request without a session header is stateless, whoever else this server serves,
    // and so is one of protocol 2026-07-28 or later, whose session header rmcp never checks.
    let stateless = context
        .protocol_version()
        .is_some_and(|version| version.as_str() >= ProtocolVersion::V_2026_07_28.as_str());
    match header(parts, SESSION_HEADER)? {
        Some(session) if session_bound && !stateless => Ok(Some(format!("mcp/session/{session}"))),
        _ => Ok(None),
    }
}

/// The namespace of the client that names itself `client`: `mcp/client/` and the id, or, for an
/// id too long for a namespace with that prefix, the hex of its BLAKE3 digest after
/// `mcp/client/blake3:` (the same id, the same namespace).
fn client_namespace(client: &str) -> String {
    let namespace = format!("mcp/client/{client}");
    if namespace.len() <= crate::turn::MAX_NAMESPACE_LEN {
        return namespace;
    }
    format!(
        "mcp/client/blake3:{}",
        blake3::hash(client.as_bytes()).to_hex()
    )
}

/// The value of header `name`, checked like a `_meta` key: visible ASCII, at most
/// [`MAX_CLIENT_KEY_LEN`] bytes.
fn header(parts: &http::request::Parts, name: &str) -> Result<Option<String>, ErrorData> {
    let Some(value) = parts.headers.get(name) else {
        return Ok(None);
    };
    match value.to_str() {
        Ok(text) if !text.is_empty() && text.len() <= MAX_CLIENT_KEY_LEN => {
            Ok(Some(text.to_owned()))
        }
        _ => Err(ErrorData::invalid_request(
            format!(
                "the `{name}` header must be 1 to {MAX_CLIENT_KEY_LEN} visible ASCII characters"
            ),
            None,
        )),
    }
}

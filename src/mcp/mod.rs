//! MCP servers and clients built with [`rmcp`] (the `rmcp` feature).
//!
//! Wrap the server in [`IdemServer`] and every `#[idempotent]` tool it routes gets, with no
//! per-tool code:
//!
//! * **a turn** from the request's `_meta` ([`TURN_ID_META`]), entered around the routed call;
//! * **a namespace**, the client the call is deduplicated for, on every transport: the
//!   authenticated principal by a rule of yours ([`IdemServer::with_namespace`]), the
//!   connection (stdio), the client's [`CLIENT_ID_HEADER`] (which names it across sessions,
//!   and where rmcp serves HTTP statelessly, as under protocol 2026-07-28), or the HTTP
//!   session — never one shared by every client, and a write that no namespace can be given
//!   to is refused rather than run undeduplicated;
//! * **the client's key**: `_meta.idempotencyKey` ([`IDEMPOTENCY_KEY_META`], the shape of
//!   SEP-3182) is honoured as the caller key, and reusing it with other arguments is refused;
//!   the server declares both entries as the [`IDEMPOTENCY_EXTENSION`] in its capabilities;
//! * **annotations** in `tools/list` (`readOnlyHint`, `idempotentHint`, `destructiveHint`)
//!   from `#[idempotent]` / `#[read_only]`, true for the client that reads them:
//!   `idempotentHint` on a write only for a client that declares [`IDEMPOTENCY_EXTENSION`],
//!   whose writes that name no turn (nor key) are refused rather than run as new actions;
//! * **errors** a model can act on: the idem errors that say something true about the action
//!   (stuck, the turn's cap reached, in flight, interrupted, …) come back as tool results with
//!   `isError: true`, worded for a model; the others are protocol errors.
//!
//! Tools return `Result<T, E>` as usual: `Result<CallToolResult, ErrorData>`,
//! `Result<String, ToolError>` and `Result<Json<T>, ToolError>` all work under
//! `#[idempotent]` ([`ToolError`], [`Json`]). On the client side, [`remote`] puts the turn id
//! and a key derived from the call into `_meta`, so that a retry after a timeout reaches the
//! server as a retry.
//!
//! ```ignore
//! #[idem_tools::tool_impl(same_service)] // every `Desk` is the same help desk
//! #[tool_router]
//! impl Desk {
//!     #[idempotent]
//!     #[tool(description = "Open a support ticket")]
//!     async fn open_ticket(
//!         &self,
//!         Parameters(new): Parameters<NewTicket>,
//!     ) -> Result<Json<Ticket>, ToolError> {
//!         todo!()
//!     }
//!
//!     #[read_only]
//!     #[tool(description = "List the open tickets")]
//!     async fn list_tickets(&self) -> Json<Tickets> {
//!         todo!()
//!     }
//! }
//!
//! const TOOLS: &[idem_tools::ToolInfo] = idem_tools::tools![Desk::open_ticket, Desk::list_tickets];
//!
//! // stdio: one server for the process's one client.
//! IdemServer::new(Desk::new(), TOOLS)?.serve(rmcp::transport::stdio()).await?;
//! // streamable HTTP: rmcp makes a server per session, or per request when stateless.
//! let factory = IdemServer::new(Desk::new(), TOOLS)?.factory(Desk::new);
//! ```
//!
//! `examples/mcp_server.rs` is a complete server (stdio, or `--http ADDR`), driven by rmcp's own
//! client in `tests/mcp_*.rs` and by the official Python SDK in `tests/mcp-clients/`.

mod forward;
mod identity;
mod refuse;
pub mod remote;
mod result;
mod scope;
mod server;

pub use idem_tools_runtime::mcp::{error_kind, is_for_model, model_message};
pub use result::{Json, ToolError};
pub use server::{IdemServer, client_declares_idempotency};

pub(crate) use scope::{carry_routed_key, take_routed_key};

/// The `_meta` entry of a `tools/call` request that carries the turn id: a string, e.g.
/// `{"_meta": {"idem/turnId": "conv-42/turn-7"}}`. Calls with one turn id share its keys and
/// its retry budget (within their namespace).
pub const TURN_ID_META: &str = "idem/turnId";

/// The `_meta` entry of a `tools/call` request that carries a client-supplied idempotency key
/// (SEP-3182's `idempotencyKey`): a string of at most [`MAX_CLIENT_KEY_LEN`] bytes. The call's
/// key is then derived from it (with the namespace and the tool) instead of the turn and the
/// arguments; the arguments are still checked, so the key reused with other arguments is
/// refused.
pub const IDEMPOTENCY_KEY_META: &str = "idempotencyKey";

/// The extension an [`IdemServer`] declares in its capabilities (`extensions`, SEP-1724), with
/// the `_meta` entries it reads as settings: `{"turnIdMeta": "idem/turnId",
/// "idempotencyKeyMeta": "idempotencyKey", "clientIdMeta": "idem/clientId"}`. A client can check for it before relying on
/// retries being deduplicated.
pub const IDEMPOTENCY_EXTENSION: &str = "idem/idempotency";

/// The HTTP header a client sets to an id of its own (a random UUID made when the agent
/// starts, say), sent with every request: its calls' keys and budgets are scoped to it. It
/// wins over the HTTP session, so a retry after a reconnection (a new session), or one that
/// reaches another server process sharing the store, is still recognised; where rmcp's
/// streamable HTTP server keeps no session (protocol 2026-07-28, or a server configured
/// without sessions) it is the only way to tell clients apart.
///
/// It is an identity the client claims, not authentication: any client that sends the same
/// id shares that namespace, and is replayed its results. A server whose clients do not trust
/// each other names the namespace from the authenticated principal instead
/// ([`IdemServer::with_namespace`]), which wins over the header.
pub const CLIENT_ID_HEADER: &str = "idem-client-id";

/// The `_meta` entry of a `tools/call` request that names the client, as
/// [`CLIENT_ID_HEADER`] does over HTTP, on every transport: a string of at most
/// [`MAX_CLIENT_KEY_LEN`] bytes, e.g. `{"_meta": {"idem/clientId": "agent-7f3a…"}}`. Over stdio
/// a server process serves one connection, and without it each process is a client of its own:
/// a client that restarts the server (a crash, a restarted run) and sends the same id, turn id
/// and arguments again is replayed the first process's result from a durable store, instead of
/// running the tool again. Like the header, it is an identity the client claims; the
/// [`IdemServer::with_namespace`] rule and the header win over it (a header present, this entry
/// is not read).
pub const CLIENT_ID_META: &str = "idem/clientId";

/// The longest turn id, client key or client id accepted, in bytes.
pub const MAX_CLIENT_KEY_LEN: usize = 256;

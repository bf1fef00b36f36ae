//! A small MCP server built with rmcp whose state-changing tools are safe to retry.
//!
//! A help desk: `open_ticket` and `close_ticket` change the world, `comment` too, and
//! `list_tickets` only reads. The server is wrapped in `idem_tools::mcp::IdemServer`, which gives
//! every call its turn (from `_meta["idem/turnId"]`), its namespace (the session) and the
//! client's `_meta["idempotencyKey"]`, and fills the `tools/list` annotations from
//! `#[idempotent]` / `#[read_only]`. No tool has any MCP-specific idem code.
//!
//! `cargo run --example mcp_server --features rmcp` serves it in-process to rmcp's own client
//! and shows a retry after a timeout being replayed; `tests/mcp_server.rs` drives it case by
//! case.

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex, PoisonError};
use std::time::Duration;

use idem_tools::mcp::{IdemServer, Json, ToolError};
use idem_tools::{idempotent, read_only};
use rmcp::handler::server::router::tool::ToolRouter;
use rmcp::handler::server::wrapper::Parameters;
use rmcp::model::{CallToolResult, CancelledNotificationParam, ContentBlock};
use rmcp::schemars::JsonSchema;
use rmcp::service::NotificationContext;
use rmcp::{ErrorData, RoleServer, ServerHandler, tool, tool_handler, tool_router};
use serde::{Deserialize, Serialize};

/// The arguments of `open_ticket`. `Serialize` too: the arguments are part of the key.
#[derive(Debug, Clone, Serialize, Deserialize, JsonSchema)]
#[schemars(crate = "rmcp::schemars")]
pub struct NewTicket {
    /// A one-line summary.
    pub title: String,
}

/// The arguments of `close_ticket`.
#[derive(Debug, Clone, Serialize, Deserialize, JsonSchema)]
#[schemars(crate = "rmcp::schemars")]
pub struct TicketId {
    /// The ticket's number.
    pub id: u64,
}

/// The arguments of `comment`.
#[derive(Debug, Clone, Serialize, Deserialize, JsonSchema)]
#[schemars(crate = "rmcp::schemars")]
pub struct Comment {
    /// The ticket's number.
    pub id: u64,
    /// The comment.
    pub text: String,
}

/// A ticket, as `open_ticket` returns it (recorded, and replayed to retries).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, JsonSchema)]
#[schemars(crate = "rmcp::schemars")]
pub struct Ticket {
    /// The ticket's number.
    pub id: u64,
    /// Its summary.
    pub title: String,
    /// Whether it is closed.
    pub closed: bool,
    /// Its comments.
    pub comments: Vec<String>,
}

/// What `list_tickets` returns.
#[derive(Debug, Clone, Serialize, Deserialize, JsonSchema)]
#[schemars(crate = "rmcp::schemars")]
pub struct Tickets {
    /// Every ticket.
    pub tickets: Vec<Ticket>,
}

/// The ticket system behind the server, shared by every session.
#[derive(Debug, Default)]
pub struct Backend {
    tickets: Mutex<Vec<Ticket>>,
    reads: AtomicU64,
    cancellations: AtomicU64,
    /// How long opening a ticket takes (to let a client time out mid-call).
    pub latency: Duration,
}

impl Backend {
    /// A backend whose `open_ticket` takes `latency`.
    pub fn with_latency(latency: Duration) -> Arc<Self> {
        Arc::new(Backend {
            latency,
            ..Backend::default()
        })
    }

    /// Every ticket opened so far (the side effects).
    pub fn tickets(&self) -> Vec<Ticket> {
        self.tickets
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .clone()
    }

    /// How many times `list_tickets` ran.
    pub fn reads(&self) -> u64 {
        self.reads.load(Ordering::Relaxed)
    }

    /// How many `notifications/cancelled` the server received (a client that timed out).
    pub fn cancellations(&self) -> u64 {
        self.cancellations.load(Ordering::Relaxed)
    }

    fn edit<R>(&self, f: impl FnOnce(&mut Vec<Ticket>) -> R) -> R {
        f(&mut self.tickets.lock().unwrap_or_else(PoisonError::into_inner))
    }
}

/// The MCP server: one per session, over a shared [`Backend`].
#[derive(Clone)]
pub struct Desk {
    backend: Arc<Backend>,
    tool_router: ToolRouter<Desk>,
}

#[idem_tools::tool_impl]
#[tool_router]
impl Desk {
    /// A server over `backend`.
    pub fn new(backend: Arc<Backend>) -> Self {
        Desk {
            backend,
            tool_router: Self::tool_router(),
        }
    }

    /// Structured output (`Json<T>`) and a tool error the model reads (`ToolError`).
    #[idempotent(ttl = "1d")]
    #[tool(description = "Open a support ticket; returns the ticket")]
    async fn open_ticket(
        &self,
        Parameters(new): Parameters<NewTicket>,
    ) -> Result<Json<Ticket>, ToolError> {
        if new.title.trim().is_empty() {
            return Err(ToolError::new(
                "A ticket needs a title: give it a one-line summary.",
            ));
        }
        tokio::time::sleep(self.backend.latency).await;
        let ticket = self.backend.edit(|tickets| {
            let ticket = Ticket {
                id: tickets.len() as u64 + 1,
                title: new.title,
                closed: false,
                comments: Vec::new(),
            };
            tickets.push(ticket.clone());
            ticket
        });
        Ok(Json(ticket))
    }

    /// rmcp's own `Result<CallToolResult, ErrorData>`.
    #[idempotent]
    #[tool(description = "Close a ticket")]
    async fn close_ticket(
        &self,
        Parameters(TicketId { id }): Parameters<TicketId>,
    ) -> Result<CallToolResult, ErrorData> {
        let closed = self.backend.edit(|tickets| {
            tickets
                .iter_mut()
                .find(|t| t.id == id)
                .map(|t| std::mem::replace(&mut t.closed, true))
        });
        let text = match closed {
            None => {
                return Ok(CallToolResult::error(vec![ContentBlock::text(format!(
                    "There is no ticket #{id}."
                ))]));
            }
            Some(true) => format!("Ticket #{id} was already closed."),
            Some(false) => format!("Closed ticket #{id}."),
        };
        Ok(CallToolResult::success(vec![ContentBlock::text(text)]))
    }

    /// A plain `Result<String, ToolError>`; `#[tool]` may also sit above `#[idempotent]`.
    #[tool(description = "Add a comment to a ticket")]
    #[idempotent]
    async fn comment(
        &self,
        Parameters(Comment { id, text }): Parameters<Comment>,
    ) -> Result<String, ToolError> {
        self.backend.edit(|tickets| {
            let ticket = tickets
                .iter_mut()
                .find(|t| t.id == id)
                .ok_or_else(|| ToolError::new(format!("There is no ticket #{id}.")))?;
            ticket.comments.push(text);
            Ok(format!(
                "Ticket #{id} has {} comments.",
                ticket.comments.len()
            ))
        })
    }

    #[read_only]
    #[tool(description = "List every ticket")]
    async fn list_tickets(&self) -> Json<Tickets> {
        self.backend.reads.fetch_add(1, Ordering::Relaxed);
        Json(Tickets {
            tickets: self.backend.tickets(),
        })
    }
}

#[tool_handler(router = self.tool_router)]
impl ServerHandler for Desk {
    /// rmcp does not stop a handler whose request is cancelled (it only signals
    /// `context.ct`): the tool finishes and records its result, and the retry gets it.
    async fn on_cancelled(
        &self,
        _notification: CancelledNotificationParam,
        _context: NotificationContext<RoleServer>,
    ) {
        self.backend.cancellations.fetch_add(1, Ordering::Relaxed);
    }
}

/// The catalog: an unclassified tool is a compile error; `IdemServer::new` checks that each
/// one is served under its name.
pub const TOOLS: &[idem_tools::ToolInfo] = idem_tools::tools![
    Desk::open_ticket,
    Desk::close_ticket,
    Desk::comment,
    Desk::list_tickets
];

/// The server of one session.
///
/// # Errors
/// [`idem_tools::Error::Config`] if a catalogued tool is not served under its name.
pub fn session(backend: Arc<Backend>) -> Result<IdemServer<Desk>, idem_tools::Error> {
    IdemServer::new(Desk::new(backend), TOOLS)
}

/// The demo: rmcp's client over an in-process transport, a timeout, and a retry.
#[tokio::main]
pub async fn main() -> Result<(), Box<dyn std::error::Error>> {
    use rmcp::ServiceExt;
    use rmcp::model::CallToolRequestParams;

    let backend = Backend::with_latency(Duration::from_millis(300));
    let (server_io, client_io) = tokio::io::duplex(64 * 1024);
    let server = session(Arc::clone(&backend))?;
    tokio::spawn(async move {
        if let Ok(running) = server.serve(server_io).await {
            let _ = running.waiting().await;
        }
    });
    let client = ().serve(client_io).await?;

    for tool in client.list_all_tools().await? {
        let hints = tool.annotations.unwrap_or_default();
        println!(
            "{:<13} readOnly={:?} idempotent={:?} destructive={:?}",
            tool.name, hints.read_only_hint, hints.idempotent_hint, hints.destructive_hint
        );
    }

    let args = serde_json::json!({ "title": "the printer is on fire" });
    let call = CallToolRequestParams::new("open_ticket")
        .with_arguments(args.as_object().cloned().unwrap_or_default());
    let peer = client.peer().clone();
    let result = idem_tools::Turn::new("conv-1/turn-1")
        .scope(async move {
            // The agent gives up after 50 ms: rmcp sends notifications/cancelled ...
            let first = tokio::time::timeout(
                Duration::from_millis(50),
                idem_tools::mcp::remote::call_tool(&peer, call.clone()),
            )
            .await;
            println!("first call timed out: {}", first.is_err());
            // ... and retries: same turn, same arguments, same key.
            idem_tools::mcp::remote::call_tool(&peer, call).await
        })
        .await?;
    println!(
        "retry: {}",
        serde_json::to_string(&result.structured_content)?
    );
    let opened = backend.tickets().len();
    println!("tickets opened: {opened}");
    client.cancel().await?;
    if opened != 1 {
        return Err(format!("expected one ticket, found {opened}").into());
    }
    Ok(())
}

//! A small MCP server built with rmcp whose state-changing tools are safe to retry, for any MCP
//! client.
//!
//! A help desk: `open_ticket` and `close_ticket` change the world, `comment` too, and
//! `list_tickets` only reads. The server is wrapped in `idem_tools::mcp::IdemServer`, which gives
//! every call its turn (from `_meta["idem/turnId"]`), its namespace (the connection, the
//! client's `Idem-Client-Id` header, or else the HTTP session) and the client's
//! `_meta["idempotencyKey"]`, and fills the `tools/list` annotations from `#[idempotent]` /
//! `#[read_only]`. No tool has any MCP-specific idem code.
//!
//! ```text
//! cargo run --example mcp_server --features rmcp                          # stdio
//! cargo run --example mcp_server --features rmcp -- --http 127.0.0.1:8000 # streamable HTTP
//! ```
//!
//! Options: `--http ADDR` serves rmcp's streamable HTTP server at `http://ADDR/mcp` (with
//! sessions for protocols up to 2025-11-25; protocol 2026-07-28 is always stateless), and
//! prints `listening on http://ADDR/mcp` on stderr (`--http 127.0.0.1:0` picks a port);
//! `--stateless` turns HTTP sessions off; `--max-calls N` caps the changes of a turn;
//! `--latency-ms N` makes `open_ticket` take that long (to let a client time out mid-call);
//! `--sqlite PATH` records results in a SQLite file instead of memory, so that a restarted
//! server replays what the one before it ran to a client that names itself
//! (`_meta["idem/clientId"]`; the example must be built with `--features rmcp,sqlite`; the
//! help desk's own tickets stay in memory).
//! `tests/mcp_server.rs` drives it in-process with rmcp's client, `tests/mcp_http.rs` over
//! rmcp's HTTP service, and `tests/mcp-clients/` with the official Python SDK.

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

#[idem_tools::tool_impl(same_service)] // every `Desk` serves one `Backend`: one service
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
    /// Logged on stderr, for the tests of clients in other languages.
    async fn on_cancelled(
        &self,
        notification: CancelledNotificationParam,
        _context: NotificationContext<RoleServer>,
    ) {
        self.backend.cancellations.fetch_add(1, Ordering::Relaxed);
        if let Some(request) = notification.request_id {
            eprintln!("notifications/cancelled: request {request}");
        }
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

/// How the server is run (see the module docs).
#[derive(Debug, Default)]
pub struct Options {
    /// `--http ADDR`: streamable HTTP at this address, instead of stdio.
    pub http: Option<String>,
    /// `--stateless`: no HTTP sessions.
    pub stateless: bool,
    /// `--max-calls N`: the most changes a turn may make.
    pub max_calls: Option<u32>,
    /// `--latency-ms N`: how long `open_ticket` takes.
    pub latency: Duration,
    /// `--sqlite PATH`: the SQLite file that keeps the records.
    pub sqlite: Option<String>,
}

impl Options {
    /// Parses the command line (without the program name).
    ///
    /// # Errors
    /// A message naming the argument that is not understood.
    pub fn parse(mut args: impl Iterator<Item = String>) -> Result<Self, String> {
        let mut options = Options::default();
        while let Some(arg) = args.next() {
            let mut value = |name: &str| args.next().ok_or(format!("{name} needs a value"));
            match arg.as_str() {
                "--http" => options.http = Some(value("--http")?),
                "--stateless" => options.stateless = true,
                "--max-calls" => {
                    let n = value("--max-calls")?;
                    options.max_calls = Some(n.parse().map_err(|e| format!("--max-calls: {e}"))?);
                }
                "--sqlite" => options.sqlite = Some(value("--sqlite")?),
                "--latency-ms" => {
                    let ms = value("--latency-ms")?;
                    let ms = ms.parse().map_err(|e| format!("--latency-ms: {e}"))?;
                    options.latency = Duration::from_millis(ms);
                }
                other => {
                    return Err(format!(
                        "unknown argument `{other}`; usage: mcp_server [--http ADDR] \
                         [--stateless] [--max-calls N] [--latency-ms N] [--sqlite PATH]"
                    ));
                }
            }
        }
        Ok(options)
    }

    /// The server of one connection or session, with these options' turn settings.
    ///
    /// # Errors
    /// As [`session`].
    pub fn server(&self, backend: Arc<Backend>) -> Result<IdemServer<Desk>, idem_tools::Error> {
        let server = session(backend)?;
        Ok(match self.max_calls {
            Some(cap) => server.with_turn(move |turn| turn.with_max_calls(cap)),
            None => server,
        })
    }
}

/// Keeps the records in the SQLite file at `path` (the process's default store).
#[cfg(feature = "sqlite")]
fn use_sqlite(path: &str) -> Result<(), idem_tools::Error> {
    idem_tools::set_default_store(Arc::new(idem_tools::SqliteStore::open(path)?))
}

/// `--sqlite` needs the `sqlite` feature.
#[cfg(not(feature = "sqlite"))]
fn use_sqlite(_: &str) -> Result<(), idem_tools::Error> {
    Err(idem_tools::Error::Config(
        "--sqlite: build the example with `--features rmcp,sqlite`".to_owned(),
    ))
}

/// Serves stdio, or streamable HTTP with `--http`, until the client goes away (or forever).
#[tokio::main]
pub async fn main() -> Result<(), Box<dyn std::error::Error>> {
    use rmcp::ServiceExt;

    // Logs go to stderr (stdout is the stdio transport): idem's refusals are warnings.
    tracing_subscriber::fmt()
        .with_writer(std::io::stderr)
        .with_ansi(false)
        .with_env_filter(
            tracing_subscriber::EnvFilter::try_from_default_env()
                .unwrap_or_else(|_| tracing_subscriber::EnvFilter::new("warn")),
        )
        .init();
    let options = Options::parse(std::env::args().skip(1))?;
    if let Some(path) = &options.sqlite {
        use_sqlite(path)?;
    }
    let backend = Backend::with_latency(options.latency);
    let server = options.server(Arc::clone(&backend))?;
    let Some(addr) = &options.http else {
        // stdio: this process serves one client, so one server for its whole life.
        server
            .serve(rmcp::transport::stdio())
            .await?
            .waiting()
            .await?;
        return Ok(());
    };
    serve_http(server, backend, addr, options.stateless).await
}

/// rmcp's streamable HTTP server at `http://addr/mcp`: a server per session (or per request,
/// statelessly), each over the shared `backend`.
async fn serve_http(
    server: IdemServer<Desk>,
    backend: Arc<Backend>,
    addr: &str,
    stateless: bool,
) -> Result<(), Box<dyn std::error::Error>> {
    use hyper_util::rt::TokioIo;
    use hyper_util::service::TowerToHyperService;
    use rmcp::transport::streamable_http_server::session::local::LocalSessionManager;
    use rmcp::transport::streamable_http_server::{
        StreamableHttpServerConfig, StreamableHttpService,
    };

    let config = StreamableHttpServerConfig::default().with_legacy_session_mode(!stateless);
    let service = StreamableHttpService::new(
        server.factory(move || Desk::new(Arc::clone(&backend))),
        LocalSessionManager::default().into(),
        config,
    );
    let listener = tokio::net::TcpListener::bind(addr).await?;
    // One write, so that a reader of stderr never sees half the address.
    let ready = format!("listening on http://{}/mcp\n", listener.local_addr()?);
    std::io::Write::write_all(&mut std::io::stderr(), ready.as_bytes())?;
    loop {
        let (stream, _) = listener.accept().await?;
        let service = TowerToHyperService::new(service.clone());
        tokio::spawn(async move {
            let connection = hyper::server::conn::http1::Builder::new()
                .serve_connection(TokioIo::new(stream), service);
            if let Err(error) = connection.await {
                eprintln!("connection: {error}");
            }
        });
    }
}

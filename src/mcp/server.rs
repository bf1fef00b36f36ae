//! [`IdemServer`]: an rmcp `ServerHandler` that gives every routed tool call its turn,
//! namespace and client key, and every listed tool its annotations.

use std::collections::BTreeMap;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::time::{SystemTime, UNIX_EPOCH};

use rmcp::model::{
    CacheScope, CallToolRequestParams, CallToolResponse, CallToolResult, ContentBlock,
    ListToolsResult, ProtocolVersion, Tool,
};
use rmcp::service::RequestContext;
use rmcp::{ErrorData, RoleServer, ServerHandler};
use serde_json::Value;

use super::identity::{self, NamespaceRule};
use super::refuse;
use super::{
    CLIENT_ID_META, IDEMPOTENCY_EXTENSION, IDEMPOTENCY_KEY_META, MAX_CLIENT_KEY_LEN, TURN_ID_META,
    scope,
};
use crate::{Error, ToolInfo, Turn};

/// Settings applied to the `Turn` of every call.
type TurnRule = dyn Fn(Turn) -> Turn + Send + Sync + 'static;

/// An rmcp server whose tool calls run in idem turns: wrap the `ServerHandler` and serve the
/// wrapper — once per connection over stdio, or through [`factory`](Self::factory) under rmcp's
/// streamable HTTP server, which makes one per session or, served statelessly, per request.
///
/// For every `tools/call` it:
///
/// 1. names the **namespace**, the client the call is deduplicated for: the
///    [`with_namespace`](Self::with_namespace) rule if there is one; else the connection when
///    the call did not come over HTTP; else the client's own
///    [`CLIENT_ID_HEADER`](super::CLIENT_ID_HEADER) header (which outlives a session); else
///    the HTTP session. A call to an `#[idempotent]` tool that none of them names (stateless
///    HTTP with no header) is **refused** with a protocol error, and logged, instead of
///    running with no deduplication;
/// 2. takes the **turn id** from `_meta["idem/turnId"]` ([`TURN_ID_META`]); without one, a
///    call carrying a client key is a turn of its own, and a call with neither is a new turn
///    (it runs, and nothing replays it) — except a call to an `#[idempotent]` tool from a
///    client that declares the [`IDEMPOTENCY_EXTENSION`], which was told the tool is safe to
///    retry: it is **refused** with a protocol error, as a retry of it would act again;
/// 3. honours `_meta["idempotencyKey"]` ([`IDEMPOTENCY_KEY_META`]) as the caller key of the
///    first `#[idempotent]` tool the call reaches; the same entry in the call's `arguments`
///    (where it does nothing) is refused, unless the tool's input schema declares it;
/// 4. runs the routed call inside that [`Turn`] and returns the idem errors a model should
///    read (see [`model_message`](super::model_message)) as tool results with `isError: true`,
///    also when the tool's error type is `ErrorData`.
///
/// `tools/list` reports each catalogued tool's `readOnlyHint`, `idempotentHint` and
/// `destructiveHint` from its classification, as they are true for the client that asks:
/// `idempotentHint` is true for a state-changing tool only if the client declares the
/// [`IDEMPOTENCY_EXTENSION`] in its capabilities, thereby promising a turn id per user
/// message (a call of such a client that names no action is refused, see 2.); a client that
/// does not declare it may send no `_meta`, and gets a new action from every such call, so it
/// is told `false`. Every other method is the wrapped server's.
pub struct IdemServer<S> {
    inner: S,
    /// rmcp tool name → classification, checked once and shared by every server of a
    /// [`factory`](Self::factory).
    tools: Arc<BTreeMap<&'static str, &'static ToolInfo>>,
    /// The namespace of calls that do not come over HTTP.
    connection: Arc<str>,
    /// Whether this server answered an `initialize` (so it serves one session).
    initialized: AtomicBool,
    namespace: Option<Arc<NamespaceRule>>,
    turn: Option<Arc<TurnRule>>,
    requests: AtomicU64,
}

/// The turn a call runs in, with its namespace.
struct CallTurn {
    turn: Turn,
    /// The client key from `_meta`.
    key: Option<String>,
    /// Whether the call named neither a turn id nor a key: its turn is new, so nothing replays it.
    unnamed: bool,
}

/// The name rmcp serves an idem tool under: for a method named by default, `Type__method`,
/// the method's own name (`ToolInfo::item`, what `#[tool]` names it after); else the name.
fn rmcp_name(info: &ToolInfo) -> &'static str {
    let default_method_name = info
        .name
        .strip_suffix(info.item)
        .and_then(|ty| ty.strip_suffix("__"))
        .is_some_and(|ty| !ty.is_empty());
    if default_method_name {
        info.item
    } else {
        info.name
    }
}

/// A process-unique connection id.
fn new_connection_id() -> String {
    static CONNECTIONS: AtomicU64 = AtomicU64::new(0);
    let nanos = SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map_or(0, |d| d.as_nanos());
    let n = CONNECTIONS.fetch_add(1, Ordering::Relaxed);
    format!("mcp/connection/{}-{nanos:x}-{n}", std::process::id())
}

/// Whether the client of `context` declares the [`IDEMPOTENCY_EXTENSION`] (in `initialize`, or
/// in the request's `_meta` under protocol 2026-07-28).
pub fn client_declares_idempotency(context: &RequestContext<RoleServer>) -> bool {
    context
        .client_capabilities()
        .and_then(|capabilities| capabilities.extensions)
        .is_some_and(|extensions| extensions.contains_key(IDEMPOTENCY_EXTENSION))
}

/// The `_meta` entries idem reads; found among a call's arguments, they were misplaced.
const META_ENTRIES: [&str; 3] = [IDEMPOTENCY_KEY_META, TURN_ID_META, CLIENT_ID_META];

impl<S: ServerHandler> IdemServer<S> {
    /// Wraps `inner`, whose tools are classified by `tools` (an `idem_tools::tools![…]` catalog).
    ///
    /// Each catalogued tool must be served by `inner` under its idem name, or under the method
    /// name of a `Type::method` name (what `#[idem_tools::tool_impl]` gives rmcp's `#[tool]`
    /// methods), and no two may share an rmcp name: `inner.get_tool` (which `#[tool_handler]`
    /// implements) is asked.
    ///
    /// # Errors
    /// [`Error::Config`] naming a catalogued tool that `inner` does not serve under that name
    /// (say, a `#[tool(name = "…")]` that differs from the idem name), or two that collide.
    pub fn new(inner: S, tools: &'static [ToolInfo]) -> Result<Self, Error> {
        let mut by_name = BTreeMap::new();
        for info in tools {
            let name = rmcp_name(info);
            if inner.get_tool(name).is_none() {
                return Err(Error::Config(format!(
                    "idem tool `{}` is not served by this MCP server under the name `{name}`: \
                     give the `#[tool]` and the `#[idempotent]`/`#[read_only]` the same name \
                     (e.g. `#[idempotent(name = \"…\")]`), or leave both to the method name",
                    info.name
                )));
            }
            if let Some(other) = by_name.insert(name, info) {
                return Err(Error::Config(format!(
                    "idem tools `{}` and `{}` are both served as MCP tool `{name}`",
                    other.name, info.name
                )));
            }
        }
        Ok(IdemServer {
            inner,
            tools: Arc::new(by_name),
            connection: Arc::from(new_connection_id()),
            initialized: AtomicBool::new(false),
            namespace: None,
            turn: None,
            requests: AtomicU64::new(0),
        })
    }

    /// The service factory rmcp's `StreamableHttpService::new` takes: each server it makes
    /// wraps a new `make()` with this server's catalog (checked once, by [`new`](Self::new)),
    /// namespace rule and turn settings. `self`'s own inner server is dropped.
    ///
    /// ```ignore
    /// let idem = IdemServer::new(Desk::new(backend.clone()), TOOLS)?;
    /// let service = StreamableHttpService::new(
    ///     idem.factory(move || Desk::new(backend.clone())),
    ///     LocalSessionManager::default().into(),
    ///     StreamableHttpServerConfig::default(),
    /// );
    /// ```
    pub fn factory(
        self,
        make: impl Fn() -> S + Send + Sync + 'static,
    ) -> impl Fn() -> Result<Self, std::io::Error> + Send + Sync + 'static {
        let IdemServer {
            tools,
            namespace,
            turn,
            ..
        } = self;
        move || {
            Ok(IdemServer {
                inner: make(),
                tools: Arc::clone(&tools),
                connection: Arc::from(new_connection_id()),
                initialized: AtomicBool::new(false),
                namespace: namespace.clone(),
                turn: turn.clone(),
                requests: AtomicU64::new(0),
            })
        }
    }

    /// Names the namespace of each call, e.g. from the authenticated principal in
    /// `context.extensions` (the HTTP request parts under rmcp's streamable HTTP server), so
    /// that a client reconnecting in a new session still gets its retries replayed. It takes
    /// precedence over the session and the client's header. An `Err` refuses the call; an
    /// empty name is refused too (it would be shared by everyone).
    #[must_use]
    pub fn with_namespace(
        mut self,
        rule: impl Fn(&RequestContext<RoleServer>) -> Result<String, ErrorData> + Send + Sync + 'static,
    ) -> Self {
        self.namespace = Some(Arc::new(rule));
        self
    }

    /// Applies `settings` to the `Turn` of every call (budgets, store, in-flight wait). The
    /// namespace is set after it.
    #[must_use]
    pub fn with_turn(mut self, settings: impl Fn(Turn) -> Turn + Send + Sync + 'static) -> Self {
        self.turn = Some(Arc::new(settings));
        self
    }

    /// The wrapped server.
    pub fn inner(&self) -> &S {
        &self.inner
    }

    /// The namespace of calls that reach this server other than over HTTP (stdio, a pipe),
    /// when no rule is given: one per `IdemServer`.
    pub fn session_namespace(&self) -> &str {
        &self.connection
    }

    /// The classification of the MCP tool `name`, if it is catalogued.
    pub fn tool_info(&self, name: &str) -> Option<&'static ToolInfo> {
        self.tools.get(name).copied()
    }

    /// `tool` with the hints of its classification (if catalogued), as true for a client that
    /// declares the [`IDEMPOTENCY_EXTENSION`] (`declared`) or does not: `idempotentHint` is
    /// true for a read-only tool, and for a state-changing one only if `declared`. Its other
    /// annotations (title, `openWorldHint`) are kept.
    pub fn annotate(&self, mut tool: Tool, declared: bool) -> Tool {
        if let Some(info) = self.tool_info(&tool.name) {
            let mut annotations = tool.annotations.take().unwrap_or_default();
            annotations.read_only_hint = Some(info.read_only_hint());
            annotations.idempotent_hint =
                Some(info.idempotent_hint() && (declared || info.read_only_hint()));
            annotations.destructive_hint = Some(info.destructive_hint());
            tool.annotations = Some(annotations);
        }
        tool
    }

    /// Records that this server answers an `initialize`, so serves one connection or session;
    /// refuses a second one. The calls of a connection not made over HTTP are deduplicated in
    /// the server's own namespace, so one server shared by two connections (an
    /// `Arc<IdemServer<_>>` served on each, which rmcp allows) would replay one client's
    /// results to the other: the second connection is refused instead, at its `initialize`.
    pub(crate) fn mark_initialized(&self) -> Result<(), ErrorData> {
        if self.initialized.swap(true, Ordering::Relaxed) {
            tracing::error!(target: "idem", connection = %self.connection,
                "refused an `initialize`: this IdemServer already serves a client");
            return Err(ErrorData::invalid_request(
                "this MCP server instance already serves another client: an idem server \
                 (IdemServer) serves one connection or session, whose calls it deduplicates \
                 apart from other clients'; make a new IdemServer for each connection \
                 (IdemServer::factory makes one per call)",
                None,
            ));
        }
        Ok(())
    }

    /// The turn of one call, from its `_meta` and its namespace; `None` if nothing names the
    /// namespace. For a `read_only` tool, which uses neither, only the namespace rule's own
    /// refusal is an error: `_meta` or a client id idem could not use for a write is no reason
    /// to refuse a read.
    fn turn_of(
        &self,
        context: &RequestContext<RoleServer>,
        read_only: bool,
    ) -> Result<Option<CallTurn>, ErrorData> {
        let named = identity::namespace_of(
            context,
            self.namespace.as_deref(),
            &self.connection,
            self.initialized.load(Ordering::Relaxed),
        );
        let namespace = match named {
            Ok(Some(namespace)) => namespace,
            Ok(None) => return Ok(None),
            Err(_) if read_only && self.namespace.is_none() => return Ok(None),
            Err(error) => return Err(error),
        };
        let (turn_id, key) = match (
            meta_string(context, TURN_ID_META),
            meta_string(context, IDEMPOTENCY_KEY_META),
        ) {
            (Ok(turn_id), Ok(key)) => (turn_id, key),
            _ if read_only => return Ok(None),
            (Err(error), _) | (_, Err(error)) => return Err(error),
        };
        let unnamed = turn_id.is_none() && key.is_none();
        let turn_id = match (turn_id, &key) {
            (Some(id), _) => id,
            (None, Some(key)) => format!("{IDEMPOTENCY_KEY_META}:{key}"),
            (None, None) => {
                let n = self.requests.fetch_add(1, Ordering::Relaxed);
                format!("request/{}/{n}", self.connection)
            }
        };
        let turn = Turn::new(turn_id);
        let turn = match &self.turn {
            Some(settings) => settings(turn),
            None => turn,
        };
        Ok(Some(CallTurn {
            turn: turn.with_namespace(namespace),
            key,
            unnamed,
        }))
    }

    /// A `_meta` entry idem reads that the call put among its `arguments` instead, if the
    /// tool's input schema does not declare it. Each entry is checked: one the tool declares
    /// (its own `idempotencyKey` argument) hides no other.
    ///
    /// A `_meta` object among the arguments (a client that passed the whole request as its
    /// arguments) holding one of them counts too, unless the schema declares `_meta`.
    fn misplaced_meta(&self, request: &CallToolRequestParams) -> Option<&'static str> {
        let arguments = request.arguments.as_ref()?;
        let nested = arguments.get("_meta").and_then(Value::as_object);
        let mut found = META_ENTRIES
            .into_iter()
            .filter_map(|name| {
                if arguments.contains_key(name) {
                    Some((name, name))
                } else if nested.is_some_and(|meta| meta.contains_key(name)) {
                    Some((name, "_meta"))
                } else {
                    None
                }
            })
            .peekable();
        found.peek()?;
        let schema = self.inner.get_tool(&request.name)?.input_schema;
        let properties = schema.get("properties").and_then(Value::as_object);
        found
            .find(|(_, argument)| {
                !properties.is_some_and(|properties| properties.contains_key(*argument))
            })
            .map(|(name, _)| name)
    }

    /// `tools/call`: the routed call, in its turn (see [`IdemServer`]).
    pub(crate) async fn call_tool_in_turn(
        &self,
        request: CallToolRequestParams,
        context: RequestContext<RoleServer>,
    ) -> Result<CallToolResponse, ErrorData> {
        let info = self.tool_info(&request.name);
        if info.is_none() {
            warn_uncatalogued(&request.name);
        }
        let writes = info.is_some_and(|info| !info.read_only_hint());
        if writes && let Some(entry) = self.misplaced_meta(&request) {
            return Ok(CallToolResponse::from(misplaced(entry)));
        }
        let read_only = info.is_some_and(ToolInfo::read_only_hint);
        let Some(CallTurn { turn, key, unnamed }) = self.turn_of(&context, read_only)? else {
            if writes {
                return Err(refuse::no_client_identity(&request.name));
            }
            // A read-only or uncatalogued tool: nothing to deduplicate.
            return self.inner.call_tool(request, context).await;
        };
        // The client was told that retrying a write is safe (`idempotentHint`); a call that
        // names no action would make its retry a new action.
        if writes && unnamed && client_declares_idempotency(&context) {
            return Err(refuse::no_turn(&request.name));
        }
        let call = self.inner.call_tool(request, context);
        match turn.scope(scope::with_caller_key(key, call)).await {
            Err(error) => super::result::into_tool_result(error).map(CallToolResponse::from),
            Ok(response) => Ok(response),
        }
    }

    /// `tools/list`: the wrapped server's list, annotated for the client of `context`. The
    /// hints depend on the client's capabilities, so the list may be cached only by it.
    pub(crate) fn annotate_list(
        &self,
        mut list: ListToolsResult,
        context: &RequestContext<RoleServer>,
    ) -> ListToolsResult {
        let declared = client_declares_idempotency(context);
        list.tools = std::mem::take(&mut list.tools)
            .into_iter()
            .map(|tool| self.annotate(tool, declared))
            .collect();
        let cacheable = context
            .protocol_version()
            .is_some_and(|version| version.as_str() >= ProtocolVersion::V_2026_07_28.as_str());
        if cacheable || list.cache_scope.is_some() {
            list.cache_scope = Some(CacheScope::Private);
        }
        list
    }
}

/// Logs, once per tool name in this process, a call of a tool that is not in the catalog: it is
/// served as the wrapped server serves it, with no classification (no hints) and no
/// deduplication of its own — a write left out of `tools![…]` by mistake runs again on every
/// retry. (A handler that calls `#[idempotent]` functions itself is deduplicated by them.)
fn warn_uncatalogued(tool: &str) {
    static WARNED: std::sync::Mutex<std::collections::BTreeSet<String>> =
        std::sync::Mutex::new(std::collections::BTreeSet::new());
    let mut warned = WARNED
        .lock()
        .unwrap_or_else(std::sync::PoisonError::into_inner);
    if warned.len() < 1024 && warned.insert(tool.to_owned()) {
        tracing::warn!(target: "idem", tool,
            "MCP tool `{tool}` is not in the idem catalog given to IdemServer::new: it is served \
             with no hints, and only #[idempotent] code it runs is deduplicated (a plain write \
             runs again on every retry); add it to `tools![...]`, as #[idempotent] or \
             #[read_only]");
    }
}

/// The result a model reads for a call that put the `_meta` entry `entry` in its arguments.
fn misplaced(entry: &str) -> CallToolResult {
    CallToolResult::error(vec![ContentBlock::text(format!(
        "This call was refused and nothing was done: its arguments contain {entry}, which is \
         not a parameter of this tool. Call it again without {entry} in the arguments. (A \
         client that sends an idempotency key or a turn id puts it in the request's _meta, \
         not in the arguments.)"
    ))])
}

/// The string `_meta[name]` of the request, checked.
pub(super) fn meta_string(
    context: &RequestContext<RoleServer>,
    name: &str,
) -> Result<Option<String>, ErrorData> {
    match context.meta.get(name) {
        None | Some(Value::Null) => Ok(None),
        Some(Value::String(s)) if !s.is_empty() && s.len() <= MAX_CLIENT_KEY_LEN => {
            Ok(Some(s.clone()))
        }
        Some(_) => Err(ErrorData::invalid_params(
            format!(
                "`_meta.{name}` must be a non-empty string of at most {MAX_CLIENT_KEY_LEN} bytes"
            ),
            None,
        )),
    }
}

impl<S> std::fmt::Debug for IdemServer<S> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("IdemServer")
            .field("connection", &self.connection)
            .field("tools", &self.tools.keys().collect::<Vec<_>>())
            .finish_non_exhaustive()
    }
}

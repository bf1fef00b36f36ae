//! [`IdemServer`]: an rmcp `ServerHandler` that gives every routed tool call its turn,
//! namespace and client key, and every listed tool its annotations.

use std::collections::BTreeMap;
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{SystemTime, UNIX_EPOCH};

use rmcp::model::{CallToolRequestParams, CallToolResponse, ListToolsResult, Tool};
use rmcp::service::RequestContext;
use rmcp::{ErrorData, RoleServer, ServerHandler};
use serde_json::Value;

use super::{IDEMPOTENCY_KEY_META, MAX_CLIENT_KEY_LEN, TURN_ID_META, scope};
use crate::{Error, ToolInfo, Turn};

/// The rule that names the namespace of a call (the session or the principal).
type NamespaceRule =
    dyn Fn(&RequestContext<RoleServer>) -> Result<String, ErrorData> + Send + Sync + 'static;

/// Settings applied to the `Turn` of every call.
type TurnRule = dyn Fn(Turn) -> Turn + Send + Sync + 'static;

/// An rmcp server whose tool calls run in idem turns: wrap the `ServerHandler` (one
/// `IdemServer` per session, like the handler itself) and serve the wrapper.
///
/// For every `tools/call` it:
///
/// 1. takes the **namespace** from [`with_namespace`](Self::with_namespace)'s rule, or by
///    default a fresh id of this `IdemServer` (so of the session): two sessions reusing a turn
///    id never see each other's results;
/// 2. takes the **turn id** from `_meta["idem/turnId"]` ([`TURN_ID_META`]); without one, a
///    call carrying a client key is a turn of its own, and a call with neither is a new turn
///    (it runs, and nothing replays it);
/// 3. honours `_meta["idempotencyKey"]` ([`IDEMPOTENCY_KEY_META`]) as the caller key of the
///    first `#[idempotent]` tool the call reaches;
/// 4. runs the routed call inside that [`Turn`] and returns the idem errors a model should
///    read (see [`model_message`](super::model_message)) as tool results with `isError: true`,
///    also when the tool's error type is `ErrorData`.
///
/// `tools/list` (and `get_tool`) report each catalogued tool's `readOnlyHint`,
/// `idempotentHint` and `destructiveHint` from its classification. Every other method is
/// the wrapped server's.
pub struct IdemServer<S> {
    inner: S,
    /// rmcp tool name → classification.
    tools: BTreeMap<&'static str, &'static ToolInfo>,
    session: Arc<str>,
    namespace: Option<Arc<NamespaceRule>>,
    turn: Option<Arc<TurnRule>>,
    requests: AtomicU64,
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

/// A process-unique session id.
fn new_session_id() -> String {
    static SESSIONS: AtomicU64 = AtomicU64::new(0);
    let nanos = SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map_or(0, |d| d.as_nanos());
    let n = SESSIONS.fetch_add(1, Ordering::Relaxed);
    format!("mcp-session/{}-{nanos:x}-{n}", std::process::id())
}

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
            tools: by_name,
            session: Arc::from(new_session_id()),
            namespace: None,
            turn: None,
            requests: AtomicU64::new(0),
        })
    }

    /// Names the namespace of each call, e.g. from the authenticated principal in
    /// `context.extensions` (the HTTP request parts under rmcp's streamable HTTP server), so
    /// that a client reconnecting in a new session still gets its retries replayed. An `Err`
    /// refuses the call; an empty name is refused too (it would be shared by everyone).
    #[must_use]
    pub fn with_namespace(
        mut self,
        rule: impl Fn(&RequestContext<RoleServer>) -> Result<String, ErrorData> + Send + Sync + 'static,
    ) -> Self {
        self.namespace = Some(Arc::new(rule));
        self
    }

    /// Applies `settings` to the `Turn` of every call (budgets, store, in-flight wait). The
    /// namespace is set after it, by the namespace rule.
    #[must_use]
    pub fn with_turn(mut self, settings: impl Fn(Turn) -> Turn + Send + Sync + 'static) -> Self {
        self.turn = Some(Arc::new(settings));
        self
    }

    /// The wrapped server.
    pub fn inner(&self) -> &S {
        &self.inner
    }

    /// The namespace of this session when no rule is given.
    pub fn session_namespace(&self) -> &str {
        &self.session
    }

    /// The classification of the MCP tool `name`, if it is catalogued.
    pub fn tool_info(&self, name: &str) -> Option<&'static ToolInfo> {
        self.tools.get(name).copied()
    }

    /// `tool` with the hints of its classification (if catalogued); its other annotations
    /// (title, `openWorldHint`) are kept.
    pub fn annotate(&self, mut tool: Tool) -> Tool {
        if let Some(info) = self.tool_info(&tool.name) {
            let mut annotations = tool.annotations.take().unwrap_or_default();
            annotations.read_only_hint = Some(info.read_only_hint());
            annotations.idempotent_hint = Some(info.idempotent_hint());
            annotations.destructive_hint = Some(info.destructive_hint());
            tool.annotations = Some(annotations);
        }
        tool
    }

    /// The turn of one call, from its `_meta` and the namespace rule, and its client key.
    fn turn_of(
        &self,
        context: &RequestContext<RoleServer>,
    ) -> Result<(Turn, Option<String>), ErrorData> {
        let namespace = match &self.namespace {
            Some(rule) => rule(context)?,
            None => self.session.to_string(),
        };
        if namespace.is_empty() {
            return Err(ErrorData::invalid_request(
                "the idem namespace rule gave an empty namespace; refused, as it would be \
                 shared by every client",
                None,
            ));
        }
        let turn_id = meta_string(context, TURN_ID_META)?;
        let key = meta_string(context, IDEMPOTENCY_KEY_META)?;
        let turn_id = match (turn_id, &key) {
            (Some(id), _) => id,
            (None, Some(key)) => format!("{IDEMPOTENCY_KEY_META}:{key}"),
            (None, None) => {
                let n = self.requests.fetch_add(1, Ordering::Relaxed);
                format!("request/{}/{n}", self.session)
            }
        };
        let turn = Turn::new(turn_id);
        let turn = match &self.turn {
            Some(settings) => settings(turn),
            None => turn,
        };
        Ok((turn.with_namespace(namespace), key))
    }

    /// `tools/call`: the routed call, in its turn (see [`IdemServer`]).
    pub(crate) async fn call_tool_in_turn(
        &self,
        request: CallToolRequestParams,
        context: RequestContext<RoleServer>,
    ) -> Result<CallToolResponse, ErrorData> {
        let (turn, key) = self.turn_of(&context)?;
        let call = self.inner.call_tool(request, context);
        match turn.scope(scope::with_caller_key(key, call)).await {
            Err(error) => super::result::into_tool_result(error).map(CallToolResponse::from),
            Ok(response) => Ok(response),
        }
    }

    /// `tools/list`: the wrapped server's list, annotated.
    pub(crate) fn annotate_list(&self, mut list: ListToolsResult) -> ListToolsResult {
        list.tools = std::mem::take(&mut list.tools)
            .into_iter()
            .map(|tool| self.annotate(tool))
            .collect();
        list
    }
}

/// The string `_meta[name]` of the request, checked.
fn meta_string(
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
            .field("session", &self.session)
            .field("tools", &self.tools.keys().collect::<Vec<_>>())
            .finish_non_exhaustive()
    }
}

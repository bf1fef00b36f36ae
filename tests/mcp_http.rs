//! `examples/mcp_server.rs` behind rmcp's streamable HTTP service, called with HTTP requests
//! (no socket): the namespace of a call with sessions, statelessly on protocol 2025-11-25, and
//! on protocol 2026-07-28 (always stateless in rmcp, which then builds a server per request).

mod mcp_support;

use std::sync::Arc;
use std::time::Duration;

use http::{Request, StatusCode};
use http_body_util::{BodyExt, Full};
use idem_tools::mcp::{CLIENT_ID_HEADER, IDEMPOTENCY_EXTENSION, IdemServer, TURN_ID_META};
use mcp_support::example::{Backend, Desk, session};
use rmcp::transport::streamable_http_server::session::local::LocalSessionManager;
use rmcp::transport::streamable_http_server::{StreamableHttpServerConfig, StreamableHttpService};
use serde_json::{Value, json};
use tower_service::Service as _;

type Service = StreamableHttpService<IdemServer<Desk>, LocalSessionManager>;

const V2025: &str = "2025-11-25";
const V2026: &str = "2026-07-28";

/// rmcp's HTTP service over `backend`, with sessions (for protocols before 2026-07-28) or not.
fn service(backend: &Arc<Backend>, sessions: bool) -> Service {
    service_of(session(Arc::clone(backend)).unwrap(), backend, sessions)
}

fn service_of(server: IdemServer<Desk>, backend: &Arc<Backend>, sessions: bool) -> Service {
    let backend = Arc::clone(backend);
    StreamableHttpService::new(
        server.factory(move || Desk::new(Arc::clone(&backend))),
        LocalSessionManager::default().into(),
        StreamableHttpServerConfig::default()
            .with_legacy_session_mode(sessions)
            .with_json_response(true)
            .with_sse_keep_alive(None),
    )
}

/// One HTTP request: a JSON-RPC message and headers.
struct Post {
    headers: Vec<(&'static str, String)>,
    body: Value,
}

impl Post {
    /// A request (`id` 1) of `method` with `params`.
    fn request(protocol: &'static str, method: &str, mut params: Value) -> Self {
        let mut headers = vec![("mcp-protocol-version", protocol.to_owned())];
        if protocol == V2026 {
            // Protocol 2026-07-28: every request says who the client is and what it can do.
            let meta = params
                .as_object_mut()
                .unwrap()
                .entry("_meta")
                .or_insert_with(|| json!({}));
            let meta = meta.as_object_mut().unwrap();
            meta.insert(
                "io.modelcontextprotocol/protocolVersion".into(),
                V2026.into(),
            );
            meta.entry("io.modelcontextprotocol/clientCapabilities")
                .or_insert_with(|| json!({}));
            meta.insert(
                "io.modelcontextprotocol/clientInfo".into(),
                json!({"name": "test", "version": "0"}),
            );
            headers.push(("mcp-method", method.to_owned()));
            if let Some(name) = params.get("name").and_then(Value::as_str) {
                headers.push(("mcp-name", name.to_owned()));
            }
        }
        let body = json!({"jsonrpc": "2.0", "id": 1, "method": method, "params": params});
        Post { headers, body }
    }

    /// `tools/call` of `tool` with `args`, in turn `turn`.
    fn call(protocol: &'static str, tool: &str, args: Value, turn: &str) -> Self {
        let params = json!({"name": tool, "arguments": args, "_meta": {TURN_ID_META: turn}});
        Post::request(protocol, "tools/call", params)
    }

    fn header(mut self, name: &'static str, value: &str) -> Self {
        self.headers.push((name, value.to_owned()));
        self
    }

    /// Sends it; the status, the session id the response names, and the JSON-RPC message.
    async fn send<S: rmcp::ServerHandler + Send + 'static>(
        self,
        service: &mut StreamableHttpService<S, LocalSessionManager>,
    ) -> (StatusCode, Option<String>, Value) {
        let mut request = Request::post("http://localhost/mcp")
            .header("host", "localhost")
            .header("accept", "application/json, text/event-stream")
            .header("content-type", "application/json");
        for (name, value) in &self.headers {
            request = request.header(*name, value);
        }
        let body = Full::new(bytes(&self.body));
        let response = service.call(request.body(body).unwrap()).await.unwrap();
        let status = response.status();
        let session = response
            .headers()
            .get("mcp-session-id")
            .map(|v| v.to_str().unwrap().to_owned());
        let sse = response
            .headers()
            .get("content-type")
            .is_some_and(|v| v.to_str().unwrap().starts_with("text/event-stream"));
        let message = read_message(response.into_body(), sse).await;
        (status, session, message)
    }
}

fn bytes(value: &Value) -> bytes::Bytes {
    bytes::Bytes::from(serde_json::to_vec(value).unwrap())
}

/// The JSON-RPC response in a JSON body, or the first one in an SSE stream.
async fn read_message<B>(mut body: B, sse: bool) -> Value
where
    B: http_body::Body<Data = bytes::Bytes> + Unpin,
    B::Error: std::fmt::Debug,
{
    let mut text = String::new();
    loop {
        let frame = tokio::time::timeout(Duration::from_secs(10), body.frame())
            .await
            .expect("a response within 10 s");
        let Some(frame) = frame else { break };
        if let Ok(data) = frame.unwrap().into_data() {
            text.push_str(std::str::from_utf8(&data).unwrap());
        }
        if sse
            && let Some(message) = text
                .lines()
                .filter_map(|line| line.strip_prefix("data:"))
                .filter_map(|data| serde_json::from_str::<Value>(data.trim()).ok())
                .find(|m| m.get("result").is_some() || m.get("error").is_some())
        {
            return message;
        }
    }
    if text.is_empty() {
        return Value::Null;
    }
    serde_json::from_str(&text).unwrap_or_else(|e| panic!("{e}: {text}"))
}

/// The `result` of a response, or a panic with its error.
fn result(message: &Value) -> &Value {
    message
        .get("result")
        .unwrap_or_else(|| panic!("an error: {message}"))
}

fn open(protocol: &'static str, title: &str, turn: &str) -> Post {
    Post::call(protocol, "open_ticket", json!({ "title": title }), turn)
}

#[tokio::test]
async fn stateless_calls_are_deduplicated_per_client_id_on_both_protocols() {
    for protocol in [V2025, V2026] {
        let backend = Backend::with_latency(Duration::ZERO);
        // With sessions configured, 2026-07-28 is served statelessly all the same.
        let mut service = service(&backend, protocol == V2026);
        // Keys live in the process's default store: each protocol gets clients of its own.
        let (alice_id, bob_id) = (format!("alice@{protocol}"), format!("bob@{protocol}"));
        let alice = || open(protocol, "vpn", "turn-1").header(CLIENT_ID_HEADER, &alice_id);
        let (status, _, first) = alice().send(&mut service).await;
        assert_eq!(status, StatusCode::OK, "{protocol}: {first}");
        let (_, _, retry) = alice().send(&mut service).await;
        assert_eq!(
            result(&retry)["structuredContent"],
            result(&first)["structuredContent"],
            "{protocol}"
        );
        assert_eq!(backend.tickets().len(), 1, "{protocol}: one side effect");
        // Another client reusing the turn id is another namespace.
        let bob = open(protocol, "vpn", "turn-1").header(CLIENT_ID_HEADER, &bob_id);
        let (_, _, other) = bob.send(&mut service).await;
        assert_eq!(result(&other)["structuredContent"]["id"], 2, "{protocol}");
        // A key reused with other arguments is refused, for a model.
        let keyed = |title: &str| {
            let params = json!({
                "name": "open_ticket",
                "arguments": {"title": title},
                "_meta": {"idempotencyKey": "k-1"},
            });
            Post::request(protocol, "tools/call", params).header(CLIENT_ID_HEADER, &alice_id)
        };
        result(&keyed("one").send(&mut service).await.2);
        let (_, _, reused) = keyed("two").send(&mut service).await;
        assert_eq!(result(&reused)["isError"], true, "{protocol}: {reused}");
        assert_eq!(backend.tickets().len(), 3, "{protocol}");
    }
}

#[tokio::test]
async fn a_stateless_write_from_an_unnamed_client_is_refused_and_a_read_is_served() {
    for protocol in [V2025, V2026] {
        let backend = Backend::with_latency(Duration::ZERO);
        let mut service = service(&backend, false);
        let (_, _, refused) = open(protocol, "x", "t").send(&mut service).await;
        assert_eq!(refused["error"]["code"], -32600, "{protocol}: {refused}");
        let message = refused["error"]["message"].as_str().unwrap();
        assert!(message.contains("Idem-Client-Id"), "{message}");
        assert_eq!(
            refused["error"]["data"]["idem"]["error"],
            "no_client_identity"
        );
        assert!(backend.tickets().is_empty(), "{protocol}: nothing ran");
        let list = Post::call(protocol, "list_tickets", json!({}), "t");
        let (_, _, listed) = list.send(&mut service).await;
        assert_eq!(result(&listed)["isError"], false, "{protocol}: {listed}");
        assert_eq!(backend.reads(), 1);
    }
}

/// `initialize` and `notifications/initialized` on protocol 2025-11-25: the session's id.
async fn open_session(service: &mut Service) -> String {
    open_session_as(service, None).await
}

/// [`open_session`] by a client that sends `client_id` as its `Idem-Client-Id`, if any.
async fn open_session_as(service: &mut Service, client_id: Option<&str>) -> String {
    let params = json!({
        "protocolVersion": V2025,
        "capabilities": {},
        "clientInfo": {"name": "test", "version": "0"},
    });
    let as_client = |post: Post| match client_id {
        Some(id) => post.header(CLIENT_ID_HEADER, id),
        None => post,
    };
    let (status, session, init) = as_client(Post::request(V2025, "initialize", params))
        .send(service)
        .await;
    assert_eq!(status, StatusCode::OK, "{init}");
    let session = session.expect("a session id");
    let mut initialized = Post::request(V2025, "notifications/initialized", json!({}));
    initialized.body = json!({"jsonrpc": "2.0", "method": "notifications/initialized"});
    let (status, _, _) = as_client(initialized)
        .header("mcp-session-id", &session)
        .send(service)
        .await;
    assert_eq!(status, StatusCode::ACCEPTED);
    session
}

/// A client's own id outlives its session: after reconnecting (a new session) its retry is
/// still a retry. A client without one is its session.
#[tokio::test]
async fn with_sessions_the_client_id_wins_over_the_session() {
    let backend = Backend::with_latency(Duration::ZERO);
    let mut service = service(&backend, true);
    let mut replies = Vec::new();
    for client in ["agent-7", "agent-7", "agent-8"] {
        let session = open_session_as(&mut service, Some(client)).await;
        let call = open(V2025, "same", "turn-1")
            .header("mcp-session-id", &session)
            .header(CLIENT_ID_HEADER, client);
        let (_, _, reply) = call.send(&mut service).await;
        replies.push(result(&reply)["structuredContent"].clone());
    }
    assert_eq!(replies[0], replies[1], "the reconnected client is replayed");
    assert_ne!(
        replies[0], replies[2],
        "another client id is another namespace"
    );
    assert_eq!(backend.tickets().len(), 2);
}

#[tokio::test]
async fn with_sessions_each_session_is_a_namespace_and_a_forged_session_header_is_not() {
    let backend = Backend::with_latency(Duration::ZERO);
    let mut service = service(&backend, true);
    let (a, b) = (
        open_session(&mut service).await,
        open_session(&mut service).await,
    );
    let in_session =
        |session: &str| open(V2025, "same", "turn-1").header("mcp-session-id", session);
    let (_, _, first) = in_session(&a).send(&mut service).await;
    let (_, _, retry) = in_session(&a).send(&mut service).await;
    assert_eq!(
        result(&retry)["structuredContent"],
        result(&first)["structuredContent"]
    );
    let (_, _, other) = in_session(&b).send(&mut service).await;
    assert_eq!(result(&other)["structuredContent"]["id"], 2);
    assert_eq!(backend.tickets().len(), 2);
    // A 2026-07-28 request is served statelessly, where rmcp checks no session header: naming
    // session `a` there does not make it `a`'s call.
    let forged = open(V2026, "same", "turn-1").header("mcp-session-id", &a);
    let (_, _, refused) = forged.send(&mut service).await;
    assert_eq!(refused["error"]["code"], -32600, "{refused}");
    assert_eq!(backend.tickets().len(), 2);
}

#[tokio::test]
async fn a_namespace_rule_names_the_principal_over_stateless_http() {
    let backend = Backend::with_latency(Duration::ZERO);
    let server = session(Arc::clone(&backend))
        .unwrap()
        .with_namespace(|context| {
            let parts = context
                .extensions
                .get::<http::request::Parts>()
                .ok_or_else(|| rmcp::ErrorData::invalid_request("not HTTP", None))?;
            let user = parts.headers.get("x-user").and_then(|v| v.to_str().ok());
            user.map(|user| format!("user/{user}"))
                .ok_or_else(|| rmcp::ErrorData::invalid_request("who are you?", None))
        });
    let mut service = service_of(server, &backend, false);
    // The principal, not the client id, names the namespace: two clients of one user share it.
    for client in ["laptop", "phone"] {
        let call = open(V2026, "x", "turn-1")
            .header("x-user", "ada")
            .header(CLIENT_ID_HEADER, client);
        result(&call.send(&mut service).await.2);
    }
    assert_eq!(backend.tickets().len(), 1);
    let (_, _, refused) = open(V2026, "x", "turn-1").send(&mut service).await;
    assert_eq!(refused["error"]["message"], "who are you?");
}

#[tokio::test]
async fn on_2026_07_28_the_hints_follow_the_capabilities_each_request_declares() {
    let backend = Backend::with_latency(Duration::ZERO);
    let mut service = service(&backend, false);
    for declared in [false, true] {
        let mut capabilities = json!({});
        if declared {
            capabilities = json!({"extensions": {IDEMPOTENCY_EXTENSION: {}}});
        }
        let params = json!({"_meta": {"io.modelcontextprotocol/clientCapabilities": capabilities}});
        let (_, _, listed) = Post::request(V2026, "tools/list", params)
            .send(&mut service)
            .await;
        let listed = result(&listed);
        // The list depends on the client: no one else may be served it from a cache.
        assert_eq!(listed["cacheScope"], "private");
        for tool in listed["tools"].as_array().unwrap() {
            let read_only = tool["name"] == "list_tickets";
            let hint = &tool["annotations"]["idempotentHint"];
            assert_eq!(*hint, declared || read_only, "{declared}: {tool}");
        }
    }
}

/// rmcp's HTTP service (with sessions) over one `IdemServer` shared by every session and
/// request, as rmcp's examples build a service of a handler that is not made per session.
fn shared_service(
    backend: &Arc<Backend>,
) -> StreamableHttpService<Arc<IdemServer<Desk>>, LocalSessionManager> {
    let server = Arc::new(session(Arc::clone(backend)).unwrap());
    StreamableHttpService::new(
        move || Ok(Arc::clone(&server)),
        LocalSessionManager::default().into(),
        StreamableHttpServerConfig::default()
            .with_json_response(true)
            .with_sse_keep_alive(None),
    )
}

/// One `IdemServer` given to rmcp's HTTP service for every session and request (`move ||
/// Ok(Arc::clone(&server))`, rather than `IdemServer::factory`): once a session has opened on
/// it, a stateless write from a client that names itself nowhere is still refused (it ran, and
/// a second such client was replayed the first one's result, in the server's own namespace),
/// and a second session is refused at its `initialize`. (Found by a review.)
#[tokio::test]
async fn a_server_shared_by_every_request_never_runs_an_unnamed_write() {
    let backend = Backend::with_latency(Duration::ZERO);
    let mut service = shared_service(&backend);
    let init = || {
        Post::request(
            V2025,
            "initialize",
            json!({"protocolVersion": V2025, "capabilities": {},
                   "clientInfo": {"name": "test", "version": "0"}}),
        )
    };
    let (_, session, opened) = init().send(&mut service).await;
    assert!(session.is_some(), "{opened}");
    for _ in 0..2 {
        let (_, _, refused) = open(V2026, "x", "t").send(&mut service).await;
        assert_eq!(refused["error"]["code"], -32600, "{refused}");
    }
    assert!(backend.tickets().is_empty(), "no unnamed write ran");
    let (_, _, second) = init().send(&mut service).await;
    let message = second["error"]["message"].as_str().unwrap_or_default();
    assert!(
        message.contains("already serves another client"),
        "{second}"
    );
}

/// The shared server of `a_server_shared_by_every_request_never_runs_an_unnamed_write`: once
/// alice's session initialized it, a stateless 2026-07-28 request — which rmcp hands to the
/// same server and whose `Mcp-Session-Id` it never checks — naming alice's session is not
/// taken for her session (it was, and replayed her ticket; found by a review). With `factory`
/// the same forged request is refused too
/// (`with_sessions_each_session_is_a_namespace_and_a_forged_session_header_is_not`).
#[tokio::test]
async fn a_shared_server_never_takes_a_forged_session_header_for_a_session() {
    let backend = Backend::with_latency(Duration::ZERO);
    let mut service = shared_service(&backend);
    let init = Post::request(
        V2025,
        "initialize",
        json!({"protocolVersion": V2025, "capabilities": {},
               "clientInfo": {"name": "alice", "version": "0"}}),
    );
    let (_, alice, opened) = init.send(&mut service).await;
    let alice = alice.unwrap_or_else(|| panic!("a session: {opened}"));
    let mut initialized = Post::request(V2025, "notifications/initialized", json!({}));
    initialized.body = json!({"jsonrpc": "2.0", "method": "notifications/initialized"});
    initialized
        .header("mcp-session-id", &alice)
        .send(&mut service)
        .await;
    let mine = open(V2025, "same", "turn-1").header("mcp-session-id", &alice);
    let (_, _, first) = mine.send(&mut service).await;
    result(&first);
    assert_eq!(backend.tickets().len(), 1);
    let forged = open(V2026, "same", "turn-1").header("mcp-session-id", &alice);
    let (_, _, forged) = forged.send(&mut service).await;
    assert_eq!(
        forged["error"]["code"], -32600,
        "a stateless request naming alice's session was served as hers: {forged}"
    );
}

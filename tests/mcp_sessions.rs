//! `examples/mcp_server.rs` over several sessions: namespaces, turns and client keys from
//! `_meta`, the namespace rule, turn settings, and the client helper.

mod mcp_support;

use std::sync::Arc;
use std::time::Duration;

use idem_tools::Turn;
use idem_tools::mcp::{CLIENT_ID_META, IDEMPOTENCY_KEY_META, TURN_ID_META, remote};
use mcp_support::example::{Backend, session};
use mcp_support::{call, connect, connect_to, is_error, text};
use rmcp::ServiceError;
use rmcp::model::RequestMetaObject;
use serde_json::{Value, json};

#[tokio::test]
async fn two_sessions_with_the_same_turn_id_are_separate_namespaces() {
    let backend = Backend::with_latency(Duration::ZERO);
    let (alice, bob) = (connect_to(&backend).await, connect_to(&backend).await);
    let open = || {
        call(
            "open_ticket",
            json!({"title": "same"}),
            &[(TURN_ID_META, "turn-1")],
        )
    };
    let a = alice.call_tool(open()).await.unwrap();
    let b = bob.call_tool(open()).await.unwrap();
    assert_ne!(
        a.structured_content, b.structured_content,
        "bob did not get alice's ticket"
    );
    assert_eq!(backend.tickets().len(), 2);
    // Each session still replays its own retries.
    assert_eq!(alice.call_tool(open()).await.unwrap(), a);
    assert_eq!(backend.tickets().len(), 2);
    alice.cancel().await.unwrap();
    bob.cancel().await.unwrap();
}

/// A stdio server serves one connection per process: a client that restarts it (a crash, a
/// restarted run) and names itself with `_meta["idem/clientId"]` is replayed the first
/// process's result (the store is shared, as a durable one is across processes); a connection
/// that does not name itself is a client of its own.
#[tokio::test]
async fn a_client_that_names_itself_is_recognised_by_a_new_connection() {
    let backend = Backend::with_latency(Duration::ZERO);
    let open = |client: Option<&'static str>| {
        let mut meta = vec![(TURN_ID_META, "turn-restart")];
        meta.extend(client.map(|id| (CLIENT_ID_META, id)));
        call("open_ticket", json!({"title": "restart"}), &meta)
    };
    let first = connect_to(&backend).await;
    let opened = first.call_tool(open(Some("agent-7"))).await.unwrap();
    first.cancel().await.unwrap();
    // The server restarted: a new connection, the same client.
    let restarted = connect_to(&backend).await;
    let again = restarted.call_tool(open(Some("agent-7"))).await.unwrap();
    assert_eq!(
        again, opened,
        "the restarted server replays the first result"
    );
    assert_eq!(backend.tickets().len(), 1);
    // Another client with the same turn id, or a connection that does not name itself, is not
    // replayed that result.
    let other = restarted.call_tool(open(Some("agent-8"))).await.unwrap();
    assert_ne!(other.structured_content, opened.structured_content);
    let unnamed = restarted.call_tool(open(None)).await.unwrap();
    assert_ne!(unnamed.structured_content, opened.structured_content);
    assert_eq!(backend.tickets().len(), 3);
    // The longest id a client may send names a namespace too (a digest of it), the same one
    // on every connection.
    let longest: &'static str = "c".repeat(256).leak();
    let first = restarted.call_tool(open(Some(longest))).await.unwrap();
    assert!(first.is_error != Some(true), "{first:?}");
    let again = connect_to(&backend).await;
    assert_eq!(again.call_tool(open(Some(longest))).await.unwrap(), first);
    assert_eq!(backend.tickets().len(), 4);
    restarted.cancel().await.unwrap();
    again.cancel().await.unwrap();
}

#[tokio::test]
async fn a_namespace_rule_shares_turns_across_sessions_and_may_refuse_a_call() {
    let backend = Backend::with_latency(Duration::ZERO);
    let tenant = |backend: &Arc<Backend>| {
        session(Arc::clone(backend))
            .unwrap()
            .with_namespace(|_| Ok("tenant-7".to_owned()))
    };
    let (first, second) = (
        connect(tenant(&backend)).await,
        connect(tenant(&backend)).await,
    );
    let open = || {
        call(
            "open_ticket",
            json!({"title": "t"}),
            &[(TURN_ID_META, "turn-1")],
        )
    };
    let a = first.call_tool(open()).await.unwrap();
    let b = second.call_tool(open()).await.unwrap();
    assert_eq!(a, b, "one principal, one turn: the second session replays");
    assert_eq!(backend.tickets().len(), 1);

    let refusing = session(Arc::clone(&backend))
        .unwrap()
        .with_namespace(|_| Err(rmcp::ErrorData::invalid_request("who are you?", None)));
    let anonymous = connect(refusing).await;
    let refused = anonymous.call_tool(open()).await;
    assert!(matches!(refused, Err(ServiceError::McpError(e)) if e.message == "who are you?"));
    assert_eq!(backend.tickets().len(), 1);
    for client in [first, second, anonymous] {
        client.cancel().await.unwrap();
    }
}

#[tokio::test]
async fn a_client_supplied_key_is_honoured_and_its_reuse_with_other_arguments_refused() {
    let backend = Backend::with_latency(Duration::ZERO);
    let client = connect_to(&backend).await;
    let keyed = |title: &str, turn: &'static str| {
        let meta: &[(&str, &str)] = if turn.is_empty() {
            &[(IDEMPOTENCY_KEY_META, "key-42")]
        } else {
            &[(IDEMPOTENCY_KEY_META, "key-42"), (TURN_ID_META, turn)]
        };
        call("open_ticket", json!({ "title": title }), meta)
    };
    let first = client.call_tool(keyed("one", "")).await.unwrap();
    // The key, not the turn, names the action: another turn with the key replays.
    assert_eq!(
        client.call_tool(keyed("one", "turn-5")).await.unwrap(),
        first
    );
    assert_eq!(backend.tickets().len(), 1);
    let conflict = client.call_tool(keyed("two", "")).await.unwrap();
    assert!(is_error(&conflict));
    assert!(
        text(&conflict).contains("different arguments"),
        "{}",
        text(&conflict)
    );
    assert_eq!(backend.tickets().len(), 1);
    client.cancel().await.unwrap();
}

#[tokio::test]
async fn a_call_with_neither_turn_nor_key_is_a_new_action_each_time() {
    let backend = Backend::with_latency(Duration::ZERO);
    let client = connect_to(&backend).await;
    for _ in 0..2 {
        let open = call("open_ticket", json!({"title": "t"}), &[]);
        assert!(!is_error(&client.call_tool(open).await.unwrap()));
    }
    assert_eq!(backend.tickets().len(), 2);
    client.cancel().await.unwrap();
}

#[tokio::test]
async fn malformed_meta_is_an_invalid_params_error() {
    let backend = Backend::with_latency(Duration::ZERO);
    let client = connect_to(&backend).await;
    let mut open = call("open_ticket", json!({"title": "t"}), &[]);
    let mut meta = RequestMetaObject::default();
    meta.insert(TURN_ID_META.to_owned(), json!(7));
    open.meta = Some(meta);
    let refused = client.call_tool(open).await;
    assert!(matches!(refused, Err(ServiceError::McpError(e)) if e.message.contains(TURN_ID_META)));
    assert!(backend.tickets().is_empty());
    client.cancel().await.unwrap();
}

#[tokio::test]
async fn the_client_helper_needs_a_turn_and_keys_calls_by_turn_and_arguments() {
    let client = connect_to(&Backend::with_latency(Duration::ZERO)).await;
    let open = call("open_ticket", json!({"title": "t"}), &[]);
    let outside = remote::call_tool(client.peer(), open.clone()).await;
    assert!(
        matches!(outside, Err(ServiceError::McpError(e)) if e.message.contains("outside of a turn"))
    );
    let turn = Turn::new("t1");
    let key = |turn: &Turn, args: Value| {
        remote::with_turn(turn, call("open_ticket", args, &[]))
            .unwrap()
            .meta
            .unwrap()[IDEMPOTENCY_KEY_META]
            .clone()
    };
    assert_eq!(
        key(&turn, json!({"a": 1, "b": 2})),
        key(&turn, json!({"b": 2, "a": 1}))
    );
    assert_ne!(key(&turn, json!({"a": 1})), key(&turn, json!({"a": 2})));
    assert_ne!(
        key(&turn, json!({"a": 1})),
        key(&Turn::new("t2"), json!({"a": 1}))
    );
    client.cancel().await.unwrap();
}

#[tokio::test]
async fn turn_settings_apply_to_every_call() {
    let backend = Backend::with_latency(Duration::ZERO);
    let strict = session(Arc::clone(&backend))
        .unwrap()
        .with_turn(|turn| turn.with_max_attempts_per_key(1));
    let client = connect(strict).await;
    let open = || {
        call(
            "open_ticket",
            json!({"title": "once"}),
            &[(TURN_ID_META, "t")],
        )
    };
    // A key may fail once: the second failure is refused before it runs.
    let empty = || call("open_ticket", json!({"title": " "}), &[(TURN_ID_META, "t")]);
    assert!(is_error(&client.call_tool(empty()).await.unwrap()));
    let stuck = client.call_tool(empty()).await.unwrap();
    assert!(text(&stuck).contains("tried once"), "{}", text(&stuck));
    // A success replays, past the budget too.
    assert!(!is_error(&client.call_tool(open()).await.unwrap()));
    let second = client.call_tool(open()).await.unwrap();
    assert!(!is_error(&second), "{}", text(&second));
    assert_eq!(backend.tickets().len(), 1);
    client.cancel().await.unwrap();
}

/// A till whose `pay` tool calls an `#[idempotent]` function that takes its turn as a `&Turn`
/// parameter, and whose `tag` tool declares an `idempotencyKey` argument of its own.
mod till {
    use std::sync::atomic::{AtomicU64, Ordering};

    use idem_tools::mcp::ToolError;
    use idem_tools::{Turn, idempotent};
    use rmcp::handler::server::router::tool::ToolRouter;
    use rmcp::handler::server::wrapper::Parameters;
    use rmcp::schemars::JsonSchema;
    use rmcp::{ServerHandler, tool, tool_handler, tool_router};
    use serde::{Deserialize, Serialize};

    pub static CHARGED: AtomicU64 = AtomicU64::new(0);

    #[idempotent]
    async fn charge(turn: &Turn, cents: u64) -> Result<u64, idem_tools::Error> {
        assert!(!turn.id().is_empty());
        Ok(CHARGED.fetch_add(cents, Ordering::SeqCst) + cents)
    }

    #[derive(Serialize, Deserialize, JsonSchema)]
    #[schemars(crate = "rmcp::schemars")]
    pub struct Amount {
        cents: u64,
    }

    #[derive(Serialize, Deserialize, JsonSchema)]
    #[schemars(crate = "rmcp::schemars")]
    pub struct Tagged {
        #[serde(rename = "idempotencyKey")]
        idempotency_key: String,
    }

    #[derive(Clone)]
    pub struct Till {
        tool_router: ToolRouter<Till>,
    }

    #[idem_tools::tool_impl(same_service)]
    #[tool_router]
    impl Till {
        pub fn new() -> Self {
            Till {
                tool_router: Self::tool_router(),
            }
        }

        /// Not catalogued: the `#[idempotent]` function it calls takes the turn explicitly.
        #[tool(description = "Charge an amount")]
        async fn pay(
            &self,
            Parameters(Amount { cents }): Parameters<Amount>,
        ) -> Result<String, ToolError> {
            let turn = Turn::current_for("pay")?;
            Ok(format!("total {}", charge(&turn, cents).await?))
        }

        #[idempotent]
        #[tool(description = "Echo a tag")]
        async fn tag(
            &self,
            Parameters(Tagged { idempotency_key }): Parameters<Tagged>,
        ) -> Result<String, ToolError> {
            Ok(idempotency_key)
        }
    }

    #[tool_handler(router = self.tool_router)]
    impl ServerHandler for Till {}

    pub const TOOLS: &[idem_tools::ToolInfo] = idem_tools::tools![Till::tag];
}

#[tokio::test]
async fn a_client_key_reaches_an_idempotent_call_that_takes_its_turn_as_a_parameter() {
    use std::sync::atomic::Ordering;
    let server = idem_tools::mcp::IdemServer::new(till::Till::new(), till::TOOLS).unwrap();
    let client = connect(server).await;
    let pay = |cents: u64| {
        call(
            "pay",
            json!({ "cents": cents }),
            &[(IDEMPOTENCY_KEY_META, "pay-1")],
        )
    };
    let first = client.call_tool(pay(5)).await.unwrap();
    assert_eq!(text(&first), "total 5");
    assert_eq!(client.call_tool(pay(5)).await.unwrap(), first, "replayed");
    // The key names the action: the same key with another amount is refused, not charged.
    let reused = client.call_tool(pay(7)).await.unwrap();
    assert!(is_error(&reused));
    assert!(
        text(&reused).contains("different arguments"),
        "{}",
        text(&reused)
    );
    assert_eq!(till::CHARGED.load(Ordering::SeqCst), 5);
    client.cancel().await.unwrap();
}

#[tokio::test]
async fn an_idempotency_key_argument_that_the_tool_declares_is_its_own() {
    let server = idem_tools::mcp::IdemServer::new(till::Till::new(), till::TOOLS).unwrap();
    let client = connect(server).await;
    let tag = call("tag", json!({ IDEMPOTENCY_KEY_META: "blue" }), &[]);
    let result = client.call_tool(tag).await.unwrap();
    assert!(!is_error(&result), "{}", text(&result));
    assert_eq!(text(&result), "blue");
    client.cancel().await.unwrap();
}

/// A tool that declares `idempotencyKey` as an argument of its own declares nothing else idem
/// reads: a turn id put among its arguments as well (where it does nothing, and each retry
/// would be a new action) is still refused. (Found by a review: the first entry found, the
/// declared `idempotencyKey`, hid the misplaced turn id, and the call ran with no turn.)
#[tokio::test]
async fn a_misplaced_turn_id_is_refused_beside_a_declared_idempotency_key_argument() {
    let server = idem_tools::mcp::IdemServer::new(till::Till::new(), till::TOOLS).unwrap();
    let client = connect(server).await;
    let tag = call(
        "tag",
        json!({ IDEMPOTENCY_KEY_META: "blue", TURN_ID_META: "turn-1" }),
        &[],
    );
    let result = client.call_tool(tag).await.unwrap();
    assert!(is_error(&result), "ran: {}", text(&result));
    assert!(text(&result).contains(TURN_ID_META), "{}", text(&result));
    client.cancel().await.unwrap();
}

/// One `IdemServer` shared by two connections (an `Arc` served on each, which rmcp allows):
/// its calls are deduplicated in the server's one namespace, so the second client would be
/// replayed the first one's results. The second connection is refused at its `initialize`,
/// saying what to do; the first goes on. (Found by a review: bob was handed alice's ticket.)
#[tokio::test]
async fn a_server_shared_by_two_connections_refuses_the_second() {
    use idem_tools::mcp::IdemServer;
    use rmcp::ServiceExt;
    use rmcp::model::ClientConfig;
    async fn connect_shared(
        server: &Arc<IdemServer<mcp_support::example::Desk>>,
    ) -> Result<mcp_support::Client, String> {
        let (server_io, client_io) = tokio::io::duplex(64 * 1024);
        let server = Arc::clone(server);
        let served = tokio::spawn(async move {
            match server.serve(server_io).await {
                Ok(running) => {
                    let _ = running.waiting().await;
                    Ok(())
                }
                Err(error) => Err(error.to_string()),
            }
        });
        match ClientConfig::default().serve(client_io).await {
            Ok(client) => Ok(client),
            Err(error) => Err(format!("{error}; the server: {:?}", served.await)),
        }
    }
    let backend = Backend::with_latency(Duration::ZERO);
    let server = Arc::new(session(Arc::clone(&backend)).unwrap());
    let alice = connect_shared(&server).await.expect("the first connection");
    let Err(refused) = connect_shared(&server).await else {
        panic!("the second connection was served");
    };
    assert!(
        refused.contains("already serves another client") && refused.contains("factory"),
        "{refused}"
    );
    let open = call(
        "open_ticket",
        json!({"title": "printer"}),
        &[(TURN_ID_META, "turn-1")],
    );
    let opened = alice.call_tool(open).await.unwrap();
    assert!(!is_error(&opened), "{}", text(&opened));
    assert_eq!(backend.tickets().len(), 1);
    alice.cancel().await.unwrap();
}

/// A client that keeps sending its key with other arguments (a model rewording on every
/// retry) is refused each time, and from the second refusal on told to stop — though each
/// `tools/call` runs in a `Turn` of its own. (Found by a trial adoption: the first refusal's
/// text, forever.) The key is the application's, not the model's: the model is not told to
/// send a new one (it was told to "use a new idempotency key", and might make up an argument
/// for it), but to tell the user.
#[tokio::test]
async fn a_client_that_keeps_reusing_its_key_is_told_to_stop() {
    let backend = Backend::with_latency(Duration::ZERO);
    let client = connect_to(&backend).await;
    let keyed = |title: &str| {
        call(
            "open_ticket",
            json!({ "title": title }),
            &[(IDEMPOTENCY_KEY_META, "key-stop"), (TURN_ID_META, "turn-1")],
        )
    };
    assert!(!is_error(&client.call_tool(keyed("one")).await.unwrap()));
    let first = text(&client.call_tool(keyed("two")).await.unwrap());
    assert!(!first.contains("stop repeating"), "{first}");
    for title in ["three", "four"] {
        let again = text(&client.call_tool(keyed(title)).await.unwrap());
        assert!(again.contains("stop repeating it"), "{again}");
    }
    for text in [
        &first,
        &text(&client.call_tool(keyed("five")).await.unwrap()),
    ] {
        assert!(text.contains("not one of your arguments"), "{text}");
        assert!(
            text.contains("application reused an idempotency key"),
            "{text}"
        );
        assert!(!text.contains("new idempotency key"), "{text}");
    }
    assert_eq!(backend.tickets().len(), 1);
    client.cancel().await.unwrap();
}

/// The client's key and `idem_tools::spawn`: a handler that hands its tool call to a task of
/// its own, or spawns unrelated work before running its tool itself.
mod spawned {
    use std::sync::atomic::{AtomicUsize, Ordering};

    use idem_tools::idempotent;
    use idem_tools::mcp::{IDEMPOTENCY_KEY_META, IdemServer, TURN_ID_META, ToolError};
    use rmcp::handler::server::router::tool::ToolRouter;
    use rmcp::handler::server::wrapper::Parameters;
    use rmcp::schemars::JsonSchema;
    use rmcp::{ServerHandler, tool, tool_handler, tool_router};
    use serde_json::json;

    use crate::mcp_support::{call, connect, is_error, text};

    /// The runs of `create` for each tool below.
    static RUNS: [AtomicUsize; 3] = [const { AtomicUsize::new(0) }; 3];

    #[idempotent]
    async fn create(title: String, by: usize) -> Result<String, ToolError> {
        RUNS[by].fetch_add(1, Ordering::SeqCst);
        Ok(format!("created {title}"))
    }

    #[derive(serde::Deserialize, JsonSchema)]
    #[schemars(crate = "rmcp::schemars")]
    struct Open {
        title: String,
    }

    #[derive(Clone)]
    struct Desk {
        tool_router: ToolRouter<Desk>,
    }

    #[tool_router]
    impl Desk {
        #[tool(description = "open")]
        async fn open(&self, Parameters(p): Parameters<Open>) -> Result<String, ToolError> {
            create(p.title, 0).await
        }

        #[tool(description = "open, in a task of its own")]
        async fn open_spawned(&self, Parameters(p): Parameters<Open>) -> Result<String, ToolError> {
            idem_tools::spawn(create(p.title, 1))
                .await
                .map_err(|e| ToolError::new(e.to_string()))?
        }

        #[tool(description = "open, after handing an audit line to a task of its own")]
        async fn open_audited(&self, Parameters(p): Parameters<Open>) -> Result<String, ToolError> {
            // Unrelated background work, spawned the way the docs say (it keeps the turn).
            let audit = idem_tools::spawn(async { tokio::task::yield_now().await });
            let created = create(p.title, 2).await;
            let _ = audit.await;
            created
        }
    }

    #[tool_handler(router = self.tool_router)]
    impl ServerHandler for Desk {}

    /// Calls `tool` with the key `job` in two turns, the same arguments: how often it ran.
    async fn runs_of(tool: &'static str, by: usize, job: &str) -> usize {
        let desk = Desk {
            tool_router: Desk::tool_router(),
        };
        let client = connect(IdemServer::new(desk, &[]).unwrap()).await;
        for turn in ["t1", "t2"] {
            let meta = [(IDEMPOTENCY_KEY_META, job), (TURN_ID_META, turn)];
            let result = client
                .call_tool(call(tool, json!({"title": "a"}), &meta))
                .await
                .unwrap();
            assert!(!is_error(&result), "{}", text(&result));
        }
        client.cancel().await.unwrap();
        RUNS[by].load(Ordering::SeqCst)
    }

    /// The client's key reaches the `#[idempotent]` tool a handler hands to a task of its own
    /// with `idem_tools::spawn`, as it reaches one the handler awaits: the same key sent in two
    /// turns with the same arguments is one action. (Found by a review: `spawn` carried the
    /// turn but not the key, and the second turn acted again.)
    #[tokio::test]
    async fn the_client_key_reaches_a_tool_spawned_with_idems_spawn() {
        assert_eq!(runs_of("open", 0, "job-1").await, 1);
        assert_eq!(runs_of("open_spawned", 1, "job-2").await, 1);
    }

    /// A handler that hands unrelated work to `idem_tools::spawn` first, then runs its own
    /// tool: the tool still gets the client's key (the tasks share it; whichever tool runs
    /// first takes it). (Found by a review of the change that made `spawn` carry the key: it
    /// moved the key into the first task spawned.)
    #[tokio::test]
    async fn an_unrelated_spawn_does_not_take_the_client_key_from_the_handlers_tool() {
        assert_eq!(runs_of("open_audited", 2, "job-3").await, 1);
    }
}

/// The application's namespace rule refusing a caller refuses its reads too (only `_meta` or a
/// client id idem cannot use is no reason to refuse a read). (Found by a review.)
#[tokio::test]
async fn a_namespace_rule_that_refuses_a_caller_refuses_its_reads_too() {
    let backend = Backend::with_latency(Duration::ZERO);
    let refusing = session(Arc::clone(&backend))
        .unwrap()
        .with_namespace(|_| Err(rmcp::ErrorData::invalid_request("who are you?", None)));
    let anonymous = connect(refusing).await;
    let listed = anonymous
        .call_tool(call("list_tickets", json!({}), &[(TURN_ID_META, "turn-1")]))
        .await;
    anonymous.cancel().await.unwrap();
    assert!(
        matches!(&listed, Err(ServiceError::McpError(e)) if e.message == "who are you?"),
        "the rule refused the caller, yet its read was served: {listed:?}"
    );
    assert_eq!(backend.reads(), 0, "list_tickets ran for a refused caller");
}

/// A `cache_errors` tool records its `Err`s, and a tool's `Err` can be an idem refusal of a
/// call it makes: one that says the action is still running, to wait and call again. Recorded,
/// that refusal is what every later call of the tool gets back, long after the action it waited
/// for finished — the model was told "wait, call again" for the record's whole TTL (found by a
/// review). An `Err` of a body whose call of a tool idem refused is not recorded: its key is
/// given back, and the call again runs the tool, which now gets the shared action's result.
mod relay {
    use std::time::Duration;

    use idem_tools::idempotent;
    use rmcp::handler::server::router::tool::ToolRouter;
    use rmcp::handler::server::wrapper::Parameters;
    use rmcp::model::{CallToolResult, ContentBlock};
    use rmcp::schemars::JsonSchema;
    use rmcp::{ErrorData, ServerHandler, tool, tool_handler, tool_router};
    use serde::{Deserialize, Serialize};

    /// The action the calls of `forward` and `send` share: it takes 50 ms per parcel number.
    #[idempotent]
    async fn deliver(parcel: u32) -> Result<u32, idem_tools::Error> {
        tokio::time::sleep(Duration::from_millis(50 * u64::from(parcel))).await;
        Ok(parcel)
    }

    #[derive(Serialize, Deserialize, JsonSchema)]
    #[schemars(crate = "rmcp::schemars")]
    pub struct Forward {
        pub route: u32,
        pub parcel: u32,
    }

    #[derive(Clone)]
    pub struct Relay {
        tool_router: ToolRouter<Relay>,
    }

    #[idem_tools::tool_impl(same_service)]
    #[tool_router]
    impl Relay {
        pub fn new() -> Self {
            Relay {
                tool_router: Self::tool_router(),
            }
        }

        #[idempotent(cache_errors)]
        #[tool(description = "Forward a parcel on a route")]
        async fn forward(
            &self,
            Parameters(Forward { route, parcel }): Parameters<Forward>,
        ) -> Result<CallToolResult, ErrorData> {
            let delivered = deliver(parcel).await?;
            Ok(CallToolResult::success(vec![ContentBlock::text(format!(
                "parcel {delivered} on route {route}"
            ))]))
        }

        /// `forward` without `cache_errors`.
        #[idempotent]
        #[tool(description = "Send a parcel on a route")]
        async fn send(
            &self,
            Parameters(Forward { route, parcel }): Parameters<Forward>,
        ) -> Result<CallToolResult, ErrorData> {
            let delivered = deliver(parcel).await?;
            Ok(CallToolResult::success(vec![ContentBlock::text(format!(
                "parcel {delivered} on route {route}"
            ))]))
        }
    }

    #[tool_handler(router = self.tool_router)]
    impl ServerHandler for Relay {}

    pub const TOOLS: &[idem_tools::ToolInfo] = idem_tools::tools![Relay::forward, Relay::send];
}

#[tokio::test]
async fn a_cached_error_is_never_a_refusal_that_said_to_call_again() {
    let server = idem_tools::mcp::IdemServer::new(relay::Relay::new(), relay::TOOLS)
        .unwrap()
        .with_turn(|turn| turn.with_in_flight_wait(Duration::from_millis(50)));
    let client = connect(server).await;
    let forward = |route: u32| {
        call(
            "forward",
            json!({ "route": route, "parcel": 6 }),
            &[(TURN_ID_META, "turn-relay")],
        )
    };
    // Route 2 reaches `deliver(6)` (300 ms) while route 1's call of it runs, waits 50 ms, and
    // is told that the action is still running: wait, then call again.
    let (first, second) = tokio::join!(client.call_tool(forward(1)), async {
        tokio::time::sleep(Duration::from_millis(30)).await;
        client.call_tool(forward(2)).await
    });
    assert_eq!(text(&first.unwrap()), "parcel 6 on route 1");
    let second = second.unwrap();
    assert!(is_error(&second), "{}", text(&second));
    assert!(text(&second).contains("call it again"), "{}", text(&second));
    // It did: `deliver(6)` has long finished, and the call again gets the parcel.
    tokio::time::sleep(Duration::from_millis(400)).await;
    let again = client.call_tool(forward(2)).await.unwrap();
    assert!(
        !is_error(&again),
        "the refusal was replayed: {}",
        text(&again)
    );
    assert_eq!(text(&again), "parcel 6 on route 2");
    client.cancel().await.unwrap();
}

/// A tool whose call of another `#[idempotent]` tool is refused as still running (an action
/// of the turn that another call started) fails with that refusal, which tells the model to
/// wait and call again; each call again is one more attempt of the tool's own key, and the
/// third spends its budget: the model, which did as it was told, is then told that the action
/// "will not be tried again in this turn", also once the action it waited for has finished.
/// (Found by a review; the same cause as the test above: the engine takes a refusal of a
/// call the body made for the body's own failure. Waiting for another holder is no attempt
/// (docs/adopting.md, "TTL and budgets"); a fix counts no attempt, and records nothing, for a
/// body that failed with such a refusal.)
#[tokio::test]
#[ignore = "a nested call's in-flight refusal is counted as an attempt of the calling tool, whose budget the model's calls again then spend"]
async fn waiting_as_told_for_a_nested_action_never_spends_the_callers_budget() {
    let server = idem_tools::mcp::IdemServer::new(relay::Relay::new(), relay::TOOLS)
        .unwrap()
        .with_turn(|turn| turn.with_in_flight_wait(Duration::from_millis(50)));
    let client = connect(server).await;
    let send = |route: u32| {
        call(
            "send",
            json!({ "route": route, "parcel": 20 }),
            &[(TURN_ID_META, "turn-send")],
        )
    };
    // Route 1 runs `deliver(20)` for a second; route 2 is told, three times, to call again.
    let first = tokio::spawn({
        let peer = client.peer().clone();
        let send = send(1);
        async move { peer.call_tool(send).await }
    });
    tokio::time::sleep(Duration::from_millis(30)).await;
    for _ in 0..3 {
        let told = client.call_tool(send(2)).await.unwrap();
        assert!(is_error(&told), "{}", text(&told));
        assert!(text(&told).contains("call it again"), "{}", text(&told));
    }
    assert_eq!(text(&first.await.unwrap().unwrap()), "parcel 20 on route 1");
    let again = client.call_tool(send(2)).await.unwrap();
    assert!(!is_error(&again), "{}", text(&again));
    assert_eq!(text(&again), "parcel 20 on route 2");
    client.cancel().await.unwrap();
}

/// A client's `idempotencyKey` names one action across turns (docs/adopting.md, "Agents in
/// Python or TypeScript": a job id, say), and the docs ask for the turn id with it. A tool it
/// keys that calls another `#[idempotent]` tool — `checkout` charging through `charge_order`,
/// then failing to ship — is retried with the key in the next turn (the user said "try again"):
/// `checkout` runs again, as it failed, but `charge_order` is keyed by the new turn and charges the
/// order a second time. With the key alone (no turn id, so the turn is the key's own) the
/// charge is replayed. (Found by a review. A fix keys the calls a keyed call makes by the
/// key's own scope rather than the turn's, while the turn still counts its new actions;
/// which keys those are is a design decision, so it is ignored for now.)
mod shop {
    use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};

    use idem_tools::idempotent;
    use idem_tools::mcp::ToolError;
    use rmcp::handler::server::router::tool::ToolRouter;
    use rmcp::handler::server::wrapper::Parameters;
    use rmcp::schemars::JsonSchema;
    use rmcp::{ServerHandler, tool, tool_handler, tool_router};
    use serde::{Deserialize, Serialize};

    pub static CHARGES: AtomicU64 = AtomicU64::new(0);
    pub static SHIPPING_DOWN: AtomicBool = AtomicBool::new(true);

    #[idempotent]
    async fn charge_order(order: u64, cents: u64) -> Result<u64, idem_tools::Error> {
        let _ = order; // in the key: which order is charged
        CHARGES.fetch_add(1, Ordering::SeqCst);
        Ok(cents)
    }

    #[derive(Serialize, Deserialize, JsonSchema)]
    #[schemars(crate = "rmcp::schemars")]
    pub struct Order {
        pub order: u64,
        pub cents: u64,
    }

    #[derive(Clone)]
    pub struct Shop {
        tool_router: ToolRouter<Shop>,
    }

    #[idem_tools::tool_impl(same_service)]
    #[tool_router]
    impl Shop {
        pub fn new() -> Self {
            Shop {
                tool_router: Self::tool_router(),
            }
        }

        #[idempotent]
        #[tool(description = "Charge an order, then ship it")]
        async fn checkout(
            &self,
            Parameters(Order { order, cents }): Parameters<Order>,
        ) -> Result<String, ToolError> {
            let charged = charge_order(order, cents).await?;
            if SHIPPING_DOWN.load(Ordering::SeqCst) {
                return Err(ToolError::new("Shipping is down: try again later."));
            }
            Ok(format!("order {order}: charged {charged}, shipped"))
        }
    }

    #[tool_handler(router = self.tool_router)]
    impl ServerHandler for Shop {}

    pub const TOOLS: &[idem_tools::ToolInfo] = idem_tools::tools![Shop::checkout];
}

#[tokio::test]
#[ignore = "the calls a client-keyed tool makes are keyed by the turn, so a retry of the key in the next turn runs them again"]
async fn a_client_key_retried_in_the_next_turn_does_not_repeat_what_its_tool_did() {
    use std::sync::atomic::Ordering;
    let server = idem_tools::mcp::IdemServer::new(shop::Shop::new(), shop::TOOLS).unwrap();
    let client = connect(server).await;
    let checkout = |turn: &'static str| {
        call(
            "checkout",
            json!({ "order": 42, "cents": 500 }),
            &[(IDEMPOTENCY_KEY_META, "order-42"), (TURN_ID_META, turn)],
        )
    };
    let failed = client.call_tool(checkout("msg-1")).await.unwrap();
    assert!(is_error(&failed), "{}", text(&failed));
    assert_eq!(
        shop::CHARGES.load(Ordering::SeqCst),
        1,
        "charged, not shipped"
    );
    // The next user message: "try again". Shipping is back.
    shop::SHIPPING_DOWN.store(false, Ordering::SeqCst);
    let shipped = client.call_tool(checkout("msg-2")).await.unwrap();
    assert_eq!(text(&shipped), "order 42: charged 500, shipped");
    assert_eq!(
        shop::CHARGES.load(Ordering::SeqCst),
        1,
        "the order was charged twice under one idempotency key"
    );
    client.cancel().await.unwrap();
}

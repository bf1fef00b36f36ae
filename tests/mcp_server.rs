//! `examples/mcp_server.rs`, driven by rmcp's own client over an in-process transport.

#[allow(dead_code)]
#[path = "../examples/mcp_server.rs"]
mod example;

use std::sync::Arc;
use std::time::Duration;

use example::{Backend, Desk, TOOLS, session};
use idem::Turn;
use idem::mcp::{IDEMPOTENCY_EXTENSION, IDEMPOTENCY_KEY_META, IdemServer, TURN_ID_META, remote};
use rmcp::model::{CallToolRequestParams, CallToolResult, RequestMetaObject};
use rmcp::service::RunningService;
use rmcp::{RoleClient, ServiceError, ServiceExt};
use serde_json::{Value, json};

type Client = RunningService<RoleClient, ()>;

/// A client connected to `server` through a `tokio::io::duplex` pipe.
async fn connect(server: IdemServer<Desk>) -> Client {
    let (server_io, client_io) = tokio::io::duplex(64 * 1024);
    tokio::spawn(async move {
        if let Ok(running) = server.serve(server_io).await {
            let _ = running.waiting().await;
        }
    });
    ().serve(client_io).await.expect("the client connects")
}

/// A new session over `backend`.
async fn connect_to(backend: &Arc<Backend>) -> Client {
    connect(session(Arc::clone(backend)).expect("the catalog matches the server")).await
}

/// A `tools/call` of `tool` with `args` and the `_meta` entries `meta`.
fn call(tool: &'static str, args: Value, meta: &[(&str, &str)]) -> CallToolRequestParams {
    let mut params = CallToolRequestParams::new(tool)
        .with_arguments(args.as_object().cloned().unwrap_or_default());
    if !meta.is_empty() {
        let mut object = RequestMetaObject::default();
        for (name, value) in meta {
            object.insert((*name).to_owned(), Value::from(*value));
        }
        params.meta = Some(object);
    }
    params
}

/// The text of a result's first content block.
fn text(result: &CallToolResult) -> String {
    result
        .content
        .first()
        .and_then(|c| c.as_text())
        .map(|t| t.text.clone())
        .unwrap_or_default()
}

fn is_error(result: &CallToolResult) -> bool {
    result.is_error == Some(true)
}

#[tokio::test]
async fn tools_list_carries_the_annotations_of_the_classification() {
    let client = connect_to(&Backend::with_latency(Duration::ZERO)).await;
    let tools = client.list_all_tools().await.unwrap();
    assert_eq!(tools.len(), 4);
    for tool in tools {
        let hints = tool.annotations.expect("annotated");
        let read_only = tool.name == "list_tickets";
        assert_eq!(hints.read_only_hint, Some(read_only), "{}", tool.name);
        assert_eq!(hints.destructive_hint, Some(!read_only), "{}", tool.name);
        assert_eq!(hints.idempotent_hint, Some(true), "{}", tool.name);
        // `idem::mcp::Json<T>` gives the tool `T`'s output schema, as `rmcp::Json<T>` does.
        let structured = matches!(tool.name.as_ref(), "open_ticket" | "list_tickets");
        assert_eq!(tool.output_schema.is_some(), structured, "{}", tool.name);
    }
    client.cancel().await.unwrap();
}

#[tokio::test]
async fn the_server_declares_the_idempotency_extension_with_its_meta_entries() {
    let client = connect_to(&Backend::with_latency(Duration::ZERO)).await;
    let info = client.peer_info().expect("initialized");
    let extensions = info.capabilities.extensions.clone().unwrap_or_default();
    let settings = extensions.get(IDEMPOTENCY_EXTENSION).expect("declared");
    assert_eq!(settings["turnIdMeta"], TURN_ID_META);
    assert_eq!(settings["idempotencyKeyMeta"], IDEMPOTENCY_KEY_META);
    assert!(
        info.capabilities.tools.is_some(),
        "the wrapped server's own capabilities"
    );
    client.cancel().await.unwrap();
}

#[tokio::test]
async fn the_same_call_twice_in_one_turn_has_one_side_effect_and_identical_results() {
    let backend = Backend::with_latency(Duration::ZERO);
    let client = connect_to(&backend).await;
    let open = || {
        call(
            "open_ticket",
            json!({"title": "vpn down"}),
            &[(TURN_ID_META, "t1")],
        )
    };
    let first = client.call_tool(open()).await.unwrap();
    let retry = client.call_tool(open()).await.unwrap();
    assert!(!is_error(&first), "{}", text(&first));
    assert_eq!(first, retry);
    assert_eq!(backend.tickets().len(), 1);
    // A new turn is a new action.
    let next = call(
        "open_ticket",
        json!({"title": "vpn down"}),
        &[(TURN_ID_META, "t2")],
    );
    client.call_tool(next).await.unwrap();
    assert_eq!(backend.tickets().len(), 2);
    client.cancel().await.unwrap();
}

#[tokio::test]
async fn a_client_timeout_then_a_retry_has_one_side_effect() {
    let backend = Backend::with_latency(Duration::from_millis(300));
    let client = connect_to(&backend).await;
    let peer = client.peer().clone();
    let open = call("open_ticket", json!({"title": "disk full"}), &[]);
    let (first, retry) = Turn::new("conv-9/turn-1")
        .scope(async {
            // Dropping the call sends notifications/cancelled to the server.
            let first = tokio::time::timeout(
                Duration::from_millis(50),
                remote::call_tool(&peer, open.clone()),
            )
            .await;
            (first, remote::call_tool(&peer, open.clone()).await)
        })
        .await;
    assert!(first.is_err(), "the first call timed out");
    assert_eq!(backend.cancellations(), 1, "the server was told");
    let retry = retry.unwrap();
    assert!(!is_error(&retry), "{}", text(&retry));
    assert_eq!(retry.structured_content.unwrap()["id"], 1);
    tokio::time::sleep(Duration::from_millis(400)).await;
    assert_eq!(backend.tickets().len(), 1, "one side effect");
    client.cancel().await.unwrap();
}

#[tokio::test]
async fn past_the_budget_the_model_reads_what_is_true() {
    let backend = Backend::with_latency(Duration::ZERO);
    let client = connect_to(&backend).await;
    // A call that keeps failing: three attempts (the default budget), then "stop retrying".
    let empty = || call("open_ticket", json!({"title": " "}), &[(TURN_ID_META, "t")]);
    for _ in 0..3 {
        let failed = client.call_tool(empty()).await.unwrap();
        assert!(is_error(&failed));
        assert!(text(&failed).contains("needs a title"), "{}", text(&failed));
    }
    let stuck = client.call_tool(empty()).await.unwrap();
    assert!(
        is_error(&stuck),
        "budget exhausted is a tool result the model reads"
    );
    assert!(text(&stuck).contains("Stop retrying"), "{}", text(&stuck));
    assert!(
        !text(&stuck).contains('`'),
        "worded for a model: {}",
        text(&stuck)
    );

    // A call that succeeded: past the budget, "it is done" — even for a tool whose error type
    // is rmcp's own `ErrorData`.
    let open = call("open_ticket", json!({"title": "x"}), &[(TURN_ID_META, "t")]);
    client.call_tool(open).await.unwrap();
    let close = || call("close_ticket", json!({"id": 1}), &[(TURN_ID_META, "t")]);
    for _ in 0..3 {
        let closed = client.call_tool(close()).await.unwrap();
        assert_eq!(text(&closed), "Closed ticket #1.");
    }
    let done = client.call_tool(close()).await.unwrap();
    assert!(is_error(&done));
    assert!(text(&done).contains("already succeeded"), "{}", text(&done));
    client.cancel().await.unwrap();
}

#[tokio::test]
async fn a_read_tool_called_repeatedly_runs_every_time() {
    let backend = Backend::with_latency(Duration::ZERO);
    let client = connect_to(&backend).await;
    for _ in 0..10 {
        let list = call("list_tickets", json!({}), &[(TURN_ID_META, "t")]);
        let result = client.call_tool(list).await.unwrap();
        assert!(!is_error(&result), "{}", text(&result));
    }
    assert_eq!(backend.reads(), 10);
    client.cancel().await.unwrap();
}

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
async fn string_results_and_tool_errors_reach_the_client() {
    let backend = Backend::with_latency(Duration::ZERO);
    let client = connect_to(&backend).await;
    let missing = call(
        "comment",
        json!({"id": 9, "text": "hi"}),
        &[(TURN_ID_META, "t")],
    );
    let result = client.call_tool(missing).await.unwrap();
    assert!(is_error(&result));
    assert_eq!(text(&result), "There is no ticket #9.");
    client
        .call_tool(call(
            "open_ticket",
            json!({"title": "t"}),
            &[(TURN_ID_META, "t")],
        ))
        .await
        .unwrap();
    let comment = || {
        call(
            "comment",
            json!({"id": 1, "text": "hi"}),
            &[(TURN_ID_META, "t")],
        )
    };
    for _ in 0..2 {
        // `#[tool]` above `#[idempotent]`: the retry is replayed too.
        let result = client.call_tool(comment()).await.unwrap();
        assert_eq!(text(&result), "Ticket #1 has 1 comments.");
    }
    assert_eq!(backend.tickets()[0].comments.len(), 1);
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

#[test]
fn a_catalogued_tool_that_the_server_does_not_serve_under_its_name_is_refused() {
    static RENAMED: &[idem::ToolInfo] = &[idem::ToolInfo::idempotent("Desk::reopen_ticket")];
    let error = IdemServer::new(Desk::new(Backend::with_latency(Duration::ZERO)), RENAMED)
        .expect_err("no `reopen_ticket` tool");
    assert!(error.to_string().contains("reopen_ticket"), "{error}");
    assert!(IdemServer::new(Desk::new(Backend::with_latency(Duration::ZERO)), TOOLS).is_ok());
}

#[test]
fn the_example_runs() {
    example::main().expect("the example checks its own claims");
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
    assert!(!is_error(&client.call_tool(open()).await.unwrap()));
    let second = client.call_tool(open()).await.unwrap();
    assert!(is_error(&second), "one attempt per key");
    assert!(
        text(&second).contains("already succeeded"),
        "{}",
        text(&second)
    );
    assert_eq!(backend.tickets().len(), 1);
    client.cancel().await.unwrap();
}

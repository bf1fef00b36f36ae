//! `examples/mcp_server.rs`, driven by rmcp's own client over an in-process transport: the
//! tools, their annotations, replays, timeouts, budgets and result types.

mod mcp_support;

use std::time::Duration;

use idem_tools::Turn;
use idem_tools::mcp::{
    IDEMPOTENCY_EXTENSION, IDEMPOTENCY_KEY_META, IdemServer, TURN_ID_META, remote,
};
use mcp_support::example::{self, Backend, Desk, TOOLS};
use mcp_support::{call, connect_declaring, connect_to, is_error, text};
use serde_json::json;

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
        // A client that declares nothing gets a new action from every call: only reads are
        // idempotent for it.
        assert_eq!(hints.idempotent_hint, Some(read_only), "{}", tool.name);
        // `idem_tools::mcp::Json<T>` gives the tool `T`'s output schema, as `rmcp::Json<T>` does.
        let structured = matches!(tool.name.as_ref(), "open_ticket" | "list_tickets");
        assert_eq!(tool.output_schema.is_some(), structured, "{}", tool.name);
    }
    client.cancel().await.unwrap();
}

#[tokio::test]
async fn a_client_that_declares_the_extension_is_told_that_writes_are_idempotent() {
    let backend = Backend::with_latency(Duration::ZERO);
    let client = connect_declaring(example::session(backend).unwrap()).await;
    for tool in client.list_all_tools().await.unwrap() {
        let hints = tool.annotations.expect("annotated");
        assert_eq!(hints.idempotent_hint, Some(true), "{}", tool.name);
    }
    client.cancel().await.unwrap();
}

/// The hint is true only where dedup happens: a declaring client's write that names no action
/// (no turn id, no key) would be a new action however often it is retried, so it is refused.
#[tokio::test]
async fn a_declaring_client_s_write_that_names_no_action_is_refused_and_nothing_runs() {
    let backend = Backend::with_latency(Duration::ZERO);
    let client = connect_declaring(example::session(backend.clone()).unwrap()).await;
    let unnamed = client
        .call_tool(call("open_ticket", json!({"title": "t"}), &[]))
        .await;
    let Err(rmcp::ServiceError::McpError(refused)) = unnamed else {
        panic!("refused, not {unnamed:?}");
    };
    assert_eq!(refused.code, rmcp::model::ErrorCode::INVALID_PARAMS);
    assert_eq!(refused.data.unwrap()["idem"]["error"], "no_turn_id");
    assert!(
        refused.message.contains(TURN_ID_META),
        "{}",
        refused.message
    );
    assert!(backend.tickets().is_empty(), "nothing ran");
    // A read needs no turn; a write with a turn id, or with a key, runs and replays.
    let listed = client.call_tool(call("list_tickets", json!({}), &[])).await;
    assert!(!is_error(&listed.unwrap()));
    for meta in [(TURN_ID_META, "t1"), (IDEMPOTENCY_KEY_META, "k1")] {
        for _ in 0..2 {
            let open = call("open_ticket", json!({"title": "t"}), &[meta]);
            assert!(!is_error(&client.call_tool(open).await.unwrap()));
        }
    }
    assert_eq!(backend.tickets().len(), 2);
    client.cancel().await.unwrap();
}

#[test]
fn get_tool_knows_no_client_so_promises_no_idempotent_write() {
    use rmcp::ServerHandler;
    let server = example::session(Backend::with_latency(Duration::ZERO)).unwrap();
    let open = server.get_tool("open_ticket").unwrap().annotations.unwrap();
    assert_eq!(open.idempotent_hint, Some(false));
    let list = server
        .get_tool("list_tickets")
        .unwrap()
        .annotations
        .unwrap();
    assert_eq!(list.idempotent_hint, Some(true));
}

#[tokio::test]
async fn the_server_declares_the_idempotency_extension_with_its_meta_entries() {
    let client = connect_to(&Backend::with_latency(Duration::ZERO)).await;
    let info = client.peer_info().expect("initialized");
    let extensions = info.capabilities.extensions.clone().unwrap_or_default();
    let settings = extensions.get(IDEMPOTENCY_EXTENSION).expect("declared");
    assert_eq!(settings["turnIdMeta"], TURN_ID_META);
    assert_eq!(settings["idempotencyKeyMeta"], IDEMPOTENCY_KEY_META);
    assert_eq!(settings["clientIdMeta"], idem_tools::mcp::CLIENT_ID_META);
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
async fn past_the_budget_the_model_reads_what_is_true_and_successes_replay() {
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

    // A call that succeeded replays its result, however often it is repeated — even for a
    // tool whose error type is rmcp's own `ErrorData`.
    let open = call("open_ticket", json!({"title": "x"}), &[(TURN_ID_META, "t")]);
    client.call_tool(open).await.unwrap();
    let close = || call("close_ticket", json!({"id": 1}), &[(TURN_ID_META, "t")]);
    for _ in 0..6 {
        let closed = client.call_tool(close()).await.unwrap();
        assert!(!is_error(&closed));
        assert_eq!(text(&closed), "Closed ticket #1.");
    }
    client.cancel().await.unwrap();
}

/// A model that opens ticket after ticket with reworded titles in one turn is stopped at the
/// tool's cap of new actions with an `isError` result it reads: stuck, say what was done.
#[tokio::test]
async fn past_a_tools_cap_of_new_actions_the_model_is_told_it_is_stuck() {
    let backend = Backend::with_latency(Duration::ZERO);
    let client = connect_to(&backend).await;
    let open = |title: &str| {
        call(
            "open_ticket",
            json!({ "title": title }),
            &[(TURN_ID_META, "t")],
        )
    };
    for n in 0..5 {
        let opened = client
            .call_tool(open(&format!("Disk full #{n}")))
            .await
            .unwrap();
        assert!(!is_error(&opened), "{}", text(&opened));
    }
    let looping = client.call_tool(open("disk full, again")).await.unwrap();
    assert!(is_error(&looping), "a tool result the model reads");
    let said = text(&looping);
    assert!(
        said.contains("already started 5 actions in this turn, the most it may"),
        "{said}"
    );
    assert!(said.contains("stuck") && !said.contains('`'), "{said}");
    assert_eq!(backend.tickets().len(), 5, "the sixth was not opened");
    let again = client.call_tool(open("Disk full #0")).await.unwrap();
    assert!(!is_error(&again), "an action already started still replays");
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

#[test]
fn a_catalogued_tool_that_the_server_does_not_serve_under_its_name_is_refused() {
    static RENAMED: &[idem_tools::ToolInfo] =
        &[idem_tools::ToolInfo::idempotent("Desk::reopen_ticket")];
    let error = IdemServer::new(Desk::new(Backend::with_latency(Duration::ZERO)), RENAMED)
        .expect_err("no `reopen_ticket` tool");
    assert!(error.to_string().contains("reopen_ticket"), "{error}");
    assert!(IdemServer::new(Desk::new(Backend::with_latency(Duration::ZERO)), TOOLS).is_ok());
}

#[test]
fn the_example_parses_its_command_line() {
    let parse = |args: &[&str]| example::Options::parse(args.iter().map(|a| (*a).to_owned()));
    let options = parse(&["--http", "127.0.0.1:0", "--stateless", "--max-calls", "2"]).unwrap();
    assert_eq!(options.http.as_deref(), Some("127.0.0.1:0"));
    assert!(options.stateless);
    assert_eq!(options.max_calls, Some(2));
    assert!(parse(&[]).unwrap().http.is_none(), "stdio by default");
    assert!(
        parse(&["--max-calls"])
            .unwrap_err()
            .contains("needs a value")
    );
    assert!(parse(&["--verbose"]).unwrap_err().contains("usage"));
}

#[tokio::test]
async fn a_tool_error_returned_as_ok_is_retried_not_replayed() {
    let backend = Backend::with_latency(Duration::ZERO);
    let client = connect_to(&backend).await;
    let close = || call("close_ticket", json!({"id": 1}), &[(TURN_ID_META, "t")]);
    let missing = client.call_tool(close()).await.unwrap();
    assert!(is_error(&missing));
    assert_eq!(text(&missing), "There is no ticket #1.");
    let open = call("open_ticket", json!({"title": "x"}), &[(TURN_ID_META, "t")]);
    client.call_tool(open).await.unwrap();
    let retry = client.call_tool(close()).await.unwrap();
    assert_eq!(
        text(&retry),
        "Closed ticket #1.",
        "the failure was not recorded"
    );
    client.cancel().await.unwrap();
}

#[tokio::test]
async fn an_idempotency_key_among_the_arguments_is_refused_and_nothing_runs() {
    let backend = Backend::with_latency(Duration::ZERO);
    let client = connect_to(&backend).await;
    for misplaced in [IDEMPOTENCY_KEY_META, TURN_ID_META] {
        let open = call("open_ticket", json!({"title": "t", misplaced: "k"}), &[]);
        let refused = client.call_tool(open).await.unwrap();
        assert!(is_error(&refused));
        assert!(text(&refused).contains("_meta"), "{}", text(&refused));
        assert!(!text(&refused).contains('`'), "worded for a model");
    }
    // A read-only tool is not refused: nothing is deduplicated there.
    let list = call("list_tickets", json!({ IDEMPOTENCY_KEY_META: "k" }), &[]);
    assert!(!is_error(&client.call_tool(list).await.unwrap()));
    assert!(backend.tickets().is_empty());
    client.cancel().await.unwrap();
}

/// A client that puts the whole `_meta` object among the arguments (a framework that passes
/// everything it is given as arguments) sends its turn id where it does nothing: every retry
/// would be a new action. It is refused like a turn id among the arguments, and nothing runs.
#[tokio::test]
async fn a_meta_object_among_the_arguments_is_refused_and_nothing_runs() {
    let backend = Backend::with_latency(Duration::ZERO);
    let client = connect_to(&backend).await;
    for entry in [TURN_ID_META, IDEMPOTENCY_KEY_META] {
        let args = json!({"title": "t", "_meta": { entry: "t1" }});
        for _ in 0..2 {
            let open = call("open_ticket", args.clone(), &[]);
            let refused = client.call_tool(open).await.unwrap();
            assert!(is_error(&refused), "ran: {}", text(&refused));
            assert!(text(&refused).contains(entry), "{}", text(&refused));
            assert!(!text(&refused).contains('`'), "worded for a model");
        }
    }
    assert!(backend.tickets().is_empty(), "nothing ran");
    client.cancel().await.unwrap();
}

/// A `#[read_only]` tool is served whatever `_meta` the call carries: a turn id or client id
/// idem could not use for a write is no reason to refuse a read it has nothing to do with.
/// (Found by a review: such a read was refused with `-32602`.)
#[tokio::test]
async fn a_read_with_meta_idem_could_not_use_is_served() {
    use idem_tools::mcp::CLIENT_ID_META;
    use rmcp::model::RequestMetaObject;
    let backend = Backend::with_latency(Duration::ZERO);
    let client = connect_to(&backend).await;
    for (entry, value) in [
        (TURN_ID_META, json!(7)),
        (CLIENT_ID_META, json!("x".repeat(300))),
    ] {
        let mut list = call("list_tickets", json!({}), &[]);
        let mut meta = RequestMetaObject::default();
        meta.insert(entry.to_owned(), value.clone());
        list.meta = Some(meta.clone());
        let listed = client.call_tool(list).await;
        assert!(
            listed.as_ref().is_ok_and(|r| !is_error(r)),
            "{entry}: {listed:?}"
        );
        // A write with the same `_meta` is still refused.
        let mut open = call("open_ticket", json!({"title": "x"}), &[]);
        open.meta = Some(meta);
        assert!(client.call_tool(open).await.is_err(), "{entry}");
    }
    assert_eq!(backend.reads(), 2);
    assert!(backend.tickets().is_empty());
    client.cancel().await.unwrap();
}

/// A tool the server serves but the catalog given to `IdemServer::new` leaves out is served as
/// the wrapped server serves it — no hints, and deduplicated only by the `#[idempotent]` code it
/// runs (here the method itself is) — and the server says so in its log, once per tool (found
/// by a trial adoption: a plain `#[tool]` write left out of `tools![…]` ran again on every
/// retry without a word).
#[tokio::test]
async fn a_tool_left_out_of_the_catalog_is_logged_once() {
    use std::sync::{Arc, Mutex};
    #[derive(Clone, Default)]
    struct Log(Arc<Mutex<Vec<u8>>>);
    impl std::io::Write for Log {
        fn write(&mut self, bytes: &[u8]) -> std::io::Result<usize> {
            self.0.lock().unwrap().extend_from_slice(bytes);
            Ok(bytes.len())
        }
        fn flush(&mut self) -> std::io::Result<()> {
            Ok(())
        }
    }
    let log = Log::default();
    let writer = log.clone();
    let subscriber = tracing_subscriber::fmt()
        .with_writer(move || writer.clone())
        .with_ansi(false)
        .finish();
    let _guard = tracing::subscriber::set_default(subscriber);
    let backend = Backend::with_latency(Duration::ZERO);
    // `open_ticket` is left out.
    let server = IdemServer::new(Desk::new(Arc::clone(&backend)), &TOOLS[1..]).unwrap();
    let client = example_client(server).await;
    for _ in 0..2 {
        let open = call("open_ticket", json!({"title": "x"}), &[(TURN_ID_META, "t")]);
        assert!(!is_error(&client.call_tool(open).await.unwrap()));
    }
    assert_eq!(
        backend.tickets().len(),
        1,
        "its own #[idempotent] still deduplicates"
    );
    client.cancel().await.unwrap();
    let text = String::from_utf8(log.0.lock().unwrap().clone()).unwrap();
    assert_eq!(
        text.matches("MCP tool `open_ticket` is not in the idem catalog")
            .count(),
        1,
        "{text}"
    );
}

async fn example_client(server: IdemServer<Desk>) -> mcp_support::Client {
    mcp_support::connect(server).await
}

//! The span of each call, seen through a real OpenTelemetry pipeline: `tracing` →
//! `tracing-opentelemetry` → the OpenTelemetry SDK → its in-memory exporter.

use idem_tools_runtime::Codec;
use std::sync::Arc;
use std::time::Duration;

use idem_tools_runtime::key::ArgsDigest;
use idem_tools_runtime::store::{MemoryStore, Store};
use idem_tools_runtime::{Call, Error, ToolInfo, Turn, execute, execute_detached};
use opentelemetry::trace::{Status, TracerProvider as _};
use opentelemetry::{KeyValue, Value};
use opentelemetry_sdk::trace::{InMemorySpanExporter, SdkTracerProvider, SpanData};
use tracing::Instrument;
use tracing::subscriber::DefaultGuard;
use tracing_subscriber::layer::SubscriberExt;

const SEND: ToolInfo = ToolInfo::idempotent("send_message");
const REFUND: ToolInfo = ToolInfo::idempotent("refund");
const CANCELLED: ToolInfo = ToolInfo::idempotent("slow_write");

/// An OpenTelemetry pipeline for this thread (the tests run on current-thread runtimes, so
/// detached tools' tasks run on it too).
struct Pipeline {
    exporter: InMemorySpanExporter,
    _provider: SdkTracerProvider,
    _guard: DefaultGuard,
}

fn pipeline() -> Pipeline {
    let exporter = InMemorySpanExporter::default();
    let provider = SdkTracerProvider::builder()
        .with_simple_exporter(exporter.clone())
        .build();
    let layer = tracing_opentelemetry::layer().with_tracer(provider.tracer("idem-test"));
    let subscriber = tracing_subscriber::registry().with(layer);
    Pipeline {
        exporter,
        _provider: provider,
        _guard: tracing::subscriber::set_default(subscriber),
    }
}

impl Pipeline {
    fn spans(&self) -> Vec<SpanData> {
        self.exporter
            .get_finished_spans()
            .expect("in-memory exporter")
    }
}

fn attr<'a>(span: &'a SpanData, key: &str) -> Option<&'a Value> {
    span.attributes
        .iter()
        .find(|kv: &&KeyValue| kv.key.as_str() == key)
        .map(|kv| &kv.value)
}

fn attr_str(span: &SpanData, key: &str) -> String {
    match attr(span, key) {
        Some(value) => value.as_str().into_owned(),
        None => panic!(
            "span {} has no attribute {key}: {:?}",
            span.name, span.attributes
        ),
    }
}

fn named<'a>(spans: &'a [SpanData], name: &str) -> Vec<&'a SpanData> {
    spans.iter().filter(|s| s.name == name).collect()
}

fn call(tool: &'static ToolInfo, turn: &Turn, to: &str) -> Call {
    let mut args = ArgsDigest::new(tool.name);
    args.arg("to", to).expect("encodes");
    let (key, fp) = args.finish(turn.namespace(), turn.id(), tool.name, tool.version);
    Call::new(tool, turn, key, fp)
}

fn turn(id: &str) -> Turn {
    let store: Arc<dyn Store> = Arc::new(MemoryStore::new());
    Turn::new(id).with_namespace("tenant-7").with_store(store)
}

/// The tool: does its "HTTP request" in a child span.
async fn send() -> Result<u32, Error> {
    async { Ok(42) }
        .instrument(tracing::info_span!("http.request", http.method = "POST"))
        .await
}

/// Checks the tool span's name and attributes and returns it.
fn tool_span<'a>(span: &'a SpanData, tool: &str, call: &Call, outcome: &str) -> &'a SpanData {
    assert_eq!(span.name, tool, "the span is named for the tool");
    assert_eq!(attr_str(span, "tool"), tool);
    assert_eq!(attr_str(span, "key"), call.key().short().to_string());
    assert_eq!(attr_str(span, "key").len(), 12);
    assert_eq!(attr_str(span, "turn"), "turn-1");
    assert_eq!(attr_str(span, "namespace"), "tenant-7");
    assert_eq!(attr_str(span, "outcome"), outcome);
    assert!(
        attr(span, "otel.name").is_none(),
        "otel.name becomes the name"
    );
    // The call's own event stands next to its span, not in it (a nested call's event is in it).
    let own_key = call.key().short().to_string();
    assert!(
        !span.events.events.iter().any(|e| e.name == "tool call"
            && e.attributes
                .iter()
                .any(|kv| kv.key.as_str() == "key" && kv.value.as_str() == own_key)),
        "the call's one-line event is not in its own span: {:?}",
        span.events.events
    );
    span
}

fn assert_child(child: &SpanData, parent: &SpanData) {
    assert_eq!(child.parent_span_id, parent.span_context.span_id());
    assert_eq!(
        child.span_context.trace_id(),
        parent.span_context.trace_id()
    );
}

#[tokio::test]
async fn attached_call_runs_in_a_span_named_for_the_tool_and_replay_has_its_own() {
    let otel = pipeline();
    let turn = turn("turn-1");
    let first = call(&SEND, &turn, "ada");
    let agent = tracing::info_span!("agent.turn");
    let result = execute(first.clone(), Codec::ok_only(), send())
        .instrument(agent)
        .await;
    assert_eq!(result.expect("executes"), 42);
    let replayed: Result<u32, Error> =
        execute(call(&SEND, &turn, "ada"), Codec::ok_only(), async {
            panic!("a replay does not run the tool")
        })
        .await;
    assert_eq!(replayed.expect("replays"), 42);

    let spans = otel.spans();
    let calls = named(&spans, "send_message");
    assert_eq!(calls.len(), 2, "{spans:#?}");
    let executed = tool_span(calls[0], "send_message", &first, "executed");
    let replay = tool_span(calls[1], "send_message", &first, "replayed");
    assert_eq!(executed.status, Status::Unset);
    assert_eq!(replay.status, Status::Unset);

    let http = named(&spans, "http.request");
    assert_eq!(http.len(), 1, "the replay did not run the tool");
    assert_child(http[0], executed);
    let agent = named(&spans, "agent.turn");
    assert_child(executed, agent[0]);
    // The call's one event is the caller's: it lands in the caller's span, with the key.
    let event = agent[0]
        .events
        .events
        .iter()
        .find(|e| e.name == "tool call")
        .expect("the call's event is in the caller's span");
    let key = event
        .attributes
        .iter()
        .find(|kv| kv.key.as_str() == "key")
        .map(|kv| kv.value.as_str().into_owned());
    assert_eq!(key, Some(first.key().short().to_string()));
    assert_ne!(
        replay.span_context.span_id(),
        executed.span_context.span_id()
    );
}

#[tokio::test]
async fn detached_call_carries_its_span_into_the_tool_task() {
    let otel = pipeline();
    let turn = turn("turn-1");
    let first = call(&SEND, &turn, "grace");
    let result = execute_detached(first.clone(), Codec::ok_only(), send()).await;
    assert_eq!(result.expect("executes"), 42);
    let replayed = execute_detached(call(&SEND, &turn, "grace"), Codec::ok_only(), async {
        Err::<u32, _>(Error::Config("a replay does not run the tool".to_owned()))
    })
    .await;
    assert_eq!(replayed.expect("replays"), 42);

    let spans = otel.spans();
    let calls = named(&spans, "send_message");
    assert_eq!(calls.len(), 2, "{spans:#?}");
    let executed = tool_span(calls[0], "send_message", &first, "executed");
    tool_span(calls[1], "send_message", &first, "replayed");
    let http = named(&spans, "http.request");
    assert_eq!(http.len(), 1);
    assert_child(http[0], executed);
}

#[tokio::test]
async fn failed_call_has_an_error_status_and_the_error() {
    let otel = pipeline();
    let turn = turn("turn-1");
    let refund = call(&REFUND, &turn, "bob");
    let result = execute(refund.clone(), Codec::ok_only(), async {
        Err::<u32, _>(Error::Config("card declined".to_owned()))
    })
    .await;
    assert!(result.is_err());
    // Reused key, other arguments: refused with an idem error.
    let mut args = ArgsDigest::new(REFUND.name);
    args.arg("to", "eve").expect("encodes");
    let (_, other_fp) = args.finish(turn.namespace(), turn.id(), REFUND.name, REFUND.version);
    let done = execute(refund.clone(), Codec::ok_only(), async {
        Ok::<u32, Error>(1)
    })
    .await;
    assert_eq!(done.expect("runs again after a failure"), 1);
    let mismatch = execute(
        Call::new(&REFUND, &turn, refund.key(), other_fp),
        Codec::ok_only(),
        async { Ok::<u32, Error>(2) },
    )
    .await;
    let mismatch = match mismatch {
        Err(error @ Error::PayloadMismatch { .. }) => error.to_string(),
        other => panic!("expected a payload mismatch, got {other:?}"),
    };

    let spans = otel.spans();
    let calls = named(&spans, "refund");
    assert_eq!(calls.len(), 3, "{spans:#?}");
    let failed = tool_span(calls[0], "refund", &refund, "failed");
    assert!(matches!(failed.status, Status::Error { .. }));
    let executed = tool_span(calls[1], "refund", &refund, "executed");
    assert_eq!(executed.status, Status::Unset);
    let refused = tool_span(calls[2], "refund", &refund, "payload_mismatch");
    assert_eq!(refused.status, Status::error(mismatch.clone()));
    // The error is the span's status; it is not repeated as an attribute.
    assert!(attr(refused, "error").is_none(), "{:?}", refused.attributes);
}

#[tokio::test]
async fn call_dropped_by_its_caller_ends_its_span_with_its_outcome() {
    let otel = pipeline();
    let turn = turn("turn-1");
    let slow = call(&CANCELLED, &turn, "carol");
    let timed_out = tokio::time::timeout(
        Duration::from_millis(20),
        execute(slow.clone(), Codec::ok_only(), async {
            tokio::time::sleep(Duration::from_secs(3600)).await;
            Ok::<u32, Error>(0)
        }),
    )
    .await;
    assert!(timed_out.is_err());

    let spans = otel.spans();
    let calls = named(&spans, "slow_write");
    assert_eq!(calls.len(), 1, "{spans:#?}");
    tool_span(calls[0], "slow_write", &slow, "interrupted");
    assert_eq!(calls[0].status, Status::Unset);
}

#[tokio::test]
async fn without_an_interested_subscriber_the_call_span_is_not_built() {
    // A subscriber that only wants the application's spans: idem's is disabled, and the
    // tool's spans nest under the application's span directly.
    let exporter = InMemorySpanExporter::default();
    let provider = SdkTracerProvider::builder()
        .with_simple_exporter(exporter.clone())
        .build();
    let only_app = tracing_subscriber::filter::filter_fn(|meta| meta.target() != "idem");
    let layer = tracing_opentelemetry::layer().with_tracer(provider.tracer("idem-test"));
    let subscriber = tracing_subscriber::registry().with(only_app).with(layer);
    let _guard = tracing::subscriber::set_default(subscriber);
    let turn = turn("turn-1");
    let app = tracing::info_span!("agent.turn");
    let result = execute(call(&SEND, &turn, "dan"), Codec::ok_only(), async {
        assert!(tracing::Span::current().metadata().map(|m| m.name()) == Some("agent.turn"));
        send().await
    })
    .instrument(app)
    .await;
    assert_eq!(result.expect("executes"), 42);
    let spans = exporter.get_finished_spans().expect("in-memory exporter");
    assert!(named(&spans, "send_message").is_empty(), "{spans:#?}");
    assert_child(
        named(&spans, "http.request")[0],
        named(&spans, "agent.turn")[0],
    );
}

const OUTER: ToolInfo = ToolInfo::idempotent("plan_trip");
const INNER: ToolInfo = ToolInfo::idempotent("book_hotel");

#[tokio::test]
async fn a_tool_calling_a_tool_nests_the_spans_and_each_gets_its_own_outcome() {
    let otel = pipeline();
    let turn = turn("turn-1");
    let outer = call(&OUTER, &turn, "lisbon");
    let inner = call(&INNER, &turn, "lisbon");
    let inner_call = inner.clone();
    let planned = execute(outer.clone(), Codec::ok_only(), async move {
        // The inner tool fails; the outer one handles it and succeeds.
        let booked = execute(inner_call, Codec::ok_only(), async {
            Err::<u32, _>(Error::Config("no rooms".to_owned()))
        })
        .await;
        Ok::<bool, Error>(booked.is_err())
    })
    .await;
    assert!(planned.expect("executes"), "the inner call failed");

    let spans = otel.spans();
    let (outer_span, inner_span) = (named(&spans, "plan_trip"), named(&spans, "book_hotel"));
    assert_eq!((outer_span.len(), inner_span.len()), (1, 1), "{spans:#?}");
    let outer_span = tool_span(outer_span[0], "plan_trip", &outer, "executed");
    let inner_span = tool_span(inner_span[0], "book_hotel", &inner, "failed");
    assert_child(inner_span, outer_span);
    assert_eq!(outer_span.status, Status::Unset);
    assert!(matches!(inner_span.status, Status::Error { .. }));
}

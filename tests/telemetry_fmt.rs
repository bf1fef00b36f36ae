//! What a `tracing_subscriber::fmt` subscriber prints for each call: one `tool call` line whose
//! fields — `tool`, `key`, `turn`, `namespace` (from the span), `outcome` and `error` (from the
//! event) — each appear once, the error's text too; the outcome says what happened (a retry
//! refused by an interrupted key is `was_interrupted`, never `replayed`; a dropped joiner is
//! `cancelled`); and a subscriber that keeps events but not spans still gets the tool and key.
//!
//! Each test installs its subscriber for its own thread (`set_default`) and runs the engine's
//! tasks on that thread ([`run`]). The tests run one at a time: whether a span is enabled is
//! cached per callsite across every subscriber alive in the process, so a subscriber of one test
//! would change what another's filter decides (an application has one subscriber).

use std::future::Future;
use std::io::Write;
use std::sync::{Arc, Mutex, MutexGuard, PoisonError};
use std::time::Duration;

use idem_tools::{Error, MemoryStore, Turn, idempotent};
use tracing_subscriber::EnvFilter;
use tracing_subscriber::filter::filter_fn;
use tracing_subscriber::fmt::MakeWriter;
use tracing_subscriber::layer::SubscriberExt;
use tracing_subscriber::registry::LookupSpan;
use tracing_subscriber::{Layer, Registry};

/// The fields a `tool call` line carries.
const FIELDS: [&str; 6] = ["tool", "key", "turn", "namespace", "outcome", "error"];

/// Runs `test` with `subscriber` as this thread's default, on a current-thread runtime that is
/// gone (with every span its tasks held) before the next test starts.
fn run<S, F>(subscriber: S, test: impl FnOnce() -> F) -> F::Output
where
    S: tracing::Subscriber + Send + Sync + 'static,
    F: Future,
{
    static ONE_AT_A_TIME: Mutex<()> = Mutex::new(());
    let _serial = ONE_AT_A_TIME.lock().unwrap_or_else(PoisonError::into_inner);
    let runtime = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .expect("a runtime");
    let output = tracing::subscriber::with_default(subscriber, || runtime.block_on(test()));
    drop(runtime);
    output
}

/// What the subscriber wrote.
#[derive(Clone, Default)]
struct Buffer(Arc<Mutex<Vec<u8>>>);

impl Buffer {
    fn bytes(&self) -> MutexGuard<'_, Vec<u8>> {
        self.0.lock().unwrap_or_else(PoisonError::into_inner)
    }

    /// The `tool call` lines written since the last call, which forgets them.
    fn take_calls(&self) -> Vec<String> {
        let text = String::from_utf8(std::mem::take(&mut *self.bytes())).expect("UTF-8 logs");
        text.lines()
            .filter(|line| line.contains("tool call"))
            .map(str::to_owned)
            .collect()
    }
}

impl Write for Buffer {
    fn write(&mut self, bytes: &[u8]) -> std::io::Result<usize> {
        self.bytes().extend_from_slice(bytes);
        Ok(bytes.len())
    }

    fn flush(&mut self) -> std::io::Result<()> {
        Ok(())
    }
}

impl<'a> MakeWriter<'a> for Buffer {
    type Writer = Buffer;

    fn make_writer(&'a self) -> Buffer {
        self.clone()
    }
}

/// A `fmt` layer writing plain text (no colours, no time) to `buffer`.
fn fmt_layer<S>(buffer: &Buffer) -> impl Layer<S> + Send + Sync + 'static
where
    S: tracing::Subscriber + for<'a> LookupSpan<'a>,
{
    tracing_subscriber::fmt::layer()
        .with_writer(buffer.clone())
        .with_ansi(false)
        .without_time()
}

/// The values of field `name` in `line`: wherever `name=` starts the line or follows a space,
/// `{` or `,` (so `otel.name=` is not `name=`), up to the next space (quotes removed).
fn values<'a>(line: &'a str, name: &str) -> Vec<&'a str> {
    let needle = format!("{name}=");
    line.match_indices(&needle)
        .filter(|(at, _)| {
            line[..*at]
                .chars()
                .next_back()
                .is_none_or(|c| c == ' ' || c == '{' || c == ',')
        })
        .map(|(at, _)| {
            let rest = &line[at + needle.len()..];
            let value = rest.split([' ', '}']).next().unwrap_or_default();
            value.trim_matches('"')
        })
        .collect()
}

/// What one `tool call` line must say.
struct Expected<'a> {
    tool: &'a str,
    turn: &'a str,
    namespace: &'a str,
    outcome: &'a str,
    /// The error the caller got, if any: its text must appear once.
    error: Option<String>,
}

/// Checks that `line` carries every field once (`error` once if expected, else not at all),
/// with the expected values, and the error's text once.
fn check(line: &str, expected: &Expected<'_>) {
    for name in FIELDS {
        let found = values(line, name);
        let want = usize::from(name != "error" || expected.error.is_some());
        assert_eq!(
            found.len(),
            want,
            "`{name}=` {} times in:\n{line}",
            found.len()
        );
    }
    assert_eq!(values(line, "tool"), [expected.tool], "{line}");
    assert_eq!(values(line, "turn"), [expected.turn], "{line}");
    assert_eq!(values(line, "namespace"), [expected.namespace], "{line}");
    assert_eq!(values(line, "outcome"), [expected.outcome], "{line}");
    let key = values(line, "key")[0];
    assert!(
        key.len() == 12 && key.chars().all(|c| c.is_ascii_hexdigit()),
        "a short key: {line}"
    );
    if let Some(error) = &expected.error {
        assert_eq!(
            line.matches(error.as_str()).count(),
            1,
            "the error's text once:\n{error}\nin:\n{line}"
        );
    }
}

/// The one line of `lines` with `outcome`, checked.
fn only<'a>(lines: &'a [String], expected: &Expected<'_>) -> &'a str {
    let matching: Vec<&String> = lines
        .iter()
        .filter(|l| values(l, "outcome").contains(&expected.outcome))
        .collect();
    assert_eq!(
        matching.len(),
        1,
        "one `{}` line: {lines:#?}",
        expected.outcome
    );
    check(matching[0], expected);
    matching[0]
}

#[idempotent]
async fn archive(id: u32) -> Result<u32, Error> {
    Ok(id)
}

#[idempotent]
async fn bounce(id: u32) -> anyhow::Result<u32> {
    anyhow::bail!("mailbox {id} is full")
}

/// Borrowed arguments: runs attached, in its caller's task, so dropping the caller cuts it.
#[idempotent]
async fn open_ticket(title: &str) -> Result<usize, Error> {
    tokio::time::sleep(Duration::from_millis(150)).await;
    Ok(title.len())
}

fn turn(id: &str) -> Turn {
    Turn::new(id)
        .with_namespace("acme")
        .with_store(Arc::new(MemoryStore::new()))
}

#[test]
fn executed_replayed_and_failed_calls_print_each_field_once() {
    let buffer = Buffer::default();
    let subscriber = Registry::default().with(fmt_layer(&buffer));
    let expected = |tool, outcome, error| Expected {
        tool,
        turn: "conv-1/turn-1",
        namespace: "acme",
        outcome,
        error,
    };
    let t = turn("conv-1/turn-1").with_max_attempts_per_key(1);
    run(subscriber, || async {
        let (first, again) = t
            .clone()
            .scope(async { (archive(7).await, archive(7).await) })
            .await;
        assert_eq!((first.unwrap(), again.unwrap()), (7, 7));
        let lines = buffer.take_calls();
        assert_eq!(lines.len(), 2, "{lines:#?}");
        only(&lines, &expected("archive", "executed", None));
        only(&lines, &expected("archive", "replayed", None));

        // The tool fails (its own error, which is the caller's to log): `failed`, no `error`.
        // The retry is refused by the key's budget, with an idem error: once, though the
        // span's status description holds it too.
        let (failed, refused) = t
            .clone()
            .scope(async { (bounce(1).await, bounce(1).await) })
            .await;
        assert_eq!(failed.unwrap_err().to_string(), "mailbox 1 is full");
        let refused = refused.unwrap_err().to_string();
        let lines = buffer.take_calls();
        assert_eq!(lines.len(), 2, "{lines:#?}");
        only(&lines, &expected("bounce", "failed", None));
        only(
            &lines,
            &expected("bounce", "budget_exhausted", Some(refused)),
        );
    });
    let stats = t.stats();
    assert_eq!(
        (
            stats.executed,
            stats.replayed,
            stats.failed,
            stats.budget_exhausted
        ),
        (1, 1, 1, 1)
    );
}

#[test]
fn a_retry_refused_by_an_interrupted_key_is_was_interrupted_not_replayed() {
    let buffer = Buffer::default();
    let subscriber = Registry::default().with(fmt_layer(&buffer));
    let t = turn("conv-1/turn-2");
    let retry = run(subscriber, || {
        t.clone().scope(async {
            let cut = tokio::time::timeout(Duration::from_millis(30), open_ticket("printer")).await;
            assert!(cut.is_err(), "the caller gave up mid-run");
            open_ticket("printer").await
        })
    });
    let error = retry.expect_err("the outcome is unknown");
    assert!(matches!(error, Error::Interrupted { .. }), "{error:?}");
    let lines = buffer.take_calls();
    assert_eq!(lines.len(), 2, "{lines:#?}");
    let expected = |outcome, error| Expected {
        tool: "open_ticket",
        turn: "conv-1/turn-2",
        namespace: "acme",
        outcome,
        error,
    };
    only(&lines, &expected("interrupted", None));
    let refused = only(
        &lines,
        &expected("was_interrupted", Some(error.to_string())),
    );
    assert!(refused.contains("WARN"), "{refused}");
    let stats = t.stats();
    assert_eq!(
        (stats.interrupted, stats.was_interrupted, stats.replayed),
        (1, 1, 0)
    );
}

#[test]
fn a_dropped_joiner_is_cancelled_and_its_leader_executes() {
    let buffer = Buffer::default();
    let subscriber = Registry::default().with(fmt_layer(&buffer));
    let t = turn("conv-1/turn-3");
    let (leader, joiner) = run(subscriber, || {
        t.clone().scope(async {
            tokio::join!(
                open_ticket("printer"),
                tokio::time::timeout(Duration::from_millis(30), open_ticket("printer")),
            )
        })
    });
    assert_eq!(leader.unwrap(), 7);
    assert!(joiner.is_err(), "the joiner was dropped while waiting");
    let lines = buffer.take_calls();
    assert_eq!(lines.len(), 2, "{lines:#?}");
    let expected = |outcome| Expected {
        tool: "open_ticket",
        turn: "conv-1/turn-3",
        namespace: "acme",
        outcome,
        error: None,
    };
    only(&lines, &expected("executed"));
    only(&lines, &expected("cancelled"));
    let stats = t.stats();
    assert_eq!((stats.executed, stats.joined, stats.cancelled), (1, 0, 1));
}

#[test]
fn without_the_span_the_event_carries_tool_and_key() {
    // A layer filter that keeps events and drops every span.
    let buffer = Buffer::default();
    let subscriber =
        Registry::default().with(fmt_layer(&buffer).with_filter(filter_fn(|m| m.is_event())));
    let t = turn("conv-1/turn-4");
    assert_eq!(run(subscriber, || t.scope(archive(8))).unwrap(), 8);
    let lines = buffer.take_calls();
    assert_eq!(lines.len(), 1, "{lines:#?}");
    let line = only(
        &lines,
        &Expected {
            tool: "archive",
            turn: "conv-1/turn-4",
            namespace: "acme",
            outcome: "executed",
            error: None,
        },
    );
    assert!(!line.contains("idem.tool_call"), "no span: {line}");
}

#[test]
fn with_only_warnings_enabled_a_refused_retry_still_names_its_tool_and_key() {
    // `RUST_LOG=idem=warn`: the INFO span is off, the WARN events are kept.
    let buffer = Buffer::default();
    let subscriber = Registry::default()
        .with(EnvFilter::new("idem=warn"))
        .with(fmt_layer(&buffer));
    let t = turn("conv-1/turn-5");
    let retry = run(subscriber, || {
        t.scope(async {
            let cut = tokio::time::timeout(Duration::from_millis(30), open_ticket("fax")).await;
            assert!(cut.is_err());
            open_ticket("fax").await
        })
    });
    let error = retry.expect_err("the outcome is unknown").to_string();
    let lines = buffer.take_calls();
    let line = only(
        &lines,
        &Expected {
            tool: "open_ticket",
            turn: "conv-1/turn-5",
            namespace: "acme",
            outcome: "was_interrupted",
            error: Some(error),
        },
    );
    assert!(!line.contains("idem.tool_call"), "no span: {line}");
}

/// Keeps the spans (as `tracing-opentelemetry` does) and nothing else.
struct SpanNames(Arc<Mutex<Vec<&'static str>>>);

impl<S: tracing::Subscriber> Layer<S> for SpanNames {
    fn on_new_span(
        &self,
        attrs: &tracing::span::Attributes<'_>,
        _: &tracing::span::Id,
        _: tracing_subscriber::layer::Context<'_, S>,
    ) {
        let mut names = self.0.lock().unwrap_or_else(PoisonError::into_inner);
        names.push(attrs.metadata().name());
    }
}

#[test]
fn a_layer_that_keeps_events_only_next_to_one_that_keeps_spans_still_gets_tool_and_key() {
    // The span is enabled (one layer wants it), but the `fmt` layer does not see it.
    let (buffer, spans) = (Buffer::default(), Arc::new(Mutex::new(Vec::new())));
    let subscriber = Registry::default()
        .with(SpanNames(Arc::clone(&spans)))
        .with(fmt_layer(&buffer).with_filter(filter_fn(|m| m.is_event())));
    let t = turn("conv-1/turn-6");
    assert_eq!(run(subscriber, || t.scope(archive(9))).unwrap(), 9);
    assert_eq!(*spans.lock().unwrap(), ["idem.tool_call"]);
    let lines = buffer.take_calls();
    only(
        &lines,
        &Expected {
            tool: "archive",
            turn: "conv-1/turn-6",
            namespace: "acme",
            outcome: "executed",
            error: None,
        },
    );
}

/// `#[tracing::instrument]` under `#[idempotent]` (the documented order) keeps the `async fn`
/// it was written on, so its span wraps the whole call: the `tool call` line of a replay too.
#[idempotent]
#[tracing::instrument(level = "info")]
async fn traced(n: u32) -> Result<u32, Error> {
    Ok(n)
}

#[test]
fn an_instrument_span_under_idempotent_wraps_executions_and_replays() {
    let buffer = Buffer::default();
    let subscriber = Registry::default().with(fmt_layer(&buffer));
    let t = turn("conv-1/turn-1");
    run(subscriber, || async {
        let (first, again) = t.scope(async { (traced(3).await, traced(3).await) }).await;
        assert_eq!((first.ok(), again.ok()), (Some(3), Some(3)));
        let lines = buffer.take_calls();
        assert_eq!(lines.len(), 2, "{lines:#?}");
        for line in &lines {
            assert!(line.contains("traced{n=3}"), "outside the span: {line}");
        }
    });
}

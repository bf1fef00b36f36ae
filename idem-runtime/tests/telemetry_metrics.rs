//! The `metrics` feature: counter, duration histogram and in-flight gauge per tool, read back
//! through `metrics-util`'s debugging recorder after a scripted scenario.
//!
//! One test per binary: the recorder is process-global and its snapshots drain it.

use idem_tools_runtime::Codec;
use std::collections::{BTreeMap, BTreeSet};
use std::sync::Arc;
use std::time::Duration;

use idem_tools_runtime::engine::refuse;
use idem_tools_runtime::engine::telemetry::{CALL_DURATION_SECONDS, CALLS_IN_FLIGHT, CALLS_TOTAL};
use idem_tools_runtime::key::ArgsDigest;
use idem_tools_runtime::store::{MemoryStore, Store};
use idem_tools_runtime::{Call, Error, ToolInfo, Turn, execute};
use metrics::Unit;
use metrics_util::MetricKind;
use metrics_util::debugging::{DebugValue, DebuggingRecorder, Snapshotter};
use tokio::sync::Notify;

const SEND: ToolInfo = ToolInfo::idempotent("send_message");
const BOOK: ToolInfo = ToolInfo::idempotent("book_flight");
const REFUND: ToolInfo = ToolInfo::idempotent("refund").with_budget(1);
const SLOW: ToolInfo = ToolInfo::idempotent("slow_write").with_release_on_cancel();
const UNTURNED: ToolInfo = ToolInfo::idempotent("no_turn");

/// Metric name and labels, sorted.
type Series = (String, Vec<(String, String)>);

/// What the recorder saw, summed over snapshots (each snapshot drains counters, gauges and
/// histograms, so values are deltas).
#[derive(Default)]
struct Seen {
    counters: BTreeMap<Series, u64>,
    gauges: BTreeMap<Series, f64>,
    histograms: BTreeMap<Series, Vec<f64>>,
    described: BTreeMap<(MetricKind, String), (Option<Unit>, String)>,
}

impl Seen {
    fn take(&mut self, snapshotter: &Snapshotter) {
        for (key, unit, description, value) in snapshotter.snapshot().into_vec() {
            let (kind, key) = key.into_parts();
            let name = key.name().to_owned();
            let mut labels: Vec<_> = key
                .labels()
                .map(|l| (l.key().to_owned(), l.value().to_owned()))
                .collect();
            labels.sort();
            if let Some(description) = description {
                self.described
                    .insert((kind, name.clone()), (unit, description.to_string()));
            }
            let series = (name, labels);
            match value {
                DebugValue::Counter(n) => *self.counters.entry(series).or_default() += n,
                DebugValue::Gauge(v) => *self.gauges.entry(series).or_default() += v.0,
                DebugValue::Histogram(vs) => self
                    .histograms
                    .entry(series)
                    .or_default()
                    .extend(vs.into_iter().map(|v| v.0)),
            }
        }
    }

    fn calls(&self, tool: &str, outcome: &str) -> u64 {
        self.counters
            .get(&series(CALLS_TOTAL, tool, Some(outcome)))
            .copied()
            .unwrap_or(0)
    }

    fn durations(&self, tool: &str, outcome: &str) -> &[f64] {
        self.histograms
            .get(&series(CALL_DURATION_SECONDS, tool, Some(outcome)))
            .map_or(&[], Vec::as_slice)
    }

    fn in_flight(&self, tool: &str) -> Option<f64> {
        self.gauges
            .get(&series(CALLS_IN_FLIGHT, tool, None))
            .copied()
    }
}

fn series(name: &str, tool: &str, outcome: Option<&str>) -> Series {
    let mut labels = vec![("tool".to_owned(), tool.to_owned())];
    if let Some(outcome) = outcome {
        labels.insert(0, ("outcome".to_owned(), outcome.to_owned()));
    }
    (name.to_owned(), labels)
}

fn call(tool: &'static ToolInfo, turn: &Turn, arg: &str) -> Call {
    let mut args = ArgsDigest::new(tool.name);
    args.arg("arg", arg).expect("encodes");
    let (key, fp) = args.finish(turn.namespace(), turn.id(), tool.name, tool.version);
    Call::new(tool, turn, key, fp)
}

#[tokio::test]
async fn calls_are_counted_timed_and_tracked_in_flight_per_tool_and_outcome() {
    let recorder = DebuggingRecorder::new();
    let snapshotter = recorder.snapshotter();
    recorder
        .install()
        .expect("the only recorder of this test binary");
    let mut seen = Seen::default();

    let store: Arc<dyn Store> = Arc::new(MemoryStore::new());
    let turn = Turn::new("turn-1").with_store(store);

    // Executed, then replayed.
    let sent = execute(call(&SEND, &turn, "ada"), Codec::ok_only(), async {
        tokio::time::sleep(Duration::from_millis(30)).await;
        Ok::<u32, Error>(1)
    })
    .await;
    assert_eq!(sent.expect("executes"), 1);
    let again: Result<u32, Error> = execute(call(&SEND, &turn, "ada"), Codec::ok_only(), async {
        panic!("a replay does not run the tool")
    })
    .await;
    assert_eq!(again.expect("replays"), 1);

    // An identical call joins the one running; both are in flight meanwhile.
    let release = Notify::new();
    let leader = execute(call(&BOOK, &turn, "LHR"), Codec::ok_only(), async {
        release.notified().await;
        Ok::<u32, Error>(7)
    });
    let follower = execute(call(&BOOK, &turn, "LHR"), Codec::ok_only(), async {
        Ok::<u32, Error>(8) // never runs: it joins the leader
    });
    // A third one gives up waiting: its caller drops it before it has an outcome.
    let impatient = tokio::time::timeout(
        Duration::from_millis(5),
        execute(call(&BOOK, &turn, "LHR"), Codec::ok_only(), async {
            Ok::<u32, Error>(9)
        }),
    );
    let script = async {
        tokio::time::sleep(Duration::from_millis(20)).await;
        let mut mid = Seen::default();
        mid.take(&snapshotter);
        release.notify_one();
        mid
    };
    let (led, joined, gave_up, mid) = tokio::join!(leader, follower, impatient, script);
    assert!(gave_up.is_err(), "timed out while joined");
    assert_eq!((led.expect("leads"), joined.expect("joins")), (7, 7));
    assert_eq!(
        mid.in_flight(BOOK.name),
        Some(2.0),
        "leader and follower in flight"
    );
    merge(&mut seen, mid);

    // Failed (the key is released), then over the per-key budget of one attempt.
    let failed = execute(call(&REFUND, &turn, "bob"), Codec::ok_only(), async {
        Err::<u32, _>(Error::Config("card declined".to_owned()))
    })
    .await;
    assert!(matches!(failed, Err(Error::Config(_))));
    let exhausted = execute(call(&REFUND, &turn, "bob"), Codec::ok_only(), async {
        Ok::<u32, Error>(1)
    })
    .await;
    assert!(matches!(exhausted, Err(Error::BudgetExhausted { .. })));

    // Dropped by its caller while the tool ran (released: `cancelled`).
    let timed_out = tokio::time::timeout(
        Duration::from_millis(20),
        execute(call(&SLOW, &turn, "carol"), Codec::ok_only(), async {
            tokio::time::sleep(Duration::from_secs(3600)).await;
            Ok::<u32, Error>(0)
        }),
    )
    .await;
    assert!(timed_out.is_err());

    // Refused before the engine: counted, never in flight.
    let _ = refuse(&UNTURNED, None, Error::Config("outside a turn".to_owned()));

    seen.take(&snapshotter);

    let expected = [
        (SEND.name, "executed", 1),
        (SEND.name, "replayed", 1),
        (BOOK.name, "executed", 1),
        (BOOK.name, "joined", 1),
        (BOOK.name, "cancelled", 1),
        (REFUND.name, "failed", 1),
        (REFUND.name, "budget_exhausted", 1),
        (SLOW.name, "cancelled", 1),
        (UNTURNED.name, "config_error", 1),
    ];
    for (tool, outcome, n) in expected {
        assert_eq!(seen.calls(tool, outcome), n, "{tool} {outcome}");
    }
    assert_eq!(
        seen.counters.values().sum::<u64>(),
        expected.len() as u64,
        "{:?}",
        seen.counters
    );

    // One duration per call that entered the engine, in seconds.
    for (tool, outcome, n) in &expected[..8] {
        assert_eq!(
            seen.durations(tool, outcome).len() as u64,
            *n,
            "{tool} {outcome}"
        );
    }
    assert!(seen.durations(UNTURNED.name, "config_error").is_empty());
    let executed = seen.durations(SEND.name, "executed")[0];
    assert!(
        (0.03..5.0).contains(&executed),
        "the executed call slept 30 ms: {executed} s"
    );
    let replayed = seen.durations(SEND.name, "replayed")[0];
    assert!(replayed < executed, "{replayed} < {executed}");

    // Every call left the in-flight gauge: back to zero for each tool.
    for tool in [SEND.name, BOOK.name, REFUND.name, SLOW.name] {
        assert_eq!(seen.in_flight(tool), Some(0.0), "{tool}: {:?}", seen.gauges);
    }
    assert_eq!(seen.in_flight(UNTURNED.name), None);

    // The key is never a label; only tool and outcome are.
    let labels: BTreeSet<String> = seen
        .counters
        .keys()
        .chain(seen.gauges.keys())
        .chain(seen.histograms.keys())
        .flat_map(|(_, labels)| labels.iter().map(|(k, _)| k.clone()))
        .collect();
    assert_eq!(
        labels,
        BTreeSet::from(["outcome".to_owned(), "tool".to_owned()])
    );

    // Described once, with units.
    let described = |kind, name: &str| seen.described.get(&(kind, name.to_owned())).cloned();
    let (unit, help) = described(MetricKind::Counter, CALLS_TOTAL).expect("described");
    assert_eq!(unit, Some(Unit::Count));
    assert!(!help.is_empty());
    let (unit, _) = described(MetricKind::Histogram, CALL_DURATION_SECONDS).expect("described");
    assert_eq!(unit, Some(Unit::Seconds));
    let (unit, _) = described(MetricKind::Gauge, CALLS_IN_FLIGHT).expect("described");
    assert_eq!(unit, Some(Unit::Count));
}

fn merge(into: &mut Seen, from: Seen) {
    for (k, v) in from.counters {
        *into.counters.entry(k).or_default() += v;
    }
    for (k, v) in from.gauges {
        *into.gauges.entry(k).or_default() += v;
    }
    for (k, v) in from.histograms {
        into.histograms.entry(k).or_default().extend(v);
    }
    into.described.extend(from.described);
}

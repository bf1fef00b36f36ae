//! `idem/metrics` reaches the runtime: an `#[idempotent]` tool called through the facade is
//! counted, and its in-flight gauge returns to zero.

use std::sync::Arc;

use idem_tools::engine::telemetry::{CALLS_IN_FLIGHT, CALLS_TOTAL};
use idem_tools::{Error, MemoryStore, Turn, idempotent};
use metrics_util::debugging::{DebugValue, DebuggingRecorder};

#[idempotent]
async fn archive(id: u32) -> Result<u32, Error> {
    Ok(id)
}

#[tokio::test]
async fn a_tool_called_through_the_facade_is_counted() {
    let recorder = DebuggingRecorder::new();
    let snapshotter = recorder.snapshotter();
    recorder
        .install()
        .expect("the only recorder of this test binary");
    let turn = Turn::new("turn-1").with_store(Arc::new(MemoryStore::new()));
    let (first, again) = turn
        .scope(async { (archive(7).await, archive(7).await) })
        .await;
    assert_eq!((first.expect("executes"), again.expect("replays")), (7, 7));

    let mut calls = Vec::new();
    let mut in_flight = None;
    for (key, _, _, value) in snapshotter.snapshot().into_vec() {
        let key = key.key().clone();
        let label = |name: &str| {
            key.labels()
                .find(|l| l.key() == name)
                .map(|l| l.value().to_owned())
        };
        match (key.name(), value) {
            (CALLS_TOTAL, DebugValue::Counter(n)) => calls.push((label("outcome"), n)),
            (CALLS_IN_FLIGHT, DebugValue::Gauge(v)) => in_flight = Some(v.0),
            _ => {}
        }
        assert_eq!(label("tool").as_deref(), Some("archive"));
    }
    calls.sort();
    assert_eq!(
        calls,
        [
            (Some("executed".to_owned()), 1),
            (Some("replayed".to_owned()), 1)
        ]
    );
    assert_eq!(in_flight, Some(0.0));
}

//! What telemetry costs on the hot path: a replay from the memory store.
//!
//! Run it with and without `--features metrics` (no `metrics` recorder is installed: the
//! facade's no-op one answers), and against a build with every span and event compiled out
//! (`tracing`'s `max_level_off`), to compare:
//!
//! ```text
//! cargo bench -p idem-tools-runtime --bench telemetry
//! cargo bench -p idem-tools-runtime --bench telemetry --features metrics
//! cargo bench -p idem-tools-runtime --bench telemetry --features tracing/max_level_off
//! ```
//!
//! Cases: no `tracing` subscriber at all; a subscriber that filters idem out (the call span is
//! disabled); a subscriber that takes every span (the span is built and closed per call).
//!
//! On a loaded machine wall time is noisy; instruction counts are not. With
//! `IDEM_BENCH_COUNT=<case>:<n>` the binary runs exactly `n` replays of one case (`none`,
//! `disabled`, `enabled`) and exits, for `valgrind --tool=callgrind`: the difference between
//! two values of `n`, divided by their difference, is the instructions per replay.

use idem_tools_runtime::Codec;
use std::hint::black_box;
use std::sync::Arc;
use std::time::Duration;

use criterion::{Criterion, criterion_group};
use idem_tools_runtime::key::ArgsDigest;
use idem_tools_runtime::store::{MemoryStore, Store};
use idem_tools_runtime::{Call, Error, ToolInfo, Turn, execute};
use tracing_subscriber::layer::SubscriberExt;

const SEND: ToolInfo = ToolInfo::idempotent("send_message");

/// A call whose key is already recorded, so that every execution replays it.
fn recorded_call(rt: &tokio::runtime::Runtime) -> Call {
    let store: Arc<dyn Store> = Arc::new(MemoryStore::new());
    let turn = Turn::new("bench-turn")
        .with_store(store)
        .with_max_attempts_per_key(u32::MAX)
        .with_max_calls(u32::MAX)
        .with_actions_per_tool(u32::MAX);
    let mut args = ArgsDigest::new(SEND.name);
    if let Err(error) = args.arg("to", "ada") {
        panic!("the argument encodes: {error}");
    }
    let (key, fp) = args.finish(turn.namespace(), turn.id(), SEND.name, SEND.version);
    let call = Call::new(&SEND, &turn, key, fp);
    let first = rt.block_on(execute(call.clone(), Codec::ok_only(), async {
        Ok::<u64, Error>(7)
    }));
    assert_eq!(first.ok(), Some(7));
    call
}

fn bench_replay(c: &mut Criterion, name: &str, rt: &tokio::runtime::Runtime) {
    let call = recorded_call(rt);
    c.bench_function(name, |b| {
        b.to_async(rt).iter(|| async {
            let replayed = execute(call.clone(), Codec::ok_only(), async {
                Ok::<u64, Error>(0)
            })
            .await;
            black_box(replayed.ok())
        })
    });
}

fn runtime() -> tokio::runtime::Runtime {
    match tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
    {
        Ok(rt) => rt,
        Err(error) => panic!("a Tokio runtime: {error}"),
    }
}

fn replay(c: &mut Criterion) {
    let rt = runtime();
    bench_replay(c, "replay/no_subscriber", &rt);
    {
        let not_idem = tracing_subscriber::filter::filter_fn(|meta| meta.target() != "idem");
        let subscriber = tracing_subscriber::registry().with(not_idem);
        let _guard = tracing::subscriber::set_default(subscriber);
        bench_replay(c, "replay/span_disabled", &rt);
    }
    {
        let _guard = tracing::subscriber::set_default(tracing_subscriber::registry());
        bench_replay(c, "replay/span_enabled", &rt);
    }
}

fn config() -> Criterion {
    Criterion::default()
        .warm_up_time(Duration::from_secs(1))
        .measurement_time(Duration::from_secs(3))
        .sample_size(40)
}

criterion_group! {
    name = benches;
    config = config();
    targets = replay
}
/// `n` replays of `call` under the subscriber of `case`.
fn count(case: &str, n: u64) {
    let rt = runtime();
    let call = recorded_call(&rt);
    let run = || {
        rt.block_on(async {
            for _ in 0..n {
                let replayed = execute(call.clone(), Codec::ok_only(), async {
                    Ok::<u64, Error>(0)
                })
                .await;
                black_box(replayed.ok());
            }
        })
    };
    match case {
        "none" => run(),
        "disabled" => {
            let not_idem = tracing_subscriber::filter::filter_fn(|meta| meta.target() != "idem");
            tracing::subscriber::with_default(tracing_subscriber::registry().with(not_idem), run)
        }
        "enabled" => tracing::subscriber::with_default(tracing_subscriber::registry(), run),
        other => panic!("unknown case {other:?}: none, disabled or enabled"),
    }
}

fn main() {
    if let Ok(spec) = std::env::var("IDEM_BENCH_COUNT") {
        let (case, n) = spec.split_once(':').unwrap_or((spec.as_str(), "0"));
        count(case, n.parse().unwrap_or(0));
        return;
    }
    benches();
    Criterion::default().configure_from_args().final_summary();
}

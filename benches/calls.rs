//! What `#[idempotent]` costs per call, side by side in one run (see BENCHMARKS.md):
//!
//! - `calls/<what>/<size>`: a bare `async fn`, `#[read_only]`, idem's replay, first execution
//!   and 32-way join on the memory store (borrowed arguments, attached), the same replay and
//!   first execution with owned arguments (detached, clone included), the floor, the `cached`
//!   crate's `#[cached]` hit and a naive `Mutex<HashMap<String, String>>` hit; time per call;
//! - `key/<what>/<size>`: idem's key derivation alone vs `serde_json::to_vec`;
//! - `throughput/replay/<n>_thread`: replays of distinct keys by 8 tasks on a multi-thread
//!   runtime with 1 and 2 workers; time per replay.
//!
//! The durable stores have bench targets of their own, `sqlite` and `redis` (required features
//! of the same names).
//!
//! Async calls are timed in a loop inside one `block_on` on a current-thread runtime, so no
//! per-iteration runtime overhead is measured.

mod support;

use std::hint::black_box;
use std::sync::Arc;
use std::time::{Duration, Instant};

use criterion::measurement::WallTime;
use criterion::{BenchmarkGroup, BenchmarkId, Criterion, criterion_group, criterion_main};
use futures_util::future::join_all;
use idem_tools::key::ArgsDigest;
use tokio::runtime::Runtime;

use support::floor::Floor;
use support::{
    Args, Receipt, SIZES, Size, bare, cached_send, current_thread, lookup, memory_store,
    multi_thread, naive_send, ok, send, send_owned, send_yielding, turn,
};

/// Concurrent identical calls in the join benchmark.
const JOIN: u32 = 32;

/// Times `iters` sequential awaits of `call()` inside one `block_on`.
macro_rules! time_loop {
    ($rt:expr, $iters:expr, $call:expr) => {
        $rt.block_on(async {
            let start = Instant::now();
            for _ in 0..$iters {
                black_box($call.await);
            }
            start.elapsed()
        })
    };
}

fn calls(c: &mut Criterion) {
    let rt = current_thread();
    let mut group = c.benchmark_group("calls");
    for size in SIZES {
        let args = Args::new(size, 0);
        baselines(&mut group, &rt, size, &args);
        memory_replay(&mut group, &rt, size, &args);
        memory_first(&mut group, &rt, size);
        memory_join(&mut group, &rt, size);
    }
    group.finish();
}

/// The bare call, `#[read_only]`, the floor, `cached` and the naive map.
fn baselines(group: &mut BenchmarkGroup<'_, WallTime>, rt: &Runtime, size: Size, args: &Args) {
    group.bench_with_input(BenchmarkId::new("bare", size.name), args, |b, args| {
        b.iter_custom(|iters| {
            time_loop!(rt, iters, async { ok("bare", bare(black_box(args)).await) })
        })
    });
    group.bench_with_input(BenchmarkId::new("read_only", size.name), args, |b, args| {
        b.iter_custom(|iters| {
            time_loop!(rt, iters, async {
                ok("read_only", lookup(black_box(args)).await)
            })
        })
    });

    let floor = Floor::<Receipt>::default();
    let recorded = ok("floor", rt.block_on(bare(args)));
    ok("floor", floor.insert(args, recorded));
    group.bench_with_input(BenchmarkId::new("floor", size.name), args, |b, args| {
        b.iter(|| match ok("floor", floor.get(black_box(args))) {
            Some(hit) => hit,
            None => panic!("floor: the recorded value is missing"),
        })
    });

    ok("cached", rt.block_on(cached_send(args)));
    group.bench_with_input(
        BenchmarkId::new("cached_hit", size.name),
        args,
        |b, args| {
            b.iter_custom(|iters| {
                time_loop!(rt, iters, async {
                    ok("cached", cached_send(black_box(args)).await)
                })
            })
        },
    );

    ok("naive", rt.block_on(naive_send(args)));
    group.bench_with_input(BenchmarkId::new("naive_hit", size.name), args, |b, args| {
        b.iter_custom(|iters| {
            time_loop!(rt, iters, async {
                ok("naive", naive_send(black_box(args)).await)
            })
        })
    });
}

/// Replays of one recorded call, borrowed (attached) and owned (detached) arguments.
fn memory_replay(group: &mut BenchmarkGroup<'_, WallTime>, rt: &Runtime, size: Size, args: &Args) {
    let turn = turn("bench/replay", memory_store());
    rt.block_on(turn.clone().scope(async {
        ok("replay setup", send(args).await);
        ok("replay setup", send_owned(args.clone()).await);
    }));
    group.bench_with_input(BenchmarkId::new("replay", size.name), args, |b, args| {
        b.iter_custom(|iters| {
            rt.block_on(turn.clone().scope(async {
                let start = Instant::now();
                for _ in 0..iters {
                    black_box(ok("replay", send(black_box(args)).await));
                }
                start.elapsed()
            }))
        })
    });
    group.bench_with_input(
        BenchmarkId::new("replay_detached", size.name),
        args,
        |b, args| {
            b.iter_custom(|iters| {
                rt.block_on(turn.clone().scope(async {
                    let start = Instant::now();
                    for _ in 0..iters {
                        let call = send_owned(black_box(args).clone());
                        black_box(ok("replay_detached", call.await));
                    }
                    start.elapsed()
                }))
            })
        },
    );
    let stats = turn.stats();
    assert_eq!(
        stats.executed, 2,
        "replay: the bodies ran more than once each: {stats:?}"
    );
}

/// First executions: fresh arguments per call, a fresh store per batch.
fn memory_first(group: &mut BenchmarkGroup<'_, WallTime>, rt: &Runtime, size: Size) {
    group.bench_function(BenchmarkId::new("first", size.name), |b| {
        b.iter_custom(|iters| {
            let turn = turn("bench/first", memory_store());
            let mut args = Args::new(size, 0);
            let elapsed = rt.block_on(turn.clone().scope(async {
                let start = Instant::now();
                for n in 0..iters {
                    args.n = n;
                    black_box(ok("first", send(black_box(&args)).await));
                }
                start.elapsed()
            }));
            assert_eq!(
                turn.stats().executed,
                iters,
                "first: not all calls executed"
            );
            elapsed
        })
    });
    group.bench_function(BenchmarkId::new("first_detached", size.name), |b| {
        b.iter_custom(|iters| {
            let turn = turn("bench/first", memory_store());
            let mut args = Args::new(size, 0);
            let elapsed = rt.block_on(turn.clone().scope(async {
                let start = Instant::now();
                for n in 0..iters {
                    args.n = n;
                    let call = send_owned(black_box(&args).clone());
                    black_box(ok("first_detached", call.await));
                }
                start.elapsed()
            }));
            assert_eq!(
                turn.stats().executed,
                iters,
                "first: not all calls executed"
            );
            elapsed
        })
    });
}

/// 32 concurrent identical calls with a fresh key per iteration; time per call. The body
/// yields once, so the 31 followers find the key in flight and wait for it (without the yield
/// the first call completes in its first poll and the others are plain replays).
/// Prints how the 31 followers were served (joined the running call or replayed its record).
fn memory_join(group: &mut BenchmarkGroup<'_, WallTime>, rt: &Runtime, size: Size) {
    let (mut joined, mut replayed) = (0, 0);
    group.bench_function(BenchmarkId::new("join32", size.name), |b| {
        b.iter_custom(|iters| {
            let turn = turn("bench/join", memory_store());
            let mut args = Args::new(size, 0);
            let elapsed = rt.block_on(turn.clone().scope(async {
                let start = Instant::now();
                for n in 0..iters {
                    args.n = n;
                    let calls = (0..JOIN).map(|_| send_yielding(black_box(&args)));
                    for result in join_all(calls).await {
                        black_box(ok("join32", result));
                    }
                }
                start.elapsed()
            }));
            let stats = turn.stats();
            assert_eq!(stats.executed, iters, "join32: a body ran twice");
            joined += stats.joined;
            replayed += stats.replayed;
            elapsed / JOIN
        })
    });
    if joined + replayed > 0 {
        println!(
            "join32/{}: followers joined {joined}, replayed {replayed}",
            size.name
        );
    }
}

fn keys(c: &mut Criterion) {
    let mut group = c.benchmark_group("key");
    for size in SIZES {
        let args = Args::new(size, 0);
        group.bench_with_input(
            BenchmarkId::new("args_digest", size.name),
            &args,
            |b, args| {
                b.iter(|| {
                    let mut digest = ArgsDigest::new("send");
                    ok("args_digest", digest.arg("args", black_box(args)));
                    digest.finish("", "bench/key", "send", 1)
                })
            },
        );
        group.bench_with_input(
            BenchmarkId::new("serde_json", size.name),
            &args,
            |b, args| b.iter(|| ok("serde_json", serde_json::to_vec(black_box(args)))),
        );
    }
    group.finish();
}

/// Tasks and distinct keys per task in the throughput benchmark.
const TASKS: u64 = 8;
const KEYS_PER_TASK: u64 = 256;

fn throughput(c: &mut Criterion) {
    let mut group = c.benchmark_group("throughput");
    for (workers, name) in [(1, "1_thread"), (2, "2_threads")] {
        let rt = multi_thread(workers);
        let turn = turn("bench/throughput", memory_store());
        let keys: Vec<Arc<Vec<Args>>> = (0..TASKS)
            .map(|task| {
                let first = task * KEYS_PER_TASK;
                Arc::new(
                    (first..first + KEYS_PER_TASK)
                        .map(|n| Args::new(SIZES[0], n))
                        .collect(),
                )
            })
            .collect();
        rt.block_on(turn.clone().scope(async {
            for args in keys.iter().flat_map(|task| task.iter()) {
                ok("throughput setup", send(args).await);
            }
        }));
        group.bench_function(BenchmarkId::new("replay", name), |b| {
            b.iter_custom(|iters| {
                rt.block_on(async {
                    let start = Instant::now();
                    for _ in 0..iters {
                        let tasks: Vec<_> = keys
                            .iter()
                            .map(|task| {
                                let task = Arc::clone(task);
                                tokio::spawn(turn.clone().scope(async move {
                                    for args in task.iter() {
                                        black_box(ok("throughput", send(args).await));
                                    }
                                }))
                            })
                            .collect();
                        for task in tasks {
                            ok("throughput task", task.await);
                        }
                    }
                    start.elapsed() / (TASKS * KEYS_PER_TASK) as u32
                })
            })
        });
        assert_eq!(
            turn.stats().executed,
            TASKS * KEYS_PER_TASK,
            "throughput: a replay executed"
        );
    }
    group.finish();
}

criterion_group! {
    name = benches;
    config = Criterion::default()
        .warm_up_time(Duration::from_secs(1))
        .measurement_time(Duration::from_secs(3));
    targets = calls, keys, throughput
}
criterion_main!(benches);

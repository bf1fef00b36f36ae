//! The runs: latency (calls timed one by one, idem's and the floor's in alternate rounds, so
//! that a machine getting busier or quieter meanwhile weighs on both alike) and throughput
//! (tasks calling as fast as they can for a fixed time, idem and the floor in alternate slots
//! of a schedule every process of the run follows).

use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

use serde::Serialize;

use super::target::Target;

/// Rounds each latency measurement is split into, idem and floor alternately.
const ROUNDS: usize = 4;

/// Keys recorded before the throughput runs, for their replays.
pub const REPLAY_KEYS: u64 = 256;

/// Between two slots of the throughput schedule: calls still running at a slot's end finish.
const GAP: Duration = Duration::from_millis(500);

/// Who answers a call.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Side {
    /// idem, through the engine and the store.
    Idem,
    /// The hand-written floor.
    Floor,
}

/// What a call does.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Kind {
    /// A recorded call again.
    Replay,
    /// A call with fresh arguments.
    First,
}

/// The throughput schedule: first executions (floor and idem alternately, four times each, so
/// that a machine getting busier or quieter weighs on both alike), then replays (twice each).
pub const SCHEDULE: [(Kind, Side); 12] = [
    (Kind::First, Side::Floor),
    (Kind::First, Side::Idem),
    (Kind::First, Side::Floor),
    (Kind::First, Side::Idem),
    (Kind::First, Side::Floor),
    (Kind::First, Side::Idem),
    (Kind::First, Side::Floor),
    (Kind::First, Side::Idem),
    (Kind::Replay, Side::Floor),
    (Kind::Replay, Side::Idem),
    (Kind::Replay, Side::Floor),
    (Kind::Replay, Side::Idem),
];

/// One call of `kind` on `side`, with the arguments numbered `n` for a replay (recorded
/// before), fresh ones for a first execution.
pub async fn call(target: &Target, side: Side, kind: Kind, n: u64) -> Result<(), String> {
    let args = match kind {
        Kind::Replay => target.args(n),
        Kind::First => target.fresh(),
    };
    match side {
        Side::Idem => target.idem(&args).await,
        Side::Floor => match kind {
            Kind::Replay => target.floor_replay(&args).await,
            Kind::First => target.floor_first(&args).await,
        },
    }
}

/// Records `count` fresh calls on `side`; returns their numbers, to replay.
pub async fn record(target: &Target, side: Side, count: u64) -> Result<Vec<u64>, String> {
    let mut recorded = Vec::new();
    for _ in 0..count {
        let args = target.fresh();
        match side {
            Side::Idem => target.idem(&args).await?,
            Side::Floor => target.floor_first(&args).await?,
        }
        recorded.push(args.n);
    }
    Ok(recorded)
}

/// Calls timed one by one: percentiles of their durations.
#[derive(Debug, Clone, Serialize)]
pub struct Percentiles {
    pub p50: u64,
    pub p90: u64,
    pub p99: u64,
    pub max: u64,
}

impl Percentiles {
    fn of(mut samples: Vec<Duration>) -> Percentiles {
        samples.sort_unstable();
        let at = |q: f64| {
            let i = ((samples.len().saturating_sub(1)) as f64 * q).round() as usize;
            samples
                .get(i)
                .map_or(0, |d| u64::try_from(d.as_nanos()).unwrap_or(u64::MAX))
        };
        Percentiles {
            p50: at(0.50),
            p90: at(0.90),
            p99: at(0.99),
            max: at(1.0),
        }
    }
}

/// Latencies of idem and the floor, for one kind of call.
#[derive(Debug, Clone, Serialize)]
pub struct Pair<T> {
    pub idem: T,
    pub floor: T,
}

/// The latency measurement: `calls` first executions and as many replays, on each side.
pub async fn latency(
    target: &Target,
    calls: usize,
) -> Result<(Pair<Percentiles>, Pair<Percentiles>), String> {
    let per_round = (calls / ROUNDS).max(1);
    let mut first = Pair {
        idem: Vec::new(),
        floor: Vec::new(),
    };
    let mut recorded = Pair {
        idem: Vec::new(),
        floor: Vec::new(),
    };
    for _ in 0..ROUNDS {
        for side in [Side::Floor, Side::Idem] {
            for _ in 0..per_round {
                let args = target.fresh();
                let started = Instant::now();
                match side {
                    Side::Idem => target.idem(&args).await?,
                    Side::Floor => target.floor_first(&args).await?,
                }
                let elapsed = started.elapsed();
                let (samples, numbers) = match side {
                    Side::Idem => (&mut first.idem, &mut recorded.idem),
                    Side::Floor => (&mut first.floor, &mut recorded.floor),
                };
                samples.push(elapsed);
                numbers.push(args.n);
            }
        }
    }
    let mut replay = Pair {
        idem: Vec::new(),
        floor: Vec::new(),
    };
    for round in 0..ROUNDS {
        for side in [Side::Floor, Side::Idem] {
            let (samples, numbers) = match side {
                Side::Idem => (&mut replay.idem, &recorded.idem),
                Side::Floor => (&mut replay.floor, &recorded.floor),
            };
            for &n in &numbers[round * per_round..(round + 1) * per_round] {
                let args = target.args(n);
                let started = Instant::now();
                match side {
                    Side::Idem => target.idem(&args).await?,
                    Side::Floor => target.floor_replay(&args).await?,
                }
                samples.push(started.elapsed());
            }
        }
    }
    let pair = |p: Pair<Vec<Duration>>| Pair {
        idem: Percentiles::of(p.idem),
        floor: Percentiles::of(p.floor),
    };
    Ok((pair(replay), pair(first)))
}

/// Milliseconds since the Unix epoch: the clock the processes of a run share.
pub fn wall_ms() -> u64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map_or(0, |d| u64::try_from(d.as_millis()).unwrap_or(u64::MAX))
}

/// Runs the throughput [`SCHEDULE`] from `start_ms` (wall clock): in each slot, `concurrency`
/// tasks call as fast as they can for `seconds`. Replays cycle through `recorded` (numbers of
/// calls recorded on each side). Returns how many calls each slot completed in time.
pub async fn throughput(
    target: &Arc<Target>,
    concurrency: usize,
    seconds: f64,
    start_ms: u64,
    recorded: &Pair<Arc<Vec<u64>>>,
) -> Result<Vec<u64>, String> {
    let length = Duration::from_secs_f64(seconds);
    let mut counts = Vec::new();
    for (i, &(kind, side)) in SCHEDULE.iter().enumerate() {
        let slot = u32::try_from(i).unwrap_or(u32::MAX);
        let begin_ms = start_ms + u64::try_from(((length + GAP) * slot).as_millis()).unwrap_or(0);
        let wait = Duration::from_millis(begin_ms.saturating_sub(wall_ms()));
        tokio::time::sleep(wait).await;
        let end = Instant::now() + length;
        let numbers = match side {
            Side::Idem => Arc::clone(&recorded.idem),
            Side::Floor => Arc::clone(&recorded.floor),
        };
        let done = Arc::new(AtomicU64::new(0));
        let tasks: Vec<_> = (0..concurrency.max(1))
            .map(|task| {
                let (target, numbers, done) =
                    (Arc::clone(target), Arc::clone(&numbers), Arc::clone(&done));
                tokio::spawn(async move {
                    let mut next = task;
                    while Instant::now() < end {
                        let n = numbers
                            .get(next % numbers.len().max(1))
                            .copied()
                            .unwrap_or(0);
                        next += concurrency;
                        call(&target, side, kind, n).await?;
                        if Instant::now() <= end {
                            done.fetch_add(1, Ordering::Relaxed);
                        }
                    }
                    Ok::<_, String>(())
                })
            })
            .collect();
        for task in tasks {
            task.await.map_err(|e| e.to_string())??;
        }
        counts.push(done.load(Ordering::Relaxed));
    }
    Ok(counts)
}

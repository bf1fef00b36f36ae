//! `idem bench`: what idem costs per call on your own store, next to the least the same store
//! can do (the floor: hand-written calls with the same driver and settings, see `floor.rs`).
//!
//! It prints replay and first-execution latency (calls timed one by one), and the throughput of
//! first executions and of replays with `--concurrency` tasks in each of `--processes`
//! processes, for idem and the floor side by side. idem's records go to a namespace of their own
//! (`idem-bench`, or `--namespace`) and are removed at the end, as is the floor's table (SQLite,
//! PostgreSQL) or keys (Redis). Unlike the other commands, it creates the SQLite file if there
//! is none, and idem's PostgreSQL tables (in `--schema`, if given) if they are missing.
//!
//! `--exact KIND:N` makes exactly N calls of one kind and nothing else (not even the clean-up),
//! for instruction counts: run it under `valgrind --tool=callgrind` with two values of N on a
//! scratch store and divide the difference.

mod floor;
mod render;
mod run;
mod stats;
mod target;

use std::process::{Command, ExitCode, Stdio};
use std::sync::Arc;

use serde::Serialize;

use self::run::{Kind, Pair, Percentiles, REPLAY_KEYS, SCHEDULE, Side};
use self::target::Target;
use crate::args::Cli;
use crate::error::CliError;

/// The options of `idem bench`.
#[derive(Debug, Clone, clap::Args)]
pub struct Options {
    /// Concurrent tasks in each process during the throughput runs.
    #[arg(long, value_name = "N", default_value_t = 64)]
    pub concurrency: usize,
    /// Processes running the throughput runs at once on the store (this one and N - 1 more it
    /// starts).
    #[arg(long, value_name = "N", default_value_t = 1)]
    pub processes: usize,
    /// Calls timed one by one, for each latency measurement.
    #[arg(long, value_name = "N", default_value_t = 2000)]
    pub calls: usize,
    /// Seconds of each throughput run (idem and the floor alternately: first executions four
    /// times each, replays twice).
    #[arg(long, value_name = "SECONDS", default_value_t = 1.5)]
    pub seconds: f64,
    /// Make exactly N calls of KIND (replay, first, floor-replay, floor-first) and nothing
    /// else, for instruction counts (`valgrind --tool=callgrind`, two values of N); what it
    /// records is left in place, so point it at a scratch store.
    #[arg(long, value_name = "KIND:N")]
    pub exact: Option<String>,
    /// A worker process of `--processes` (started by idem itself): follow the throughput
    /// schedule from this instant (ms since the Unix epoch) and print the counts.
    #[arg(long, value_name = "START_MS", hide = true)]
    pub worker: Option<u64>,
}

/// Runs `idem bench` on a runtime of its own (with a thread per core, as a server has).
pub fn main(cli: &Cli, options: &Options) -> ExitCode {
    let runtime = match tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()
    {
        Ok(runtime) => runtime,
        Err(error) => {
            eprintln!("idem: could not start the async runtime: {error}");
            return ExitCode::from(2);
        }
    };
    match runtime.block_on(bench(cli, options)) {
        Ok(text) => {
            print!("{text}");
            ExitCode::SUCCESS
        }
        Err(error) => {
            eprintln!("idem: {error}");
            error.exit_code()
        }
    }
}

/// What a run measured.
#[derive(Debug, Serialize)]
struct Report {
    store: String,
    floor: &'static str,
    concurrency: usize,
    processes: usize,
    latency_ns: Latency,
    throughput_per_s: Throughput,
    /// Redis only: the server's commands per call.
    #[serde(skip_serializing_if = "Option::is_none")]
    commands_per_call: Option<Commands>,
}

#[derive(Debug, Serialize)]
struct Latency {
    replay: Pair<Percentiles>,
    first: Pair<Percentiles>,
}

#[derive(Debug, Serialize)]
struct Throughput {
    replay: Pair<f64>,
    first: Pair<f64>,
}

#[derive(Debug, Serialize)]
struct Commands {
    replay: Pair<Vec<(String, f64)>>,
    first: Pair<Vec<(String, f64)>>,
}

async fn bench(cli: &Cli, options: &Options) -> Result<String, CliError> {
    let failed = |e: String| CliError::connection(format!("the benchmark failed: {e}"));
    let target = Arc::new(Target::open(cli, &target::run_id()).await?);
    if let Some(exact) = &options.exact {
        // Nothing else, not even removing what it recorded: point it at a scratch store.
        return exact_calls(&target, exact).await.map(|()| String::new());
    }
    let recorded = Pair {
        idem: Arc::new(
            run::record(&target, Side::Idem, REPLAY_KEYS)
                .await
                .map_err(failed)?,
        ),
        floor: Arc::new(
            run::record(&target, Side::Floor, REPLAY_KEYS)
                .await
                .map_err(failed)?,
        ),
    };
    if let Some(start_ms) = options.worker {
        let counts = run::throughput(
            &target,
            options.concurrency,
            options.seconds,
            start_ms,
            &recorded,
        )
        .await;
        target.clean(options.concurrency).await.map_err(failed)?;
        let counts = counts.map_err(failed)?;
        return Ok(serde_json::json!({ "counts": counts }).to_string() + "\n");
    }
    let measured = measure(options, &target, &recorded).await;
    target.clean(options.concurrency).await.map_err(failed)?;
    let report = measured?;
    Ok(if cli.json {
        super::json_text(&serde_json::to_value(&report).unwrap_or_default())
    } else {
        render::table(&report)
    })
}

/// Latency, then the commands per call (Redis), then throughput in every process at once.
async fn measure(
    options: &Options,
    target: &Arc<Target>,
    recorded: &Pair<Arc<Vec<u64>>>,
) -> Result<Report, CliError> {
    let failed = |e: String| CliError::connection(format!("the benchmark failed: {e}"));
    let (replay, first) = run::latency(target, options.calls).await.map_err(failed)?;
    let commands = commands(target, recorded).await.map_err(failed)?;
    let start_ms = run::wall_ms() + u64::try_from(target::STARTUP.as_millis()).unwrap_or(0);
    let workers = start_workers(options, start_ms)?;
    let counts = run::throughput(
        target,
        options.concurrency,
        options.seconds,
        start_ms,
        recorded,
    )
    .await
    .map_err(failed)?;
    let mut total = counts;
    for worker in workers {
        let output = worker
            .wait_with_output()
            .map_err(|e| failed(format!("a worker process: {e}")))?;
        let counts = serde_json::from_slice::<serde_json::Value>(&output.stdout)
            .ok()
            .and_then(|v| serde_json::from_value::<Vec<u64>>(v["counts"].clone()).ok())
            .ok_or_else(|| {
                failed(format!(
                    "a worker process failed: {}",
                    String::from_utf8_lossy(&output.stderr).trim()
                ))
            })?;
        for (sum, n) in total.iter_mut().zip(counts) {
            *sum += n;
        }
    }
    let rate = |kind: Kind, side: Side| {
        let slots = SCHEDULE.iter().filter(|&&(k, s)| k == kind && s == side);
        let calls: u64 = SCHEDULE
            .iter()
            .zip(&total)
            .filter(|((k, s), _)| *k == kind && *s == side)
            .map(|(_, n)| n)
            .sum();
        calls as f64 / (slots.count() as f64 * options.seconds)
    };
    Ok(Report {
        store: target.label.clone(),
        floor: target.floor_label,
        concurrency: options.concurrency,
        processes: options.processes.max(1),
        latency_ns: Latency { replay, first },
        throughput_per_s: Throughput {
            replay: Pair {
                idem: rate(Kind::Replay, Side::Idem),
                floor: rate(Kind::Replay, Side::Floor),
            },
            first: Pair {
                idem: rate(Kind::First, Side::Idem),
                floor: rate(Kind::First, Side::Floor),
            },
        },
        commands_per_call: commands,
    })
}

/// Starts `--processes` - 1 workers: this program again, with the same arguments and the
/// schedule's start.
fn start_workers(options: &Options, start_ms: u64) -> Result<Vec<std::process::Child>, CliError> {
    let exe = std::env::current_exe()
        .map_err(|e| CliError::connection(format!("cannot start worker processes: {e}")))?;
    let args: Vec<String> = std::env::args().skip(1).collect();
    (1..options.processes.max(1))
        .map(|_| {
            Command::new(&exe)
                .args(&args)
                .arg(format!("--worker={start_ms}"))
                .stdout(Stdio::piped())
                .stderr(Stdio::piped())
                .spawn()
                .map_err(|e| CliError::connection(format!("cannot start a worker process: {e}")))
        })
        .collect()
}

/// The server's commands per call of each kind and side (Redis, when `INFO` is allowed).
async fn commands(
    target: &Target,
    recorded: &Pair<Arc<Vec<u64>>>,
) -> Result<Option<Commands>, String> {
    const CALLS: u64 = 100;
    let Some(stats) = &target.commands else {
        return Ok(None);
    };
    let mut per_call = Vec::new();
    for (kind, side) in [
        (Kind::Replay, Side::Idem),
        (Kind::Replay, Side::Floor),
        (Kind::First, Side::Idem),
        (Kind::First, Side::Floor),
    ] {
        let numbers = match side {
            Side::Idem => &recorded.idem,
            Side::Floor => &recorded.floor,
        };
        let Some(before) = stats.counts().await else {
            return Ok(None);
        };
        for i in 0..CALLS {
            let n = numbers.get(i as usize % numbers.len().max(1)).copied();
            run::call(target, side, kind, n.unwrap_or(0)).await?;
        }
        let Some(after) = stats.counts().await else {
            return Ok(None);
        };
        per_call.push(stats::per_call(&before, &after, CALLS));
    }
    let mut per_call = per_call.into_iter();
    let mut next = || per_call.next().unwrap_or_default();
    Ok(Some(Commands {
        replay: Pair {
            idem: next(),
            floor: next(),
        },
        first: Pair {
            idem: next(),
            floor: next(),
        },
    }))
}

/// `--exact KIND:N`: N calls of one kind (after recording what a replay needs).
async fn exact_calls(target: &Target, exact: &str) -> Result<(), CliError> {
    let usage = || {
        CliError::usage(format!(
            "--exact {exact}: want KIND:N, KIND one of replay, first, floor-replay, floor-first"
        ))
    };
    let (kind, n) = exact.split_once(':').ok_or_else(usage)?;
    let n: u64 = n.parse().map_err(|_| usage())?;
    let (kind, side) = match kind {
        "replay" => (Kind::Replay, Side::Idem),
        "first" => (Kind::First, Side::Idem),
        "floor-replay" => (Kind::Replay, Side::Floor),
        "floor-first" => (Kind::First, Side::Floor),
        _ => return Err(usage()),
    };
    let failed = |e: String| CliError::connection(format!("the benchmark failed: {e}"));
    // Only a replay needs something recorded before it.
    let recorded = match kind {
        Kind::Replay => run::record(target, side, REPLAY_KEYS)
            .await
            .map_err(failed)?,
        Kind::First => Vec::new(),
    };
    for i in 0..n {
        let number = recorded
            .get(usize::try_from(i).unwrap_or(0) % recorded.len().max(1))
            .copied();
        run::call(target, side, kind, number.unwrap_or(0))
            .await
            .map_err(failed)?;
    }
    Ok(())
}

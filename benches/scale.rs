//! Memory per live record and replay latency at 10k, 100k and 1M keys on the memory store, for
//! three recorded results: the benchmark's `Receipt` (19 bytes as recorded), 26 and 64 bytes.
//!
//! Each size runs in a child process of its own (this binary re-run with
//! `--scale-child=N:RESULT`), so that memory freed by a smaller size cannot hide the next one's
//! growth. The child records N calls, reads the RSS delta from `/proc/self/statm`, times replays
//! of a sample of the keys one by one, then moves the store's clock past the 30 s lease of the
//! claims and times replays again (a lazy clean-up that does all its work at once would show as
//! a pause there). It prints one line per size:
//!
//! `scale n=… result=… result_bytes=… bytes_per_record=… replay_p50_ns=… replay_p99_ns=… replay_max_ns=…
//! replay_over_1ms=… after_lease_p50_ns=… after_lease_p99_ns=… after_lease_max_ns=…
//! after_lease_over_1ms=…` (`over_1ms`: how many sampled replays took more than 1 ms).
//!
//! `IDEM_SCALE_SIZES=10000,100000` runs other sizes; `IDEM_SCALE_RESULTS=receipt,64,200` other
//! results (`receipt`, or a size in bytes reached by padding a note).

mod support;

use std::hint::black_box;
use std::process::Command;
use std::sync::Arc;
use std::time::{Duration, Instant};

use idem_tools::MemoryStore;
use idem_tools::clock::ManualClock;

use idem_tools::Store;
use support::{Args, LEASE, PAD, SIZES, current_thread, ok, send, send_padded, turn};

const DEFAULT_SIZES: [u64; 3] = [10_000, 100_000, 1_000_000];
const DEFAULT_RESULTS: &str = "receipt,26,64";
/// Replays timed one by one at each size, before and after the lease.
const SAMPLE: u64 = 10_000;
const CHILD_FLAG: &str = "--scale-child=";

fn main() {
    // `cargo bench` passes `--bench` and perhaps a filter: only our own flag matters.
    let child = std::env::args().find_map(|a| a.strip_prefix(CHILD_FLAG).map(str::to_owned));
    match child {
        Some(arg) => {
            let (n, result) = arg
                .split_once(':')
                .unwrap_or_else(|| panic!("{CHILD_FLAG}{arg}: want N:RESULT"));
            measure(ok("--scale-child", n.parse::<u64>()), result)
        }
        None => parent(),
    }
}

fn parent() {
    let sizes: Vec<u64> = match std::env::var("IDEM_SCALE_SIZES") {
        Ok(list) => list
            .split(',')
            .map(|n| ok("IDEM_SCALE_SIZES", n.trim().parse::<u64>()))
            .collect(),
        Err(_) => DEFAULT_SIZES.to_vec(),
    };
    let results =
        std::env::var("IDEM_SCALE_RESULTS").unwrap_or_else(|_| DEFAULT_RESULTS.to_owned());
    let exe = ok("current_exe", std::env::current_exe());
    for result in results.split(',').map(str::trim) {
        for &n in &sizes {
            let status = ok(
                "scale child",
                Command::new(&exe)
                    .arg(format!("{CHILD_FLAG}{n}:{result}"))
                    .status(),
            );
            assert!(
                status.success(),
                "scale child for n={n}, result {result} failed: {status}"
            );
        }
    }
}

/// Which tool records, and how long its result is as recorded: `receipt` is [`send`]'s
/// `Receipt`; a number pads [`send_padded`]'s note to reach that many bytes.
#[derive(Clone, Copy)]
enum Recorded {
    Receipt,
    Padded,
}

impl Recorded {
    /// Calls the tool; returns the recorded result's id.
    async fn call(self, args: &Args) -> u64 {
        match self {
            Recorded::Receipt => ok("record", send(args).await).id,
            Recorded::Padded => ok("record", send_padded(args).await).id,
        }
    }
}

/// The length of the result recorded for `args` by `tool`, in a store of its own.
fn recorded_len(rt: &tokio::runtime::Runtime, tool: Recorded, args: &Args) -> usize {
    let store = Arc::new(MemoryStore::new());
    let turn = turn("bench/scale/probe", store.clone());
    rt.block_on(turn.clone().scope(tool.call(args)));
    let records = ok("list", rt.block_on(store.list(None, 1)));
    match records.first().and_then(|r| r.result.as_ref()) {
        Some(result) => result.len(),
        None => panic!("scale: the probe recorded nothing"),
    }
}

/// Resident set size in bytes, from `/proc/self/statm` (pages) and the page size.
fn rss_bytes() -> u64 {
    let statm = ok(
        "/proc/self/statm",
        std::fs::read_to_string("/proc/self/statm"),
    );
    let pages = statm
        .split_whitespace()
        .nth(1)
        .map(|p| ok("statm resident", p.parse::<u64>()))
        .unwrap_or_else(|| panic!("/proc/self/statm has no resident field: {statm}"));
    pages * page_size()
}

fn page_size() -> u64 {
    Command::new("getconf")
        .arg("PAGESIZE")
        .output()
        .ok()
        .and_then(|out| String::from_utf8(out.stdout).ok())
        .and_then(|s| s.trim().parse().ok())
        .unwrap_or(4096)
}

/// p50, p99, max (in nanoseconds) and how many of `samples` took over 1 ms.
fn percentiles(mut samples: Vec<Duration>) -> [u128; 4] {
    samples.sort_unstable();
    let at = |q: f64| {
        let i = ((samples.len() as f64 - 1.0) * q).round() as usize;
        samples[i].as_nanos()
    };
    let pauses = samples
        .iter()
        .filter(|d| **d > Duration::from_millis(1))
        .count();
    [at(0.50), at(0.99), at(1.0), pauses as u128]
}

fn measure(n: u64, result: &str) {
    let rt = current_thread();
    // A typical argument: the result's id has as many digits as most of the keys'.
    let typical = Args::new(SIZES[0], n / 2);
    let tool = match result {
        "receipt" => Recorded::Receipt,
        bytes => {
            let want = ok("IDEM_SCALE_RESULTS", bytes.parse::<usize>());
            let base = recorded_len(&rt, Recorded::Padded, &typical);
            PAD.store(
                want.saturating_sub(base),
                std::sync::atomic::Ordering::Relaxed,
            );
            Recorded::Padded
        }
    };
    let result_bytes = recorded_len(&rt, tool, &typical);

    let clock = ManualClock::new(1_700_000_000_000);
    let store = Arc::new(MemoryStore::with_clock(Arc::new(clock.clone())));
    let turn = turn("bench/scale", store.clone());
    let stride = (n / SAMPLE).max(1);

    let before = rss_bytes();
    let mut args = Args::new(SIZES[0], 0);
    rt.block_on(turn.clone().scope(async {
        for i in 0..n {
            args.n = i;
            black_box(tool.call(&args).await);
        }
    }));
    let after = rss_bytes();
    assert_eq!(turn.stats().executed, n, "scale: not every call recorded");
    assert!(store.len() as u64 >= n, "scale: the store lost records");
    let per_record = after.saturating_sub(before) / n;

    let mut time_replays = |offset: u64| {
        rt.block_on(turn.clone().scope(async {
            let mut samples = Vec::with_capacity(SAMPLE as usize);
            for i in (0..n).step_by(stride as usize).take(SAMPLE as usize) {
                args.n = (i + offset) % n;
                let start = Instant::now();
                black_box(tool.call(black_box(&args)).await);
                samples.push(start.elapsed());
            }
            percentiles(samples)
        }))
    };
    let replay = time_replays(0);
    clock.advance(LEASE + Duration::from_secs(1));
    let after_lease = time_replays(stride / 2);
    assert_eq!(turn.stats().executed, n, "scale: a replay executed");

    println!(
        "scale n={n} result={result} result_bytes={result_bytes} bytes_per_record={per_record} \
         replay_p50_ns={} replay_p99_ns={} replay_max_ns={} replay_over_1ms={} \
         after_lease_p50_ns={} after_lease_p99_ns={} after_lease_max_ns={} \
         after_lease_over_1ms={}",
        replay[0],
        replay[1],
        replay[2],
        replay[3],
        after_lease[0],
        after_lease[1],
        after_lease[2],
        after_lease[3]
    );
}

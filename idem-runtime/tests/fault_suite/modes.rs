//! Running a mode: many generated schedules, a summary line, a minimized report of any failing
//! seed; and the environment variables that size it.

use crate::ledger::Counts;
use crate::minimize::minimize;
use crate::run::Verdict;
use crate::schedule::{Schedule, Shape};

/// The schedules the suite generates: every fault pattern, including those of the defects it
/// found (`regressions.rs`, all fixed since).
pub const SHAPE: Shape = Shape {
    unbounded_hangs: false,
    known_defects: true,
    realtime: false,
};

/// [`SHAPE`].
pub fn shape() -> Shape {
    SHAPE
}

/// [`shape`] for a mode that runs in real time.
pub fn realtime_shape() -> Shape {
    Shape {
        realtime: true,
        ..shape()
    }
}

fn env_u64(name: &str) -> Option<u64> {
    std::env::var(name).ok().and_then(|v| v.trim().parse().ok())
}

/// How many schedules a mode runs: `IDEM_FAULT_SCHEDULES`, else `long` under
/// `IDEM_FAULT_LONG=1`, else `default`.
pub fn budget(default: u64, long: u64) -> u64 {
    env_u64("IDEM_FAULT_SCHEDULES").unwrap_or_else(|| {
        if std::env::var_os("IDEM_FAULT_LONG").is_some_and(|v| v == "1") {
            long
        } else {
            default
        }
    })
}

/// Seeds of a mode: the one of `IDEM_FAULT_SEED`, or `count` seeds from `base`.
pub fn seeds(base: u64, count: u64) -> Vec<u64> {
    match env_u64("IDEM_FAULT_SEED") {
        Some(seed) => vec![seed],
        None => (0..count).map(|i| base.wrapping_add(i)).collect(),
    }
}

/// Runs every seed, prints the summary line and each failing seed (minimized, with the command
/// that reproduces it: `test` is what follows `cargo test -p idem-tools-runtime --test`); returns the
/// totals and the failing seeds.
pub fn mode(
    name: &str,
    test: &str,
    seeds: &[u64],
    shape: Shape,
    check: impl Fn(&Schedule) -> Verdict,
) -> (Counts, Vec<u64>) {
    let mut totals = Counts::default();
    let mut failing = Vec::new();
    let single = seeds.len() == 1;
    for &seed in seeds {
        let schedule = Schedule::generate(seed, shape);
        if single {
            eprintln!("schedule {seed}: {schedule:#?}");
        }
        let verdict = check(&schedule);
        totals.add(&verdict.counts);
        if single {
            eprintln!("verdict: {verdict:#?}");
        }
        if verdict.failed() {
            failing.push(seed);
            if failing.len() <= 3 {
                let (small, why) = minimize(seed, shape, verdict, &check);
                eprintln!(
                    "fault-suite {name}: seed {seed} FAILS (reproduce: IDEM_FAULT_SEED={seed} \
                     cargo test -p idem-tools-runtime --test {test} -- --nocapture --include-ignored)\n\
                     minimized schedule: {small:#?}\nviolations: {:#?}",
                    why.problems,
                );
            }
        }
    }
    eprintln!("{}", totals.summary(name));
    if !failing.is_empty() {
        eprintln!("fault-suite {name}: failing seeds: {failing:?}");
    }
    (totals, failing)
}

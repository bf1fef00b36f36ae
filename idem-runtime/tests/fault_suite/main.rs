//! The seeded fault-schedule suite: thousands of generated schedules of concurrent, cancelled,
//! failing and panicking tool calls against a store that delays, fails and loses replies, each
//! checked against the engine's guarantees (see `docs/guarantees.md`).
//!
//! - `IDEM_FAULT_SEED=<n>` runs one schedule alone, prints it and its verdict, and minimizes it
//!   if it fails.
//! - `IDEM_FAULT_SCHEDULES=<n>` sets how many schedules each mode runs; `IDEM_FAULT_LONG=1`
//!   runs two million in the paused mode, a million with two processes, 20,000 in real time.
//! - `IDEM_FAULT_FULL=1` also plans the patterns of the known defects (`regressions.rs`).
//! - `IDEM_FAULT_SOAK=1` runs the long soak.
//!
//! Each mode prints one summary line (`fault-suite <mode>: schedules=… duplicates=0 …`).

#[path = "../fault_store/mod.rs"]
mod fault_store;

mod calls;
mod clock_step;
mod enumerate;
mod ledger;
mod minimize;
mod modes;
mod regressions;
mod run;
mod schedule;
mod soak;
mod stores;
mod suite;

use std::sync::{Mutex, MutexGuard};

/// The single-flight registry is process-wide: tests that count its entries run one at a time.
static SERIAL: Mutex<()> = Mutex::new(());

/// Holds the suite's lock for the duration of a test.
pub fn serial() -> MutexGuard<'static, ()> {
    SERIAL
        .lock()
        .unwrap_or_else(std::sync::PoisonError::into_inner)
}

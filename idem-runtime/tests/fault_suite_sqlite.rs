//! The fault-schedule suite against SQLite: each schedule opens two `SqliteStore` handles on one
//! fresh WAL file (two processes on one host) and runs in real time on two worker threads.
//! Needs `--features sqlite`; `IDEM_FAULT_SCHEDULES` and `IDEM_FAULT_SEED` work as in
//! `fault_suite`.
#![allow(dead_code)] // the shared harness modules carry helpers only the memory suite uses

#[path = "fault_store/mod.rs"]
mod fault_store;

#[path = "fault_suite/calls.rs"]
mod calls;
#[path = "fault_suite/ledger.rs"]
mod ledger;
#[path = "fault_suite/minimize.rs"]
mod minimize;
#[path = "fault_suite/modes.rs"]
mod modes;
#[path = "fault_suite/run.rs"]
mod run;
#[path = "fault_suite/schedule.rs"]
mod schedule;
#[path = "fault_suite/stores.rs"]
mod stores;

use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};

use idem_test_support::TempDir;
use idem_tools_runtime::store::{SqliteStore, Store};

use modes::{budget, mode, realtime_shape, seeds};
use run::{Backend, Opener};

#[test]
fn sqlite_realtime() {
    let dir = TempDir::new("fault-suite");
    let root = dir.0.clone();
    let files = Arc::new(AtomicU64::new(0));
    let open: Opener = Arc::new(move |clock| {
        let path = root.join(format!("s{}.db", files.fetch_add(1, Ordering::SeqCst)));
        Box::pin(async move {
            let handle = || {
                SqliteStore::open(&path)
                    .map(|store| Arc::new(store.with_clock(Arc::clone(&clock))) as Arc<dyn Store>)
                    .map_err(|e| e.to_string())
            };
            Ok(vec![handle()?, handle()?])
        })
    });
    let seeds = seeds(1 << 41, budget(40, 5_000));
    let (totals, failing) = mode(
        "sqlite-realtime",
        "fault_suite_sqlite sqlite_realtime --features sqlite",
        &seeds,
        realtime_shape(),
        |s| run::realtime(s, Backend::Handles(Arc::clone(&open))),
    );
    assert!(totals.executions > 0, "the schedules ran no tool");
    assert!(failing.is_empty(), "failing seeds: {failing:?}");
}

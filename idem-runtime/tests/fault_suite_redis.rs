//! The fault-schedule suite against Redis: each schedule connects two `RedisStore` handles
//! (two processes) to `IDEM_REDIS_URL` under a prefix of its own, and runs in real time on two
//! worker threads. Needs `--features redis`; without `IDEM_REDIS_URL` it is skipped, unless
//! `IDEM_REQUIRE_REDIS` is set (as in CI).
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

use idem_tools_runtime::store::{RedisStore, Store};

use modes::{budget, mode, realtime_shape, seeds};
use run::{Backend, Opener};

#[test]
fn redis_realtime() {
    let Some(url) = std::env::var("IDEM_REDIS_URL")
        .ok()
        .filter(|u| !u.is_empty())
    else {
        assert!(
            std::env::var_os("IDEM_REQUIRE_REDIS").is_none(),
            "IDEM_REQUIRE_REDIS is set (as in CI) but IDEM_REDIS_URL is not"
        );
        eprintln!("SKIPPED redis_realtime: IDEM_REDIS_URL is not set");
        return;
    };
    let nanos = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| d.as_nanos());
    let run_id = format!("idem-fault-suite:{}-{nanos}", std::process::id());
    let schedules = Arc::new(AtomicU64::new(0));
    let open: Opener = Arc::new(move |_clock| {
        let prefix = format!("{run_id}:{}", schedules.fetch_add(1, Ordering::SeqCst));
        let url = url.clone();
        Box::pin(async move {
            let mut handles = Vec::new();
            for _ in 0..2 {
                let store = RedisStore::builder()
                    .prefix(prefix.clone())
                    .connect(&url)
                    .await
                    .map_err(|e| e.to_string())?;
                handles.push(Arc::new(store) as Arc<dyn Store>);
            }
            Ok(handles)
        })
    });
    let seeds = seeds(1 << 42, budget(40, 5_000));
    let (totals, failing) = mode(
        "redis-realtime",
        "fault_suite_redis redis_realtime --features redis",
        &seeds,
        realtime_shape(),
        |s| run::realtime(s, Backend::Handles(Arc::clone(&open))),
    );
    assert!(totals.executions > 0, "the schedules ran no tool");
    assert!(failing.is_empty(), "failing seeds: {failing:?}");
}

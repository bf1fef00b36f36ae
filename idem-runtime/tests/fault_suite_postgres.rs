//! The fault-schedule suite against PostgreSQL: each schedule connects two `PostgresStore`
//! handles (two processes, two pools) to `IDEM_POSTGRES_URL` in a schema of its own, and runs
//! in real time on two worker threads. Needs `--features postgres`; without
//! `IDEM_POSTGRES_URL` it is skipped, unless `IDEM_REQUIRE_POSTGRES` is set (as in CI).
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

use idem_tools_runtime::store::{PostgresStore, Store};

use modes::{budget, mode, realtime_shape, seeds};
use run::{Backend, Opener};

#[test]
fn postgres_realtime() {
    let Some(url) = std::env::var("IDEM_POSTGRES_URL")
        .ok()
        .filter(|u| !u.is_empty())
    else {
        assert!(
            std::env::var_os("IDEM_REQUIRE_POSTGRES").is_none(),
            "IDEM_REQUIRE_POSTGRES is set (as in CI) but IDEM_POSTGRES_URL is not"
        );
        eprintln!("SKIPPED postgres_realtime: IDEM_POSTGRES_URL is not set");
        return;
    };
    let nanos = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| d.as_nanos());
    let run_id = format!("idem_fault_{}_{nanos}", std::process::id());
    let schedules = Arc::new(AtomicU64::new(0));
    let (open_url, open_run) = (url.clone(), run_id.clone());
    let open: Opener = Arc::new(move |_clock| {
        let schema = format!("{open_run}_{}", schedules.fetch_add(1, Ordering::SeqCst));
        let url = open_url.clone();
        Box::pin(async move {
            let mut handles = Vec::new();
            for _ in 0..2 {
                let store = PostgresStore::builder()
                    .schema(schema.clone())
                    .max_connections(4)
                    .connect(&url)
                    .await
                    .map_err(|e| e.to_string())?;
                handles.push(Arc::new(store) as Arc<dyn Store>);
            }
            Ok(handles)
        })
    });
    let seeds = seeds(1 << 43, budget(40, 5_000));
    let (totals, failing) = mode(
        "postgres-realtime",
        "fault_suite_postgres postgres_realtime --features postgres",
        &seeds,
        realtime_shape(),
        |s| run::realtime(s, Backend::Handles(Arc::clone(&open))),
    );
    // The schemas of the run, dropped.
    tokio::runtime::Runtime::new()
        .expect("a runtime")
        .block_on(async {
            let pool = sqlx::PgPool::connect(&url).await.expect("connect");
            let schemas: Vec<String> =
                sqlx::query_scalar("SELECT nspname::text FROM pg_namespace WHERE nspname LIKE $1")
                    .bind(format!("{run_id}_%"))
                    .fetch_all(&pool)
                    .await
                    .expect("list schemas");
            for schema in schemas {
                let _ = sqlx::query(&format!("DROP SCHEMA \"{schema}\" CASCADE"))
                    .execute(&pool)
                    .await;
            }
        });
    assert!(totals.executions > 0, "the schedules ran no tool");
    assert!(failing.is_empty(), "failing seeds: {failing:?}");
}

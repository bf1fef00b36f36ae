//! Failovers of a real PostgreSQL primary to its streaming standby, under load: a primary and
//! a standby of the test's own (`scripts/postgres-test-server.sh`), the clients behind a
//! forwarder that is switched to the promoted standby as a DNS name or a virtual IP is. The
//! primary is killed (SIGKILL: its connections end) or frozen (SIGSTOP: its connections hang,
//! nothing resets them), the standby promoted, the address switched, a new standby made;
//! meanwhile plain and transactional tools are called with fresh and repeated turn ids through
//! two stores (the pool `PostgresStore::connect` builds, and an application's pool handed to
//! `from_pool`). Afterwards every key is called once more, and the checks are exact: no
//! acknowledged result lost, no side effect performed again after its result was acknowledged,
//! no transactional row twice, no key left claimed by nobody, and every call ended.
//!
//! `IDEM_PG_FAILOVERS` (default 4, alternately frozen and killed) is how many failovers run;
//! `IDEM_PG_FAILOVER_STANDBY=async` fails over to an asynchronous standby replicating through a
//! link that holds every byte back `IDEM_PG_FAILOVER_LAG_MS` (default 40 ms): what it loses is
//! counted and printed, not asserted (see docs/stores.md: exactly once needs a synchronous
//! standby).
#![cfg(all(feature = "postgres", unix))]

#[path = "../postgres_common/mod.rs"]
mod postgres_common;

mod check;
mod cluster;
mod load;

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use idem_tools_runtime::store::PostgresStore;
use rand::Rng;
use sqlx::postgres::PgPoolOptions;

use check::{check, recoveries};
use cluster::{Cluster, Fault};
use load::{Answer, Log, Tool, worker};
use postgres_common::{postgres_url, unique_schema};

/// Every call must end within this (the slowest path: a transactional body stopped at its 5 s
/// lease after waiting for a connection, its charge and its claim; see docs/guarantees.md).
const CALL_BOUND: Duration = Duration::from_secs(30);

fn env_u64(name: &str, default: u64) -> u64 {
    std::env::var(name)
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(default)
}

/// The two stores of the run, through the clients' address.
async fn stores(url: &str, schema: &str) -> Vec<PostgresStore> {
    let builder = || {
        PostgresStore::builder()
            .schema(schema)
            .lock_timeout(Duration::from_secs(1))
            .reply_timeout(Duration::from_secs(2))
            .connect_timeout(Duration::from_secs(2))
    };
    let own = builder()
        .max_connections(6)
        .connect(url)
        .await
        .expect("the connect store");
    let pool = PgPoolOptions::new()
        .max_connections(6)
        .acquire_timeout(Duration::from_secs(2))
        .test_before_acquire(false)
        .connect_lazy_with(url.parse().expect("a URL"));
    let app = builder()
        .from_pool(pool)
        .await
        .expect("the from_pool store");
    vec![own, app]
}

fn spread(times: &[Duration]) -> String {
    let ms: Vec<u128> = times.iter().map(Duration::as_millis).collect();
    match (ms.iter().min(), ms.iter().max()) {
        (Some(lo), Some(hi)) => format!("{lo}-{hi}"),
        _ => "none".to_owned(),
    }
}

#[test]
fn failovers_lose_nothing_acknowledged_and_every_call_ends() {
    if postgres_url("failovers_lose_nothing_acknowledged_and_every_call_ends").is_none() {
        return;
    }
    let failovers = env_u64("IDEM_PG_FAILOVERS", 4);
    let sync = std::env::var("IDEM_PG_FAILOVER_STANDBY").as_deref() != Ok("async");
    let lag = if sync {
        Duration::ZERO
    } else {
        Duration::from_millis(env_u64("IDEM_PG_FAILOVER_LAG_MS", 40))
    };
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .expect("a runtime");
    let schema = unique_schema("failover");
    let ledger = format!("\"{schema}\".ledger");
    let started = Instant::now();
    let mut cluster = Cluster::start(sync, lag, |url| {
        runtime.block_on(async {
            let pool = sqlx::PgPool::connect(url).await.expect("connect");
            sqlx::raw_sql(&format!(
                "CREATE SCHEMA \"{schema}\"; \
                 CREATE TABLE {ledger} (id bigserial PRIMARY KEY, memo text NOT NULL)"
            ))
            .execute(&pool)
            .await
            .expect("create the ledger");
            pool.close().await;
            // idem's tables, before the standby is made.
            drop(stores(url, &schema).await);
        });
    });
    let url = cluster.url();
    let stores = runtime.block_on(stores(&url, &schema));
    let log = Arc::new(Mutex::new(Log::default()));
    let stop = Arc::new(AtomicBool::new(false));
    let workers: Vec<_> = (0..8)
        .map(|n| {
            let (stores, ledger, log, stop) =
                (stores.clone(), ledger.clone(), log.clone(), stop.clone());
            runtime.spawn(worker(n, stores, ledger, log, stop))
        })
        .collect();
    let mut switches = Vec::new();
    let (mut kills, mut freezes) = (0, 0);
    for n in 0..failovers {
        std::thread::sleep(Duration::from_millis(rand::rng().random_range(1000..2000)));
        let (fault, detection) = if n % 2 == 0 {
            freezes += 1;
            (Fault::Freeze, Duration::from_secs(1))
        } else {
            kills += 1;
            (Fault::Kill, Duration::from_millis(300))
        };
        switches.push(cluster.fail_over(fault, detection));
    }
    std::thread::sleep(Duration::from_millis(1500));
    stop.store(true, Ordering::Relaxed);
    runtime.block_on(async {
        for handle in workers {
            handle.await.expect("a worker");
        }
    });
    let found = runtime.block_on(async {
        let store = PostgresStore::builder()
            .schema(&schema)
            .connect(&url)
            .await
            .expect("the checking store");
        check(&store, &ledger, &log).await
    });
    let [connect, from_pool] = recoveries(&log, &switches);
    let log = log.lock().expect("the log");
    let calls: Vec<_> = log.calls.iter().filter(|c| c.store < 2).collect();
    let count = |f: &dyn Fn(&Answer) -> bool| calls.iter().filter(|c| f(&c.answer)).count();
    let slowest = calls
        .iter()
        .map(|c| c.ended - c.started)
        .max()
        .unwrap_or_default();
    let over = calls
        .iter()
        .filter(|c| c.ended - c.started > CALL_BOUND)
        .count();
    let hangs = count(&|a| *a == Answer::Hung);
    println!(
        "fault-suite postgres-failover: standby={} failovers={failovers} (freeze={freezes} kill={kills}) \
         seconds={} calls={} (plain={} transactional={}) acks={} failed_closed={} in_flight={} \
         lease_lost={} tool_errors={} keys={} lost={} (transactional={}) duplicates={} second_runs={} orphans={} \
         interrupted={} hangs={hangs} slowest_call_ms={} recovered_after_switch_ms=connect:{},from_pool:{}",
        if sync {
            "sync".to_owned()
        } else {
            format!("async(lag={}ms)", lag.as_millis())
        },
        started.elapsed().as_secs(),
        calls.len(),
        calls.iter().filter(|c| c.key.tool == Tool::Plain).count(),
        calls
            .iter()
            .filter(|c| c.key.tool == Tool::Transactional)
            .count(),
        count(&|a| matches!(a, Answer::Ok(_))),
        count(&|a| *a == Answer::Store),
        count(&|a| *a == Answer::InFlight),
        count(&|a| *a == Answer::LeaseLost),
        count(&|a| *a == Answer::Tool),
        found.keys,
        found.lost,
        found.lost_transactional,
        found.duplicates,
        found.second_runs,
        found.orphans,
        found.interrupted,
        slowest.as_millis(),
        spread(&connect),
        spread(&from_pool),
    );
    let others: Vec<_> = calls
        .iter()
        .filter(|c| matches!(c.answer, Answer::Other(_) | Answer::Interrupted))
        .take(5)
        .collect();
    assert!(others.is_empty(), "unexpected answers: {others:?}");
    assert_eq!(
        (hangs, over),
        (0, 0),
        "every call ends within {CALL_BOUND:?}"
    );
    assert!(
        found.failed.is_empty(),
        "final calls failed: {:?}",
        found.failed
    );
    assert!(
        count(&|a| matches!(a, Answer::Ok(_))) > 0,
        "the run did something"
    );
    // What an asynchronous standby had not received is gone: a completed record (its key then
    // runs again, or stays held by nobody until its lease ends), a transactional write.
    if sync {
        let exact = (found.lost, found.duplicates, found.second_runs);
        assert_eq!(
            (exact, found.orphans, found.interrupted),
            ((0, 0, 0), 0, 0),
            "a synchronous standby loses nothing acknowledged: {found:?}"
        );
    }
    drop(log);
    drop(cluster);
}

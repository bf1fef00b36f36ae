//! Transactional tools across real processes on a real PostgreSQL server of the test's own:
//! workers killed with SIGKILL at random points, their connections terminated with
//! `pg_terminate_backend`, the server restarted — and a crash loop of one key.
//!
//! Each test re-executes this test binary as children running only
//! [`children::child`], with `IDEM_PG_CHILD` saying what to do (without it, nothing). The tool's side
//! effect is two rows in the same database (`ledger`, parts 1 and 2, written with a pause
//! before, between and after them, and a commit slowed by a deferred trigger), so the ledger is
//! exact: a duplicated row, a lost acknowledged result, a key left interrupted or claimed by
//! nobody all show.
//!
//! `IDEM_PG_FAULT_SECONDS` (default 20) is how long the fault mode runs; CI runs the default.
#![cfg(all(feature = "postgres", unix))]

#[path = "../postgres_common/mod.rs"]
mod postgres_common;

mod check;
mod children;
mod tools;

use std::collections::{BTreeMap, BTreeSet};
use std::process::Child;
use std::sync::{Arc, Mutex, mpsc};
use std::time::{Duration, Instant};

use idem_tools_runtime::Error;
use idem_tools_runtime::key::ArgsDigest;
use idem_tools_runtime::store::{RecordState, Store};
use postgres_common::{OwnServer, postgres_url, unique_schema};

use check::{check, live_records};
use children::{listen, spawn_child};
use rand::Rng;

use tools::{CRASH_BUDGET, PAY, RACE_KEYS, create_ledger, open, plain, turn};

#[test]
fn transactional_calls_survive_kills_terminations_and_restarts() {
    if postgres_url("transactional_calls_survive_kills_terminations_and_restarts").is_none() {
        return;
    }
    let seconds: u64 = std::env::var("IDEM_PG_FAULT_SECONDS")
        .ok()
        .and_then(|s| s.parse().ok())
        .unwrap_or(20);
    let (workers, keys) = (3, usize::try_from(seconds * 80).unwrap_or(1500).max(1500));
    let server = OwnServer::start();
    let schema = unique_schema("fault");
    let runtime = tokio::runtime::Runtime::new().expect("a runtime");
    runtime.block_on(create_ledger(&server.url, &schema));
    let (lines, heard) = mpsc::channel();
    let extra = [("IDEM_PG_KEYS", keys.to_string())];
    let mut children: Vec<Child> = (0..workers)
        .map(|n| {
            let mut child = spawn_child("worker", &server.url, &schema, &extra);
            listen(&mut child, n, lines.clone());
            child
        })
        .collect();
    let (mut kills, mut terminations, mut restarts, mut calls) = (0, 0, 0, 0);
    let mut kills_in: BTreeMap<String, usize> = BTreeMap::new();
    let mut phase: BTreeMap<usize, String> = BTreeMap::new();
    let mut acks: BTreeMap<String, BTreeSet<i64>> = BTreeMap::new();
    let mut memos: BTreeSet<String> = BTreeSet::new();
    let drain = |phase: &mut BTreeMap<usize, String>,
                 acks: &mut BTreeMap<_, BTreeSet<_>>,
                 memos: &mut BTreeSet<String>,
                 calls: &mut usize| {
        while let Ok((n, line)) = heard.try_recv() {
            let mut words = line.split_whitespace();
            match (words.next(), words.next(), words.next()) {
                (Some("call"), Some(memo), _) => {
                    *calls += 1;
                    memos.insert(memo.to_owned());
                    phase.insert(n, "begin".to_owned());
                }
                (Some("phase"), Some(p), _) => {
                    phase.insert(n, p.to_owned());
                }
                (Some("ack"), Some(memo), Some(id)) => {
                    let id: i64 = id.parse().expect("an id");
                    acks.entry(memo.to_owned()).or_default().insert(id);
                    phase.insert(n, "idle".to_owned());
                }
                (Some("err"), _, _) => {
                    phase.insert(n, "idle".to_owned());
                }
                _ => {}
            }
        }
    };
    let admin = runtime.block_on(async {
        let options: sqlx::postgres::PgConnectOptions = server.url.parse().expect("a URL");
        sqlx::postgres::PgPoolOptions::new()
            .max_connections(1)
            .test_before_acquire(true)
            .connect_lazy_with(options)
    });
    let started = Instant::now();
    let mut next_restart = Duration::from_secs(seconds / 3).max(Duration::from_secs(3));
    let mut rng = rand::rng();
    while started.elapsed() < Duration::from_secs(seconds) {
        std::thread::sleep(Duration::from_millis(rng.random_range(20..120)));
        drain(&mut phase, &mut acks, &mut memos, &mut calls);
        match rng.random_range(0..10) {
            // Kill a worker wherever it is, and start another in its place.
            0..=5 => {
                let n = rng.random_range(0..workers);
                let _ = children[n].kill();
                let _ = children[n].wait();
                kills += 1;
                *kills_in
                    .entry(phase.get(&n).cloned().unwrap_or_else(|| "start".to_owned()))
                    .or_default() += 1;
                phase.insert(n, "start".to_owned());
                let mut child = spawn_child("worker", &server.url, &schema, &extra);
                listen(&mut child, n, lines.clone());
                children[n] = child;
            }
            // Terminate the connections of the workers.
            6..=8 => {
                let cut: Result<Vec<bool>, _> = runtime.block_on(
                    sqlx::query_scalar(
                        "SELECT pg_terminate_backend(pid) FROM pg_stat_activity \
                         WHERE application_name = 'idem-fault-worker' \
                         AND random() < 0.5",
                    )
                    .fetch_all(&admin),
                );
                terminations += cut.map_or(0, |c| c.len());
            }
            _ => {}
        }
        if started.elapsed() >= next_restart {
            server.restart();
            restarts += 1;
            next_restart += Duration::from_secs(seconds / 3).max(Duration::from_secs(3));
        }
    }
    for child in &mut children {
        let _ = child.kill();
        let _ = child.wait();
    }
    std::thread::sleep(Duration::from_millis(200));
    drain(&mut phase, &mut acks, &mut memos, &mut calls);
    let found = runtime.block_on(check(&server.url, &schema, &memos, &acks));
    let acked: usize = acks.values().map(BTreeSet::len).sum();
    println!(
        "fault-suite postgres-transactional: seconds={seconds} workers={workers} keys={} \
         calls={calls} acks={acked} kills={kills} (before={} between={} after={} begin={} \
         start={} idle={}) terminated_connections={terminations} restarts={restarts} rows={} \
         duplicates={} lost={} interrupted={} orphans={}",
        memos.len(),
        kills_in.get("before").unwrap_or(&0),
        kills_in.get("between").unwrap_or(&0),
        kills_in.get("after").unwrap_or(&0),
        kills_in.get("begin").unwrap_or(&0),
        kills_in.get("start").unwrap_or(&0),
        kills_in.get("idle").unwrap_or(&0),
        found.rows,
        found.duplicates,
        found.lost,
        found.interrupted,
        found.orphans,
    );
    assert_eq!(
        (
            found.duplicates,
            found.lost,
            found.interrupted,
            found.orphans
        ),
        (0, 0, 0, 0),
        "{found:?}"
    );
    assert!(acked > 0 && kills > 0, "the run did something");
}

#[test]
fn a_crash_loop_on_one_key_leaves_one_row_and_one_record() {
    let Some(url) = postgres_url("a_crash_loop_on_one_key_leaves_one_row_and_one_record") else {
        return;
    };
    let schema = unique_schema("crash");
    let runtime = tokio::runtime::Runtime::new().expect("a runtime");
    runtime.block_on(create_ledger(&url, &schema));
    let acks = Arc::new(Mutex::new(BTreeSet::new()));
    let mut rng = rand::rng();
    // Kills that landed before the call answered (mid-call) and after (it had its answer).
    let (mut mid_call, mut answered) = (0, 0);
    for _ in 0..100 {
        let mut child = spawn_child("crash", &url, &schema, &[]);
        let (lines, heard) = mpsc::channel();
        listen(&mut child, 0, lines);
        // Wait until it is about to call, then kill it at a random instant of the call.
        let ready = loop {
            match heard.recv_timeout(Duration::from_secs(30)) {
                Ok((_, line)) if line == "ready" => break true,
                Ok(_) => {} // the test harness's own lines
                Err(_) => break false,
            }
        };
        assert!(ready, "the child started");
        std::thread::sleep(Duration::from_millis(rng.random_range(0..40)));
        child.kill().expect("kill -9");
        child.wait().expect("wait");
        let mut got_answer = false;
        while let Ok((_, line)) = heard.recv_timeout(Duration::from_millis(50)) {
            if let Some(id) = line.strip_prefix("ack crash ") {
                acks.lock()
                    .expect("lock")
                    .insert(id.parse::<i64>().expect("an id"));
            }
            got_answer |= line.starts_with("ack ") || line.starts_with("err ");
        }
        if got_answer {
            answered += 1;
        } else {
            mid_call += 1;
        }
    }
    let memos = BTreeSet::from(["crash".to_owned()]);
    let acked: BTreeMap<String, BTreeSet<i64>> =
        BTreeMap::from([("crash".to_owned(), acks.lock().expect("lock").clone())]);
    let found = runtime.block_on(check(&url, &schema, &memos, &acked));
    println!(
        "postgres crash loop: kills=100 (mid_call={mid_call} after_answer={answered}) executions={} rows={} \
         duplicates={} lost={}",
        found.rows / 2,
        found.rows,
        found.duplicates,
        found.lost
    );
    assert_eq!((found.duplicates, found.lost, found.interrupted), (0, 0, 0));
    runtime.block_on(async {
        let store = open(&url, &schema, "idem-crash-check").await.expect("open");
        let shared: Arc<dyn Store> = Arc::new(store.clone());
        let turn = turn(&store);
        let mut args = ArgsDigest::new(PAY.name);
        args.arg("memo", "crash").expect("encodes");
        let (key, _) = args.finish(turn.namespace(), turn.id(), PAY.name, 1);
        let record = shared.get(turn.namespace(), &key).await.expect("get");
        assert_eq!(record.map(|r| r.state), Some(RecordState::Completed));
        sqlx::query(&format!("DROP SCHEMA {schema} CASCADE"))
            .execute(store.pool())
            .await
            .expect("drop");
    });
}

/// A transactional tool that crashes its process in the body every time runs out of budget:
/// each attempt's charge commits before the body runs, on its own, so the server's rollback of
/// the killed attempt's transaction does not take the count back.
#[test]
fn a_tool_that_crashes_its_process_every_time_runs_out_of_budget() {
    let Some(url) = postgres_url("a_tool_that_crashes_its_process_every_time_runs_out_of_budget")
    else {
        return;
    };
    let schema = unique_schema("crash_budget");
    let runtime = tokio::runtime::Runtime::new().expect("a runtime");
    runtime.block_on(create_ledger(&url, &schema));
    let mut said = Vec::new();
    for _ in 0..=CRASH_BUDGET {
        let mut child = spawn_child("crash-budget", &url, &schema, &[]);
        let (lines, heard) = mpsc::channel();
        listen(&mut child, 0, lines);
        let line = loop {
            match heard.recv_timeout(Duration::from_secs(30)) {
                Ok((_, line)) if line == "in body" || line.starts_with("err ") => break line,
                Ok(_) => {} // the test harness's own lines
                Err(_) => break "no answer within 30 s".to_owned(),
            }
        };
        child.kill().expect("kill -9");
        child.wait().expect("wait");
        said.push(line);
    }
    let (ran, refused) = said.split_at(said.len() - 1);
    assert!(ran.iter().all(|line| line == "in body"), "{said:?}");
    assert!(
        refused[0].starts_with("err crash-budget Idem(BudgetExhausted"),
        "the attempt after the budget is refused, not run: {said:?}"
    );
    runtime.block_on(async {
        let pool = sqlx::PgPool::connect(&url).await.expect("connect");
        let rows: i64 = sqlx::query_scalar(&format!(
            "SELECT count(*) FROM {schema}.ledger WHERE memo = 'crash-budget'"
        ))
        .fetch_one(&pool)
        .await
        .expect("count");
        assert_eq!(rows, 0, "every killed attempt rolled back");
        sqlx::query(&format!("DROP SCHEMA {schema} CASCADE"))
            .execute(&pool)
            .await
            .expect("drop");
    });
}

#[test]
fn several_processes_sharing_the_database_run_each_key_once() {
    let Some(url) = postgres_url("several_processes_sharing_the_database_run_each_key_once") else {
        return;
    };
    let schema = unique_schema("race");
    let runtime = tokio::runtime::Runtime::new().expect("a runtime");
    runtime.block_on(create_ledger(&url, &schema));
    let (lines, heard) = mpsc::channel();
    let mut children: Vec<Child> = (0..4)
        .map(|n| {
            let mut child = spawn_child("store-race", &url, &schema, &[]);
            listen(&mut child, n, lines.clone());
            child
        })
        .collect();
    drop(lines);
    for child in &mut children {
        assert!(child.wait().expect("wait").success());
    }
    let mut acks: BTreeMap<String, BTreeSet<i64>> = BTreeMap::new();
    let mut waits = 0;
    for (_, line) in heard.iter() {
        let words: Vec<&str> = line.split_whitespace().collect();
        match words.as_slice() {
            ["ack", memo, id] => {
                acks.entry((*memo).to_owned())
                    .or_default()
                    .insert(id.parse().expect("an id"));
            }
            ["err", ..] => waits += 1, // in flight in another process past the short wait
            _ => {}
        }
    }
    runtime.block_on(async {
        let store = open(&url, &schema, "idem-race-check").await.expect("open");
        let rows: i64 = sqlx::query_scalar("SELECT count(*) FROM ledger")
            .fetch_one(store.pool())
            .await
            .expect("count");
        assert_eq!(
            rows, RACE_KEYS as i64,
            "each key ran once, in one of the processes"
        );
        assert!(
            acks.values().all(|ids| ids.len() == 1),
            "every process got the first result"
        );
        println!("postgres store race: processes=4 keys={RACE_KEYS} rows={rows} waits={waits}");
        sqlx::query(&format!("DROP SCHEMA {schema} CASCADE"))
            .execute(store.pool())
            .await
            .expect("drop");
    });
}

/// Starts a child whose plain call of `send("hang")` runs (its side effect written) and never
/// ends, then kills it with SIGKILL: its claim is left in flight, its 1 s lease running.
fn kill_a_hanging_call(url: &str, schema: &str) {
    let mut child = spawn_child("store-hang", url, schema, &[]);
    let (lines, heard) = mpsc::channel();
    listen(&mut child, 0, lines);
    let started = loop {
        match heard.recv_timeout(Duration::from_secs(30)) {
            Ok((_, line)) if line == "started" => break true,
            Ok(_) => {}
            Err(_) => break false,
        }
    };
    assert!(started, "the child's tool started");
    child.kill().expect("kill -9");
    child.wait().expect("wait");
}

/// The in-flight claim's lease end and holder.
async fn the_claim(store: &idem_tools_runtime::PostgresStore) -> (i64, Option<String>) {
    sqlx::query_as(
        "SELECT expires_at_ms, holder FROM idem_records WHERE state = 'in_progress' \
         AND expires_at_ms > idem_now_ms()",
    )
    .fetch_one(store.pool())
    .await
    .expect("the killed call's claim")
}

/// A plain call killed mid-call, on this host: the store proves its process gone, and a retry
/// claims the key a reply timeout later, before the lease ends (and runs it again: the limit a transactional tool, or
/// the key forwarded downstream, closes). A holder that cannot be proven gone — here one named
/// on another host — holds the key until its lease ends.
#[test]
fn a_plain_call_killed_mid_call_frees_its_key_at_once_unless_its_holder_is_unknown() {
    let Some(url) = postgres_url("a_plain_call_killed_mid_call_frees_its_key_at_once") else {
        return;
    };
    let runtime = tokio::runtime::Runtime::new().expect("a runtime");
    // A store on a schema of its own, where a child's hanging call was killed.
    let killed = |tag: &str| {
        let schema = unique_schema(tag);
        runtime.block_on(create_ledger(&url, &schema));
        let store = runtime
            .block_on(open(&url, &schema, "idem-hang-check"))
            .expect("open");
        kill_a_hanging_call(&url, &schema);
        (store, schema)
    };

    let (store, schema) = killed("hang");
    runtime.block_on(async {
        let (lease_end, holder) = the_claim(&store).await;
        assert!(holder.is_some(), "the claim names its process");
        // The gone holder's claim is left a reply timeout (for a result it sent before it died
        // to land), here shorter than the retry's in-flight wait and than the lease.
        let quick = idem_tools_runtime::PostgresStore::builder()
            .reply_timeout(Duration::from_millis(100))
            .from_pool(store.pool().clone())
            .await
            .expect("the same store");
        plain(&quick, "hang", Duration::ZERO)
            .await
            .expect("runs at once");
        let claimed_at: i64 = sqlx::query_scalar("SELECT created_at_ms FROM idem_records")
            .fetch_one(store.pool())
            .await
            .expect("the record");
        assert!(
            claimed_at < lease_end,
            "claimed {} ms after the lease ended: the lease, not the holder, freed it",
            claimed_at - lease_end
        );
        nothing_left_claimed_then_drop(&store, &schema).await;
    });

    let (store, schema) = killed("hangunknown");
    runtime.block_on(async {
        // The same holder, as if it ran on another host: nothing proves it gone.
        let (_, holder) = the_claim(&store).await;
        let mut parts: Vec<String> = holder
            .expect("a holder")
            .split(':')
            .map(str::to_owned)
            .collect();
        parts[1] = "another-host-boot-id".to_owned();
        sqlx::query("UPDATE idem_records SET holder = $1 WHERE state = 'in_progress'")
            .bind(parts.join(":"))
            .execute(store.pool())
            .await
            .expect("rename the holder");
        let early = plain(&store, "hang", Duration::ZERO).await;
        assert!(matches!(early, Err(Error::InFlight { .. })), "{early:?}");
        // After the lease, the key is free and the retry runs.
        tokio::time::sleep(Duration::from_millis(1100)).await;
        plain(&store, "hang", Duration::ZERO)
            .await
            .expect("runs after the lease");
        nothing_left_claimed_then_drop(&store, &schema).await;
    });
}

async fn nothing_left_claimed_then_drop(store: &idem_tools_runtime::PostgresStore, schema: &str) {
    assert_eq!(live_records(store, "in_progress").await, 0);
    sqlx::query(&format!("DROP SCHEMA {schema} CASCADE"))
        .execute(store.pool())
        .await
        .expect("drop");
}

#[test]
fn plain_calls_fail_closed_through_a_restart_and_terminated_connections() {
    if postgres_url("plain_calls_fail_closed_through_a_restart_and_terminated_connections")
        .is_none()
    {
        return;
    }
    let server = OwnServer::start();
    let schema = unique_schema("restart");
    let runtime = tokio::runtime::Runtime::new().expect("a runtime");
    runtime.block_on(async {
        create_ledger(&server.url, &schema).await;
        let store = open(&server.url, &schema, "idem-restart")
            .await
            .expect("open");
        let admin = {
            let options: sqlx::postgres::PgConnectOptions = server.url.parse().expect("a URL");
            sqlx::postgres::PgPoolOptions::new().connect_lazy_with(options)
        };
        let mut acks: BTreeMap<String, i64> = BTreeMap::new();
        let (mut failed, mut restarted, mut terminated) = (0, false, 0);
        for round in 0..3 {
            for key in 0..60 {
                let memo = format!("k-{key}");
                if round == 1 && key == 20 {
                    server.restart();
                    restarted = true;
                }
                if key % 15 == 7 {
                    terminated += sqlx::query_scalar::<_, bool>(
                        "SELECT pg_terminate_backend(pid) FROM pg_stat_activity \
                         WHERE application_name = 'idem-restart'",
                    )
                    .fetch_all(&admin)
                    .await
                    .map_or(0, |cut| cut.len());
                }
                match plain(&store, &memo, Duration::ZERO).await {
                    Ok(id) => {
                        // Once acknowledged, always replayed: the same id.
                        let first = *acks.entry(memo.clone()).or_insert(id);
                        assert_eq!(first, id, "{memo} replays its first result");
                    }
                    Err(Error::Store { .. } | Error::InFlight { .. }) => failed += 1,
                    Err(other) => panic!("{memo}: {other:?}"),
                }
            }
        }
        // A key whose call failed after it claimed is in flight until its lease (1 s) ends;
        // then it runs.
        tokio::time::sleep(Duration::from_millis(1100)).await;
        for key in 0..60 {
            let memo = format!("k-{key}");
            let id = plain(&store, &memo, Duration::ZERO)
                .await
                .expect("after the lease");
            let first = *acks.entry(memo.clone()).or_insert(id);
            assert_eq!(first, id, "{memo} replays its first result");
        }
        // An acknowledged key never ran again.
        for (memo, id) in &acks {
            let ids: Vec<i64> = sqlx::query_scalar("SELECT id FROM ledger WHERE memo = $1")
                .bind(memo)
                .fetch_all(store.pool())
                .await
                .expect("read");
            assert!(ids.contains(id), "{memo}: its acknowledged row is there");
        }
        assert!(
            restarted && acks.len() == 60,
            "every key got through: {}",
            acks.len()
        );
        println!(
            "postgres store restart: keys=60 rounds=3 failed_closed={failed} \
             terminated_connections={terminated}"
        );
    });
}

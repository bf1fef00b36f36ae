//! Transactional tools across real processes on a real PostgreSQL server of the test's own:
//! workers killed with SIGKILL at random points, their connections terminated with
//! `pg_terminate_backend`, the server restarted — and a crash loop of one key.
//!
//! Each test re-executes this test binary as children running only [`child`], with
//! `IDEM_PG_CHILD` saying what to do; without it [`child`] does nothing. The tool's side
//! effect is two rows in the same database (`ledger`, parts 1 and 2, written with a pause
//! before, between and after them, and a commit slowed by a deferred trigger), so the ledger is
//! exact: a duplicated row, a lost acknowledged result, a key left interrupted or claimed by
//! nobody all show.
//!
//! `IDEM_PG_FAULT_SECONDS` (default 20) is how long the fault mode runs; CI runs the default.
#![cfg(all(feature = "postgres", unix))]

mod postgres_common;

use std::collections::{BTreeMap, BTreeSet};
use std::io::{BufRead, BufReader};
use std::process::{Child, Command, Stdio};
use std::sync::mpsc;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use idem_tools_runtime::engine::transactional;
use idem_tools_runtime::key::ArgsDigest;
use idem_tools_runtime::store::{PostgresStore, RecordState, Store};
use idem_tools_runtime::{Call, Codec, Error, ToolInfo, Turn};
use postgres_common::{Failure, OwnServer, postgres_url, unique_schema};
use rand::Rng;
use rand::seq::SliceRandom;
use sqlx::PgConnection;

const CHILD_ENV: &str = "IDEM_PG_CHILD";
static PAY: ToolInfo = ToolInfo::idempotent("pay");
const TURN_ID: &str = "fault-turn";

/// The turn every process uses: same keys everywhere, and a budget no kill loop exhausts.
fn turn(store: &PostgresStore) -> Turn {
    Turn::new(TURN_ID)
        .with_max_attempts_per_key(1_000_000)
        .with_in_flight_wait(Duration::from_secs(10))
        .with_store(Arc::new(store.clone()))
}

/// The transactional call of `pay(memo)`: two rows, with pauses of up to `pause` ms around
/// them; `phase` is told where the body is.
async fn pay(
    store: &PostgresStore,
    memo: &str,
    pause: u64,
    phase: impl Fn(&str),
) -> Result<i64, Failure> {
    let turn = turn(store);
    let mut args = ArgsDigest::new(PAY.name);
    args.arg("memo", memo).expect("encodes");
    let (key, fingerprint) = args.finish(turn.namespace(), turn.id(), PAY.name, 1);
    let call = Call::new(&PAY, &turn, key, fingerprint);
    let nap = |max: u64| {
        let ms = rand::rng().random_range(0..=max);
        tokio::time::sleep(Duration::from_millis(ms))
    };
    transactional::execute(
        call,
        Codec::ok_only(),
        async |conn: &mut PgConnection| -> Result<i64, Failure> {
            phase("before");
            nap(pause).await;
            let id: i64 =
                sqlx::query_scalar("INSERT INTO ledger (memo, part) VALUES ($1, 1) RETURNING id")
                    .bind(memo)
                    .fetch_one(&mut *conn)
                    .await?;
            phase("between");
            nap(pause).await;
            sqlx::query("INSERT INTO ledger (memo, part) VALUES ($1, 2)")
                .bind(memo)
                .execute(&mut *conn)
                .await?;
            phase("after");
            nap(pause).await;
            Ok(id)
        },
    )
    .await
}

/// Keys of the plain race.
const RACE_KEYS: usize = 50;

/// A plain tool with a 1 s lease (so that a killed holder frees its key quickly).
static SEND: ToolInfo = ToolInfo::idempotent("send").with_lease(Duration::from_secs(1));

/// A plain (not transactional) call of `send(memo)` on the store: its side effect, one row
/// written through the pool after `pause`, commits on its own.
async fn plain(store: &PostgresStore, memo: &str, pause: Duration) -> Result<i64, Error> {
    let turn = turn(store).with_in_flight_wait(Duration::from_millis(200));
    let mut args = ArgsDigest::new(SEND.name);
    args.arg("memo", memo).expect("encodes");
    let (key, fingerprint) = args.finish(turn.namespace(), turn.id(), SEND.name, 1);
    let call = Call::new(&SEND, &turn, key, fingerprint);
    let pool = store.pool().clone();
    idem_tools_runtime::execute(call, Codec::ok_only(), async move {
        if memo == "hang" {
            sqlx::query("INSERT INTO ledger (memo, part) VALUES ('hang', 0)")
                .execute(&pool)
                .await
                .map_err(|e| Error::store("test", e))?;
            println!("started");
        }
        tokio::time::sleep(pause).await;
        sqlx::query_scalar("INSERT INTO ledger (memo, part) VALUES ($1, 1) RETURNING id")
            .bind(memo)
            .fetch_one(&pool)
            .await
            .map_err(|e| Error::store("test", e))
    })
    .await
}

/// Creates the application's tables in `schema`: the ledger and a deferred trigger that
/// sleeps up to 10 ms at commit, so that kills land in `COMMIT` too.
async fn create_ledger(url: &str, schema: &str) {
    let pool = sqlx::PgPool::connect(url).await.expect("connect");
    sqlx::raw_sql(&format!(
        "CREATE SCHEMA IF NOT EXISTS {schema};
         CREATE TABLE {schema}.ledger (id bigserial PRIMARY KEY, memo text NOT NULL,
                                       part int NOT NULL);
         CREATE FUNCTION {schema}.slow_commit() RETURNS trigger LANGUAGE plpgsql AS $$
             BEGIN PERFORM pg_sleep(random() * 0.01); RETURN NULL; END $$;
         CREATE CONSTRAINT TRIGGER slow_commit AFTER INSERT ON {schema}.ledger
             DEFERRABLE INITIALLY DEFERRED FOR EACH ROW
             EXECUTE FUNCTION {schema}.slow_commit();"
    ))
    .execute(&pool)
    .await
    .expect("create the ledger");
    pool.close().await;
}

/// The store the processes share: idem's tables and the ledger in `schema`, found through the
/// search path; connections named so that the parent can terminate them.
async fn open(url: &str, schema: &str, name: &str) -> Result<PostgresStore, Error> {
    let options: sqlx::postgres::PgConnectOptions = url.parse().expect("a URL");
    let options = options
        .options([("search_path", schema)])
        .application_name(name);
    let pool = sqlx::postgres::PgPoolOptions::new()
        .max_connections(3)
        .acquire_timeout(Duration::from_secs(2))
        .test_before_acquire(false)
        .connect_lazy_with(options);
    PostgresStore::from_pool(pool).await
}

/// A child process of this test binary.
fn spawn_child(mode: &str, url: &str, schema: &str, extra: &[(&str, String)]) -> Child {
    let mut command = Command::new(std::env::current_exe().expect("the test binary"));
    command
        .args(["--exact", "child", "--nocapture", "--test-threads=1"])
        .env(CHILD_ENV, mode)
        .env("IDEM_PG_URL", url)
        .env("IDEM_PG_SCHEMA", schema)
        .stdout(Stdio::piped())
        .stderr(Stdio::null());
    for (name, value) in extra {
        command.env(name, value);
    }
    command.spawn().expect("spawn a child")
}

/// What children say, line by line, tagged with the child's number.
fn listen(child: &mut Child, n: usize, lines: mpsc::Sender<(usize, String)>) {
    let stdout = child.stdout.take().expect("piped");
    std::thread::spawn(move || {
        for line in BufReader::new(stdout).lines().map_while(Result::ok) {
            if lines.send((n, line)).is_err() {
                return;
            }
        }
    });
}

/// The child: does what `IDEM_PG_CHILD` says (nothing without it).
#[test]
fn child() {
    let Ok(mode) = std::env::var(CHILD_ENV) else {
        return;
    };
    let var = |name: &str| std::env::var(name).expect(name);
    let (url, schema) = (var("IDEM_PG_URL"), var("IDEM_PG_SCHEMA"));
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .expect("a runtime");
    // The test harness has printed `test child ... ` without a newline: end that line first.
    println!();
    runtime.block_on(async move {
        let say = |line: String| println!("{line}");
        match mode.as_str() {
            // Calls random keys forever (until killed), saying where it is and what it got.
            "worker" => {
                let keys: usize = var("IDEM_PG_KEYS").parse().expect("a number");
                let store = loop {
                    match open(&url, &schema, "idem-fault-worker").await {
                        Ok(store) => break store,
                        Err(_) => tokio::time::sleep(Duration::from_millis(50)).await,
                    }
                };
                loop {
                    let key = rand::rng().random_range(0..keys);
                    let memo = format!("key-{key}");
                    say(format!("call {memo}"));
                    match pay(&store, &memo, 5, |phase| say(format!("phase {phase}"))).await {
                        Ok(id) => say(format!("ack {memo} {id}")),
                        Err(error) => {
                            say(format!("err {memo} {error:?}").replace('\n', " "));
                            tokio::time::sleep(Duration::from_millis(20)).await;
                        }
                    }
                }
            }
            // One call of the crash loop's key, once told to go.
            "crash" => {
                let store = open(&url, &schema, "idem-crash-loop").await.expect("open");
                say("ready".to_owned());
                match pay(&store, "crash", 10, |phase| say(format!("phase {phase}"))).await {
                    Ok(id) => say(format!("ack crash {id}")),
                    Err(error) => say(format!("err crash {error:?}").replace('\n', " ")),
                }
                // Wait to be killed: every run of the loop ends with a SIGKILL.
                tokio::time::sleep(Duration::from_secs(60)).await;
            }
            // Plain (not transactional) calls of every key of the race, in a random order.
            "store-race" => {
                let store = open(&url, &schema, "idem-store-race").await.expect("open");
                let mut keys: Vec<usize> = (0..RACE_KEYS).collect();
                keys.shuffle(&mut rand::rng());
                for key in keys {
                    let memo = format!("race-{key}");
                    match plain(&store, &memo, Duration::from_millis(2)).await {
                        Ok(id) => say(format!("ack {memo} {id}")),
                        Err(error) => say(format!("err {memo} {error:?}").replace('\n', " ")),
                    }
                }
            }
            // A plain call that never finishes: killed mid-call.
            "store-hang" => {
                let store = open(&url, &schema, "idem-store-hang").await.expect("open");
                let _ = plain(&store, "hang", Duration::from_secs(60)).await;
            }
            other => panic!("unknown child mode {other}"),
        }
    });
}

/// What the checks found.
#[derive(Default, Debug)]
struct Ledger {
    duplicates: usize,
    lost: usize,
    interrupted: usize,
    orphans: usize,
    rows: i64,
}

/// Checks the ledger and idem's records after the chaos: every key called once more in a
/// clean process state must answer (replay or run), every acknowledged id must be the one
/// replayed, and no `(memo, part)` may have two rows.
async fn check(
    url: &str,
    schema: &str,
    memos: &BTreeSet<String>,
    acks: &BTreeMap<String, BTreeSet<i64>>,
) -> Ledger {
    let store = open(url, schema, "idem-fault-check").await.expect("open");
    let mut found = Ledger::default();
    // Every key with a row, whether or not its call was heard.
    let written: Vec<String> = sqlx::query_scalar("SELECT DISTINCT memo FROM ledger")
        .fetch_all(store.pool())
        .await
        .expect("read the ledger");
    let memos: BTreeSet<String> = memos.iter().cloned().chain(written).collect();
    let memos = &memos;
    // Nothing may be left claimed: a transactional claim never commits in progress.
    let claimed: i64 = sqlx::query_scalar(
        "SELECT count(*) FROM idem_records WHERE state = 'in_progress' \
         AND expires_at_ms > idem_now_ms()",
    )
    .fetch_one(store.pool())
    .await
    .expect("count claims");
    found.orphans += usize::try_from(claimed).unwrap_or(usize::MAX);
    for memo in memos {
        match pay(&store, memo, 0, |_| {}).await {
            Ok(id) => {
                let acked = acks.get(memo).cloned().unwrap_or_default();
                // Every id a caller was given is the one the record replays.
                found.lost += acked.iter().filter(|a| **a != id).count();
            }
            Err(Failure::Idem(Error::Interrupted { .. })) => found.interrupted += 1,
            Err(other) => panic!("the final call of {memo} failed: {other:?}"),
        }
        let shared: Arc<dyn Store> = Arc::new(store.clone());
        let _ = shared;
    }
    let duplicated: i64 = sqlx::query_scalar(
        "SELECT count(*) FROM (SELECT memo, part FROM ledger GROUP BY memo, part \
         HAVING count(*) > 1) AS d",
    )
    .fetch_one(store.pool())
    .await
    .expect("count duplicates");
    found.duplicates = usize::try_from(duplicated).unwrap_or(usize::MAX);
    found.rows = sqlx::query_scalar("SELECT count(*) FROM ledger")
        .fetch_one(store.pool())
        .await
        .expect("count rows");
    // Every key ran exactly once: its two rows, and a completed record.
    let complete: i64 = sqlx::query_scalar(
        "SELECT count(*) FROM idem_records WHERE state = 'completed' \
         AND expires_at_ms > idem_now_ms()",
    )
    .fetch_one(store.pool())
    .await
    .expect("count records");
    assert_eq!(found.rows, 2 * memos.len() as i64, "two rows per key");
    assert_eq!(complete, memos.len() as i64, "one record per key");
    found
}

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

#[test]
fn a_plain_call_killed_mid_call_holds_its_key_until_the_lease_ends() {
    let Some(url) = postgres_url("a_plain_call_killed_mid_call_holds_its_key_until_the_lease_ends")
    else {
        return;
    };
    let schema = unique_schema("hang");
    let runtime = tokio::runtime::Runtime::new().expect("a runtime");
    runtime.block_on(create_ledger(&url, &schema));
    let mut child = spawn_child("store-hang", &url, &schema, &[]);
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
    runtime.block_on(async {
        let store = open(&url, &schema, "idem-hang-check").await.expect("open");
        // Within the lease the key is in flight: a retry waits, then says so.
        let early = plain(&store, "hang", Duration::ZERO).await;
        assert!(matches!(early, Err(Error::InFlight { .. })), "{early:?}");
        // After it, the key is free and the retry runs (the limit a transactional tool closes).
        tokio::time::sleep(Duration::from_millis(1100)).await;
        plain(&store, "hang", Duration::ZERO)
            .await
            .expect("runs after the lease");
        let claimed: i64 = sqlx::query_scalar(
            "SELECT count(*) FROM idem_records WHERE state = 'in_progress' \
             AND expires_at_ms > idem_now_ms()",
        )
        .fetch_one(store.pool())
        .await
        .expect("count");
        assert_eq!(claimed, 0, "nothing left claimed");
        sqlx::query(&format!("DROP SCHEMA {schema} CASCADE"))
            .execute(store.pool())
            .await
            .expect("drop");
    });
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

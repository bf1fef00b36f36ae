//! SqliteStore: the state machine of `Store` on a real file, with time under test control.
#![cfg(feature = "sqlite")]

mod sqlite_common;
use idem_tools_runtime::Codec;
use idem_tools_runtime::store::Charge;
use sqlite_common::TempDir;

use std::path::Path;
use std::sync::Arc;
use std::time::Duration;

use idem_tools_runtime::clock::ManualClock;
use idem_tools_runtime::key::{Fingerprint, Key};
use idem_tools_runtime::store::conformance::lease_of;
use idem_tools_runtime::store::sqlite::SCHEMA_VERSION;
use idem_tools_runtime::store::{
    Begin, BeginRequest, Lease, LeaseToken, RecordState, SqliteStore, Store,
};
use idem_tools_runtime::{Error, ToolInfo, Turn, execute, key::ArgsDigest};

const NS: &str = "tenant";
const LEASE: Duration = Duration::from_secs(30);
const TTL: Duration = Duration::from_secs(3600);

fn key(n: u8) -> Key {
    Key::from_bytes([n; 32])
}

fn fp(n: u8) -> Fingerprint {
    Fingerprint::from_bytes([n; 32])
}

fn req<'a>(key: &'a Key, fingerprint: &'a Fingerprint, lease: Duration) -> BeginRequest<'a> {
    BeginRequest {
        namespace: NS,
        key,
        tool: "send_message",
        turn: "t",
        fingerprint,
        lease,
        ttl: Duration::from_secs(60),
        token: LeaseToken::generate(),
        // Counts that expire with the shortest leases here, so that expired claims leave
        // nothing behind for the purge tests.
        charge: Charge {
            window: Duration::from_secs(1),
            ..Charge::unlimited()
        },
    }
}

fn open(path: &Path, clock: &ManualClock) -> SqliteStore {
    SqliteStore::open(path)
        .unwrap()
        .with_clock(Arc::new(clock.clone()))
}

async fn claim(store: &SqliteStore, k: &Key, lease: Duration) -> Lease {
    let f = fp(1);
    let request = req(k, &f, lease);
    let held = lease_of(&request);
    match store.begin(request).await.unwrap() {
        Begin::Claimed => held,
        other => panic!("expected a claim, got {other:?}"),
    }
}

#[tokio::test]
async fn claim_complete_then_replay_and_survive_reopening() {
    let dir = TempDir::new("replay");
    let clock = ManualClock::new(1_000_000);
    let k = key(1);
    {
        let store = open(&dir.db(), &clock);
        let token = claim(&store, &k, LEASE).await;
        match store.begin(req(&k, &fp(1), LEASE)).await.unwrap() {
            Begin::InFlight { fingerprint } => assert_eq!(fingerprint, fp(1)),
            other => panic!("expected in flight, got {other:?}"),
        }
        let record = store.get(NS, &k).await.unwrap().unwrap();
        assert_eq!(record.state, RecordState::InProgress);
        assert_eq!(record.expires_at_ms, 1_000_000 + 30_000);
        assert_eq!(record.result, None);
        store.complete(&token, b"{\"ok\":1}", TTL).await.unwrap();
    }
    // A new store on the same file, as after a restart.
    let store = open(&dir.db(), &clock);
    match store.begin(req(&k, &fp(1), LEASE)).await.unwrap() {
        Begin::Completed(first) => {
            assert_eq!(first.fingerprint, fp(1));
            assert_eq!(&*first.result, b"{\"ok\":1}");
        }
        other => panic!("expected completed, got {other:?}"),
    }
    let record = store.get(NS, &k).await.unwrap().unwrap();
    assert_eq!(record.state, RecordState::Completed);
    assert_eq!(record.namespace, NS);
    assert_eq!(record.key, k);
    assert_eq!(record.tool, "send_message");
    assert_eq!(record.fingerprint, fp(1));
    assert_eq!(record.result.as_deref(), Some(&b"{\"ok\":1}"[..]));
    assert_eq!(record.created_at_ms, 1_000_000);
    assert_eq!(record.expires_at_ms, 1_000_000 + 3_600_000);
    assert_eq!(store.path(), Some(dir.db().as_path()));
}

#[tokio::test]
async fn completed_records_expire_after_their_ttl() {
    let dir = TempDir::new("ttl");
    let clock = ManualClock::new(5_000);
    let store = open(&dir.db(), &clock);
    let k = key(2);
    let token = claim(&store, &k, LEASE).await;
    store.complete(&token, b"1", TTL).await.unwrap();
    clock.advance(TTL - Duration::from_millis(1));
    assert!(store.get(NS, &k).await.unwrap().is_some());
    assert!(matches!(
        store.begin(req(&k, &fp(1), LEASE)).await.unwrap(),
        Begin::Completed(_)
    ));
    clock.advance(Duration::from_millis(1)); // expires_at_ms <= now: gone
    assert!(store.get(NS, &k).await.unwrap().is_none());
    assert!(store.list(None, 10).await.unwrap().is_empty());
    // Expired, so claimable again, with a new creation time.
    let again = claim(&store, &k, LEASE).await;
    assert_ne!(again, token);
    let record = store.get(NS, &k).await.unwrap().unwrap();
    assert_eq!(record.created_at_ms, clock_now(&clock));
}

fn clock_now(clock: &ManualClock) -> u64 {
    use idem_tools_runtime::clock::Clock;
    clock.now_ms()
}

#[tokio::test]
async fn an_expired_lease_is_claimable_and_fences_the_old_holder() {
    let dir = TempDir::new("lease");
    let clock = ManualClock::new(0);
    let store = open(&dir.db(), &clock);
    let k = key(3);
    let old = claim(&store, &k, Duration::from_secs(1)).await;
    clock.advance(Duration::from_millis(999));
    assert!(matches!(
        store.begin(req(&k, &fp(1), LEASE)).await.unwrap(),
        Begin::InFlight { .. }
    ));
    clock.advance(Duration::from_millis(1));
    // The old holder's lease ran out: it can no longer act, even before anyone takes over.
    assert!(matches!(
        store.renew(&old, LEASE).await,
        Err(Error::LeaseLost { .. })
    ));
    let new = claim(&store, &k, LEASE).await;
    assert_ne!(old, new);
    for result in [
        store.complete(&old, b"stale", TTL).await,
        store.release(&old).await,
        store.renew(&old, LEASE).await,
    ] {
        assert!(matches!(result, Err(Error::LeaseLost { .. })), "{result:?}");
    }
    // The new claim is untouched by the stale token and completes normally.
    let record = store.get(NS, &k).await.unwrap().unwrap();
    assert_eq!(record.state, RecordState::InProgress);
    store.complete(&new, b"fresh", TTL).await.unwrap();
    // A completed record has no holder any more; a complete repeated by the lease that completed
    // it (its first reply lost) succeeds without changing the record.
    store.complete(&new, b"again", TTL).await.unwrap();
    assert!(matches!(
        store.release(&new).await,
        Err(Error::LeaseLost { .. })
    ));
    let record = store.get(NS, &k).await.unwrap().unwrap();
    assert_eq!(record.result.as_deref(), Some(&b"fresh"[..]));
}

#[tokio::test]
async fn renew_extends_and_release_frees() {
    let dir = TempDir::new("renew");
    let clock = ManualClock::new(0);
    let store = open(&dir.db(), &clock);
    let k = key(4);
    let token = claim(&store, &k, Duration::from_secs(1)).await;
    clock.advance(Duration::from_millis(900));
    store.renew(&token, Duration::from_secs(1)).await.unwrap();
    clock.advance(Duration::from_millis(900)); // past the first lease, within the renewed one
    assert!(matches!(
        store.begin(req(&k, &fp(1), LEASE)).await.unwrap(),
        Begin::InFlight { .. }
    ));
    store.release(&token).await.unwrap();
    assert!(store.get(NS, &k).await.unwrap().is_none());
    assert!(matches!(
        store.release(&token).await,
        Err(Error::LeaseLost { .. })
    ));
    claim(&store, &k, LEASE).await;
}

#[tokio::test]
async fn purge_list_and_remove() {
    let dir = TempDir::new("admin");
    let clock = ManualClock::new(0);
    let store = open(&dir.db(), &clock);
    for n in 0..5u8 {
        let token = claim(&store, &key(n), LEASE).await;
        let ttl = Duration::from_secs(if n < 3 { 10 } else { 1000 });
        store.complete(&token, b"r", ttl).await.unwrap();
    }
    let (k9, f1) = (key(9), fp(1));
    let other = BeginRequest {
        namespace: "other",
        ..req(&k9, &f1, LEASE)
    };
    assert!(matches!(store.begin(other).await.unwrap(), Begin::Claimed));
    assert_eq!(store.list(None, 100).await.unwrap().len(), 6);
    assert_eq!(store.list(Some(NS), 100).await.unwrap().len(), 5);
    assert_eq!(store.list(Some("other"), 100).await.unwrap().len(), 1);
    assert_eq!(store.list(None, 2).await.unwrap().len(), 2);
    assert_eq!(store.list(None, 0).await.unwrap().len(), 0);

    clock.advance(Duration::from_secs(10));
    // 3 completed records and the lease in "other" (30 s) — only the 3 are expired.
    assert_eq!(store.purge_expired().await.unwrap(), 3);
    assert_eq!(store.purge_expired().await.unwrap(), 0);
    assert_eq!(store.list(None, 100).await.unwrap().len(), 3);

    assert!(store.remove(NS, &key(4)).await.unwrap());
    assert!(!store.remove(NS, &key(4)).await.unwrap());
    // Namespaces are separate.
    assert!(!store.remove(NS, &key(9)).await.unwrap());
    assert!(store.remove("other", &key(9)).await.unwrap());
    assert_eq!(store.list(None, 100).await.unwrap().len(), 1);
}

#[tokio::test]
async fn purge_deletes_many_rows_in_batches() {
    let dir = TempDir::new("purge-many");
    let clock = ManualClock::new(0);
    let store = open(&dir.db(), &clock);
    let n = 1_300u32; // more than two internal batches
    for i in 0..n {
        let mut bytes = [0u8; 32];
        bytes[..4].copy_from_slice(&i.to_le_bytes());
        let k = Key::from_bytes(bytes);
        claim(&store, &k, Duration::from_secs(1)).await;
    }
    clock.advance(Duration::from_secs(1));
    // Housekeeping may already have deleted a batch; together they account for every row.
    let purged = store.purge_expired().await.unwrap();
    assert!(
        purged > 0 && purged <= u64::from(n),
        "purged {purged} of {n}"
    );
    assert_eq!(store.purge_expired().await.unwrap(), 0);
    assert!(store.list(None, 10_000).await.unwrap().is_empty());
}

fn numbered_key(i: u32) -> Key {
    let mut bytes = [0xAB; 32];
    bytes[..4].copy_from_slice(&i.to_le_bytes());
    Key::from_bytes(bytes)
}

fn raw_count(path: &Path) -> i64 {
    let conn = rusqlite::Connection::open(path).unwrap();
    conn.query_row("SELECT count(*) FROM idem_records", [], |row| row.get(0))
        .unwrap()
}

/// Housekeeping sweeps the records in key order, a step of 512 every 512 writes, wrapping
/// around: expired rows are gone within a few passes over the table, without a purge.
#[tokio::test]
async fn expired_rows_are_reclaimed_without_purge() {
    let dir = TempDir::new("housekeeping");
    let clock = ManualClock::new(0);
    let store = open(&dir.db(), &clock);
    for i in 0..600 {
        claim(&store, &numbered_key(i), Duration::from_secs(1)).await;
    }
    clock.advance(Duration::from_secs(2));
    let expired = |path: &Path| -> i64 {
        let conn = rusqlite::Connection::open(path).unwrap();
        conn.query_row(
            "SELECT count(*) FROM idem_records WHERE expires_at_ms <= 2000",
            [],
            |row| row.get(0),
        )
        .unwrap()
    };
    let mut writes = 600;
    while expired(&dir.db()) > 0 {
        claim(&store, &numbered_key(writes), LEASE).await;
        writes += 1;
        // The table never exceeds 600 + the claims since; two full passes are plenty.
        assert!(
            writes < 600 + 4 * 512 * 3,
            "still {} expired",
            expired(&dir.db())
        );
    }
    let live = i64::from(writes - 600);
    assert_eq!(raw_count(&dir.db()), live, "only the live claims are left");
    assert_eq!(store.purge_expired().await.unwrap(), 0);
    // And purge deletes what expired, all of it at once.
    clock.advance(LEASE);
    assert_eq!(
        store.purge_expired().await.unwrap(),
        u64::try_from(live).unwrap()
    );
    assert_eq!(raw_count(&dir.db()), 0);
}

#[tokio::test]
async fn large_results_round_trip() {
    let dir = TempDir::new("large");
    let clock = ManualClock::new(0);
    let store = open(&dir.db(), &clock);
    let big: Vec<u8> = (0..3 * 1024 * 1024 + 7).map(|i| (i % 251) as u8).collect();
    let k = key(5);
    let token = claim(&store, &k, LEASE).await;
    store.complete(&token, &big, TTL).await.unwrap();
    drop(store);
    let store = open(&dir.db(), &clock);
    match store.begin(req(&k, &fp(1), LEASE)).await.unwrap() {
        Begin::Completed(first) => assert!(*first.result == big[..]),
        other => panic!("expected completed, got {other:?}"),
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn concurrent_begins_on_one_file_claim_once() {
    let dir = TempDir::new("concurrent");
    // Eight stores, eight connections, as if eight processes shared the file.
    let stores: Vec<Arc<SqliteStore>> = (0..8)
        .map(|_| Arc::new(SqliteStore::open(dir.db()).unwrap()))
        .collect();
    for round in 0..20u8 {
        let k = key(round);
        let mut tasks = Vec::new();
        for i in 0..32 {
            let store = Arc::clone(&stores[i % stores.len()]);
            tasks.push(tokio::spawn(async move {
                store.begin(req(&k, &fp(1), LEASE)).await.unwrap()
            }));
        }
        let mut claimed = 0;
        for task in tasks {
            match task.await.unwrap() {
                Begin::Claimed => claimed += 1,
                Begin::InFlight { .. } => {}
                other => panic!("nobody completed or charged, got {other:?}"),
            }
        }
        assert_eq!(claimed, 1, "round {round}");
    }
}

/// Writes raw values into a stored row, bypassing the store.
fn tamper(path: &Path, sql: &str) {
    let conn = rusqlite::Connection::open(path).unwrap();
    conn.pragma_update(None, "ignore_check_constraints", true)
        .unwrap();
    let changed = conn.execute(sql, []).unwrap();
    assert_eq!(changed, 1, "{sql}");
}

#[tokio::test]
async fn corrupt_rows_are_errors_not_panics() {
    let dir = TempDir::new("corrupt");
    let clock = ManualClock::new(0);
    let store = open(&dir.db(), &clock);
    let cases = [
        "UPDATE idem_records SET fingerprint = x'0102' WHERE key = x'{k}'",
        "UPDATE idem_records SET state = 'exploded' WHERE key = x'{k}'",
        "UPDATE idem_records SET result = NULL WHERE key = x'{k}'",
        "UPDATE idem_records SET created_at_ms = -5 WHERE key = x'{k}'",
        "UPDATE idem_records SET key = x'00' WHERE key = x'{k}'",
        "UPDATE idem_records SET state = 'in_progress', token = NULL WHERE key = x'{k}'",
    ];
    for (n, sql) in cases.iter().enumerate() {
        let n = u8::try_from(n).unwrap() + 100;
        let k = key(n);
        let token = claim(&store, &k, LEASE).await;
        store.complete(&token, b"ok", TTL).await.unwrap();
        tamper(&dir.db(), &sql.replace("{k}", &k.to_hex()));
        if sql.contains("SET key") {
            // The row moved to a malformed key: the listing skips it instead of failing.
            assert!(store.get(NS, &k).await.unwrap().is_none());
            assert!(store.list(None, 100).await.unwrap().is_empty());
            continue;
        }
        let got = store.get(NS, &k).await;
        assert!(
            matches!(got, Err(Error::CorruptRecord { .. })),
            "{sql}: {got:?}"
        );
        let begun = store.begin(req(&k, &fp(1), LEASE)).await;
        assert!(
            matches!(begun, Err(Error::CorruptRecord { .. })),
            "{sql}: {begun:?}"
        );
        let message = begun.unwrap_err().to_string();
        assert!(message.contains("corrupt record"), "{message}");
        // Skipped by the listing, and removable by the admin API.
        assert!(store.list(None, 100).await.unwrap().is_empty(), "{sql}");
        assert!(store.remove(NS, &k).await.unwrap());
        claim(&store, &k, LEASE).await;
        store.remove(NS, &k).await.unwrap();
    }
}

#[tokio::test]
async fn a_corrupt_expired_row_is_simply_reclaimed() {
    let dir = TempDir::new("corrupt-expired");
    let clock = ManualClock::new(0);
    let store = open(&dir.db(), &clock);
    let k = key(7);
    claim(&store, &k, Duration::from_secs(1)).await;
    tamper(
        &dir.db(),
        &format!(
            "UPDATE idem_records SET fingerprint = x'00' WHERE key = x'{}'",
            k.to_hex()
        ),
    );
    clock.advance(Duration::from_secs(1));
    claim(&store, &k, LEASE).await;
    assert_eq!(store.get(NS, &k).await.unwrap().unwrap().fingerprint, fp(1));
}

#[test]
fn a_database_from_a_newer_idem_is_refused() {
    let dir = TempDir::new("version");
    drop(SqliteStore::open(dir.db()).unwrap());
    let conn = rusqlite::Connection::open(dir.db()).unwrap();
    let version: i64 = conn
        .pragma_query_value(None, "user_version", |row| row.get(0))
        .unwrap();
    assert_eq!(version, SCHEMA_VERSION);
    let mode: String = conn
        .pragma_query_value(None, "journal_mode", |row| row.get(0))
        .unwrap();
    assert_eq!(mode, "wal");
    conn.pragma_update(None, "user_version", SCHEMA_VERSION + 1)
        .unwrap();
    drop(conn);
    let error = SqliteStore::open(dir.db()).unwrap_err();
    assert!(matches!(error, Error::Config(_)), "{error:?}");
    let message = error.to_string();
    assert!(
        message.contains(&format!("schema version {}", SCHEMA_VERSION + 1))
            && message.contains("upgrade idem"),
        "{message}"
    );
}

#[test]
fn a_file_that_is_not_a_database_is_a_store_error() {
    let dir = TempDir::new("garbage");
    std::fs::write(dir.db(), vec![0x42u8; 8192]).unwrap();
    let error = SqliteStore::open(dir.db()).unwrap_err();
    assert!(matches!(error, Error::Store { .. }), "{error:?}");
}

#[tokio::test]
async fn in_memory_store_works() {
    let store = SqliteStore::open_in_memory().unwrap();
    assert_eq!(store.path(), None);
    let k = key(8);
    let token = claim(&store, &k, LEASE).await;
    store.complete(&token, b"x", TTL).await.unwrap();
    assert!(matches!(
        store.begin(req(&k, &fp(1), LEASE)).await.unwrap(),
        Begin::Completed(_)
    ));
}

#[tokio::test]
async fn the_engine_replays_across_store_instances() {
    const CHARGE: ToolInfo = ToolInfo::idempotent("charge");
    let dir = TempDir::new("engine");
    let mut runs = 0;
    for _ in 0..2 {
        // A new store each time, as in a new process.
        let store: Arc<dyn Store> = Arc::new(SqliteStore::open(dir.db()).unwrap());
        let turn = Turn::new("conv/turn-1").with_store(store);
        let mut args = ArgsDigest::new(CHARGE.name);
        args.arg("cents", &500).unwrap();
        let (key, fingerprint) =
            args.finish(turn.namespace(), turn.id(), CHARGE.name, CHARGE.version);
        let receipt = execute(
            idem_tools_runtime::Call::new(&CHARGE, &turn, key, fingerprint),
            Codec::ok_only(),
            async {
                runs += 1;
                Ok::<_, Error>(format!("receipt-{runs}"))
            },
        )
        .await
        .unwrap();
        assert_eq!(receipt, "receipt-1");
    }
    assert_eq!(runs, 1);
}

/// Rough cost per call on a file, printed; run with `--ignored --nocapture` (release mode for
/// meaningful numbers).
#[tokio::test]
#[ignore = "a measurement, not a test"]
async fn measure_cost_per_call() {
    const TOOL: ToolInfo = ToolInfo::idempotent("measure");
    let dir = TempDir::new("measure");
    let store: Arc<dyn Store> = Arc::new(SqliteStore::open(dir.db()).unwrap());
    let n = 2_000u32;
    let turn = Turn::new("measure").with_store(Arc::clone(&store));
    let keys: Vec<_> = (0..n)
        .map(|i| {
            let mut args = ArgsDigest::new(TOOL.name);
            args.arg("i", &i).unwrap();
            args.finish(turn.namespace(), turn.id(), TOOL.name, TOOL.version)
        })
        .collect();
    let started = std::time::Instant::now();
    for (k, f) in &keys {
        execute(
            idem_tools_runtime::Call::new(&TOOL, &turn, *k, *f),
            Codec::ok_only(),
            async { Ok::<_, Error>(1u32) },
        )
        .await
        .unwrap();
    }
    let first = started.elapsed() / n;
    let turn = Turn::new("measure").with_store(Arc::clone(&store));
    let started = std::time::Instant::now();
    for (k, f) in &keys {
        execute(
            idem_tools_runtime::Call::new(&TOOL, &turn, *k, *f),
            Codec::ok_only(),
            async { Ok::<_, Error>(1u32) },
        )
        .await
        .unwrap();
    }
    let replay = started.elapsed() / n;
    println!("sqlite: first execution {first:?}/call, replay {replay:?}/call");
    let started = std::time::Instant::now();
    for (k, f) in &keys {
        let request = BeginRequest {
            namespace: turn.namespace(),
            ..req(k, f, LEASE)
        };
        let begun = store.begin(request).await.unwrap();
        assert!(matches!(begun, Begin::Completed(_)));
    }
    println!(
        "sqlite: store.begin on a completed key {:?}/call",
        started.elapsed() / n
    );
    let started = std::time::Instant::now();
    for (k, _) in &keys {
        assert!(store.get("elsewhere", k).await.unwrap().is_none());
    }
    println!(
        "sqlite: store.get of a missing key {:?}/call",
        started.elapsed() / n
    );
    let memory: Arc<dyn Store> = Arc::new(idem_tools_runtime::MemoryStore::new());
    let turn = Turn::new("measure").with_store(Arc::clone(&memory));
    let started = std::time::Instant::now();
    for (k, f) in &keys {
        execute(
            idem_tools_runtime::Call::new(&TOOL, &turn, *k, *f),
            Codec::ok_only(),
            async { Ok::<_, Error>(1u32) },
        )
        .await
        .unwrap();
    }
    println!("memory: first execution {:?}/call", started.elapsed() / n);
}

/// The engine releases a cancelled call's key from a destructor (for a tool that asks for it);
/// the store sends the release when it is called, so it lands before any later call on the
/// same store.
#[tokio::test]
async fn a_cancelled_call_releases_its_key_at_once() {
    const SLOW: ToolInfo = ToolInfo::idempotent("slow").with_release_on_cancel();
    let dir = TempDir::new("cancel");
    let store: Arc<dyn Store> = Arc::new(SqliteStore::open(dir.db()).unwrap());
    let turn = Turn::new("t").with_store(Arc::clone(&store));
    let mut args = ArgsDigest::new(SLOW.name);
    args.arg("n", &1).unwrap();
    let (k, f) = args.finish(turn.namespace(), turn.id(), SLOW.name, SLOW.version);
    let (started, mut started_rx) = tokio::sync::mpsc::channel::<()>(1);
    let call = execute(
        idem_tools_runtime::Call::new(&SLOW, &turn, k, f),
        Codec::ok_only(),
        async move {
            started.send(()).await.unwrap();
            std::future::pending::<Result<u32, Error>>().await
        },
    );
    tokio::select! {
        _ = call => panic!("the tool never finishes"),
        _ = started_rx.recv() => {} // running: drop the call here
    }
    let request = BeginRequest {
        namespace: turn.namespace(),
        ..req(&k, &f, LEASE)
    };
    assert!(matches!(
        store.begin(request).await.unwrap(),
        Begin::Claimed
    ));
}

/// Processes (here: threads, each with its own connection) opening one fresh file at the same
/// moment all get a store: switching the file to WAL and creating the schema wait for each
/// other instead of failing with "database is locked".
#[test]
fn many_openers_of_one_fresh_file_all_succeed() {
    for round in 0..20 {
        let dir = TempDir::new(&format!("openers-{round}"));
        let path = dir.db();
        let start = Arc::new(std::sync::Barrier::new(8));
        let openers: Vec<_> = (0..8)
            .map(|_| {
                let (path, start) = (path.clone(), Arc::clone(&start));
                std::thread::spawn(move || {
                    start.wait();
                    SqliteStore::open(&path).map(drop)
                })
            })
            .collect();
        for opener in openers {
            if let Err(error) = opener.join().unwrap() {
                panic!("round {round}: an opener failed: {error}");
            }
        }
    }
}

/// A busy timeout longer than SQLite takes (`Duration::MAX`) waits as long as SQLite allows:
/// writes in place and on the store's thread, purges and listings all keep working.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_endless_busy_timeout_is_the_longest_sqlite_takes() {
    let dir = TempDir::new("busy-max");
    let clock = ManualClock::new(1_000_000);
    let store = open(&dir.db(), &clock).with_busy_timeout(Duration::MAX);
    for n in 0..4 {
        let lease = claim(&store, &key(n), LEASE).await;
        store.complete(&lease, b"ok", TTL).await.expect("complete");
    }
    store
        .purge_expired()
        .await
        .expect("purge on the store's thread");
    assert_eq!(store.list(None, 10).await.expect("list").len(), 4);
    let lease = claim(&store, &key(9), LEASE).await;
    store
        .complete(&lease, b"ok", TTL)
        .await
        .expect("still writes");
}

/// A claim's holder is the process that made it. A claim whose holder is certainly gone (no
/// process with its pid and start time runs, on this host and in this pid namespace) is free
/// at once; any doubt — a holder still running, even stopped, one on another host or in
/// another namespace, a holder text this build cannot read, none at all — leaves the lease to
/// free it.
#[cfg(target_os = "linux")]
#[tokio::test]
async fn a_claim_is_freed_at_once_only_when_its_holder_is_certainly_gone() {
    use idem_test_support::HolderProcesses;
    use idem_tools_runtime::store::holder::Holder;

    let dir = TempDir::new("holders");
    let clock = ManualClock::new(1_000_000);
    let store = open(&dir.db(), &clock);
    let this = Holder::this_process_text().expect("a Linux process is named");
    let parts: Vec<&str> = this.split(':').collect();
    let (format, boot, namespace, time, pid, start) =
        (parts[0], parts[1], parts[2], parts[3], parts[4], parts[5]);
    let named = |boot: &str, namespace: &str, pid: &str, start: &str| {
        Some(format!("{format}:{boot}:{namespace}:{time}:{pid}:{start}"))
    };

    // A process that ran and was reaped (gone), one stopped (SIGSTOP, as a paused holder),
    // and one that runs.
    let processes = HolderProcesses::start(|pid| Holder::of_pid(pid).map(|h| h.encode()));
    let mut running = std::process::Command::new("sleep")
        .arg("60")
        .spawn()
        .unwrap();
    let running_text = Holder::of_pid(running.id()).unwrap().encode();

    let dead_pid = "4194304"; // above Linux's pid_max: never a running process
    let cases: Vec<(&str, Option<String>, bool)> = vec![
        (
            "a pid no process has",
            named(boot, namespace, dead_pid, start),
            true,
        ),
        (
            "our pid with another start time (reused: the holder ran before us)",
            named(boot, namespace, pid, "1"),
            true,
        ),
        ("a running process", Some(running_text), false),
        ("a stopped process", Some(processes.stopped.clone()), false),
        ("this process", Some(this.to_owned()), false),
        (
            "another boot",
            named("another-boot", namespace, dead_pid, start),
            false,
        ),
        (
            "another pid namespace",
            named(boot, "1", dead_pid, start),
            false,
        ),
        (
            "another time namespace (start times read differently there)",
            Some(format!("{format}:{boot}:{namespace}:1:{dead_pid}:{start}")),
            false,
        ),
        (
            "an unknown format",
            Some(format!("linux9:{boot}:{namespace}:{time}:{dead_pid}:1")),
            false,
        ),
        (
            "the previous format (no time namespace)",
            Some(format!("linux1:{boot}:{namespace}:{dead_pid}:{start}")),
            false,
        ),
        ("damaged text", Some("linux1:??".to_owned()), false),
        ("no holder", None, false),
    ];
    let mut cases = cases;
    if let Some(text) = processes.exited.clone() {
        cases.push(("an exited, reaped process", Some(text), true));
    }
    for (i, (case, holder, gone)) in cases.into_iter().enumerate() {
        let k = numbered_key(i as u32);
        claim(&store, &k, LEASE).await;
        let conn = rusqlite::Connection::open(dir.db()).unwrap();
        conn.execute(
            "UPDATE idem_records SET holder = ?1 WHERE key = ?2",
            rusqlite::params![holder, k.as_bytes().as_slice()],
        )
        .unwrap();
        drop(conn);
        // `get` says what `begin` will do: take the claim over at once, or leave it held.
        let shown = store.get(NS, &k).await.unwrap().unwrap();
        assert_eq!(shown.holder_gone, gone, "{case}: get");
        let listed = store.list(Some(NS), 1_000).await.unwrap();
        let listed = listed.iter().find(|r| r.key == k).unwrap();
        assert_eq!(listed.holder_gone, gone, "{case}: list");
        // Every other case through the claim charged to counts of actions (a transaction).
        let second = fp(2);
        let mut request = req(&k, &second, LEASE);
        if i % 2 == 1 {
            request.charge.max_tool_actions = Some(1_000);
        }
        let answer = store.begin(request).await.unwrap();
        if gone {
            assert!(matches!(answer, Begin::Claimed), "{case}: {answer:?}");
            let record = store.get(NS, &k).await.unwrap().unwrap();
            assert_eq!(record.fingerprint, fp(2), "{case}: the new claim holds it");
        } else {
            assert!(
                matches!(answer, Begin::InFlight { fingerprint } if fingerprint == fp(1)),
                "{case}: {answer:?}"
            );
        }
    }
    running.kill().unwrap();
    running.wait().unwrap();
}

/// A version 5 file (claims without a holder) is migrated to version 6: its claims keep their
/// leases (no holder proves anything), and new claims name theirs.
#[tokio::test]
async fn a_version_5_claim_has_no_holder_and_keeps_its_lease() {
    let dir = TempDir::new("migrate-v5");
    let clock = ManualClock::new(1_000_000);
    let (old, new) = (key(1), key(2));
    {
        let store = open(&dir.db(), &clock);
        claim(&store, &old, LEASE).await;
    }
    {
        // As version 5 left it.
        let conn = rusqlite::Connection::open(dir.db()).unwrap();
        conn.execute_batch("ALTER TABLE idem_records DROP COLUMN holder; PRAGMA user_version = 5;")
            .unwrap();
    }
    let store = open(&dir.db(), &clock);
    let conn = rusqlite::Connection::open(dir.db()).unwrap();
    let version: i64 = conn
        .pragma_query_value(None, "user_version", |row| row.get(0))
        .unwrap();
    assert_eq!(version, SCHEMA_VERSION);
    assert!(matches!(
        store.begin(req(&old, &fp(2), LEASE)).await.unwrap(),
        Begin::InFlight { .. }
    ));
    claim(&store, &new, LEASE).await;
    let holders: Vec<Option<String>> = conn
        .prepare("SELECT holder FROM idem_records ORDER BY key")
        .unwrap()
        .query_map([], |row| row.get(0))
        .unwrap()
        .map(Result::unwrap)
        .collect();
    assert_eq!(holders[0], None);
    #[cfg(target_os = "linux")]
    assert_eq!(
        holders[1].as_deref(),
        idem_tools_runtime::store::holder::Holder::this_process_text()
    );
}

/// A file at this build's schema opens, and answers reads, while another process holds its
/// write lock (a long write): opening takes no lock unless there is something to migrate. (It
/// took the lock to read the version, and failed after the busy timeout with "database is
/// locked": the CLI's `list`, and an agent restarted during another's write.)
#[tokio::test]
async fn a_current_file_opens_and_reads_while_another_process_holds_the_write_lock() {
    let dir = TempDir::new("open-locked");
    let clock = ManualClock::new(1_000_000);
    let store = open(&dir.db(), &clock);
    let k = key(3);
    let lease = claim(&store, &k, LEASE).await;
    store.complete(&lease, b"kept", TTL).await.unwrap();
    drop(store);
    let writer = rusqlite::Connection::open(dir.db()).unwrap();
    writer.execute_batch("BEGIN IMMEDIATE").unwrap();
    let started = std::time::Instant::now();
    let reopened = open(&dir.db(), &clock);
    let record = reopened.get(NS, &k).await.unwrap().expect("the record");
    assert_eq!(record.result.as_deref(), Some(&b"kept"[..]));
    assert!(
        started.elapsed() < Duration::from_secs(2),
        "opened and read at once, not after the busy timeout: {:?}",
        started.elapsed()
    );
    writer.execute_batch("ROLLBACK").unwrap();
}

//! SqliteStore's budget counts: kept in the file (shared by every connection and process,
//! surviving restarts), charged atomically with the claim, expired counts deleted; and the
//! schema migration that added them.
#![cfg(feature = "sqlite")]

mod sqlite_common;

use std::path::Path;
use std::sync::Arc;
use std::time::Duration;

use idem_tools_runtime::clock::ManualClock;
use idem_tools_runtime::key::{Fingerprint, Key};
use idem_tools_runtime::store::budget::TurnIdentity;
use idem_tools_runtime::store::sqlite::SCHEMA_VERSION;
use idem_tools_runtime::store::{
    Begin, BeginRequest, Charge, Exhausted, LeaseToken, SqliteStore, Store,
};
use sqlite_common::TempDir;

const NS: &str = "tenant";
const LEASE: Duration = Duration::from_secs(30);
const WINDOW: Duration = Duration::from_secs(3600);

fn key(n: u32) -> Key {
    let mut bytes = [0x5a; 32];
    bytes[..4].copy_from_slice(&n.to_le_bytes());
    Key::from_bytes(bytes)
}

fn charged<'a>(
    key: &'a Key,
    fp: &'a Fingerprint,
    turn: &'a str,
    max_attempts: u32,
    max_calls: Option<u32>,
    window: Duration,
) -> BeginRequest<'a> {
    BeginRequest {
        namespace: NS,
        key,
        tool: "send",
        turn,
        fingerprint: fp,
        lease: LEASE,
        ttl: Duration::from_secs(60),
        token: LeaseToken::generate(),
        charge: Charge {
            turn: TurnIdentity::new(NS, turn),
            max_attempts,
            max_calls,
            max_tool_actions: None,
            window,
        },
    }
}

fn raw_counts(path: &Path) -> i64 {
    let conn = rusqlite::Connection::open(path).unwrap();
    conn.query_row("SELECT count(*) FROM idem_budgets", [], |row| row.get(0))
        .unwrap()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn every_store_on_a_file_shares_the_budget_atomically() {
    let dir = TempDir::new("budget-shared");
    // Six connections, as six processes sharing the file.
    let stores: Vec<Arc<SqliteStore>> = (0..6)
        .map(|_| Arc::new(SqliteStore::open(dir.db()).unwrap()))
        .collect();
    let fp = Fingerprint::from_bytes([1; 32]);
    for round in 0..3u32 {
        let k = key(round);
        let mut tasks = Vec::new();
        // 36 callers of one failing action: each claim is released at once; callers that find
        // it in flight ask again, until the budget refuses them.
        for i in 0..36 {
            let store = Arc::clone(&stores[i % stores.len()]);
            tasks.push(tokio::spawn(async move {
                let mut claims = 0;
                loop {
                    let req = charged(&k, &fp, "turn-1", 4, None, WINDOW);
                    let lease = req.lease();
                    match store.begin(req).await.unwrap() {
                        Begin::Claimed => {
                            claims += 1;
                            store.release(&lease).await.unwrap();
                        }
                        Begin::InFlight { .. } => tokio::task::yield_now().await,
                        Begin::Refused(Exhausted::Key { attempts: 4, .. }) => return claims,
                        other => panic!("round {round}: {other:?}"),
                    }
                }
            }));
        }
        let mut claimed = 0;
        for task in tasks {
            claimed += task.await.unwrap();
        }
        assert_eq!(
            claimed, 4,
            "round {round}: 4 attempts allowed, over six connections"
        );
    }
    // The turn-wide cap, shared the same way: 5 actions of distinct keys over 6 stores.
    let mut tasks = Vec::new();
    for i in 0..30u32 {
        let store = Arc::clone(&stores[i as usize % stores.len()]);
        tasks.push(tokio::spawn(async move {
            let k = key(100 + i);
            store
                .begin(charged(&k, &fp, "turn-2", 3, Some(5), WINDOW))
                .await
                .unwrap()
        }));
    }
    let mut allowed = 0;
    for task in tasks {
        match task.await.unwrap() {
            Begin::Claimed => allowed += 1,
            Begin::Refused(Exhausted::Turn { calls: 5, limit: 5 }) => {}
            other => panic!("turn cap: {other:?}"),
        }
    }
    assert_eq!(allowed, 5);
}

#[tokio::test]
async fn counts_survive_a_restart() {
    let dir = TempDir::new("budget-restart");
    let fp = Fingerprint::from_bytes([2; 32]);
    let k = key(1);
    {
        let store = SqliteStore::open(dir.db()).unwrap();
        let req = charged(&k, &fp, "turn", 1, None, WINDOW);
        let lease = req.lease();
        assert_eq!(store.begin(req).await.unwrap(), Begin::Claimed);
        store.release(&lease).await.unwrap();
    }
    let store = SqliteStore::open(dir.db()).unwrap();
    match store
        .begin(charged(&k, &fp, "turn", 1, None, WINDOW))
        .await
        .unwrap()
    {
        Begin::Refused(Exhausted::Key {
            attempts: 1,
            limit: 1,
        }) => {}
        other => panic!("the restarted store remembers the attempt: {other:?}"),
    }
}

/// A replay reads: it takes no write lock and writes nothing (the file's change counter stays).
#[tokio::test]
async fn a_replay_writes_nothing() {
    let dir = TempDir::new("budget-replay-read");
    let store = SqliteStore::open(dir.db()).unwrap();
    let fp = Fingerprint::from_bytes([4; 32]);
    let k = key(4);
    let req = charged(&k, &fp, "turn", 1, Some(1), WINDOW);
    let lease = req.lease();
    assert_eq!(store.begin(req).await.unwrap(), Begin::Claimed);
    store.complete(&lease, b"r", WINDOW).await.unwrap();
    // `data_version` changes for a connection when *another* connection commits.
    let watcher = rusqlite::Connection::open(dir.db()).unwrap();
    let version = |conn: &rusqlite::Connection| -> i64 {
        conn.query_row("PRAGMA data_version", [], |row| row.get(0))
            .unwrap()
    };
    let before = version(&watcher);
    for _ in 0..20 {
        match store
            .begin(charged(&k, &fp, "turn", 1, Some(1), WINDOW))
            .await
            .unwrap()
        {
            Begin::Completed(first) => assert_eq!(&*first.result, b"r"),
            other => panic!("a replay past every cap: {other:?}"),
        }
    }
    assert_eq!(version(&watcher), before, "replays committed nothing");
}

#[tokio::test]
async fn expired_turn_counts_are_deleted_by_purge_and_by_housekeeping() {
    let dir = TempDir::new("budget-purge");
    let clock = ManualClock::new(1_000_000);
    let store = SqliteStore::open(dir.db())
        .unwrap()
        .with_clock(Arc::new(clock.clone()));
    let fp = Fingerprint::from_bytes([3; 32]);
    let short = Duration::from_secs(1);
    for i in 0..40 {
        let k = key(i);
        let turn = format!("turn-{i}");
        let req = charged(&k, &fp, &turn, 3, Some(10), short);
        assert_eq!(store.begin(req).await.unwrap(), Begin::Claimed);
    }
    assert_eq!(raw_counts(&dir.db()), 40, "a turn count per capped turn");
    clock.advance(Duration::from_millis(999));
    assert_eq!(store.purge_expired().await.unwrap(), 0);
    assert_eq!(raw_counts(&dir.db()), 40, "counts live while now < expiry");
    clock.advance(Duration::from_millis(1));
    // The claims (30 s leases) stay; the turn counts go.
    assert_eq!(store.purge_expired().await.unwrap(), 0);
    assert_eq!(raw_counts(&dir.db()), 0);

    // Housekeeping deletes expired turn counts too, without purge_expired.
    for i in 0..600 {
        let k = key(1_000 + i);
        let turn = format!("busy-{i}");
        store
            .begin(charged(&k, &fp, &turn, 3, Some(3), short))
            .await
            .unwrap();
    }
    clock.advance(Duration::from_secs(40));
    for i in 0..600 {
        let k = key(5_000 + i);
        store
            .begin(charged(&k, &fp, "busy", 3, None, WINDOW))
            .await
            .unwrap();
    }
    // Writes 513..1200 after the last housekeeping include at least one more: each deletes a
    // batch (512) of the 600 expired turn counts, on the store's thread (a `get` goes after
    // it). How many passes ran depends on how the writes were batched, so at least one.
    store.get(NS, &key(0)).await.unwrap();
    let left = raw_counts(&dir.db());
    assert!(
        left <= 600 - 512,
        "housekeeping deleted expired turn counts without purge_expired: {left} left"
    );
    store.purge_expired().await.unwrap();
    assert_eq!(raw_counts(&dir.db()), 0);
}

/// SQL of schema version 1, as idem 0.1 wrote it.
const SCHEMA_V1: &str = "
CREATE TABLE idem_records (
    namespace     TEXT    NOT NULL,
    key           BLOB    NOT NULL,
    tool          TEXT    NOT NULL,
    state         TEXT    NOT NULL CHECK (state IN ('in_progress', 'completed')),
    fingerprint   BLOB    NOT NULL,
    result        BLOB,
    created_at_ms INTEGER NOT NULL,
    expires_at_ms INTEGER NOT NULL,
    token         INTEGER,
    PRIMARY KEY (namespace, key)
) STRICT;
CREATE INDEX idem_records_expires_at ON idem_records (expires_at_ms);
PRAGMA user_version = 1;
";

#[tokio::test]
async fn a_version_1_database_is_migrated_and_keeps_its_records() {
    let dir = TempDir::new("migrate-v1");
    let k = key(9);
    let fp = Fingerprint::from_bytes([9; 32]);
    {
        let conn = rusqlite::Connection::open(dir.db()).unwrap();
        conn.execute_batch(SCHEMA_V1).unwrap();
        // A completed record as version 1 left it: no token.
        conn.execute(
            "INSERT INTO idem_records VALUES (?1, ?2, 'send', 'completed', ?3, ?4, 1, ?5, NULL)",
            rusqlite::params![
                NS,
                k.as_bytes().as_slice(),
                fp.as_bytes().as_slice(),
                b"{\"ok\":1}".as_slice(),
                i64::MAX
            ],
        )
        .unwrap();
    }
    let store = SqliteStore::open(dir.db()).unwrap();
    let conn = rusqlite::Connection::open(dir.db()).unwrap();
    let version = user_version(&conn);
    assert_eq!((version, SCHEMA_VERSION), (7, 7));
    assert!(!has_counts_expiry_index(&conn));
    match store
        .begin(charged(&k, &fp, "turn", 3, None, WINDOW))
        .await
        .unwrap()
    {
        Begin::Completed(first) => assert_eq!(&*first.result, b"{\"ok\":1}"),
        other => panic!("the old record replays: {other:?}"),
    }
    assert_eq!(raw_counts(&dir.db()), 0, "a replay counts nothing");
    drop(store);
    // Opening again is a no-op.
    SqliteStore::open(dir.db()).unwrap();
}

/// The schema version a database says it has.
fn user_version(conn: &rusqlite::Connection) -> i64 {
    conn.pragma_query_value(None, "user_version", |row| row.get(0))
        .unwrap()
}

/// Whether the counts still have the index on their expiry that schema 7 dropped.
fn has_counts_expiry_index(conn: &rusqlite::Connection) -> bool {
    conn.query_row(
        "SELECT count(*) FROM sqlite_master WHERE name = 'idem_budgets_expires_at'",
        [],
        |row| row.get::<_, i64>(0),
    )
    .unwrap()
        == 1
}

#[tokio::test]
async fn a_version_6_database_loses_the_index_on_the_counts_expiry() {
    let dir = TempDir::new("budget-v6");
    let fp = Fingerprint::from_bytes([6; 32]);
    let (first, second) = (key(1), key(2));
    {
        let store = SqliteStore::open(dir.db()).unwrap();
        let req = charged(&first, &fp, "turn-6", 3, Some(10), WINDOW);
        assert_eq!(store.begin(req).await.unwrap(), Begin::Claimed);
    }
    {
        // As version 6 left it.
        let conn = rusqlite::Connection::open(dir.db()).unwrap();
        conn.execute_batch(
            "CREATE INDEX idem_budgets_expires_at ON idem_budgets (expires_at_ms);
             PRAGMA user_version = 6;",
        )
        .unwrap();
    }
    let store = SqliteStore::open(dir.db()).unwrap();
    let conn = rusqlite::Connection::open(dir.db()).unwrap();
    let version = user_version(&conn);
    assert_eq!(version, SCHEMA_VERSION);
    assert!(!has_counts_expiry_index(&conn));
    assert_eq!(raw_counts(&dir.db()), 1, "the turn's count is kept");
    let req = charged(&second, &fp, "turn-6", 3, Some(10), WINDOW);
    assert_eq!(store.begin(req).await.unwrap(), Begin::Claimed);
}

/// SQL of schema version 3 on top of version 1: budget counters, and each key's attempt count
/// in its row.
const SCHEMA_V3_ON_V1: &str = "
CREATE TABLE idem_budgets (
    id            BLOB    NOT NULL PRIMARY KEY,
    count         INTEGER NOT NULL,
    expires_at_ms INTEGER NOT NULL
) STRICT, WITHOUT ROWID;
CREATE INDEX idem_budgets_expires_at ON idem_budgets (expires_at_ms);
ALTER TABLE idem_records ADD COLUMN attempts INTEGER NOT NULL DEFAULT 0;
ALTER TABLE idem_records ADD COLUMN attempts_expire_ms INTEGER NOT NULL DEFAULT 0;
PRAGMA user_version = 3;
";

/// Version 4 copies every row into a `WITHOUT ROWID` table: records, and released claims
/// with their attempt counts, survive it.
#[tokio::test]
async fn a_version_3_database_is_migrated_and_keeps_its_records_and_counts() {
    let dir = TempDir::new("migrate-v3");
    let (done, released) = (key(31), key(32));
    let fp = Fingerprint::from_bytes([3; 32]);
    {
        let conn = rusqlite::Connection::open(dir.db()).unwrap();
        conn.execute_batch(SCHEMA_V1).unwrap();
        conn.execute_batch(SCHEMA_V3_ON_V1).unwrap();
        let insert =
            "INSERT INTO idem_records VALUES (?1, ?2, 'send', ?3, ?4, ?5, 1, ?6, 7, ?7, ?8)";
        conn.execute(
            insert,
            rusqlite::params![
                NS,
                done.as_bytes().as_slice(),
                "completed",
                fp.as_bytes().as_slice(),
                b"{\"ok\":2}".as_slice(),
                i64::MAX,
                0,
                0
            ],
        )
        .unwrap();
        // A released claim: no live record, two attempts counted until far in the future.
        conn.execute(
            insert,
            rusqlite::params![
                NS,
                released.as_bytes().as_slice(),
                "in_progress",
                fp.as_bytes().as_slice(),
                None::<Vec<u8>>,
                0,
                2,
                i64::MAX
            ],
        )
        .unwrap();
    }
    let store = SqliteStore::open(dir.db()).unwrap();
    let conn = rusqlite::Connection::open(dir.db()).unwrap();
    let version = user_version(&conn);
    assert_eq!(version, SCHEMA_VERSION);
    assert!(
        conn.prepare("SELECT rowid FROM idem_records").is_err(),
        "the records table has no rowid any more"
    );
    match store
        .begin(charged(&done, &fp, "turn", 3, None, WINDOW))
        .await
        .unwrap()
    {
        Begin::Completed(first) => assert_eq!(&*first.result, b"{\"ok\":2}"),
        other => panic!("the old record replays: {other:?}"),
    }
    // Two attempts were counted before records carried their turn: they belong to no turn
    // now, so the key's next claim is a new action of its turn, which may claim it 3 times.
    for attempt in 1..=3 {
        let req = charged(&released, &fp, "turn", 3, None, WINDOW);
        let lease = req.lease();
        assert_eq!(
            store.begin(req).await.unwrap(),
            Begin::Claimed,
            "attempt {attempt}"
        );
        store.release(&lease).await.unwrap();
    }
    assert_eq!(
        store
            .begin(charged(&released, &fp, "turn", 3, None, WINDOW))
            .await
            .unwrap(),
        Begin::Refused(Exhausted::Key {
            attempts: 3,
            limit: 3
        })
    );
    drop(store);
    SqliteStore::open(dir.db()).unwrap();
}

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
    Begin, BeginRequest, Charge, Exhausted, KeyCounter, LeaseToken, SqliteStore, Store,
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
        fingerprint: fp,
        lease: LEASE,
        token: LeaseToken::generate(),
        charge: Some(Charge {
            turn: TurnIdentity::new(NS, turn),
            counter: KeyCounter::TurnAndKey,
            max_attempts,
            max_calls,
            window,
        }),
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
        for i in 0..36 {
            let store = Arc::clone(&stores[i % stores.len()]);
            tasks.push(tokio::spawn(async move {
                store
                    .begin(charged(&k, &fp, "turn-1", 4, None, WINDOW))
                    .await
                    .unwrap()
            }));
        }
        let (mut claimed, mut in_flight, mut refused) = (0, 0, Vec::new());
        for task in tasks {
            match task.await.unwrap() {
                Begin::Claimed => claimed += 1,
                Begin::InFlight { .. } => in_flight += 1,
                Begin::Exhausted(Exhausted::Key { attempts, .. }) => refused.push(attempts),
                other => panic!("round {round}: {other:?}"),
            }
        }
        assert_eq!(
            (claimed, in_flight),
            (1, 3),
            "round {round}: 4 attempts allowed"
        );
        refused.sort_unstable();
        assert_eq!(refused, (5..=36).collect::<Vec<u32>>(), "honest numbering");
    }
    // The turn-wide cap, shared the same way: 5 calls of distinct keys over 6 stores.
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
            Begin::Exhausted(Exhausted::Turn { limit: 5, .. }) => {}
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
        let lease = idem_tools_runtime::store::conformance::lease_of(&req);
        assert_eq!(store.begin(req).await.unwrap(), Begin::Claimed);
        store.complete(&lease, b"{}", WINDOW).await.unwrap();
    }
    let store = SqliteStore::open(dir.db()).unwrap();
    match store
        .begin(charged(&k, &fp, "turn", 1, None, WINDOW))
        .await
        .unwrap()
    {
        Begin::Exhausted(Exhausted::Key {
            attempts: 2,
            limit: 1,
            completed: true,
        }) => {}
        other => panic!("the restarted store remembers the attempt: {other:?}"),
    }
}

#[tokio::test]
async fn expired_counts_are_deleted_by_purge_and_by_housekeeping() {
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
    assert_eq!(
        raw_counts(&dir.db()),
        80,
        "a per-key and a turn count per call"
    );
    clock.advance(Duration::from_millis(999));
    assert_eq!(store.purge_expired().await.unwrap(), 0);
    assert_eq!(raw_counts(&dir.db()), 80, "counts live while now < expiry");
    clock.advance(Duration::from_millis(1));
    // The claims (30 s leases) stay; the counts go.
    assert_eq!(store.purge_expired().await.unwrap(), 0);
    assert_eq!(raw_counts(&dir.db()), 0);

    // Housekeeping deletes expired counts too, without purge_expired.
    for i in 0..600 {
        let k = key(1_000 + i);
        store
            .begin(charged(&k, &fp, "busy", 3, None, short))
            .await
            .unwrap();
    }
    clock.advance(Duration::from_secs(2));
    for i in 0..600 {
        let k = key(5_000 + i);
        store
            .begin(charged(&k, &fp, "busy", 3, None, WINDOW))
            .await
            .unwrap();
    }
    // Writes 513..1152 after the last housekeeping include one more: it deletes a batch (512)
    // of the 600 expired counts.
    assert_eq!(raw_counts(&dir.db()), 1_200 - 512);
    assert_eq!(store.purge_expired().await.unwrap(), 0, "no record expired");
    assert_eq!(raw_counts(&dir.db()), 600);
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
    let version: i64 = conn
        .pragma_query_value(None, "user_version", |row| row.get(0))
        .unwrap();
    assert_eq!((version, SCHEMA_VERSION), (2, 2));
    match store
        .begin(charged(&k, &fp, "turn", 3, None, WINDOW))
        .await
        .unwrap()
    {
        Begin::Completed(first) => assert_eq!(&*first.result, b"{\"ok\":1}"),
        other => panic!("the old record replays: {other:?}"),
    }
    assert_eq!(raw_counts(&dir.db()), 1, "the new table counts the attempt");
    drop(store);
    // Opening again is a no-op.
    SqliteStore::open(dir.db()).unwrap();
}

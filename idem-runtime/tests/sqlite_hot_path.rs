//! SqliteStore's hot path: what runs on the caller's thread never waits for a lock, a replay
//! takes no write lock, and the WAL stays bounded although writes never checkpoint by
//! themselves (the store's thread does).
#![cfg(feature = "sqlite")]

mod sqlite_common;

use std::time::{Duration, Instant};

use idem_tools_runtime::key::{Fingerprint, Key};
use idem_tools_runtime::store::{Begin, BeginRequest, Charge, LeaseToken, SqliteStore, Store};
use sqlite_common::TempDir;

const NS: &str = "hot";
const LEASE: Duration = Duration::from_secs(30);
const TTL: Duration = Duration::from_secs(3600);

fn key(n: u32) -> Key {
    let mut bytes = [0x3c; 32];
    bytes[..4].copy_from_slice(&n.to_le_bytes());
    Key::from_bytes(bytes)
}

fn req<'a>(key: &'a Key, fp: &'a Fingerprint) -> BeginRequest<'a> {
    BeginRequest {
        namespace: NS,
        key,
        tool: "send",
        turn: "t",
        fingerprint: fp,
        lease: LEASE,
        ttl: Duration::from_secs(60),
        token: LeaseToken::generate(),
        charge: Charge::unlimited(),
    }
}

/// Another process's connection holding the write lock.
fn hold_write_lock(path: &std::path::Path) -> rusqlite::Connection {
    let conn = rusqlite::Connection::open(path).unwrap();
    conn.execute_batch("BEGIN IMMEDIATE").unwrap();
    conn
}

/// While another process holds the write lock, a claim and a completion return their futures
/// at once (a write on the caller's thread gives up instead of waiting), and are carried out by
/// the store's thread once the lock is free; a replay is answered meanwhile (it takes no write
/// lock).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_callers_thread_never_waits_for_another_processs_lock() {
    let dir = TempDir::new("hot-lock");
    let store = SqliteStore::open(dir.db()).unwrap();
    let fp = Fingerprint::from_bytes([1; 32]);
    let (done, fresh) = (key(1), key(2));
    let r = req(&done, &fp);
    let lease = r.lease();
    assert_eq!(store.begin(r).await.unwrap(), Begin::Claimed);
    store.complete(&lease, b"first", TTL).await.unwrap();

    let other = hold_write_lock(&dir.db());
    let started = Instant::now();
    match store.begin(req(&done, &fp)).await.unwrap() {
        Begin::Completed(first) => assert_eq!(&*first.result, b"first"),
        other => panic!("a replay while the lock is held: {other:?}"),
    }
    let r = req(&fresh, &fp);
    let lease = r.lease();
    let claim = store.begin(r);
    assert!(
        started.elapsed() < Duration::from_millis(200),
        "the caller waited {:?} for the lock",
        started.elapsed()
    );
    let release_later = std::thread::spawn(move || {
        std::thread::sleep(Duration::from_millis(300));
        other.execute_batch("COMMIT").unwrap();
    });
    assert_eq!(claim.await.unwrap(), Begin::Claimed);
    assert!(
        started.elapsed() >= Duration::from_millis(300),
        "the claim was made while another process held the lock"
    );
    release_later.join().unwrap();

    let other = hold_write_lock(&dir.db());
    let started = Instant::now();
    let completion = store.complete(&lease, b"second", TTL);
    assert!(started.elapsed() < Duration::from_millis(200));
    let release_later = std::thread::spawn(move || {
        std::thread::sleep(Duration::from_millis(300));
        other.execute_batch("COMMIT").unwrap();
    });
    completion.await.unwrap();
    release_later.join().unwrap();
    match store.begin(req(&fresh, &fp)).await.unwrap() {
        Begin::Completed(first) => assert_eq!(&*first.result, b"second"),
        other => panic!("{other:?}"),
    }
}

/// Writes never checkpoint the WAL themselves (a checkpoint syncs the file, which a caller
/// must not wait for): the store's thread does, every few hundred writes, so the WAL does not
/// grow with the number of calls.
#[tokio::test]
async fn the_wal_stays_bounded() {
    let dir = TempDir::new("hot-wal");
    let store = SqliteStore::open(dir.db()).unwrap();
    let fp = Fingerprint::from_bytes([2; 32]);
    for n in 0..4_000 {
        let k = key(n);
        let r = req(&k, &fp);
        let lease = r.lease();
        assert_eq!(store.begin(r).await.unwrap(), Begin::Claimed);
        store.complete(&lease, b"a result", TTL).await.unwrap();
    }
    // Through the store's thread: after the checkpoints the writes made due.
    assert!(store.get(NS, &key(0)).await.unwrap().is_some());
    let wal = std::fs::metadata(dir.path("idem.db-wal")).unwrap().len();
    // 8,000 writes of a page each would be over 30 MB of WAL.
    assert!(wal < 8 * 1024 * 1024, "the WAL grew to {wal} bytes");
}

//! Which file a `SqliteStore` is: a relative path stays the file it named when the process
//! changes its working directory, a file with two names (hard links) is refused, and the
//! inspecting open (`open_existing`, the CLI's) writes nothing to a database that is not idem's.
//! Found by a review of the SQLite store (2026-12-07). The first test changes the process's
//! working directory: the others here use absolute paths only.
#![cfg(all(feature = "sqlite", unix))]

mod sqlite_common;

use std::time::Duration;

use idem_tools_runtime::Error;
use idem_tools_runtime::key::{Fingerprint, Key};
use idem_tools_runtime::store::conformance::lease_of;
use idem_tools_runtime::store::{Begin, BeginRequest, Charge, LeaseToken, SqliteStore, Store};
use sqlite_common::TempDir;

const TTL: Duration = Duration::from_secs(3600);

fn request<'a>(key: &'a Key, fingerprint: &'a Fingerprint) -> BeginRequest<'a> {
    BeginRequest {
        namespace: "tenant",
        key,
        tool: "send_message",
        turn: "t",
        fingerprint,
        lease: Duration::from_secs(30),
        ttl: TTL,
        token: LeaseToken::generate(),
        charge: Charge::unlimited(),
    }
}

/// A store opened by a relative path (`SqliteStore::open("idem.db")`, as the README writes it)
/// keeps reading that file after the process changes its working directory: here to a
/// directory holding another idem database (a backup) where the key is completed, while another
/// process holds the write lock of the store's own file (so `begin` reads on the calling
/// thread). It was answered with the other file's result: a wrong replay, the tool never run.
#[tokio::test]
async fn a_relative_path_keeps_naming_its_file_after_a_change_of_directory() {
    let (ours, backup) = (TempDir::new("paths-ours"), TempDir::new("paths-backup"));
    let k = Key::from_bytes([3; 32]);
    let fp = Fingerprint::from_bytes([1; 32]);
    {
        let other = SqliteStore::open(backup.path("idem.db")).expect("open the backup");
        let req = request(&k, &fp);
        let lease = lease_of(&req);
        assert!(matches!(other.begin(req).await, Ok(Begin::Claimed)));
        other
            .complete(&lease, b"FROM-ANOTHER-FILE", TTL)
            .await
            .expect("complete");
    }
    std::env::set_current_dir(ours.path("")).expect("cd");
    let store = SqliteStore::open("idem.db").expect("open by a relative path");
    std::env::set_current_dir(backup.path("")).expect("cd");
    let writer = rusqlite::Connection::open(ours.path("idem.db")).expect("open");
    writer.execute_batch("BEGIN IMMEDIATE").expect("lock");
    let answer = store.begin(request(&k, &fp)).await;
    writer.execute_batch("ROLLBACK").expect("unlock");
    assert!(
        !matches!(answer, Ok(Begin::Completed(_))),
        "a key never run in this store's file was replayed from another file: {answer:?}"
    );
    assert_eq!(store.path(), Some(ours.path("idem.db").as_path()));
}

/// A file with two names is refused by both: SQLite keeps the write-ahead log and the lock
/// index next to the name it opened, so two processes opening one file by two names (a hard
/// link; a file bind-mounted into a container is the same case, which cannot be seen) could
/// both claim one key.
#[test]
fn a_file_with_two_names_is_refused() {
    let dir = TempDir::new("paths-links");
    drop(SqliteStore::open(dir.path("idem.db")).expect("open"));
    std::fs::hard_link(dir.path("idem.db"), dir.path("other-name.db")).expect("link");
    for name in ["idem.db", "other-name.db"] {
        for store in [
            SqliteStore::open(dir.path(name)),
            SqliteStore::open_existing(dir.path(name)),
        ] {
            let Err(Error::Config(message)) = store else {
                panic!("{name}: a file with two names was opened: {store:?}");
            };
            assert!(message.contains("2 names (hard links)"), "{message}");
        }
    }
    // Named by a URI too.
    let uri = format!("file:{}?cache=private", dir.file("other-name.db"));
    let Err(Error::Config(message)) = SqliteStore::open(&uri) else {
        panic!("{uri}: a file with two names was opened");
    };
    assert!(message.contains("2 names (hard links)"), "{message}");
    std::fs::remove_file(dir.path("other-name.db")).expect("unlink");
    SqliteStore::open(dir.path("idem.db")).expect("one name again: opens");
    SqliteStore::open(format!("file://localhost{}", dir.file("idem.db"))).expect("a URI: opens");
}

/// A `file:` URI naming a relative path is refused (each connection the store opens later
/// would resolve it against the working directory of its time); one naming a memory database
/// opens.
#[test]
fn a_uri_naming_a_relative_path_is_refused() {
    let Err(Error::Config(message)) = SqliteStore::open("file:idem.db?cache=shared") else {
        panic!("a relative URI was opened");
    };
    assert!(message.contains("names a relative path"), "{message}");
    SqliteStore::open("file:paths-memory?mode=memory&cache=shared").expect("a memory database");
}

/// The inspecting open (the CLI's) refuses another application's database without writing to
/// it: its `user_version` was migrated as if it were idem's (and the file switched to WAL)
/// whenever it was not 0.
#[test]
fn open_existing_leaves_another_applications_database_as_it_was() {
    let dir = TempDir::new("paths-foreign");
    let file = dir.path("app.db");
    {
        let app = rusqlite::Connection::open(&file).expect("open");
        app.execute_batch("CREATE TABLE users (id INTEGER); PRAGMA user_version = 6;")
            .expect("the application's schema");
    }
    let opened = SqliteStore::open_existing(&file);
    let Err(Error::Config(message)) = &opened else {
        panic!("another application's database was opened: {opened:?}");
    };
    assert!(message.contains("is not an idem database"), "{message}");
    let app = rusqlite::Connection::open(&file).expect("open");
    let version: i64 = app
        .pragma_query_value(None, "user_version", |row| row.get(0))
        .expect("user_version");
    let mode: String = app
        .pragma_query_value(None, "journal_mode", |row| row.get(0))
        .expect("journal_mode");
    assert_eq!((version, mode.as_str()), (6, "delete"), "untouched");
}

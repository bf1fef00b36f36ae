//! SqliteStore passes the store conformance suite: on one shared store, on a fresh store (a new
//! connection, as after a restart) for every check, and in memory.

mod sqlite_common;

use std::path::PathBuf;

use sqlite_common::TempDir;
use std::sync::Arc;
use std::time::Duration;

use idem_tools_runtime::clock::ManualClock;
use idem_tools_runtime::key::Key;
use idem_tools_runtime::store::conformance::{self, Harness};
use idem_tools_runtime::store::{SqliteStore, Store, StoreFuture};

struct Sqlite {
    clock: ManualClock,
    /// The database file; `None` in memory.
    path: Option<PathBuf>,
    shared: Arc<dyn Store>,
    /// Open a new store on the file for every check instead of sharing one.
    reopen: bool,
}

impl Sqlite {
    fn new(path: Option<PathBuf>, reopen: bool) -> Sqlite {
        let clock = ManualClock::new(1_000_000);
        let store = match &path {
            Some(path) => SqliteStore::open(path).unwrap(),
            None => SqliteStore::open_in_memory().unwrap(),
        };
        let shared = Arc::new(store.with_clock(Arc::new(clock.clone())));
        Sqlite {
            clock,
            path,
            shared,
            reopen,
        }
    }
}

impl Harness for Sqlite {
    fn store(&self) -> Arc<dyn Store> {
        match &self.path {
            Some(path) if self.reopen => Arc::new(
                SqliteStore::open(path)
                    .unwrap()
                    .with_clock(Arc::new(self.clock.clone())),
            ),
            _ => Arc::clone(&self.shared),
        }
    }

    fn short(&self) -> Duration {
        Duration::from_secs(30)
    }

    fn advance(&self, by: Duration) -> StoreFuture<'_, ()> {
        self.clock.advance(by);
        StoreFuture::ready(Ok(()))
    }

    /// A ManualClock drives the store: the expiry boundary is checked to the millisecond.
    fn exact_time(&self) -> bool {
        true
    }

    fn corrupt<'a>(&'a self, namespace: &'a str, key: &'a Key) -> Option<StoreFuture<'a, ()>> {
        let path = self.path.clone()?;
        let (namespace, key) = (namespace.to_owned(), *key);
        Some(StoreFuture::new(async move {
            let conn = rusqlite::Connection::open(path).unwrap();
            conn.busy_timeout(Duration::from_secs(5)).unwrap();
            let changed = conn
                .execute(
                    "UPDATE idem_records SET fingerprint = x'c0ffee' \
                     WHERE namespace = ?1 AND key = ?2",
                    rusqlite::params![namespace, key.as_bytes().as_slice()],
                )
                .unwrap();
            assert_eq!(changed, 1, "the record to corrupt exists");
            Ok(())
        }))
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn sqlite_file_store_conforms() {
    let dir = TempDir::new("shared");
    conformance::run_all(&Sqlite::new(Some(dir.db()), false)).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn sqlite_store_reopened_for_every_check_conforms() {
    let dir = TempDir::new("reopen");
    conformance::run_all(&Sqlite::new(Some(dir.db()), true)).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn sqlite_in_memory_store_conforms() {
    conformance::run_all(&Sqlite::new(None, false)).await;
}

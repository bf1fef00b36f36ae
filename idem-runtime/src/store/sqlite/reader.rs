//! Connections that read on the caller's thread: a `begin` that finds a live record (a replay,
//! a wait) or a spent budget answers with one `SELECT`, without the store's thread, the write
//! lock or a write.
//!
//! A read here never waits: its connection's busy timeout is zero, and a read that would wait
//! (or fails in any way) is left to the store's thread, as is a read when every reader is in
//! use. In WAL mode readers take no lock that writers wait for, and the page it reads is
//! almost always in SQLite's or the system's cache: a few microseconds.

use std::path::PathBuf;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Mutex, PoisonError};
use std::time::Duration;

use rusqlite::{Connection, ErrorCode, OpenFlags};

use super::row::{self, Seen};
use crate::Result;
use crate::key::Key;

/// The store's reading connections, opened as needed, at most one per core (up to 8).
pub(super) struct Readers {
    path: PathBuf,
    idle: Mutex<Vec<Connection>>,
    /// Connections open, idle or in use.
    opened: AtomicUsize,
    /// The most connections to open; 0 once opening one failed.
    max: AtomicUsize,
}

impl Readers {
    pub(super) fn new(path: PathBuf) -> Readers {
        let cores = std::thread::available_parallelism().map_or(4, usize::from);
        Readers {
            path,
            idle: Mutex::new(Vec::new()),
            opened: AtomicUsize::new(0),
            max: AtomicUsize::new(cores.clamp(1, 8)),
        }
    }

    /// What `begin` learns of `key` at `now`, read on this thread; `None` if the store's
    /// thread has to answer (no reader free, or the read would wait or failed).
    pub(super) fn seen(
        &self,
        namespace: &str,
        turn: &str,
        key: &Key,
        now: u64,
    ) -> Option<Result<Seen>> {
        let conn = self.take()?;
        let read = row::seen(&conn, namespace, turn, key, now);
        match read {
            Ok(seen) => {
                self.put(conn);
                Some(seen)
            }
            Err(rusqlite::Error::SqliteFailure(e, _))
                if matches!(e.code, ErrorCode::DatabaseBusy | ErrorCode::DatabaseLocked) =>
            {
                self.put(conn);
                None
            }
            Err(error) => {
                // Perhaps broken: closed, and the store's thread answers.
                tracing::debug!(target: "idem", %error, "a SQLite reader failed");
                self.opened.fetch_sub(1, Ordering::SeqCst);
                None
            }
        }
    }

    fn take(&self) -> Option<Connection> {
        if let Some(conn) = self.lock().pop() {
            return Some(conn);
        }
        if self.opened.fetch_add(1, Ordering::SeqCst) >= self.max.load(Ordering::SeqCst) {
            self.opened.fetch_sub(1, Ordering::SeqCst);
            return None;
        }
        match open(&self.path) {
            Ok(conn) => Some(conn),
            Err(error) => {
                tracing::warn!(target: "idem", %error, path = %self.path.display(),
                    "cannot open a SQLite reader; every call goes through the store's thread");
                self.max.store(0, Ordering::SeqCst);
                self.opened.fetch_sub(1, Ordering::SeqCst);
                None
            }
        }
    }

    fn put(&self, conn: Connection) {
        self.lock().push(conn);
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, Vec<Connection>> {
        self.idle.lock().unwrap_or_else(PoisonError::into_inner)
    }
}

/// A connection that only reads, and never waits for a lock.
fn open(path: &std::path::Path) -> rusqlite::Result<Connection> {
    let flags = OpenFlags::SQLITE_OPEN_READ_WRITE
        | OpenFlags::SQLITE_OPEN_NO_MUTEX
        | OpenFlags::SQLITE_OPEN_URI;
    let conn = Connection::open_with_flags(path, flags)?;
    conn.busy_timeout(Duration::ZERO)?;
    conn.pragma_update(None, "query_only", true)?;
    Ok(conn)
}

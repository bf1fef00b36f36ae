//! A durable store on a local SQLite file (feature `sqlite`).

mod claim;
mod ops;
mod pending;
mod reader;
mod row;
mod schema;
mod statements;
mod thread;
mod worker;

#[cfg(test)]
mod batch_tests;

use std::fmt;
use std::path::{Path, PathBuf};
use std::sync::{Arc, mpsc};
use std::time::Duration;

use rusqlite::{Connection, OpenFlags};
use tokio::sync::oneshot;

use self::pending::Pending;
use self::reader::Readers;
use self::thread::{Job, Task};
use self::worker::{Worker, Writer};
use super::{LeaseToken, StoreFuture};
use crate::clock::{Clock, SystemClock};
use crate::key::Key;
use crate::{Error, Result};

pub use self::schema::SCHEMA_VERSION;

/// How long a connection waits for another process's write lock before failing, unless
/// [`SqliteStore::with_busy_timeout`] says otherwise.
pub const DEFAULT_BUSY_TIMEOUT: Duration = Duration::from_secs(5);

/// Records looked at per step of the sweep of expired ones (by
/// [`Store::purge_expired`](super::Store::purge_expired) and by the store's own housekeeping),
/// and expired turn counts deleted per step, so that no single statement holds the write lock
/// for long.
const PURGE_BATCH: i64 = 512;

/// The store sweeps one step of [`PURGE_BATCH`] records after this many writes.
const HOUSEKEEPING_EVERY: u32 = 512;

const STATE_IN_PROGRESS: &str = "in_progress";
const STATE_COMPLETED: &str = "completed";

/// A durable dedup store on a local SQLite file: remembered keys survive process restarts, and
/// several processes on one host can share the file.
///
/// ```no_run
/// # extern crate idem_tools_runtime as idem_tools;
/// use std::sync::Arc;
/// use idem_tools::{SqliteStore, Store};
///
/// let store: Arc<dyn Store> = Arc::new(SqliteStore::open("idem.db")?);
/// # Ok::<(), idem_tools::Error>(())
/// ```
///
/// # What it survives
/// - **A process restart or crash** (`SIGKILL`, OOM kill, a panic that aborts): every
///   transition is committed before the call returns, so a restarted agent replays the results
///   its predecessor recorded. Each claim names the process that holds it (on Linux: the
///   host's boot, the pid namespace, the pid and its start time;
///   [`Holder`](super::holder::Holder)): a claim whose process is certainly gone is free at
///   once, so a run restarted right after a crash claims the key again without waiting (and
///   runs the tool again: forward the key downstream). A holder that still exists — stopped,
///   slow, cut off from the file — or that cannot be proven gone (another host or container,
///   another platform, a claim written without a holder) keeps the key until its lease expires
///   (at most the tool's `lease`, [`DEFAULT_LEASE`](super::DEFAULT_LEASE) by default).
/// - **Several processes on one host sharing the file**: claims are atomic across processes
///   (SQLite's file lock serialises writers), so of any number of concurrent calls with one key,
///   in any number of processes, exactly one runs the tool.
///
/// # What it does not cover
/// - **Several hosts.** SQLite's locking is not reliable over network file systems (NFS, SMB);
///   use a networked store (Redis, Postgres) when workers run on different machines.
/// - **A crash between the side effect and the completion.** If the process dies after the tool
///   changed the world but before its result was recorded, the key is freed when the lease
///   expires and a retry runs the tool again. No store can close this window alone: forward
///   [`current_key`](crate::current_key) to the downstream API (an `Idempotency-Key` header, a
///   message id) so that the second execution is deduplicated there.
/// - **Power loss.** The database runs in WAL mode with `synchronous = NORMAL`: a process crash
///   loses nothing, but an OS crash or power cut may lose the last few committed transactions
///   (never corrupting the file). Losing a completion means one re-execution after a reboot.
///
/// # Cost per call
/// A **replay** (and a wait on a key in flight elsewhere) is one `SELECT` by primary key, on
/// the calling thread: no write lock, nothing written, no hand-off to another thread. A **first
/// execution** is that read, a claim (one `INSERT … ON CONFLICT DO UPDATE … WHERE` that applies
/// the per-key budget itself) and a completion (one `UPDATE`): two writes, each one WAL append
/// of one b-tree page, on the calling thread when the store is idle and shared with the other
/// writes queued at the same time when it is not (see *How it runs*). A lease renewal (every
/// `lease / 4` while the tool runs) is one more write. Writes commit without `fsync`
/// (`synchronous = NORMAL`). BENCHMARKS.md has the numbers, next to hand-written SQL on the
/// same file.
///
/// # Budgets
/// A claim applies the per-key budget in its own statement (a count that is spent makes it
/// change nothing), so concurrent calls in any number of processes never exceed it. A turn with
/// a cap (`max_calls`) reads and writes its count in the same `BEGIN IMMEDIATE` transaction as
/// the claim: the per-key count first, then the turn-wide count, exactly as
/// [`MemoryStore`](super::MemoryStore) counts. A replay is never charged, so it never writes.
///
/// # Time
/// Processes sharing the file must agree on the time, so the store reads the **wall clock**
/// ([`SystemClock`]), not a monotonic one: a lease ends at an instant written in the file.
/// The limit: a wall-clock step larger than the lease (NTP correcting a badly wrong clock, a VM
/// resumed) can free a live holder's key early (a step forward: another caller claims it and
/// the holder's renewal is refused) or keep a dead holder's key blocked for longer (a step
/// back). The engine tracks each lease on its own monotonic clock and stops the tool body when
/// it cannot renew in time, so two executions of one key still do not overlap within one
/// process; across processes, keep host clocks disciplined (slewed, not stepped) and leases
/// well above the largest expected step.
///
/// # How it runs
/// SQLite calls block. Each store has **one writing connection** and a small pool of
/// **reading connections** (at most one per core, up to 8, opened as needed), and **a thread
/// of its own**. Nothing that can wait runs on the caller's thread:
///
/// - `begin` runs on the calling thread when nothing this store was asked is still on its way
///   to the thread: on the writing connection if it is free (its cache is the warmest), else a
///   read on a reading connection, which answers a live record (a replay, a wait) and leaves a
///   claim to the writing connection. A read takes no lock a writer holds (WAL mode), so it
///   answers in microseconds.
/// - A write (claim, completion, renewal, release) runs on the calling thread when the writing
///   connection is free and nothing is queued, with a busy timeout of zero: a write that would
///   wait for another process's lock goes to the thread instead, as does every write while the
///   thread has work. So one caller's first execution costs what hand-written SQL on the
///   calling thread costs, without a hand-off.
/// - The thread runs what it is sent in **batches**: whatever is queued when it gets to them,
///   in order, with the writes of a batch in one transaction (group commit), each answered once
///   its batch committed: concurrent first executions share transactions. Across processes it
///   waits for the write lock up to [`DEFAULT_BUSY_TIMEOUT`] a batch
///   ([`with_busy_timeout`](Self::with_busy_timeout); then the call fails closed with
///   [`Error::Store`] and the tool is not run): a call queued behind a batch that waits starts
///   its own wait when that one gives up, so it may wait up to about twice that. It also checkpoints the WAL (writes never do:
///   a checkpoint syncs the file) and sweeps expired records, every 512 writes. The admin
///   methods (`get`, `list`, `remove`, `purge_expired`) always run there.
///
/// An operation on a key still on its way to the thread keeps a later `begin` of that key off
/// the calling thread, so a call sees every call made on this store before it. One writing
/// connection is enough: SQLite admits one writer per file at a time anyway, and a pool of
/// writers would only queue on the file lock, where SQLite's busy handler sleeps and polls.
///
/// Each method does its work, or sends it to the thread, when called, not when first polled, so
/// a `complete` or `release` issued from a destructor is carried out even if its future is
/// never polled again. A `begin` sent to the thread whose future is dropped before it starts is
/// skipped; once started, a dropped `begin`'s claim is given back by a `release` with the
/// request's token (as the engine does), which runs after it, so no orphaned claim is left
/// behind.
///
/// # Storage
/// Two tables, in a schema whose version is kept in `PRAGMA user_version` and migrated on open
/// ([`SCHEMA_VERSION`]): `idem_records`, a `WITHOUT ROWID` table keyed by the key alone (keys
/// commit to their namespace, a column every statement checks), with an index that finds a
/// turn's records; and `idem_budgets`, the counts of started actions of turns and tools (`id`
/// as named by [`budget`](super::budget), `count`, `expires_at_ms`). Expired rows are
/// overwritten by the next claim of their key (or count of their id); every 512 writes the
/// store's thread sweeps the next 512 records and the next 512 counts in key order (wrapping
/// around) of what expired, so the file does not grow without bound and no index on expiry has
/// to be kept up to date by every write; [`Store::purge_expired`](super::Store::purge_expired)
/// sweeps them all. Results are stored in idem's record format; `idem --sqlite FILE show KEY`
/// renders one.
///
/// A row that cannot be parsed (a wrong-length key or fingerprint, an unknown state, a
/// completed row without a result, ...) makes `begin` and `get` on its key fail with
/// [`Error::CorruptRecord`], never panic; `list` skips it with a warning naming its key, and
/// `remove` deletes it. An expired corrupt row is simply overwritten by the next claim.
pub struct SqliteStore {
    jobs: mpsc::Sender<Job>,
    /// The writing connection, shared with the store's thread.
    writer: Arc<Writer>,
    /// Reading connections for `begin` on the calling thread (a file in WAL mode only).
    readers: Option<Readers>,
    /// Keys with an operation on its way to the thread.
    pending: Arc<Pending>,
    clock: Arc<dyn Clock>,
    path: Option<PathBuf>,
}

/// `path` made absolute (against the working directory now), so that the connections the store
/// opens later reach this file even if the process changes its working directory. `:memory:`,
/// the empty path (SQLite's private databases) and a `file:` URI naming an absolute path or a
/// memory database are taken as they are; a URI naming a relative path is refused (SQLite would
/// resolve it again for each connection).
fn file_path(path: &Path) -> Result<PathBuf> {
    let Some(text) = path.to_str() else {
        return std::path::absolute(path).map_err(|e| Error::store("open", e));
    };
    if text.is_empty() || text == ":memory:" {
        return Ok(path.to_owned());
    }
    if let Some(uri) = text.strip_prefix("file:") {
        if uri_file(uri).is_some_and(|file| file.is_relative()) {
            return Err(Error::Config(format!(
                "the SQLite URI {text} names a relative path, which each connection the store \
                 opens would resolve against the working directory of its time: write an \
                 absolute one (`file:/srv/agents/idem.db?…`), or a plain path"
            )));
        }
        return Ok(path.to_owned());
    }
    std::path::absolute(path).map_err(|e| Error::store("open", e))
}

/// The file a `file:` URI (given without its scheme) names: its path, percent-decoded, after an
/// empty or `localhost` authority; `None` for a memory database or another host.
fn uri_file(uri: &str) -> Option<PathBuf> {
    let (file, query) = uri.split_once('?').unwrap_or((uri, ""));
    let file = file.split('#').next().unwrap_or_default();
    if file == ":memory:" || query.split('&').any(|param| param == "mode=memory") {
        return None;
    }
    let file = match file.strip_prefix("//") {
        Some(rest) => {
            let (authority, path) = rest.find('/').map_or((rest, ""), |at| rest.split_at(at));
            if !authority.is_empty() && authority != "localhost" {
                return None;
            }
            path
        }
        None => file,
    };
    let bytes = file.as_bytes();
    let mut decoded = Vec::with_capacity(bytes.len());
    let mut i = 0;
    while i < bytes.len() {
        let escaped = (bytes[i] == b'%')
            .then(|| bytes.get(i + 1..i + 3))
            .flatten()
            .and_then(|hex| u8::from_str_radix(std::str::from_utf8(hex).ok()?, 16).ok());
        match escaped {
            Some(byte) => {
                decoded.push(byte);
                i += 3;
            }
            None => {
                decoded.push(bytes[i]);
                i += 1;
            }
        }
    }
    Some(PathBuf::from(
        String::from_utf8_lossy(&decoded).into_owned(),
    ))
}

/// Refuses a file with several names (hard links): SQLite keeps the write-ahead log and the
/// lock index next to the name it opened, so two names of one file are two databases to it,
/// and two processes could each claim one key.
fn one_name(path: &Path) -> Result<()> {
    #[cfg(unix)]
    {
        use std::os::unix::fs::MetadataExt;
        let file = match path.to_str().and_then(|text| text.strip_prefix("file:")) {
            Some(uri) => uri_file(uri),
            None => Some(path.to_owned()),
        };
        let links = file
            .and_then(|file| std::fs::metadata(file).ok())
            .map_or(1, |metadata| metadata.nlink());
        if links > 1 {
            return Err(Error::Config(format!(
                "{} has {links} names (hard links): SQLite keeps its write-ahead log and lock \
                 index next to the name a process opens, so two names of one file are two \
                 databases to it, and two processes could both run one action; give the file \
                 one name (into a container, mount the directory that holds it, not the file; \
                 a hard link is no backup of a live database either, it is the same file: copy \
                 it with `sqlite3 FILE \".backup COPY\"` or `VACUUM INTO`)",
                path.display()
            )));
        }
    }
    #[cfg(not(unix))]
    let _ = path;
    Ok(())
}

impl SqliteStore {
    /// Opens (creating it if needed) the database at `path`, migrating its schema to this
    /// build's version.
    ///
    /// This blocks on file I/O: call it at start-up, not inside a hot async path. Processes
    /// opening one file at once wait for each other, for up to [`DEFAULT_BUSY_TIMEOUT`] (a file
    /// already at this build's schema takes no write lock to open).
    ///
    /// # Errors
    /// [`Error::Store`] if the file cannot be opened, is not a database, or stays locked by
    /// another connection for longer than that; and
    /// [`Error::Config`] if it was written by a newer version of idem.
    pub fn open(path: impl AsRef<Path>) -> Result<SqliteStore> {
        let path = file_path(path.as_ref())?;
        let conn = Connection::open(&path).map_err(|e| Error::store("open", e))?;
        one_name(&path)?;
        Self::start(conn, Some(path))
    }

    /// Opens the idem database at `path` only if it exists and already holds idem's schema:
    /// never creates a file, and never adds idem's table to another application's database.
    /// For tools that inspect and repair a store (the `idem` CLI).
    ///
    /// # Errors
    /// [`Error::Store`] if the file does not exist, cannot be opened or is not a database;
    /// [`Error::Config`] if it has no idem schema or was written by a newer version of idem.
    pub fn open_existing(path: impl AsRef<Path>) -> Result<SqliteStore> {
        let path = file_path(path.as_ref())?;
        let flags = OpenFlags::SQLITE_OPEN_READ_WRITE
            | OpenFlags::SQLITE_OPEN_NO_MUTEX
            | OpenFlags::SQLITE_OPEN_URI;
        let conn =
            Connection::open_with_flags(&path, flags).map_err(|e| Error::store("open", e))?;
        one_name(&path)?;
        // Nothing is written (not even the switch to WAL) before the file is known to be idem's.
        if !schema::is_idem(&conn)? {
            return Err(Error::Config(format!(
                "{} is not an idem database (it has no idem schema): check the path",
                path.display()
            )));
        }
        Self::start(conn, Some(path))
    }

    /// A private database in memory: durable for nothing, but handy in tests of code that
    /// expects a `SqliteStore`.
    ///
    /// # Errors
    /// [`Error::Store`] if SQLite cannot allocate it.
    pub fn open_in_memory() -> Result<SqliteStore> {
        let conn = Connection::open_in_memory().map_err(|e| Error::store("open", e))?;
        Self::start(conn, None)
    }

    /// Reads time from `clock` instead of the system clock (a
    /// [`ManualClock`](crate::clock::ManualClock) in tests).
    ///
    /// Stores sharing a file must agree on the time: give every process the system clock.
    #[must_use]
    pub fn with_clock(mut self, clock: Arc<dyn Clock>) -> Self {
        self.writer.set_clock(Arc::clone(&clock));
        self.clock = clock;
        self
    }

    /// Waits up to `timeout` for another process's write lock before failing a call with
    /// [`Error::Store`], instead of [`DEFAULT_BUSY_TIMEOUT`]. SQLite waits at most `i32::MAX`
    /// milliseconds (about 24.8 days); a longer `timeout` waits that long.
    #[must_use]
    pub fn with_busy_timeout(self, timeout: Duration) -> Self {
        // The store's thread sets it on the connection when it next takes it.
        self.writer.set_busy_timeout(timeout);
        self
    }

    /// The database file, or `None` for an in-memory store.
    pub fn path(&self) -> Option<&Path> {
        self.path.as_deref()
    }

    fn start(mut conn: Connection, path: Option<PathBuf>) -> Result<SqliteStore> {
        let wal = schema::configure(&mut conn, path.as_deref(), DEFAULT_BUSY_TIMEOUT)?;
        let fail = |e| Error::store("open", e);
        conn.set_prepared_statement_cache_capacity(statements::CACHED);
        // Checkpoints sync the file: the store's thread runs them (see `worker`), never a
        // write made on a caller's thread.
        conn.pragma_update(None, "wal_autocheckpoint", 0)
            .map_err(fail)?;
        let clock: Arc<dyn Clock> = Arc::new(SystemClock);
        let writer = Arc::new(Writer::new(conn, DEFAULT_BUSY_TIMEOUT, Arc::clone(&clock)));
        let (jobs, queue) = mpsc::channel::<Job>();
        let thread_writer = Arc::clone(&writer);
        std::thread::Builder::new()
            .name("idem-sqlite".to_owned())
            .spawn(move || thread::serve(thread_writer, queue))
            .map_err(|e| Error::store("open", e))?;
        let readers = match (&path, wal) {
            (Some(path), true) => Some(Readers::new(path.clone())),
            _ => None,
        };
        Ok(SqliteStore {
            jobs,
            writer,
            readers,
            pending: Pending::new(),
            clock,
            path,
        })
    }

    /// Sends an operation to the store's thread now, and returns a future of its answer.
    ///
    /// `may_write`: whether it may share a batch's transaction. With `skip_if_abandoned`, it
    /// does nothing if its future was dropped before it started. `key`: the key it acts on,
    /// counted as pending until its answer is committed.
    fn submit<T, F>(
        &self,
        operation: &'static str,
        may_write: bool,
        skip_if_abandoned: bool,
        key: Option<&Key>,
        work: F,
    ) -> Answer<T>
    where
        T: Send + 'static,
        F: FnMut(&mut Worker<'_>) -> rusqlite::Result<Result<T>> + Send + 'static,
    {
        let (reply, answer) = oneshot::channel();
        let op = Box::new(Task {
            operation,
            may_write,
            skip_if_abandoned,
            work,
            answer: None,
            reply,
            pending: key.map(|key| self.pending.mark(key)),
        });
        let sent = self.jobs.send(Job::Op(op)).is_ok();
        Answer {
            operation,
            sent,
            answer,
        }
    }
}

/// An operation's answer, awaited.
struct Answer<T> {
    operation: &'static str,
    sent: bool,
    answer: oneshot::Receiver<Result<T>>,
}

impl<T: Send + 'static> Answer<T> {
    fn boxed<'a>(self) -> StoreFuture<'a, T> {
        StoreFuture::new(async move {
            let stopped = || {
                Error::store(
                    self.operation,
                    "the SQLite store's thread did not answer (it stopped, or an operation \
                     panicked)",
                )
            };
            if !self.sent {
                return Err(stopped());
            }
            self.answer.await.map_err(|_| stopped())?
        })
    }
}

/// A timestamp as SQLite stores it.
fn sql_ms(ms: u64) -> i64 {
    i64::try_from(ms).unwrap_or(i64::MAX)
}

/// A token as SQLite stores it (the same 64 bits, signed).
fn sql_token(token: LeaseToken) -> i64 {
    i64::from_le_bytes(token.0.to_le_bytes())
}

impl fmt::Debug for SqliteStore {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("SqliteStore")
            .field("path", &self.path)
            .field("clock", &self.clock)
            .finish_non_exhaustive()
    }
}

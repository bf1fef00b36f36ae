//! A durable store on a local SQLite file (feature `sqlite`).

mod ops;
mod row;
mod schema;
mod worker;

use std::fmt;
use std::panic::{AssertUnwindSafe, catch_unwind};
use std::path::{Path, PathBuf};
use std::sync::{Arc, mpsc};
use std::time::Duration;

use rusqlite::{Connection, OpenFlags};
use tokio::sync::oneshot;

use self::worker::Worker;
use super::{LeaseToken, StoreFuture};
use crate::clock::{Clock, SystemClock};
use crate::{Error, Result};

pub use self::schema::SCHEMA_VERSION;

/// How long a connection waits for another process's write lock before failing, unless
/// [`SqliteStore::with_busy_timeout`] says otherwise.
pub const DEFAULT_BUSY_TIMEOUT: Duration = Duration::from_secs(5);

/// Expired rows deleted per batch by [`Store::purge_expired`](super::Store::purge_expired) and by the store's own
/// housekeeping, so that no single transaction holds the write lock for long.
const PURGE_BATCH: i64 = 512;

/// The store deletes up to [`PURGE_BATCH`] expired rows after this many writes.
const HOUSEKEEPING_EVERY: u32 = 512;

const STATE_IN_PROGRESS: &str = "in_progress";
const STATE_COMPLETED: &str = "completed";

/// A durable dedup store on a local SQLite file: remembered keys survive process restarts, and
/// several processes on one host can share the file.
///
/// ```no_run
/// # extern crate idem_tools_runtime as idem_tools;
/// use std::sync::Arc;
/// use idem_tools::store::{SqliteStore, Store};
///
/// let store: Arc<dyn Store> = Arc::new(SqliteStore::open("idem.db")?);
/// # Ok::<(), idem_tools::Error>(())
/// ```
///
/// # What it survives
/// - **A process restart or crash** (`SIGKILL`, OOM kill, a panic that aborts): every
///   transition is committed before the call returns, so a restarted agent replays the results
///   its predecessor recorded. A claim whose holder died stays "in flight" until its lease
///   expires (at most the tool's `lease`, [`DEFAULT_LEASE`](super::DEFAULT_LEASE) by default);
///   then a retry runs the tool again.
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
/// A first execution is two store calls: `begin` (one write transaction that charges the turn's
/// budget and claims the key) and `complete` (one write transaction), plus one write per lease
/// renewal (every `lease / 3` while the tool runs). A replay is one store call: its `begin` is
/// charged too, so it is one small write transaction; only an uncharged `begin` (polling a key
/// in flight elsewhere) is a plain read without the write lock. Writes commit without `fsync`
/// (`synchronous = NORMAL`).
///
/// Measured roughly on a small 2-core VM with the `measure_cost_per_call` test (release build,
/// before budgets were kept in the file): a first execution cost 0.06–0.27 ms, a replay about
/// 0.1 ms, against 2 µs with [`MemoryStore`](super::MemoryStore). SQLite's own share is about
/// 35 µs per write and 8 µs per read, so charging the budget in the claim's transaction adds
/// tens of microseconds to a replay; most of the rest is the hand-off to the store's thread
/// and back. Either way it is far below the cost of the tools it protects.
///
/// # Budgets
/// A charged `begin` counts the attempt in the same `BEGIN IMMEDIATE` transaction as the claim,
/// so concurrent calls in any number of processes never exceed a turn's budget: the per-key
/// count first, then the turn-wide count when the turn sets `max_calls`, exactly as
/// [`MemoryStore`](super::MemoryStore) counts. A charged `begin` always takes the write lock,
/// even to answer a replay; an uncharged one (a poll) reads without it.
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
/// SQLite calls block, so each store owns **one connection on one dedicated thread**; the async
/// methods send it a job and await the answer, so the async executor never blocks and the
/// store works under any executor. One connection is enough: every hot-path operation writes,
/// and SQLite admits one writer per file at a time anyway. A pool of writers in one process
/// would only queue on the file lock, where SQLite's busy handler sleeps and polls; queueing in
/// a channel hands the connection over at once. Across processes, writers wait for each other
/// for up to [`DEFAULT_BUSY_TIMEOUT`] ([`with_busy_timeout`](Self::with_busy_timeout); then the call fails closed with
/// [`Error::Store`] and the tool is not run); meanwhile this store's other calls queue behind
/// the waiting one. To spread a hot file over more writers, give processes separate files.
///
/// Each method sends its job when called, not when first polled, so a `complete` or `release`
/// issued from a destructor is carried out even if its future is never polled again. A `begin`
/// whose future is dropped before the job starts is skipped; once started, a dropped `begin`'s
/// claim is given back by a `release` with the request's token (as the engine does), which
/// runs after it on the same thread, so no orphaned claim is left behind.
///
/// # Storage
/// Two tables: `idem_records`, keyed by `(namespace, key)`, and `idem_budgets`, the turn budget
/// counts (`id` as named by [`budget`](super::budget), `count`, `expires_at_ms`), each with an
/// index on `expires_at_ms`, in a schema whose version is kept in `PRAGMA user_version` and
/// migrated on open ([`SCHEMA_VERSION`]). Expired rows are overwritten by the next claim of
/// their key (or charge of their count), deleted in small batches as the store is used, and
/// all at once by [`Store::purge_expired`](super::Store::purge_expired). Results are stored as written by the engine
/// (JSON), so `sqlite3 idem.db "select tool, cast(result as text) from idem_records"` shows what
/// the agent was told.
///
/// A row that cannot be parsed (a wrong-length key or fingerprint, an unknown state, a
/// completed row without a result, ...) makes `begin` and `get` on its key fail with
/// [`Error::CorruptRecord`], never panic; `list` skips it with a warning naming its key, and
/// `remove` deletes it. An expired corrupt row is simply overwritten by the next claim.
pub struct SqliteStore {
    jobs: mpsc::Sender<Job>,
    clock: Arc<dyn Clock>,
    path: Option<PathBuf>,
}

/// Work sent to the connection's thread.
type Job = Box<dyn FnOnce(&mut Worker) + Send>;

impl SqliteStore {
    /// Opens (creating it if needed) the database at `path`, migrating its schema to this
    /// build's version.
    ///
    /// This blocks on file I/O: call it at start-up, not inside a hot async path. Processes
    /// opening one file at once wait for each other, for up to [`DEFAULT_BUSY_TIMEOUT`].
    ///
    /// # Errors
    /// [`Error::Store`] if the file cannot be opened, is not a database, or stays locked by
    /// another connection for longer than that; and
    /// [`Error::Config`] if it was written by a newer version of idem.
    pub fn open(path: impl AsRef<Path>) -> Result<SqliteStore> {
        let path = path.as_ref();
        let conn = Connection::open(path).map_err(|e| Error::store("open", e))?;
        Self::start(conn, Some(path.to_owned()))
    }

    /// Opens the idem database at `path` only if it exists and already holds idem's schema:
    /// never creates a file, and never adds idem's table to another application's database.
    /// For tools that inspect and repair a store (the `idem` CLI).
    ///
    /// # Errors
    /// [`Error::Store`] if the file does not exist, cannot be opened or is not a database;
    /// [`Error::Config`] if it has no idem schema or was written by a newer version of idem.
    pub fn open_existing(path: impl AsRef<Path>) -> Result<SqliteStore> {
        let path = path.as_ref();
        let flags = OpenFlags::SQLITE_OPEN_READ_WRITE
            | OpenFlags::SQLITE_OPEN_NO_MUTEX
            | OpenFlags::SQLITE_OPEN_URI;
        let conn = Connection::open_with_flags(path, flags).map_err(|e| Error::store("open", e))?;
        let version: i64 = conn
            .pragma_query_value(None, "user_version", |row| row.get(0))
            .map_err(|e| Error::store("open", e))?;
        if version == 0 {
            return Err(Error::Config(format!(
                "{} is not an idem database (it has no idem schema): check the path",
                path.display()
            )));
        }
        Self::start(conn, Some(path.to_owned()))
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
        self.clock = clock;
        self
    }

    /// Waits up to `timeout` for another process's write lock before failing a call with
    /// [`Error::Store`], instead of [`DEFAULT_BUSY_TIMEOUT`].
    #[must_use]
    pub fn with_busy_timeout(self, timeout: Duration) -> Self {
        let job: Job = Box::new(move |worker: &mut Worker| {
            if let Err(error) = worker.conn.busy_timeout(timeout) {
                tracing::warn!(target: "idem", %error, "could not set the SQLite busy timeout");
            }
        });
        // Jobs run in order, so every later call waits `timeout`. If the thread is gone, every
        // call fails anyway.
        let _ = self.jobs.send(job);
        self
    }

    /// The database file, or `None` for an in-memory store.
    pub fn path(&self) -> Option<&Path> {
        self.path.as_deref()
    }

    fn start(mut conn: Connection, path: Option<PathBuf>) -> Result<SqliteStore> {
        schema::configure(&mut conn, path.as_deref(), DEFAULT_BUSY_TIMEOUT)?;
        let (jobs, queue) = mpsc::channel::<Job>();
        let mut worker = Worker {
            conn,
            writes_since_housekeeping: 0,
        };
        std::thread::Builder::new()
            .name("idem-sqlite".to_owned())
            .spawn(move || {
                while let Ok(job) = queue.recv() {
                    // A panic in a job must not take the connection down with it; the open
                    // transaction, if any, is rolled back as the job unwinds.
                    if catch_unwind(AssertUnwindSafe(|| job(&mut worker))).is_err() {
                        tracing::error!(target: "idem", "a SQLite store job panicked");
                    }
                }
            })
            .map_err(|e| Error::store("open", e))?;
        Ok(SqliteStore {
            jobs,
            clock: Arc::new(SystemClock),
            path,
        })
    }

    /// Sends `job` to the connection's thread now, and returns a future of its answer.
    ///
    /// With `skip_if_abandoned`, the job does nothing if its future was dropped before the job
    /// started.
    fn submit<T, F>(&self, operation: &'static str, skip_if_abandoned: bool, job: F) -> Answer<T>
    where
        T: Send + 'static,
        F: FnOnce(&mut Worker, u64) -> Result<T> + Send + 'static,
    {
        let (reply, answer) = oneshot::channel();
        let clock = Arc::clone(&self.clock);
        let job: Job = Box::new(move |worker: &mut Worker| {
            if skip_if_abandoned && reply.is_closed() {
                return;
            }
            let now = clock.now_ms();
            let result = job(worker, now);
            // The caller may have gone away meanwhile; then nobody wants the answer.
            let _ = reply.send(result);
            // After answering, so that the caller does not wait for it.
            worker.housekeeping(now);
        });
        let sent = self.jobs.send(job).is_ok();
        Answer {
            operation,
            sent,
            answer,
        }
    }
}

/// A job's answer, awaited.
struct Answer<T> {
    operation: &'static str,
    sent: bool,
    answer: oneshot::Receiver<Result<T>>,
}

impl<T: Send + 'static> Answer<T> {
    fn boxed<'a>(self) -> StoreFuture<'a, T> {
        Box::pin(async move {
            let stopped = || {
                Error::store(
                    self.operation,
                    "the SQLite store's thread did not answer (it stopped, or the operation \
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

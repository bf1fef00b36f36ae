//! The writing connection, and the store's thread that serves it.
//!
//! A write runs on the caller's thread when the connection is free and nothing sent earlier
//! for its key is still on its way (no hand-off, as hand-written SQL would do), and never
//! waits there: a write that would wait for the lock, or finds the connection in use, goes to
//! the thread. The thread runs what was sent in **batches** — every operation queued when it
//! gets to them, in order, the writes of a batch in one transaction (group commit), each
//! answered once its batch committed. So concurrent first executions share transactions: the
//! more there are, the fewer commits each costs. The thread also does the maintenance nobody
//! should wait for: sweeping expired rows and checkpointing the WAL.

use std::panic::{AssertUnwindSafe, catch_unwind};
use std::sync::atomic::{AtomicU32, AtomicU64, Ordering};
use std::sync::mpsc::Receiver;
use std::sync::{Arc, Mutex, MutexGuard, PoisonError, RwLock};
use std::time::Duration;

use rusqlite::{Connection, params};
use tokio::sync::oneshot;

use super::statements::{BEGIN, COMMIT, ROLLBACK};
use super::{HOUSEKEEPING_EVERY, PURGE_BATCH, sql_ms};
use crate::clock::Clock;
use crate::{Error, Result};

/// At most this many operations share a transaction.
const MAX_BATCH: usize = 256;

/// The writing connection, shared by the store's thread and callers that write in place.
pub(super) struct Writer {
    conn: Mutex<Connection>,
    /// How long the thread waits for another process's write lock (callers never wait).
    busy_timeout_ms: AtomicU64,
    /// The clock the thread reads (callers read the store's).
    clock: RwLock<Arc<dyn Clock>>,
    /// Writes since the store started; every [`HOUSEKEEPING_EVERY`] the thread does its
    /// maintenance.
    writes: AtomicU32,
}

impl Writer {
    pub(super) fn new(conn: Connection, busy_timeout: Duration, clock: Arc<dyn Clock>) -> Self {
        Writer {
            conn: Mutex::new(conn),
            busy_timeout_ms: AtomicU64::new(duration_ms(busy_timeout)),
            clock: RwLock::new(clock),
            writes: AtomicU32::new(0),
        }
    }

    pub(super) fn set_busy_timeout(&self, timeout: Duration) {
        self.busy_timeout_ms
            .store(duration_ms(timeout), Ordering::SeqCst);
    }

    pub(super) fn set_clock(&self, clock: Arc<dyn Clock>) {
        *self.clock.write().unwrap_or_else(PoisonError::into_inner) = clock;
    }

    fn clock(&self) -> Arc<dyn Clock> {
        Arc::clone(&self.clock.read().unwrap_or_else(PoisonError::into_inner))
    }

    fn lock(&self) -> MutexGuard<'_, Connection> {
        self.conn.lock().unwrap_or_else(PoisonError::into_inner)
    }

    /// Counts `n` writes; whether that makes maintenance due.
    fn wrote(&self, n: u32) -> bool {
        let before = self.writes.fetch_add(n, Ordering::Relaxed);
        before / HOUSEKEEPING_EVERY != before.wrapping_add(n) / HOUSEKEEPING_EVERY
    }

    /// Runs `work` (which may write) on this thread, if the connection is free: without
    /// waiting for any lock. `None`: the connection was in use, or the work would have waited
    /// or failed; the store's thread has to do it. `due` is set when maintenance became due.
    pub(super) fn here<T>(
        &self,
        clock: &dyn Clock,
        due: &mut bool,
        work: &mut dyn FnMut(&mut Worker<'_>) -> rusqlite::Result<Result<T>>,
    ) -> Option<Result<T>> {
        let conn = self.conn.try_lock().ok()?;
        conn.busy_timeout(Duration::ZERO).ok()?;
        let mut worker = Worker::new(&conn, clock, false);
        let done = work(&mut worker);
        let wrote = worker.wrote;
        let timeout = Duration::from_millis(self.busy_timeout_ms.load(Ordering::SeqCst));
        if let Err(error) = conn.busy_timeout(timeout) {
            tracing::warn!(target: "idem", %error, "could not set the SQLite busy timeout");
        }
        drop(conn);
        *due = wrote && self.wrote(1);
        done.ok()
    }
}

fn duration_ms(d: Duration) -> u64 {
    u64::try_from(d.as_millis()).unwrap_or(u64::MAX)
}

/// The writing connection lent to one batch, or to one operation run in place.
pub(super) struct Worker<'c> {
    pub(super) conn: &'c Connection,
    clock: &'c dyn Clock,
    /// The time of the operation running: read when its batch starts, and again once the
    /// write lock is taken (that may have waited for another process).
    pub(super) now: u64,
    /// Whether the batch has two writes or more: then they share a transaction.
    sharing: bool,
    /// The operation running, and the one that opened the batch's transaction, if open.
    current: usize,
    opened_by: Option<usize>,
    /// Why taking the write lock failed in this batch: the writes after it fail alike at
    /// once, without waiting the busy timeout again each.
    lock_failed: Option<rusqlite::Error>,
    /// Whether a write statement ran.
    wrote: bool,
}

impl<'c> Worker<'c> {
    fn new(conn: &'c Connection, clock: &'c dyn Clock, sharing: bool) -> Self {
        Worker {
            conn,
            clock,
            now: clock.now_ms(),
            sharing,
            current: 0,
            opened_by: None,
            lock_failed: None,
            wrote: false,
        }
    }

    /// Call before a write statement: in a batch of several writes, takes the write lock for
    /// the batch's transaction (the first time).
    pub(super) fn writing(&mut self) -> rusqlite::Result<()> {
        self.wrote = true;
        if self.sharing && self.conn.is_autocommit() {
            self.begin_transaction()?;
            self.opened_by = Some(self.current);
        }
        Ok(())
    }

    /// Runs `f` in a transaction: the batch's, or one of its own.
    pub(super) fn transaction<T>(
        &mut self,
        f: impl FnOnce(&mut Self) -> rusqlite::Result<T>,
    ) -> rusqlite::Result<T> {
        if self.sharing || !self.conn.is_autocommit() {
            self.writing()?;
            return f(self);
        }
        self.wrote = true;
        self.begin_transaction()?;
        let done = f(self).and_then(|value| self.execute(COMMIT).map(|()| value));
        if done.is_err() {
            self.rollback();
        }
        done
    }

    fn execute(&self, sql: &str) -> rusqlite::Result<()> {
        self.conn.prepare_cached(sql)?.execute([]).map(drop)
    }

    /// `BEGIN IMMEDIATE`, then the time again.
    fn begin_transaction(&mut self) -> rusqlite::Result<()> {
        if let Some(error) = &self.lock_failed {
            return Err(same_error(error));
        }
        if let Err(error) = self.execute(BEGIN) {
            self.lock_failed = Some(same_error(&error));
            return Err(error);
        }
        self.now = self.clock.now_ms().max(self.now);
        Ok(())
    }

    /// Rolls back the open transaction, if any (SQLite rolls some failures back itself).
    fn rollback(&mut self) {
        if !self.conn.is_autocommit()
            && let Err(error) = self.execute(ROLLBACK)
        {
            tracing::warn!(target: "idem", %error, "could not roll back a SQLite transaction");
        }
    }

    /// Deletes what expired at `now` among the [`PURGE_BATCH`] records after the key `after`
    /// in key order (from the first if `None`), in one transaction. Returns how many it
    /// deleted, and where the next step starts (`None`: the sweep reached the end).
    pub(super) fn sweep(
        &mut self,
        after: Option<&[u8]>,
        now: u64,
    ) -> rusqlite::Result<(usize, Option<Vec<u8>>)> {
        // No key is the empty blob: x'' comes before every record.
        let after = after.unwrap_or_default();
        let (mut expired, mut last, mut seen) = (Vec::new(), Vec::new(), 0);
        {
            let mut window = self.conn.prepare_cached(
                "SELECT key, expires_at_ms <= ?2 AND attempts_expire_ms <= ?2 \
                 FROM idem_records WHERE key > ?1 ORDER BY key LIMIT ?3",
            )?;
            let mut rows = window.query(params![after, sql_ms(now), PURGE_BATCH])?;
            while let Some(row) = rows.next()? {
                let key = row.get_ref(0)?.as_blob()?;
                if row.get::<_, bool>(1)? {
                    expired.push(key.to_vec());
                }
                last.clear();
                last.extend_from_slice(key);
                seen += 1;
            }
        }
        let deleted = if expired.is_empty() {
            0
        } else {
            self.transaction(|worker| {
                let mut delete = worker.conn.prepare_cached(
                    "DELETE FROM idem_records WHERE key = ?1 \
                     AND expires_at_ms <= ?2 AND attempts_expire_ms <= ?2",
                )?;
                expired.iter().try_fold(0, |deleted, key| {
                    Ok(deleted + delete.execute(params![key, sql_ms(now)])?)
                })
            })?
        };
        let next = (seen == PURGE_BATCH).then_some(last);
        Ok((deleted, next))
    }

    /// Deletes up to [`PURGE_BATCH`] turn counts expired at `now`; returns how many.
    pub(super) fn purge_turn_counts(&self, now: u64) -> rusqlite::Result<usize> {
        self.conn
            .prepare_cached(
                "DELETE FROM idem_budgets WHERE id IN (SELECT id FROM idem_budgets \
                 WHERE expires_at_ms <= ?1 LIMIT ?2)",
            )?
            .execute(params![sql_ms(now), PURGE_BATCH])
    }
}

/// One operation sent to the store's thread.
pub(super) trait Op: Send {
    /// Runs the operation, keeping its answer. `Err`: SQLite itself failed (in a batch's
    /// transaction, the batch is rolled back and its operations run again one by one).
    fn run(&mut self, worker: &mut Worker<'_>) -> rusqlite::Result<()>;
    /// Keeps `error` as the answer.
    fn fail(&mut self, error: &rusqlite::Error);
    /// Sends the answer, once whatever it read or wrote is committed.
    fn finish(self: Box<Self>);
    /// Whether it may write (so that it may share a transaction).
    fn may_write(&self) -> bool;
}

/// What the store's thread is sent.
pub(super) enum Job {
    /// An operation.
    Op(Box<dyn Op>),
    /// Maintenance became due after writes made in place.
    Maintain,
}

/// An [`Op`] made of a closure and the channel its answer goes back on.
pub(super) struct Task<T, F> {
    pub(super) operation: &'static str,
    pub(super) may_write: bool,
    /// Do nothing if the caller stopped waiting before the operation started.
    pub(super) skip_if_abandoned: bool,
    pub(super) work: F,
    pub(super) answer: Option<Result<T>>,
    pub(super) reply: oneshot::Sender<Result<T>>,
    /// Cleared once the answer is committed (see [`Pending`](super::pending::Pending)).
    pub(super) pending: Option<super::pending::Marked>,
}

impl<T, F> Op for Task<T, F>
where
    T: Send + 'static,
    F: FnMut(&mut Worker<'_>) -> rusqlite::Result<Result<T>> + Send + 'static,
{
    fn run(&mut self, worker: &mut Worker<'_>) -> rusqlite::Result<()> {
        if self.skip_if_abandoned && self.reply.is_closed() {
            return Ok(());
        }
        self.answer = Some((self.work)(worker)?);
        Ok(())
    }

    fn fail(&mut self, error: &rusqlite::Error) {
        self.answer = Some(Err(Error::store(self.operation, error.to_string())));
    }

    fn finish(mut self: Box<Self>) {
        drop(self.pending.take());
        if let Some(answer) = self.answer.take() {
            // The caller may have gone away meanwhile; then nobody wants the answer.
            let _ = self.reply.send(answer);
        }
    }

    fn may_write(&self) -> bool {
        self.may_write
    }
}

/// The thread's body: serves batches until every sender is gone.
pub(super) fn serve(writer: Arc<Writer>, queue: Receiver<Job>) {
    let mut thread = Thread {
        writer,
        sweep_after: None,
    };
    let mut batch: Vec<Box<dyn Op>> = Vec::new();
    while let Ok(job) = queue.recv() {
        let mut maintain = false;
        let mut next = Some(job);
        while let Some(job) = next.take() {
            match job {
                Job::Op(op) => batch.push(op),
                Job::Maintain => maintain = true,
            }
            if batch.len() < MAX_BATCH {
                next = queue.try_recv().ok();
            }
        }
        let clock = thread.writer.clock();
        {
            let conn = thread.writer.lock();
            let writes = batch.iter().filter(|op| op.may_write()).count();
            let mut worker = Worker::new(&conn, &*clock, writes > 1);
            // A panic in an operation must not take the connection down with it: the batch's
            // callers are told the thread did not answer, and its transaction is rolled back.
            let ran = catch_unwind(AssertUnwindSafe(|| worker.run_batch(&mut batch)));
            if ran.is_err() {
                tracing::error!(target: "idem", "a SQLite store operation panicked");
                worker.rollback();
            }
            let writes = u32::try_from(writes).unwrap_or(u32::MAX);
            maintain |= writes > 0 && thread.writer.wrote(writes);
        }
        for op in batch.drain(..) {
            op.finish();
        }
        if maintain {
            thread.maintain(&*clock);
        }
    }
}

/// What the thread keeps between batches.
struct Thread {
    writer: Arc<Writer>,
    /// The key after which the sweep of expired records goes on (`None`: from the first).
    sweep_after: Option<Vec<u8>>,
}

impl Thread {
    /// Sweeps the next [`PURGE_BATCH`] records (in key order, wrapping around) of what
    /// expired, deletes as many expired turn counts, and checkpoints the WAL, so that neither
    /// the file nor the WAL grows without bound when nobody calls
    /// [`Store::purge_expired`](crate::store::Store::purge_expired).
    fn maintain(&mut self, clock: &dyn Clock) {
        let conn = self.writer.lock();
        let mut worker = Worker::new(&conn, clock, false);
        let now = worker.now;
        let after = self.sweep_after.take();
        let swept = worker.sweep(after.as_deref(), now).and_then(|(_, next)| {
            self.sweep_after = next;
            worker.purge_turn_counts(now)
        });
        if let Err(error) = swept {
            tracing::warn!(target: "idem", %error, "could not delete expired SQLite records");
        }
        // Writes never checkpoint by themselves (`wal_autocheckpoint` is off): a checkpoint
        // syncs the file, which a caller writing in place must not wait for.
        let checkpoint = conn.query_row("PRAGMA wal_checkpoint(PASSIVE)", [], |_| Ok(()));
        if let Err(error) = checkpoint {
            tracing::warn!(target: "idem", %error, "could not checkpoint the SQLite WAL");
        }
    }
}

impl Worker<'_> {
    /// Runs `batch` in order. Two writes or more share one `BEGIN IMMEDIATE` transaction,
    /// opened by the first write statement (reads before it take no write lock); a lone write
    /// commits by itself. Every answer waits for the commit.
    fn run_batch(&mut self, batch: &mut [Box<dyn Op>]) {
        let mut failed = false;
        for (i, op) in batch.iter_mut().enumerate() {
            self.current = i;
            if let Err(error) = op.run(self) {
                match self.opened_by {
                    None => op.fail(&error),
                    Some(_) => {
                        failed = true;
                        break;
                    }
                }
            }
        }
        if let Some(from) = self.opened_by.take()
            && (failed || self.execute(COMMIT).is_err())
        {
            self.rollback();
            self.one_by_one(&mut batch[from..]);
        }
    }

    /// Runs each of `ops` alone (after their batch failed), so that each gets its own answer.
    fn one_by_one(&mut self, ops: &mut [Box<dyn Op>]) {
        self.sharing = false;
        self.lock_failed = None;
        for op in ops {
            self.now = self.clock.now_ms();
            if let Err(error) = op.run(self) {
                op.fail(&error);
            }
        }
    }
}

/// A copy of `error` (`rusqlite::Error` is not `Clone`).
fn same_error(error: &rusqlite::Error) -> rusqlite::Error {
    match error {
        rusqlite::Error::SqliteFailure(code, message) => {
            rusqlite::Error::SqliteFailure(*code, message.clone())
        }
        other => rusqlite::Error::SqliteFailure(
            rusqlite::ffi::Error::new(rusqlite::ffi::SQLITE_ERROR),
            Some(other.to_string()),
        ),
    }
}

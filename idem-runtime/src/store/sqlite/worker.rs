//! The writing connection, shared by the store's thread and the callers that write in place,
//! and [`Worker`], the connection lent to one batch or one operation.
//!
//! A write runs on the caller's thread when the connection is free and nothing is on its way
//! to the store's thread (no hand-off, as hand-written SQL would do), and never waits there: a
//! write that would wait for the lock, or finds the connection in use, goes to the thread
//! (`thread.rs`).

use std::sync::atomic::{AtomicU32, AtomicU64, Ordering};
use std::sync::{Arc, Mutex, MutexGuard, PoisonError, RwLock};
use std::time::Duration;

use rusqlite::{Connection, params};

use super::statements::{
    BEGIN, COMMIT, RELEASE_SAVEPOINT, ROLLBACK, ROLLBACK_TO_SAVEPOINT, SAVEPOINT,
};
use super::{HOUSEKEEPING_EVERY, PURGE_BATCH, sql_ms};
use crate::Result;
use crate::clock::Clock;

/// The writing connection, shared by the store's thread and callers that write in place.
pub(super) struct Writer {
    conn: Mutex<Held>,
    /// How long the thread waits for another process's write lock (callers never wait).
    busy_timeout_ms: AtomicU64,
    /// The clock the thread reads (callers read the store's).
    clock: RwLock<Arc<dyn Clock>>,
    /// Writes since the store started; every [`HOUSEKEEPING_EVERY`] the thread does its
    /// maintenance.
    writes: AtomicU32,
}

impl Writer {
    /// `conn` has `busy_timeout` set already.
    pub(super) fn new(conn: Connection, busy_timeout: Duration, clock: Arc<dyn Clock>) -> Self {
        Writer {
            conn: Mutex::new(Held {
                conn,
                busy: Some(busy_timeout),
            }),
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

    pub(super) fn clock(&self) -> Arc<dyn Clock> {
        Arc::clone(&self.clock.read().unwrap_or_else(PoisonError::into_inner))
    }

    /// The connection for the store's thread, which waits up to the busy timeout for another
    /// process's write lock.
    pub(super) fn lock(&self) -> MutexGuard<'_, Held> {
        let mut held = self.conn.lock().unwrap_or_else(PoisonError::into_inner);
        let timeout = Duration::from_millis(self.busy_timeout_ms.load(Ordering::SeqCst));
        if let Err(error) = held.wait_up_to(timeout) {
            tracing::warn!(target: "idem", %error, "could not set the SQLite busy timeout");
        }
        held
    }

    /// Counts `n` writes; whether that makes maintenance due.
    pub(super) fn wrote(&self, n: u32) -> bool {
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
        let mut held = self.conn.try_lock().ok()?;
        held.wait_up_to(Duration::ZERO).ok()?;
        let mut worker = Worker::new(&held.conn, clock, false);
        let done = work(&mut worker);
        let wrote = worker.wrote;
        drop(held);
        *due = wrote && self.wrote(1);
        done.ok()
    }
}

/// The writing connection, and the busy timeout it has now: set only when it changes (the
/// callers that write in place want none, the store's thread the store's), not twice per call.
pub(super) struct Held {
    pub(super) conn: Connection,
    /// `None` once setting it failed: then it is set again before the next use.
    busy: Option<Duration>,
}

impl Held {
    fn wait_up_to(&mut self, timeout: Duration) -> rusqlite::Result<()> {
        let timeout = clamp_busy_timeout(timeout);
        if self.busy != Some(timeout) {
            self.busy = None;
            self.conn.busy_timeout(timeout)?;
            self.busy = Some(timeout);
        }
        Ok(())
    }
}

/// The longest busy timeout SQLite takes (`i32::MAX` milliseconds, about 24.8 days): a longer
/// one, `Duration::MAX` included, waits that long.
pub(super) fn clamp_busy_timeout(timeout: Duration) -> Duration {
    timeout.min(Duration::from_millis(i32::MAX.unsigned_abs().into()))
}

fn duration_ms(d: Duration) -> u64 {
    u64::try_from(d.as_millis()).unwrap_or(u64::MAX)
}

/// The writing connection lent to one batch, or to one operation run in place.
pub(super) struct Worker<'c> {
    pub(super) conn: &'c Connection,
    pub(super) clock: &'c dyn Clock,
    /// The time of the operation running: read when its batch starts, and again once the
    /// write lock is taken (that may have waited for another process).
    pub(super) now: u64,
    /// Whether the batch has two writes or more: then they share a transaction.
    pub(super) sharing: bool,
    /// The operation running, and the one that opened the batch's transaction, if open.
    pub(super) current: usize,
    pub(super) opened_by: Option<usize>,
    /// Why taking the write lock failed in this batch: the writes after it fail alike at
    /// once, without waiting the busy timeout again each.
    pub(super) lock_failed: Option<rusqlite::Error>,
    /// Whether a write statement ran.
    wrote: bool,
}

impl<'c> Worker<'c> {
    pub(super) fn new(conn: &'c Connection, clock: &'c dyn Clock, sharing: bool) -> Self {
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

    /// Runs `f` in a transaction — one of its own, or a savepoint in the batch's — and keeps
    /// what it wrote unless it answers [`Done::Undo`] (a claim that a count then refused).
    pub(super) fn transaction<T>(
        &mut self,
        f: impl FnOnce(&mut Self) -> rusqlite::Result<Done<T>>,
    ) -> rusqlite::Result<T> {
        if self.sharing || !self.conn.is_autocommit() {
            self.writing()?;
            self.execute(SAVEPOINT)?;
            // An error fails the batch, whose transaction is rolled back whole.
            let (value, undo) = f(self)?.split();
            if undo {
                self.execute(ROLLBACK_TO_SAVEPOINT)?;
            }
            self.execute(RELEASE_SAVEPOINT)?;
            return Ok(value);
        }
        self.wrote = true;
        self.begin_transaction()?;
        let done = f(self).and_then(|done| match done {
            Done::Keep(value) => self.execute(COMMIT).map(|()| value),
            Done::Undo(value) => {
                self.rollback();
                Ok(value)
            }
        });
        if done.is_err() {
            self.rollback();
        }
        done
    }

    pub(super) fn execute(&self, sql: &str) -> rusqlite::Result<()> {
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
    pub(super) fn rollback(&mut self) {
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
        self.sweep_table(&RECORDS_SWEEP, after, now)
    }

    /// [`Self::sweep`] for the counts of started actions (turn and tool counts).
    pub(super) fn sweep_counts(
        &mut self,
        after: Option<&[u8]>,
        now: u64,
    ) -> rusqlite::Result<(usize, Option<Vec<u8>>)> {
        self.sweep_table(&COUNTS_SWEEP, after, now)
    }

    /// One housekeeping step over `table` ([`RECORDS_SWEEP`] or [`COUNTS_SWEEP`]) from the key
    /// `after`: a step that started halfway and reached the last key goes on from the first,
    /// so that each covers at least a batch, however the writes that trigger it fall. Where the
    /// next step starts. ([`Self::sweep`], for a purge, stops at the last key.)
    pub(super) fn sweep_step(
        &mut self,
        table: &Sweep,
        after: Option<&[u8]>,
        now: u64,
    ) -> rusqlite::Result<Option<Vec<u8>>> {
        let (_, next) = self.sweep_table(table, after, now)?;
        if after.is_some() && next.is_none() {
            return Ok(self.sweep_table(table, None, now)?.1);
        }
        Ok(next)
    }

    fn sweep_table(
        &mut self,
        sql: &Sweep,
        after: Option<&[u8]>,
        now: u64,
    ) -> rusqlite::Result<(usize, Option<Vec<u8>>)> {
        // No key is the empty blob: x'' comes before every one.
        let after = after.unwrap_or_default();
        let (mut expired, mut last, mut seen) = (Vec::new(), Vec::new(), 0);
        {
            let mut window = self.conn.prepare_cached(sql.window)?;
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
                let mut delete = worker.conn.prepare_cached(sql.delete)?;
                expired
                    .iter()
                    .try_fold(0, |deleted, key| {
                        Ok(deleted + delete.execute(params![key, sql_ms(now)])?)
                    })
                    .map(Done::Keep)
            })?
        };
        let next = (seen == PURGE_BATCH).then_some(last);
        Ok((deleted, next))
    }
}

/// The two statements of a sweep: a window of keys in order, each with whether it expired
/// (parameters: after, now, count), and the deletion of one expired row (key, now).
pub(super) struct Sweep {
    window: &'static str,
    delete: &'static str,
}

/// A record goes once both its lease or TTL and its attempt count expired.
pub(super) const RECORDS_SWEEP: Sweep = Sweep {
    window: "SELECT key, expires_at_ms <= ?2 AND attempts_expire_ms <= ?2 \
             FROM idem_records WHERE key > ?1 ORDER BY key LIMIT ?3",
    delete: "DELETE FROM idem_records WHERE key = ?1 \
             AND expires_at_ms <= ?2 AND attempts_expire_ms <= ?2",
};

pub(super) const COUNTS_SWEEP: Sweep = Sweep {
    window: "SELECT id, expires_at_ms <= ?2 FROM idem_budgets WHERE id > ?1 ORDER BY id LIMIT ?3",
    delete: "DELETE FROM idem_budgets WHERE id = ?1 AND expires_at_ms <= ?2",
};

/// What a [`Worker::transaction`] does with what it wrote.
pub(super) enum Done<T> {
    /// Keep it: commit (or release the savepoint).
    Keep(T),
    /// Undo it, and answer `T`.
    Undo(T),
}

impl<T> Done<T> {
    fn split(self) -> (T, bool) {
        match self {
            Done::Keep(value) => (value, false),
            Done::Undo(value) => (value, true),
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

//! The store's thread: it owns the writing connection and its prepared statements, and runs
//! the operations sent to it in batches — every operation queued when the thread gets to them,
//! the writes of a batch in one transaction (group commit), answered once it committed. So
//! concurrent first executions share transactions: the more there are, the fewer commits each
//! costs.

use std::panic::{AssertUnwindSafe, catch_unwind};
use std::sync::Arc;
use std::sync::mpsc::{Receiver, SyncSender};

use rusqlite::{Connection, OptionalExtension, params};
use tokio::sync::oneshot;

use super::statements::Statements;
use super::{HOUSEKEEPING_EVERY, PURGE_BATCH, sql_ms};
use crate::clock::Clock;
use crate::{Error, Result};

/// At most this many operations share a transaction.
const MAX_BATCH: usize = 256;

/// The connection and statements of the store's thread, and the batch being run.
pub(super) struct Worker<'c> {
    pub(super) conn: &'c Connection,
    pub(super) stmts: Statements<'c>,
    clock: Arc<dyn Clock>,
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
    writes_since_housekeeping: u32,
    /// Where housekeeping's sweep of expired records goes on (`None`: from the first).
    sweep_after: Option<(String, Vec<u8>)>,
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

/// The thread's body: prepares the statements (telling `ready` how that went), then serves
/// batches until every sender is gone.
pub(super) fn serve(
    conn: Connection,
    queue: Receiver<Box<dyn Op>>,
    clock: Arc<dyn Clock>,
    ready: SyncSender<rusqlite::Result<()>>,
) {
    let stmts = match Statements::prepare(&conn) {
        Ok(stmts) => stmts,
        Err(error) => {
            let _ = ready.send(Err(error));
            return;
        }
    };
    let _ = ready.send(Ok(()));
    let mut worker = Worker {
        conn: &conn,
        stmts,
        clock,
        now: 0,
        sharing: false,
        current: 0,
        opened_by: None,
        lock_failed: None,
        writes_since_housekeeping: 0,
        sweep_after: None,
    };
    let mut batch: Vec<Box<dyn Op>> = Vec::new();
    while let Ok(op) = queue.recv() {
        batch.push(op);
        while batch.len() < MAX_BATCH {
            match queue.try_recv() {
                Ok(op) => batch.push(op),
                Err(_) => break,
            }
        }
        // A panic in an operation must not take the connection down with it: the batch's
        // callers are told the thread did not answer, and its transaction is rolled back.
        let ran = catch_unwind(AssertUnwindSafe(|| worker.run_batch(&mut batch)));
        if ran.is_err() {
            tracing::error!(target: "idem", "a SQLite store operation panicked");
            worker.rollback();
        }
        for op in batch.drain(..) {
            op.finish();
        }
    }
}

impl Worker<'_> {
    /// Runs `batch` in order. Two writes or more share one `BEGIN IMMEDIATE` transaction,
    /// opened by the first write statement (reads before it take no write lock); a lone write
    /// commits by itself. Every answer waits for the commit.
    fn run_batch(&mut self, batch: &mut [Box<dyn Op>]) {
        let writes = batch.iter().filter(|op| op.may_write()).count();
        self.sharing = writes > 1;
        self.opened_by = None;
        self.lock_failed = None;
        self.now = self.clock.now_ms();
        let mut failed = false;
        for i in 0..batch.len() {
            self.current = i;
            if let Err(error) = batch[i].run(self) {
                match self.opened_by {
                    None => batch[i].fail(&error),
                    Some(_) => {
                        failed = true;
                        break;
                    }
                }
            }
        }
        if let Some(from) = self.opened_by.take() {
            if failed || self.stmts.commit.execute([]).is_err() {
                self.rollback();
                self.one_by_one(&mut batch[from..]);
            }
        }
        self.writes_since_housekeeping = self
            .writes_since_housekeeping
            .saturating_add(u32::try_from(writes).unwrap_or(u32::MAX));
        let now = self.clock.now_ms();
        self.housekeeping(now);
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

    /// Reads time from `clock` from now on.
    pub(super) fn set_clock(&mut self, clock: Arc<dyn Clock>) {
        self.now = clock.now_ms();
        self.clock = clock;
    }

    /// Call before a write statement: in a batch of several writes, takes the write lock for
    /// the batch's transaction (the first time).
    pub(super) fn writing(&mut self) -> rusqlite::Result<()> {
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
        self.begin_transaction()?;
        let done = f(self).and_then(|value| self.stmts.commit.execute([]).map(|_| value));
        if done.is_err() {
            self.rollback();
        }
        done
    }

    /// `BEGIN IMMEDIATE`, then the time again.
    fn begin_transaction(&mut self) -> rusqlite::Result<()> {
        if let Some(error) = &self.lock_failed {
            return Err(same_error(error));
        }
        if let Err(error) = self.stmts.begin.execute([]) {
            self.lock_failed = Some(same_error(&error));
            return Err(error);
        }
        self.now = self.clock.now_ms().max(self.now);
        Ok(())
    }

    /// Rolls back the open transaction, if any (SQLite rolls some failures back itself).
    fn rollback(&mut self) {
        if !self.conn.is_autocommit()
            && let Err(error) = self.stmts.rollback.execute([])
        {
            tracing::warn!(target: "idem", %error, "could not roll back a SQLite transaction");
        }
    }

    /// Every [`HOUSEKEEPING_EVERY`] writes, sweeps the next [`PURGE_BATCH`] records (in key
    /// order, wrapping around) of what expired at `now`, and deletes as many expired turn
    /// counts, so that the file does not grow without bound when nobody calls
    /// [`Store::purge_expired`](crate::store::Store::purge_expired).
    fn housekeeping(&mut self, now: u64) {
        if self.writes_since_housekeeping >= HOUSEKEEPING_EVERY {
            self.writes_since_housekeeping = 0;
            let after = self.sweep_after.take();
            let swept = self.sweep(after.as_ref(), now).and_then(|(_, next)| {
                self.sweep_after = next;
                self.purge_turn_counts(now)
            });
            if let Err(error) = swept {
                tracing::warn!(target: "idem", %error, "could not delete expired SQLite records");
            }
        }
    }

    /// Deletes what expired at `now` among the [`PURGE_BATCH`] records after `after` in key
    /// order (from the first if `None`). Returns how many it deleted, and where the next step
    /// starts (`None`: the sweep reached the end).
    pub(super) fn sweep(
        &self,
        after: Option<&(String, Vec<u8>)>,
        now: u64,
    ) -> rusqlite::Result<(usize, Option<(String, Vec<u8>)>)> {
        // No key is the empty blob, so ("", x'') comes before every record.
        let (namespace, key) = after.map_or(("", &[][..]), |(ns, key)| (ns.as_str(), &key[..]));
        let end: Option<(String, Vec<u8>)> = self
            .conn
            .prepare_cached(
                "SELECT namespace, key FROM idem_records WHERE (namespace, key) > (?1, ?2) \
                 ORDER BY namespace, key LIMIT 1 OFFSET ?3",
            )?
            .query_row(params![namespace, key, PURGE_BATCH - 1], |row| {
                Ok((row.get(0)?, row.get(1)?))
            })
            .optional()?;
        let deleted = match &end {
            Some((last_namespace, last_key)) => self
                .conn
                .prepare_cached(
                    "DELETE FROM idem_records WHERE (namespace, key) > (?1, ?2) \
                     AND (namespace, key) <= (?3, ?4) \
                     AND expires_at_ms <= ?5 AND attempts_expire_ms <= ?5",
                )?
                .execute(params![
                    namespace,
                    key,
                    last_namespace,
                    last_key,
                    sql_ms(now)
                ])?,
            None => self
                .conn
                .prepare_cached(
                    "DELETE FROM idem_records WHERE (namespace, key) > (?1, ?2) \
                     AND expires_at_ms <= ?3 AND attempts_expire_ms <= ?3",
                )?
                .execute(params![namespace, key, sql_ms(now)])?,
        };
        Ok((deleted, end))
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

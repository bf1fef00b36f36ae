//! The store's thread: it runs what it is sent in **batches** — every operation queued when it
//! gets to them, in order, the writes of a batch in one transaction (group commit), each
//! answered once its batch committed. So concurrent first executions share transactions: the
//! more there are, the fewer commits each costs. It also does the maintenance nobody should
//! wait for: sweeping expired rows and checkpointing the WAL.

use std::panic::{AssertUnwindSafe, catch_unwind};
use std::sync::Arc;
use std::sync::mpsc::Receiver;

use tokio::sync::oneshot;

use super::statements::COMMIT;
use super::worker::{COUNTS_SWEEP, RECORDS_SWEEP, Worker, Writer};
use crate::clock::Clock;
use crate::{Error, Result};

/// At most this many operations share a transaction.
const MAX_BATCH: usize = 256;

/// One operation sent to the store's thread.
pub(super) trait Op: Send {
    /// Runs the operation, keeping its answer. `Err`: SQLite itself failed (in a batch's
    /// transaction, the batch is rolled back and its operations run again one by one).
    fn run(&mut self, worker: &mut Worker<'_>) -> rusqlite::Result<()>;
    /// Keeps `error` as the answer.
    fn fail(&mut self, error: &rusqlite::Error);
    /// Drops the answer (what it read or wrote was rolled back): the caller is told the thread
    /// did not answer.
    fn forget(&mut self);
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

    fn forget(&mut self) {
        self.answer = None;
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
        counts_after: None,
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
            let held = thread.writer.lock();
            let writes = batch.iter().filter(|op| op.may_write()).count();
            let mut worker = Worker::new(&held.conn, &*clock, writes > 1);
            worker.run_guarded(&mut batch);
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
    /// The same for the counts of started actions.
    counts_after: Option<Vec<u8>>,
}

impl Thread {
    /// Sweeps the next [`PURGE_BATCH`] records and counts (each in key order, wrapping
    /// around: [`Worker::sweep_step`]) of what expired, and checkpoints the WAL, so that
    /// neither the file nor the WAL grows without bound when nobody calls
    /// [`Store::purge_expired`](crate::store::Store::purge_expired).
    fn maintain(&mut self, clock: &dyn Clock) {
        let held = self.writer.lock();
        let mut worker = Worker::new(&held.conn, clock, false);
        let now = worker.now;
        let after = self.sweep_after.take();
        let counts_after = self.counts_after.take();
        let swept = worker
            .sweep_step(&RECORDS_SWEEP, after.as_deref(), now)
            .and_then(|next| {
                self.sweep_after = next;
                worker.sweep_step(&COUNTS_SWEEP, counts_after.as_deref(), now)
            })
            .map(|next| self.counts_after = next);
        if let Err(error) = swept {
            tracing::warn!(target: "idem", %error, "could not delete expired SQLite records");
        }
        // Writes never checkpoint by themselves (`wal_autocheckpoint` is off): a checkpoint
        // syncs the file, which a caller writing in place must not wait for.
        let checkpoint = held
            .conn
            .query_row("PRAGMA wal_checkpoint(PASSIVE)", [], |_| Ok(()));
        if let Err(error) = checkpoint {
            tracing::warn!(target: "idem", %error, "could not checkpoint the SQLite WAL");
        }
    }
}

impl Worker<'_> {
    /// [`Self::run_batch`], and if an operation panics, the batch's transaction is rolled back
    /// and none of its operations answers (an answer already made, a claim say, was rolled back
    /// with it): the callers are told the thread did not answer. The connection survives.
    pub(super) fn run_guarded(&mut self, batch: &mut [Box<dyn Op>]) {
        let ran = catch_unwind(AssertUnwindSafe(|| self.run_batch(batch)));
        if ran.is_err() {
            tracing::error!(target: "idem", "a SQLite store operation panicked");
            self.rollback();
            for op in batch {
                op.forget();
            }
        }
    }

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

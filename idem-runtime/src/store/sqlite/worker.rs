//! The connection's thread: the transactions behind each store operation, budget charges, and
//! housekeeping.

use std::time::Duration;

use rusqlite::{Connection, OptionalExtension, Transaction, TransactionBehavior, params};

use super::row::{Row, corrupt, select};
use super::{HOUSEKEEPING_EVERY, PURGE_BATCH, sql_ms, sql_token};
use crate::clock::{Clock, duration_ms};
use crate::key::{Fingerprint, Key};
use crate::store::budget::{self, CounterId};
use crate::store::{Begin, Charge, LeaseToken};
use crate::{Error, Result};

/// The state owned by the connection's thread.
pub(super) struct Worker {
    pub(super) conn: Connection,
    pub(super) writes_since_housekeeping: u32,
}

/// A [`BeginRequest`](crate::store::BeginRequest) that can travel to the connection's thread.
pub(super) struct OwnedBegin {
    pub(super) namespace: String,
    pub(super) key: Key,
    pub(super) tool: &'static str,
    pub(super) fingerprint: Fingerprint,
    pub(super) lease: Duration,
    pub(super) token: LeaseToken,
    pub(super) charge: Charge,
}

impl Worker {
    /// Runs one write statement; returns the number of rows changed.
    pub(super) fn write(
        &mut self,
        operation: &'static str,
        sql: &str,
        params: impl rusqlite::Params,
    ) -> Result<usize> {
        let changed = self
            .conn
            .prepare_cached(sql)
            .and_then(|mut stmt| stmt.execute(params))
            .map_err(|e| Error::store(operation, e))?;
        self.writes_since_housekeeping += 1;
        Ok(changed)
    }

    /// Every [`HOUSEKEEPING_EVERY`] writes, deletes a batch of records and of budget counts
    /// expired at `now`, so that the file does not grow without bound when nobody calls
    /// [`Store::purge_expired`](crate::store::Store::purge_expired).
    pub(super) fn housekeeping(&mut self, now: u64) {
        if self.writes_since_housekeeping >= HOUSEKEEPING_EVERY {
            self.writes_since_housekeeping = 0;
            if let Err(error) = self.purge_batch(now) {
                tracing::warn!(target: "idem", %error, "could not delete expired SQLite records");
            }
        }
    }

    /// Deletes up to [`PURGE_BATCH`] rows whose record and attempt count both expired at
    /// `now`, and as many expired turn counts; returns how many of each were deleted.
    pub(super) fn purge_batch(&self, now: u64) -> rusqlite::Result<(usize, usize)> {
        let records = self
            .conn
            .prepare_cached(
                "DELETE FROM idem_records WHERE rowid IN (SELECT rowid FROM idem_records \
                 WHERE expires_at_ms <= ?1 AND attempts_expire_ms <= ?1 LIMIT ?2)",
            )?
            .execute(params![sql_ms(now), PURGE_BATCH])?;
        let counts = self
            .conn
            .prepare_cached(
                "DELETE FROM idem_budgets WHERE id IN (SELECT id FROM idem_budgets \
                 WHERE expires_at_ms <= ?1 LIMIT ?2)",
            )?
            .execute(params![sql_ms(now), PURGE_BATCH])?;
        Ok((records, counts))
    }

    /// Answers a live record with a plain read (no write lock, nothing written); else charges
    /// the request's budget and claims its key, in one `BEGIN IMMEDIATE` transaction.
    pub(super) fn begin(&mut self, req: &OwnedBegin, now: u64, clock: &dyn Clock) -> Result<Begin> {
        let row = select(&self.conn, "begin", &req.namespace, &req.key)?;
        if let Some(row) = row.filter(|r| r.is_live(now)) {
            return live(row, &req.key);
        }
        let fail = |e: rusqlite::Error| Error::store("begin", e);
        let tx = self
            .conn
            .transaction_with_behavior(TransactionBehavior::Immediate)
            .map_err(fail)?;
        // Taking the lock may have waited for another process: read the clock again, so that a
        // claim's lease starts when it is taken.
        let now = clock.now_ms().max(now);
        // Under the write lock: nobody can charge or claim between these reads and the writes.
        let row = select(&tx, "begin", &req.namespace, &req.key)?;
        if let Some(row) = row.as_ref().filter(|r| r.is_live(now)) {
            // Claimed or completed meanwhile: drops `tx`, rolling back a transaction that
            // wrote nothing.
            return live(row.clone(), &req.key);
        }
        let attempts = row.as_ref().map_or(0, |r| r.live_attempts(now));
        let window_end = now.saturating_add(duration_ms(req.charge.window));
        let turn_id = req.charge.turn.turn_counter();
        let calls = match req.charge.max_calls {
            Some(_) => count(&tx, &turn_id, now)?,
            None => 0,
        };
        if let Err(refused) = budget::charge(attempts, calls, &req.charge) {
            return Ok(Begin::Refused(refused));
        }
        if req.charge.max_calls.is_some() {
            set_count(&tx, &turn_id, calls + 1, window_end)?;
        }
        tx.prepare_cached(
            "INSERT INTO idem_records (namespace, key, tool, state, fingerprint, result, \
             created_at_ms, expires_at_ms, token, attempts, attempts_expire_ms) \
             VALUES (?1, ?2, ?3, 'in_progress', ?4, NULL, ?5, ?6, ?7, ?8, ?9) \
             ON CONFLICT (namespace, key) DO UPDATE SET tool = excluded.tool, \
             state = excluded.state, fingerprint = excluded.fingerprint, result = NULL, \
             created_at_ms = excluded.created_at_ms, expires_at_ms = excluded.expires_at_ms, \
             token = excluded.token, attempts = excluded.attempts, \
             attempts_expire_ms = excluded.attempts_expire_ms",
        )
        .and_then(|mut stmt| {
            stmt.execute(params![
                req.namespace,
                req.key.as_bytes().as_slice(),
                req.tool,
                req.fingerprint.as_bytes().as_slice(),
                sql_ms(now),
                sql_ms(now.saturating_add(duration_ms(req.lease))),
                sql_token(req.token),
                attempts + 1,
                sql_ms(window_end),
            ])
        })
        .map_err(fail)?;
        tx.commit().map_err(fail)?;
        self.writes_since_housekeeping += 1;
        Ok(Begin::Claimed)
    }
}

/// The live turn count named `id` (0 if absent or expired).
fn count(tx: &Transaction<'_>, id: &CounterId, now: u64) -> Result<u32> {
    let n: Option<i64> = tx
        .prepare_cached("SELECT count FROM idem_budgets WHERE id = ?1 AND expires_at_ms > ?2")
        .and_then(|mut stmt| {
            stmt.query_row(params![id.as_slice(), sql_ms(now)], |row| row.get(0))
                .optional()
        })
        .map_err(|e| Error::store("begin", e))?;
    // A count out of range (written by hand) is read as the nearest valid one.
    Ok(n.map_or(0, |n| u32::try_from(n.max(0)).unwrap_or(u32::MAX)))
}

fn set_count(tx: &Transaction<'_>, id: &CounterId, n: u32, expires_at_ms: u64) -> Result<()> {
    tx.prepare_cached(
        "INSERT INTO idem_budgets (id, count, expires_at_ms) VALUES (?1, ?2, ?3) \
         ON CONFLICT (id) DO UPDATE SET count = excluded.count, \
         expires_at_ms = excluded.expires_at_ms",
    )
    .and_then(|mut stmt| stmt.execute(params![id.as_slice(), n, sql_ms(expires_at_ms)]))
    .map_err(|e| Error::store("begin", e))?;
    Ok(())
}

/// The answer of `begin` for a live row.
fn live(row: Row, key: &Key) -> Result<Begin> {
    Begin::found(row.into_record(0).map_err(corrupt(key))?)
}

//! The SQL of the hot path, prepared once when the store's thread starts (`BEGIN` and `COMMIT`
//! included) and kept for the thread's life.

use rusqlite::{Connection, Statement};

/// What `begin` reads of a key's row: enough to answer a live record and to charge a claim.
/// Parameters: namespace, key.
pub(super) const SEEN: &str = "SELECT state, fingerprint, result, expires_at_ms, token, \
     attempts, attempts_expire_ms, created_at_ms FROM idem_records \
     WHERE namespace = ?1 AND key = ?2";

/// A claim in one statement: insert the key's row, or take over a row whose record is no
/// longer live and whose attempt count allows one more claim. A live record, or a spent count,
/// changes nothing (0 rows). Parameters: namespace, key, tool, fingerprint, now, lease end,
/// token, count window end, max attempts.
const CLAIM: &str = "INSERT INTO idem_records (namespace, key, tool, state, fingerprint, \
     result, created_at_ms, expires_at_ms, token, attempts, attempts_expire_ms) \
     VALUES (?1, ?2, ?3, 'in_progress', ?4, NULL, ?5, ?6, ?7, 1, ?8) \
     ON CONFLICT (namespace, key) DO UPDATE SET tool = excluded.tool, state = 'in_progress', \
     fingerprint = excluded.fingerprint, result = NULL, created_at_ms = excluded.created_at_ms, \
     expires_at_ms = excluded.expires_at_ms, token = excluded.token, \
     attempts = (CASE WHEN idem_records.attempts_expire_ms > ?5 \
         THEN max(idem_records.attempts, 0) ELSE 0 END) + 1, \
     attempts_expire_ms = excluded.attempts_expire_ms \
     WHERE idem_records.expires_at_ms <= ?5 \
     AND (CASE WHEN idem_records.attempts_expire_ms > ?5 \
         THEN max(idem_records.attempts, 0) ELSE 0 END) < ?9";

/// A turn's live count of started actions. Parameters: counter id, now.
const TURN_COUNT: &str = "SELECT count FROM idem_budgets WHERE id = ?1 AND expires_at_ms > ?2";

/// Sets a turn's count. Parameters: counter id, count, expiry.
const SET_TURN_COUNT: &str = "INSERT INTO idem_budgets (id, count, expires_at_ms) \
     VALUES (?1, ?2, ?3) ON CONFLICT (id) DO UPDATE SET count = excluded.count, \
     expires_at_ms = excluded.expires_at_ms";

/// Parameters: new expiry, namespace, key, token, now.
const RENEW: &str = "UPDATE idem_records SET expires_at_ms = ?1 WHERE namespace = ?2 \
     AND key = ?3 AND token = ?4 AND state = 'in_progress' AND expires_at_ms > ?5";

/// The token stays in the row, so that a retried complete is recognised. Parameters: result,
/// expiry, namespace, key, token, now.
const COMPLETE: &str = "UPDATE idem_records SET state = 'completed', result = ?1, \
     expires_at_ms = ?2, attempts = 0, attempts_expire_ms = 0 WHERE namespace = ?3 AND key = ?4 \
     AND token = ?5 AND state = 'in_progress' AND expires_at_ms > ?6";

/// Whether a token completed its key's live record. Parameters: namespace, key, token, now.
const COMPLETED_BY: &str = "SELECT 1 FROM idem_records WHERE namespace = ?1 AND key = ?2 \
     AND token = ?3 AND state = 'completed' AND expires_at_ms > ?4";

/// The row stays, expired, with the key's attempt count. Parameters: namespace, key, token,
/// now.
const RELEASE: &str = "UPDATE idem_records SET expires_at_ms = 0 WHERE namespace = ?1 \
     AND key = ?2 AND token = ?3 AND state = 'in_progress' AND expires_at_ms > ?4";

/// The prepared statements of the store's thread.
pub(super) struct Statements<'c> {
    pub(super) begin: Statement<'c>,
    pub(super) commit: Statement<'c>,
    pub(super) rollback: Statement<'c>,
    pub(super) seen: Statement<'c>,
    pub(super) claim: Statement<'c>,
    pub(super) turn_count: Statement<'c>,
    pub(super) set_turn_count: Statement<'c>,
    pub(super) renew: Statement<'c>,
    pub(super) complete: Statement<'c>,
    pub(super) completed_by: Statement<'c>,
    pub(super) release: Statement<'c>,
}

impl<'c> Statements<'c> {
    pub(super) fn prepare(conn: &'c Connection) -> rusqlite::Result<Self> {
        Ok(Statements {
            begin: conn.prepare("BEGIN IMMEDIATE")?,
            commit: conn.prepare("COMMIT")?,
            rollback: conn.prepare("ROLLBACK")?,
            seen: conn.prepare(SEEN)?,
            claim: conn.prepare(CLAIM)?,
            turn_count: conn.prepare(TURN_COUNT)?,
            set_turn_count: conn.prepare(SET_TURN_COUNT)?,
            renew: conn.prepare(RENEW)?,
            complete: conn.prepare(COMPLETE)?,
            completed_by: conn.prepare(COMPLETED_BY)?,
            release: conn.prepare(RELEASE)?,
        })
    }
}

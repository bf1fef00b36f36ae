//! The SQL of the hot path. Each statement is prepared once per connection and kept in its
//! statement cache (`BEGIN` and `COMMIT` included): found again by its text, never parsed
//! again.

/// How many prepared statements a connection keeps: every statement here and the admin ones.
pub(super) const CACHED: usize = 64;

pub(super) const BEGIN: &str = "BEGIN IMMEDIATE";
pub(super) const COMMIT: &str = "COMMIT";
pub(super) const ROLLBACK: &str = "ROLLBACK";
/// A transaction inside a batch's, that can be undone alone.
pub(super) const SAVEPOINT: &str = "SAVEPOINT idem_claim";
pub(super) const ROLLBACK_TO_SAVEPOINT: &str = "ROLLBACK TO idem_claim";
pub(super) const RELEASE_SAVEPOINT: &str = "RELEASE idem_claim";

/// What a replay reads of a key's row: the columns that answer a live record (in the order
/// [`SEEN`] starts with). A row this does not settle (a claim, an expired row) is read again
/// with [`SEEN`]. Parameter: key.
pub(super) const LIVE: &str = "SELECT state, fingerprint, result, expires_at_ms, namespace, \
     created_at_ms FROM idem_records WHERE key = ?1";

/// What `begin` reads of a key's row: enough to answer a live record and to charge a claim,
/// the namespace and turn the row belongs to, and who holds a claim. Parameter: key.
pub(super) const SEEN: &str = "SELECT state, fingerprint, result, expires_at_ms, namespace, \
     created_at_ms, token, attempts, attempts_expire_ms, turn, holder FROM idem_records \
     WHERE key = ?1";

/// A claim in one statement: insert the key's row, or take over a row whose record is no
/// longer live and whose attempt count (of this turn, in this namespace) allows one more claim.
/// A live record, or a spent count, changes nothing (0 rows). Parameters: key, namespace, tool,
/// fingerprint, now, lease end, token, count window end, max attempts, turn, holder.
pub(super) const CLAIM: &str = "INSERT INTO idem_records (key, namespace, tool, turn, state, \
     fingerprint, result, created_at_ms, expires_at_ms, token, attempts, attempts_expire_ms, \
     holder) VALUES (?1, ?2, ?3, ?10, 'in_progress', ?4, NULL, ?5, ?6, ?7, 1, ?8, ?11) \
     ON CONFLICT (key) DO UPDATE SET namespace = ?2, tool = ?3, turn = ?10, holder = ?11, \
     state = 'in_progress', fingerprint = ?4, result = NULL, created_at_ms = ?5, \
     expires_at_ms = ?6, token = ?7, \
     attempts = (CASE WHEN idem_records.namespace = ?2 AND idem_records.turn = ?10 \
         AND idem_records.attempts_expire_ms > ?5 \
         THEN max(idem_records.attempts, 0) ELSE 0 END) + 1, \
     attempts_expire_ms = ?8 \
     WHERE idem_records.expires_at_ms <= ?5 \
     AND (CASE WHEN idem_records.namespace = ?2 AND idem_records.turn = ?10 \
         AND idem_records.attempts_expire_ms > ?5 \
         THEN max(idem_records.attempts, 0) ELSE 0 END) < ?9";

/// Frees a claim whose holder is gone: it expires, keeping its attempt count, as a lease that
/// ran out would — if it is still the claim that was read (its token and holder). Parameters:
/// namespace, key, token, holder.
pub(super) const FREE_ABANDONED: &str = "UPDATE idem_records SET expires_at_ms = 0 \
     WHERE key = ?2 AND namespace = ?1 AND token = ?3 AND holder = ?4 \
     AND state = 'in_progress'";

/// A turn's (or a tool's) live count of started actions. Parameters: counter id, now.
pub(super) const TURN_COUNT: &str =
    "SELECT count FROM idem_budgets WHERE id = ?1 AND expires_at_ms > ?2";

/// Counts one more started action in a turn's (or a tool's) count, if the key's claim just made
/// is a new action (its attempt count is 1) and the live count is under the cap; an expired count
/// starts again from 0. Changes 1 row if it counted, else 0. (Not `RETURNING`: SQLite keeps
/// returned rows in a temporary table, which costs more than the statement.) Parameters:
/// counter id, now, expiry, cap, key.
pub(super) const COUNT_ACTION: &str = "INSERT INTO idem_budgets (id, count, expires_at_ms) \
     SELECT ?1, 1, ?3 WHERE ?4 > 0 \
         AND (SELECT attempts FROM idem_records WHERE key = ?5) = 1 \
     ON CONFLICT (id) DO UPDATE SET count = (CASE WHEN idem_budgets.expires_at_ms > ?2 \
         THEN max(idem_budgets.count, 0) ELSE 0 END) + 1, expires_at_ms = ?3 \
     WHERE (CASE WHEN idem_budgets.expires_at_ms > ?2 \
         THEN max(idem_budgets.count, 0) ELSE 0 END) < ?4";

/// A key's attempt count. Parameter: key.
pub(super) const ATTEMPTS: &str = "SELECT attempts FROM idem_records WHERE key = ?1";

/// Parameters: new expiry, namespace, key, token, now.
pub(super) const RENEW: &str = "UPDATE idem_records SET expires_at_ms = ?1 WHERE key = ?3 \
     AND namespace = ?2 AND token = ?4 AND state = 'in_progress' AND expires_at_ms > ?5";

/// The token stays in the row, so that a retried complete is recognised. Parameters: result,
/// expiry, namespace, key, token, now.
pub(super) const COMPLETE: &str = "UPDATE idem_records SET state = 'completed', result = ?1, \
     expires_at_ms = ?2, attempts = 0, attempts_expire_ms = 0 WHERE key = ?4 AND namespace = ?3 \
     AND token = ?5 AND state = 'in_progress' AND expires_at_ms > ?6";

/// Whether a token completed its key's live record. Parameters: namespace, key, token, now.
pub(super) const COMPLETED_BY: &str = "SELECT 1 FROM idem_records WHERE key = ?2 \
     AND namespace = ?1 AND token = ?3 AND state = 'completed' AND expires_at_ms > ?4";

/// The row stays, expired, with the key's attempt count. Parameters: namespace, key, token,
/// now.
pub(super) const RELEASE: &str = "UPDATE idem_records SET expires_at_ms = 0 WHERE key = ?2 \
     AND namespace = ?1 AND token = ?3 AND state = 'in_progress' AND expires_at_ms > ?4";

/// Deletes the record an operator was shown, if the key still holds it: the same claim (its
/// claim time) in the same state, not given back since (expiry 0: only its attempt count is
/// left, and stays); answers whether it was live. Parameters: namespace, key, state, claim
/// time, now.
pub(super) const REMOVE_SHOWN: &str = "DELETE FROM idem_records WHERE key = ?2 \
     AND namespace = ?1 AND state = ?3 AND created_at_ms = ?4 AND expires_at_ms <> 0 \
     RETURNING expires_at_ms > ?5";

/// Whether a key holds a record, live or not (a claim given back holds none). Parameters:
/// namespace, key.
pub(super) const HAS_RECORD: &str = "SELECT 1 FROM idem_records WHERE key = ?2 \
     AND namespace = ?1 AND expires_at_ms <> 0";

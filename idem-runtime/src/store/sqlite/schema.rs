//! Opening a database: connection settings, and the schema migrated to this build's version.

use std::path::Path;
use std::time::Duration;

use rusqlite::{Connection, TransactionBehavior};

use crate::{Error, Result};

/// The schema version this build writes, kept in `PRAGMA user_version`.
///
/// Version 1 is the records table; version 2 adds the budget counters; version 3 keeps each
/// key's attempt count in its record row (the budget counters keep turn counts only); version 4
/// makes the records table a `WITHOUT ROWID` table keyed by the key alone, without an index on
/// expiry, so that a write changes one b-tree page instead of three (expired rows are swept in
/// key order instead); version 5 keeps in each row the id of the turn that claimed it (whose
/// claims its attempt count counts), with an index that finds a namespace's records of one turn;
/// version 6 keeps in each claim the process that holds it
/// ([`Holder`](crate::store::holder::Holder)), so that a claim whose process is gone is free at
/// once; version 7 drops the index on the counts' expiry (they are swept in key order too).
pub const SCHEMA_VERSION: i64 = 7;

/// Version 2: budget counters (since version 3, turn counts only, named by
/// [`TurnIdentity::turn_counter`](crate::store::budget::TurnIdentity::turn_counter)).
const SCHEMA_V2: &str = "
CREATE TABLE IF NOT EXISTS idem_budgets (
    id            BLOB    NOT NULL PRIMARY KEY,
    count         INTEGER NOT NULL,
    expires_at_ms INTEGER NOT NULL
) STRICT, WITHOUT ROWID;
CREATE INDEX IF NOT EXISTS idem_budgets_expires_at ON idem_budgets (expires_at_ms);
";

/// Version 3: a key's attempt count and its expiry, in its row. A released claim keeps its row
/// (expired, with its count). Per-key counts of version 2, named by a digest of the turn and the
/// key, cannot be moved into the rows: they are left to expire within their window, and keys
/// attempted before the upgrade start counting afresh.
const SCHEMA_V3: &str = "
ALTER TABLE idem_records ADD COLUMN attempts INTEGER NOT NULL DEFAULT 0;
ALTER TABLE idem_records ADD COLUMN attempts_expire_ms INTEGER NOT NULL DEFAULT 0;
";

/// Version 4: the records in a `WITHOUT ROWID` table keyed by the key alone (keys commit to
/// their namespace, which is a column every statement checks), with no index on expiry: the
/// primary key is the table, one b-tree, compared as one blob.
const RECORDS_V4: &str = "
CREATE TABLE idem_records_v4 (
    key                BLOB    NOT NULL PRIMARY KEY,
    namespace          TEXT    NOT NULL,
    tool               TEXT    NOT NULL,
    state              TEXT    NOT NULL CHECK (state IN ('in_progress', 'completed')),
    fingerprint        BLOB    NOT NULL,
    result             BLOB,
    created_at_ms      INTEGER NOT NULL,
    expires_at_ms      INTEGER NOT NULL,
    token              INTEGER,
    attempts           INTEGER NOT NULL DEFAULT 0,
    attempts_expire_ms INTEGER NOT NULL DEFAULT 0
) STRICT, WITHOUT ROWID;
";

/// From version 3 to 4: the rows copied into the new table, which takes the old one's name.
/// Two rows of one key (in two namespaces: only keys written by hand can do that) keep one.
const SCHEMA_V4: &str = "
INSERT OR IGNORE INTO idem_records_v4 (key, namespace, tool, state, fingerprint, result,
    created_at_ms, expires_at_ms, token, attempts, attempts_expire_ms)
SELECT key, namespace, tool, state, fingerprint, result, created_at_ms, expires_at_ms, token,
    attempts, attempts_expire_ms FROM idem_records;
DROP TABLE idem_records;
ALTER TABLE idem_records_v4 RENAME TO idem_records;
";

/// Version 5: the claiming turn's id in each record, and the index that finds a turn's
/// records. Rows written before it have the turn `''` (unknown): their attempt counts belong to
/// no turn, so the next claim of such a key counts from 0.
const SCHEMA_V5: &str = "
ALTER TABLE idem_records ADD COLUMN turn TEXT NOT NULL DEFAULT '';
CREATE INDEX IF NOT EXISTS idem_records_turn ON idem_records (namespace, turn, created_at_ms);
";

/// Version 6: the holder of each claim (its process, encoded; NULL where it cannot be named).
/// Claims written before it have none: their leases alone free them.
const SCHEMA_V6: &str = "ALTER TABLE idem_records ADD COLUMN holder TEXT;";

/// The counts are swept in key order, like the records: an index on their expiry cost every
/// new action a b-tree page more to write.
const SCHEMA_V7: &str = "DROP INDEX IF EXISTS idem_budgets_expires_at;";

/// Sets the connection up: busy timeout, WAL, and the schema. Returns whether the file is in
/// WAL mode (readers then never wait for writers).
pub(super) fn configure(
    conn: &mut Connection,
    path: Option<&Path>,
    busy: Duration,
) -> Result<bool> {
    let fail = |e: rusqlite::Error| Error::store("open", e);
    conn.busy_timeout(busy).map_err(fail)?;
    let mode: String = retry_while_busy(busy, || {
        conn.pragma_update_and_check(None, "journal_mode", "wal", |row| row.get(0))
    })
    .map_err(fail)?;
    if path.is_some() && !mode.eq_ignore_ascii_case("wal") {
        tracing::warn!(target: "idem", mode, "SQLite refused WAL mode; writers will block readers");
    }
    conn.pragma_update(None, "synchronous", "NORMAL")
        .map_err(fail)?;
    migrate(conn, path)?;
    Ok(mode.eq_ignore_ascii_case("wal"))
}

/// Runs `op` again while it fails with "database is locked", for up to `busy`. Switching a file
/// to WAL can fail at once, without SQLite's busy handler, while another connection opens or
/// migrates the same file (SQLite does not wait where waiting could deadlock).
fn retry_while_busy<T>(
    busy: Duration,
    mut op: impl FnMut() -> rusqlite::Result<T>,
) -> rusqlite::Result<T> {
    let give_up = std::time::Instant::now() + busy;
    let mut pause = Duration::from_millis(1);
    loop {
        match op() {
            Err(rusqlite::Error::SqliteFailure(e, _))
                if matches!(
                    e.code,
                    rusqlite::ErrorCode::DatabaseBusy | rusqlite::ErrorCode::DatabaseLocked
                ) && std::time::Instant::now() < give_up =>
            {
                std::thread::sleep(pause);
                pause = (pause * 2).min(Duration::from_millis(50));
            }
            answer => return answer,
        }
    }
}

/// Whether the database holds idem's records table (of any schema version), read without
/// writing anything.
pub(super) fn is_idem(conn: &Connection) -> Result<bool> {
    conn.query_row(
        "SELECT EXISTS (SELECT 1 FROM sqlite_master WHERE type = 'table' AND name = 'idem_records')",
        [],
        |row| row.get(0),
    )
    .map_err(|e| Error::store("open", e))
}

/// Brings the schema to [`SCHEMA_VERSION`], under the write lock so that processes opening the
/// same file at once migrate it once. Each step is idempotent and the version is written in
/// the same transaction, so an interrupted migration is simply done again. A file already at
/// this version is read without the write lock (the version is committed with the schema it
/// names): a store opens, and the CLI reads, while another process holds the lock for a write.
fn migrate(conn: &mut Connection, path: Option<&Path>) -> Result<()> {
    let fail = |e: rusqlite::Error| Error::store("migrate", e);
    let current: i64 = conn
        .pragma_query_value(None, "user_version", |row| row.get(0))
        .map_err(fail)?;
    if current == SCHEMA_VERSION {
        return Ok(());
    }
    let tx = conn
        .transaction_with_behavior(TransactionBehavior::Immediate)
        .map_err(fail)?;
    let version: i64 = tx
        .pragma_query_value(None, "user_version", |row| row.get(0))
        .map_err(fail)?;
    match version {
        SCHEMA_VERSION => return Ok(()),
        0 => {
            tx.execute_batch(RECORDS_V4).map_err(fail)?;
            tx.execute_batch("ALTER TABLE idem_records_v4 RENAME TO idem_records;")
                .map_err(fail)?;
            tx.execute_batch(SCHEMA_V2).map_err(fail)?;
            tx.execute_batch(SCHEMA_V5).map_err(fail)?;
            tx.execute_batch(SCHEMA_V6).map_err(fail)?;
            tx.execute_batch(SCHEMA_V7).map_err(fail)?;
            tx.pragma_update(None, "user_version", SCHEMA_VERSION)
                .map_err(fail)?;
        }
        1..=6 => {
            if version <= 1 {
                tx.execute_batch(SCHEMA_V2).map_err(fail)?;
            }
            if version <= 2 {
                tx.execute_batch(SCHEMA_V3).map_err(fail)?;
            }
            if version <= 3 {
                tx.execute_batch(RECORDS_V4).map_err(fail)?;
                tx.execute_batch(SCHEMA_V4).map_err(fail)?;
            }
            if version <= 4 {
                tx.execute_batch(SCHEMA_V5).map_err(fail)?;
            }
            if version <= 5 {
                tx.execute_batch(SCHEMA_V6).map_err(fail)?;
            }
            tx.execute_batch(SCHEMA_V7).map_err(fail)?;
            tx.pragma_update(None, "user_version", SCHEMA_VERSION)
                .map_err(fail)?;
        }
        newer if newer > SCHEMA_VERSION => {
            let file = path.map_or_else(|| "(in memory)".to_owned(), |p| p.display().to_string());
            return Err(Error::Config(format!(
                "the idem database {file} has schema version {newer}, but this build of idem \
                 only knows versions up to {SCHEMA_VERSION}: upgrade idem, or point it at \
                 another file"
            )));
        }
        unknown => {
            return Err(Error::Config(format!(
                "the idem database has an unknown schema version {unknown} \
                 (PRAGMA user_version); point idem at another file"
            )));
        }
    }
    tx.commit().map_err(fail)
}

//! Reading `idem_records` rows: every column checked, a malformed row an error, never a panic.

use rusqlite::types::ValueRef;
use rusqlite::{Connection, OptionalExtension, params};

use super::{STATE_COMPLETED, STATE_IN_PROGRESS};
use crate::key::{Fingerprint, Key};
use crate::store::{Record, RecordState};
use crate::{Error, Result};

/// The columns [`read_row`] expects, in order.
pub(super) const COLUMNS: &str = "namespace, key, tool, state, fingerprint, result, \
     created_at_ms, expires_at_ms, token, attempts, attempts_expire_ms";

/// A row as read, before validation.
#[derive(Clone)]
pub(super) struct Row {
    pub(super) namespace: String,
    pub(super) key: Vec<u8>,
    pub(super) tool: String,
    pub(super) state: String,
    pub(super) fingerprint: Vec<u8>,
    pub(super) result: Option<Vec<u8>>,
    pub(super) created_at_ms: i64,
    pub(super) expires_at_ms: i64,
    pub(super) token: Option<i64>,
    pub(super) attempts: i64,
    pub(super) attempts_expire_ms: i64,
}

/// Whatever is wrong with a row; becomes [`Error::CorruptRecord`].
pub(super) struct Corrupt(pub(super) String);

fn text(row: &rusqlite::Row<'_>, i: usize, name: &str) -> Result<String, Corrupt> {
    match row.get_ref(i) {
        Ok(ValueRef::Text(t)) => String::from_utf8(t.to_vec())
            .map_err(|_| Corrupt(format!("column `{name}` is not valid UTF-8"))),
        Ok(other) => Err(Corrupt(format!(
            "column `{name}` holds {:?}, not text",
            other.data_type()
        ))),
        Err(e) => Err(Corrupt(format!("column `{name}` unreadable: {e}"))),
    }
}

fn blob(row: &rusqlite::Row<'_>, i: usize, name: &str) -> Result<Option<Vec<u8>>, Corrupt> {
    match row.get_ref(i) {
        Ok(ValueRef::Blob(b)) => Ok(Some(b.to_vec())),
        Ok(ValueRef::Null) => Ok(None),
        Ok(other) => Err(Corrupt(format!(
            "column `{name}` holds {:?}, not a blob",
            other.data_type()
        ))),
        Err(e) => Err(Corrupt(format!("column `{name}` unreadable: {e}"))),
    }
}

fn integer(row: &rusqlite::Row<'_>, i: usize, name: &str) -> Result<Option<i64>, Corrupt> {
    match row.get_ref(i) {
        Ok(ValueRef::Integer(n)) => Ok(Some(n)),
        Ok(ValueRef::Null) => Ok(None),
        Ok(other) => Err(Corrupt(format!(
            "column `{name}` holds {:?}, not an integer",
            other.data_type()
        ))),
        Err(e) => Err(Corrupt(format!("column `{name}` unreadable: {e}"))),
    }
}

fn required<T>(value: Option<T>, name: &str) -> Result<T, Corrupt> {
    value.ok_or_else(|| Corrupt(format!("column `{name}` is NULL")))
}

/// Reads a row selected with [`COLUMNS`]; a malformed row is an inner `Err`, never a panic.
pub(super) fn read_row(row: &rusqlite::Row<'_>) -> rusqlite::Result<Result<Row, Corrupt>> {
    let read = || -> Result<Row, Corrupt> {
        Ok(Row {
            namespace: text(row, 0, "namespace")?,
            key: required(blob(row, 1, "key")?, "key")?,
            tool: text(row, 2, "tool")?,
            state: text(row, 3, "state")?,
            fingerprint: required(blob(row, 4, "fingerprint")?, "fingerprint")?,
            result: blob(row, 5, "result")?,
            created_at_ms: required(integer(row, 6, "created_at_ms")?, "created_at_ms")?,
            expires_at_ms: required(integer(row, 7, "expires_at_ms")?, "expires_at_ms")?,
            token: integer(row, 8, "token")?,
            attempts: required(integer(row, 9, "attempts")?, "attempts")?,
            attempts_expire_ms: required(
                integer(row, 10, "attempts_expire_ms")?,
                "attempts_expire_ms",
            )?,
        })
    };
    Ok(read())
}

fn timestamp(ms: i64, name: &str) -> Result<u64, Corrupt> {
    u64::try_from(ms).map_err(|_| Corrupt(format!("`{name}` is negative ({ms})")))
}

impl Row {
    /// Whether the row still counts at `now`.
    pub(super) fn is_live(&self, now: u64) -> bool {
        u64::try_from(self.expires_at_ms).is_ok_and(|at| at > now)
    }

    /// The attempt count live at `now` (0 if expired; a count out of range, written by hand,
    /// is read as the nearest valid one).
    pub(super) fn live_attempts(&self, now: u64) -> u32 {
        if u64::try_from(self.attempts_expire_ms).is_ok_and(|at| at > now) {
            u32::try_from(self.attempts.max(0)).unwrap_or(u32::MAX)
        } else {
            0
        }
    }

    /// Validates the row into a [`Record`], with its attempt count as live at `now`.
    pub(super) fn into_record(self, now: u64) -> Result<Record, Corrupt> {
        let attempts = self.live_attempts(now);
        let key = <[u8; 32]>::try_from(self.key.as_slice())
            .map(Key::from_bytes)
            .map_err(|_| Corrupt(format!("key is {} bytes, not 32", self.key.len())))?;
        let fingerprint = <[u8; 32]>::try_from(self.fingerprint.as_slice())
            .map(Fingerprint::from_bytes)
            .map_err(|_| {
                Corrupt(format!(
                    "fingerprint is {} bytes, not 32",
                    self.fingerprint.len()
                ))
            })?;
        let state = match self.state.as_str() {
            STATE_IN_PROGRESS => {
                if self.token.is_none() {
                    return Err(Corrupt("in progress without a lease token".to_owned()));
                }
                RecordState::InProgress
            }
            STATE_COMPLETED => {
                if self.result.is_none() {
                    return Err(Corrupt("completed without a result".to_owned()));
                }
                RecordState::Completed
            }
            other => return Err(Corrupt(format!("unknown state {other:?}"))),
        };
        Ok(Record {
            namespace: self.namespace,
            key,
            tool: self.tool,
            state,
            fingerprint,
            result: match state {
                RecordState::Completed => self.result,
                RecordState::InProgress => None,
            },
            attempts,
            created_at_ms: timestamp(self.created_at_ms, "created_at_ms")?,
            expires_at_ms: timestamp(self.expires_at_ms, "expires_at_ms")?,
        })
    }
}

pub(super) fn corrupt(key: &Key) -> impl FnOnce(Corrupt) -> Error + '_ {
    move |Corrupt(message)| Error::CorruptRecord {
        key: key.short(),
        message,
    }
}

/// The row for a key, live or not.
pub(super) fn select(
    conn: &Connection,
    operation: &'static str,
    namespace: &str,
    key: &Key,
) -> Result<Option<Row>> {
    let sql = format!("SELECT {COLUMNS} FROM idem_records WHERE namespace = ?1 AND key = ?2");
    let row = conn
        .prepare_cached(&sql)
        .and_then(|mut stmt| {
            stmt.query_row(params![namespace, key.as_bytes().as_slice()], read_row)
                .optional()
        })
        .map_err(|e| Error::store(operation, e))?;
    row.transpose().map_err(corrupt(key))
}

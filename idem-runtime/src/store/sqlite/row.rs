//! Reading `idem_records` rows: every column checked, a malformed row an error, never a panic.

use rusqlite::types::ValueRef;
use rusqlite::{Connection, OptionalExtension, params};

use super::statements::{LIVE, SEEN};
use super::{STATE_COMPLETED, STATE_IN_PROGRESS};
use crate::key::{Fingerprint, Key};
use crate::store::{Begin, Bytes, FirstResult, Record, RecordState};
use crate::{Error, Result};

/// The columns [`read_row`] expects, in order.
pub(super) const COLUMNS: &str = "namespace, key, tool, state, fingerprint, result, \
     created_at_ms, expires_at_ms, token, attempts, attempts_expire_ms, turn, holder";

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
    pub(super) turn: String,
    /// The holder's process, encoded, if written as text.
    pub(super) holder: Option<String>,
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
            turn: text(row, 11, "turn")?,
            holder: match row.get_ref(12) {
                Ok(ValueRef::Text(text)) => Some(String::from_utf8_lossy(text).into_owned()),
                // Not a holder this build wrote: never proof of anything.
                _ => None,
            },
        })
    };
    Ok(read())
}

/// An attempt count as live at `now` (0 if expired; a count out of range, written by hand, is
/// read as the nearest valid one).
fn live_attempts(attempts: i64, expires_at_ms: i64, now: u64) -> u32 {
    if u64::try_from(expires_at_ms).is_ok_and(|at| at > now) {
        u32::try_from(attempts.max(0)).unwrap_or(u32::MAX)
    } else {
        0
    }
}

fn timestamp(ms: i64, name: &str) -> Result<u64, Corrupt> {
    u64::try_from(ms).map_err(|_| Corrupt(format!("`{name}` is negative ({ms})")))
}

impl Row {
    /// Whether the row still counts at `now`.
    pub(super) fn is_live(&self, now: u64) -> bool {
        u64::try_from(self.expires_at_ms).is_ok_and(|at| at > now)
    }

    /// The attempt count live at `now`.
    pub(super) fn live_attempts(&self, now: u64) -> u32 {
        live_attempts(self.attempts, self.attempts_expire_ms, now)
    }

    /// Validates the row into a [`Record`], with its attempt count as live at `now`; a claim
    /// whose holder is found gone is read again on `conn` before it is said to be
    /// ([`still_held`]).
    pub(super) fn into_record(self, now: u64, conn: &Connection) -> Result<Record, Corrupt> {
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
        let holder_gone = state == RecordState::InProgress
            && crate::store::holder::Holder::text_is_gone(self.holder.as_deref())
            && still_held(conn, &self.namespace, &self.key, self.token);
        Ok(Record {
            namespace: self.namespace,
            key,
            tool: self.tool,
            turn: self.turn,
            state,
            fingerprint,
            result: match state {
                RecordState::Completed => self.result,
                RecordState::InProgress => None,
            },
            attempts,
            created_at_ms: timestamp(self.created_at_ms, "created_at_ms")?,
            expires_at_ms: timestamp(self.expires_at_ms, "expires_at_ms")?,
            holder_gone,
        })
    }
}

pub(super) fn corrupt(key: &Key) -> impl FnOnce(Corrupt) -> Error + '_ {
    move |Corrupt(message)| Error::CorruptRecord {
        key: key.short(),
        message,
    }
}

/// Whether the claim of `key` with lease token `token` is still there, unchanged: asked after
/// its holder was found gone. A holder that completed the claim and exited between the read of
/// its row and the look at its process would otherwise be taken for one that died holding it;
/// once the holder is gone, what this read shows is final. A read that fails says no.
fn still_held(conn: &Connection, namespace: &str, key: &[u8], token: Option<i64>) -> bool {
    let read = conn
        .prepare_cached("SELECT state, token FROM idem_records WHERE key = ?2 AND namespace = ?1")
        .and_then(|mut stmt| {
            stmt.query_row(params![namespace, key], |row| {
                Ok((row.get::<_, String>(0)?, row.get::<_, Option<i64>>(1)?))
            })
            .optional()
        });
    matches!(read, Ok(Some((state, now_token))) if state == STATE_IN_PROGRESS && now_token == token)
}

/// The row for a key, live or not (an inner `Err` for a row that cannot be parsed).
pub(super) fn select(
    conn: &Connection,
    namespace: &str,
    key: &Key,
) -> rusqlite::Result<Result<Option<Row>>> {
    let sql = format!("SELECT {COLUMNS} FROM idem_records WHERE key = ?2 AND namespace = ?1");
    let row = conn
        .prepare_cached(&sql)?
        .query_row(params![namespace, key.as_bytes().as_slice()], read_row)
        .optional()?;
    Ok(row.transpose().map_err(corrupt(key)))
}

/// What `begin` learns from a key's row.
pub(super) enum Seen {
    /// A live record: `begin`'s answer.
    Live(Begin),
    /// A live claim: `begin` answers [`Begin::InFlight`] unless its holder is gone.
    Held(Held),
    /// No live record; the key's live attempt count.
    Free {
        /// Claims since the last recorded result, within the budget window.
        attempts: u32,
    },
}

/// A live claim as `begin` read it.
pub(super) struct Held {
    /// The holder's fingerprint.
    pub(super) fingerprint: Fingerprint,
    /// The holder's lease token.
    pub(super) token: i64,
    /// The holder's process, encoded ([`Holder`](crate::store::holder::Holder)), if written.
    pub(super) holder: Option<String>,
}

impl Held {
    /// Whether the holder is certainly gone, so that its claim may be freed at once.
    pub(super) fn is_abandoned(&self) -> bool {
        crate::store::holder::Holder::text_is_gone(self.holder.as_deref())
    }

    /// `begin`'s answer while the holder may still run.
    pub(super) fn in_flight(&self) -> Begin {
        Begin::InFlight {
            fingerprint: self.fingerprint,
        }
    }
}

/// Reads a row selected with [`SEEN`] (`whole`) or [`LIVE`] as of `now`, for `namespace` and
/// `turn`; `None` when the row is read with [`LIVE`] and it does not settle `begin`'s answer.
/// Only a live record has to be well formed: an expired one is overwritten by the next claim. A
/// row of another namespace holds no count for this one, and if live, cannot be this
/// namespace's record (keys commit to their namespace: it was written by hand); a row of another
/// turn holds no count for this one either.
fn read_seen(
    row: &rusqlite::Row<'_>,
    namespace: &str,
    turn: &str,
    now: u64,
    whole: bool,
) -> Result<Option<Seen>, Corrupt> {
    let expires_at_ms = required(integer(row, 3, "expires_at_ms")?, "expires_at_ms")?;
    let live = u64::try_from(expires_at_ms).is_ok_and(|at| at > now);
    match row.get_ref(4) {
        Ok(ValueRef::Text(ns)) if ns == namespace.as_bytes() => {}
        Ok(ValueRef::Text(_)) if !live => return Ok(Some(Seen::Free { attempts: 0 })),
        Ok(ValueRef::Text(ns)) => {
            return Err(Corrupt(format!(
                "the key's live record is in namespace {:?}",
                String::from_utf8_lossy(ns)
            )));
        }
        _ => return Err(Corrupt("column `namespace` is not text".to_owned())),
    }
    if !live {
        if !whole {
            return Ok(None);
        }
        match row.get_ref(9) {
            Ok(ValueRef::Text(of)) if of == turn.as_bytes() => {}
            Ok(ValueRef::Text(_)) => return Ok(Some(Seen::Free { attempts: 0 })),
            _ => return Err(Corrupt("column `turn` is not text".to_owned())),
        }
        let attempts = required(integer(row, 7, "attempts")?, "attempts")?;
        let window_end = required(integer(row, 8, "attempts_expire_ms")?, "attempts_expire_ms")?;
        return Ok(Some(Seen::Free {
            attempts: live_attempts(attempts, window_end, now),
        }));
    }
    // Not needed to answer, but a record whose columns do not hold what they should is
    // refused whole, as `get` refuses it.
    timestamp(
        required(integer(row, 5, "created_at_ms")?, "created_at_ms")?,
        "created_at_ms",
    )?;
    let fingerprint = match row.get_ref(1) {
        Ok(ValueRef::Blob(b)) => <[u8; 32]>::try_from(b)
            .map(Fingerprint::from_bytes)
            .map_err(|_| Corrupt(format!("fingerprint is {} bytes, not 32", b.len())))?,
        _ => return Err(Corrupt("column `fingerprint` is not a blob".to_owned())),
    };
    let state = match row.get_ref(0) {
        Ok(ValueRef::Text(state)) => state,
        _ => return Err(Corrupt("column `state` is not text".to_owned())),
    };
    match state {
        b"in_progress" if !whole => Ok(None),
        b"in_progress" => {
            let Some(token) = integer(row, 6, "token")? else {
                return Err(Corrupt("in progress without a lease token".to_owned()));
            };
            let holder = match row.get_ref(10) {
                Ok(ValueRef::Text(text)) => Some(String::from_utf8_lossy(text).into_owned()),
                // Not a holder this build wrote: never proof of anything.
                _ => None,
            };
            Ok(Some(Seen::Held(Held {
                fingerprint,
                token,
                holder,
            })))
        }
        b"completed" => match row.get_ref(2) {
            Ok(ValueRef::Blob(result)) => Ok(Some(Seen::Live(Begin::Completed(FirstResult {
                fingerprint,
                result: Bytes::copy_from_slice(result),
            })))),
            _ => Err(Corrupt("completed without a result".to_owned())),
        },
        other => Err(Corrupt(format!(
            "unknown state {:?}",
            String::from_utf8_lossy(other)
        ))),
    }
}

/// What `begin` of turn `turn` learns from `key`'s row (none: free, never claimed), read on
/// `conn`: the columns of a live record first ([`LIVE`], a replay's read), and the whole row
/// ([`SEEN`]) only if they do not settle it.
pub(super) fn seen(
    conn: &Connection,
    namespace: &str,
    turn: &str,
    key: &Key,
    now: u64,
) -> rusqlite::Result<Result<Seen>> {
    let read = |sql: &str, whole: bool| {
        conn.prepare_cached(sql)?
            .query_row([key.as_bytes().as_slice()], |row| {
                Ok(read_seen(row, namespace, turn, now, whole))
            })
            .optional()
    };
    let found = match read(LIVE, false)? {
        Some(Ok(None)) => read(SEEN, true)?,
        found => found,
    };
    Ok(match found {
        None => Ok(Seen::Free { attempts: 0 }),
        Some(Ok(Some(seen))) => Ok(seen),
        // A whole row always settles it.
        Some(Ok(None)) => Err(Corrupt("the key's row could not be read whole".to_owned())),
        Some(Err(corrupt)) => Err(corrupt),
    }
    .map_err(corrupt(key)))
}

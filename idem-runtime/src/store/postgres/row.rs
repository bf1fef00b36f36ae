//! Reading `idem_records` rows: every column checked, a malformed row an error, never a panic.

use sqlx::Row as _;
use sqlx::postgres::PgRow;

use crate::Error;
use crate::key::{Fingerprint, Key};
use crate::store::{Begin, FirstResult, Record, RecordState};

/// The columns [`read`] expects, in order, followed by the server's time (`now`).
pub(super) const COLUMNS: &str = "namespace, key, tool, state, fingerprint, result, \
     created_at_ms, expires_at_ms, token, attempts, attempts_expire_ms, turn";

/// Whatever is wrong with a row; becomes [`Error::CorruptRecord`].
pub(super) struct Corrupt(pub(super) String);

fn get<'r, T: sqlx::Decode<'r, sqlx::Postgres> + sqlx::Type<sqlx::Postgres>>(
    row: &'r PgRow,
    i: usize,
    name: &str,
) -> Result<T, Corrupt> {
    row.try_get(i)
        .map_err(|e| Corrupt(format!("column `{name}` unreadable: {e}")))
}

fn ms(value: i64, name: &str) -> Result<u64, Corrupt> {
    u64::try_from(value).map_err(|_| Corrupt(format!("`{name}` is negative ({value})")))
}

fn bytes32(value: &[u8], name: &str) -> Result<[u8; 32], Corrupt> {
    <[u8; 32]>::try_from(value)
        .map_err(|_| Corrupt(format!("{name} is {} bytes, not 32", value.len())))
}

/// Reads a row selected with [`COLUMNS`] and the server's time, as a live [`Record`] (the
/// query selects live rows only).
pub(super) fn read(row: &PgRow) -> Result<Record, Corrupt> {
    let now: i64 = get(row, 12, "now")?;
    let state: String = get(row, 3, "state")?;
    let token: Option<i64> = get(row, 8, "token")?;
    let result: Option<Vec<u8>> = get(row, 5, "result")?;
    let state = parse_state(&state, token.is_some(), result.is_some())?;
    let attempts: i64 = get(row, 9, "attempts")?;
    let attempts_expire_ms: i64 = get(row, 10, "attempts_expire_ms")?;
    let key: Vec<u8> = get(row, 1, "key")?;
    let fingerprint: Vec<u8> = get(row, 4, "fingerprint")?;
    Ok(Record {
        namespace: get(row, 0, "namespace")?,
        key: Key::from_bytes(bytes32(&key, "key")?),
        tool: get(row, 2, "tool")?,
        turn: get(row, 11, "turn")?,
        state,
        fingerprint: Fingerprint::from_bytes(bytes32(&fingerprint, "fingerprint")?),
        result: match state {
            RecordState::Completed => result,
            RecordState::InProgress => None,
        },
        attempts: if attempts_expire_ms > now {
            u32::try_from(attempts.max(0)).unwrap_or(u32::MAX)
        } else {
            0
        },
        created_at_ms: ms(get(row, 6, "created_at_ms")?, "created_at_ms")?,
        expires_at_ms: ms(get(row, 7, "expires_at_ms")?, "expires_at_ms")?,
        holder_gone: false,
    })
}

fn parse_state(state: &str, has_token: bool, has_result: bool) -> Result<RecordState, Corrupt> {
    match state {
        "in_progress" if !has_token => Err(Corrupt("in progress without a lease token".into())),
        "in_progress" => Ok(RecordState::InProgress),
        "completed" if !has_result => Err(Corrupt("completed without a result".into())),
        "completed" => Ok(RecordState::Completed),
        other => Err(Corrupt(format!("unknown state {other:?}"))),
    }
}

/// The answer of `begin` for a live row, as `idem_begin` returns it (`o_state`,
/// `o_fingerprint`, `o_result`, `o_token` in columns 1 to 4).
pub(super) fn live(row: &PgRow, key: &Key) -> crate::Result<Begin> {
    let read = || -> Result<Begin, Corrupt> {
        // idem_begin's own columns, read as the bytes the server sent (each is checked below:
        // the state is one of two words, the fingerprint 32 bytes, the result an envelope
        // when it is replayed); only the result is copied out.
        let state = raw(row, 1, "state")?.unwrap_or_default();
        let fingerprint = raw(row, 2, "fingerprint")?.unwrap_or_default();
        let result = raw(row, 3, "result")?;
        let token = raw(row, 4, "token")?;
        let fingerprint = Fingerprint::from_bytes(bytes32(fingerprint, "fingerprint")?);
        let state = std::str::from_utf8(state).unwrap_or("(not UTF-8)");
        Ok(
            match parse_state(state, token.is_some(), result.is_some())? {
                RecordState::InProgress => Begin::InFlight { fingerprint },
                RecordState::Completed => Begin::Completed(FirstResult {
                    fingerprint,
                    result: result
                        .map(bytes::Bytes::copy_from_slice)
                        .unwrap_or_default(),
                }),
            },
        )
    };
    read().map_err(corrupt(key))
}

/// The token and holder of a live claim that `idem_begin` answered (`o_answer` `'live'`,
/// `o_state` `'in_progress'`, `o_token` and `o_holder` in columns 4 and 7) whose holder is
/// certainly gone; `None` for any other answer, or a holder that may still run.
pub(super) fn abandoned(row: &PgRow) -> Option<(i64, String)> {
    if text(row, 0) != Some(b"live") || text(row, 1) != Some(b"in_progress") {
        return None;
    }
    let token: i64 = row.try_get::<Option<i64>, _>(4).ok()??;
    let holder: String = row.try_get::<Option<String>, _>(7).ok()??;
    crate::store::holder::Holder::text_is_gone(Some(&holder)).then_some((token, holder))
}

/// The bytes of column `i` (`name`) of `row` as the server sent them; `None` for NULL.
fn raw<'r>(row: &'r PgRow, i: usize, name: &str) -> Result<Option<&'r [u8]>, Corrupt> {
    let value = row
        .try_get_raw(i)
        .map_err(|e| Corrupt(format!("column `{name}` unreadable: {e}")))?;
    Ok(value.as_bytes().ok())
}

/// The bytes of text column `i` of `row` as the server sent them (no check of the column's
/// type, no UTF-8 validation: for comparing with known words); `None` for NULL or no column.
pub(super) fn text(row: &PgRow, i: usize) -> Option<&[u8]> {
    raw(row, i, "").ok().flatten()
}

/// `Corrupt` as the error of `key`.
pub(super) fn corrupt(key: &Key) -> impl FnOnce(Corrupt) -> Error + '_ {
    move |Corrupt(message)| Error::CorruptRecord {
        key: key.short(),
        message,
    }
}

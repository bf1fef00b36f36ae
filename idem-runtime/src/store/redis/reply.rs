//! The replies of the store's scripts, and records decoded from them.

use ::redis::Value;

use crate::key::{Fingerprint, Key};
use crate::store::Bytes;
use crate::store::{Record, RecordState};
use crate::{Error, Result};

/// The replies of the `begin` and `get` scripts.
pub(super) enum Reply {
    /// `c`: `begin` claimed the key.
    Claimed,
    /// `n`: `begin` in mode `claim` claimed the key as a retry (its turn's charge is to be
    /// given back).
    ClaimedRetry,
    /// `f` + attempts: no live record, and the key's count (of this turn's claims) allows a
    /// claim (`begin` in mode `check`, or `retry` for a new action).
    Free(u32),
    /// `{'none'}`: no live record (`get`).
    None,
    /// `d` + fingerprint + result: a completed record (`begin`).
    Done {
        /// The fingerprint, as stored.
        fingerprint: Bytes,
        /// The encoded result (shares the reply's bytes).
        result: Bytes,
    },
    /// `r` + fingerprint + token + ` ` + holder: a record in progress (`begin`).
    Running {
        /// The fingerprint, as stored.
        fingerprint: Bytes,
        /// The holder's token, as stored.
        token: Vec<u8>,
        /// The holder's process, encoded ([`Holder`](crate::store::holder::Holder)); empty if
        /// none was written.
        holder: Vec<u8>,
    },
    /// `{'record', state, fp, tool, created, exp, res, att, turn}`: the eight fields, `None`
    /// where absent (`get`).
    Record(Vec<Option<Vec<u8>>>),
    /// `x` + what (`begin`), `{'corrupt', what}` (`get`): the hash is not a well-formed
    /// record.
    Corrupt(String),
    /// `k` + attempts: the per-key budget refused the claim.
    RefusedKey(u32),
    /// `t` + calls: the turn's cap refused the claim.
    RefusedTurn(u32),
    /// `a` + actions: the tool's cap refused the claim.
    RefusedTool(u32),
}

fn bytes(value: Option<Value>) -> Option<Vec<u8>> {
    match value {
        Some(Value::BulkString(bytes)) => Some(bytes),
        _ => None,
    }
}

fn text(value: Option<Value>) -> String {
    bytes(value).map_or_else(
        || "unknown".to_owned(),
        |b| String::from_utf8_lossy(&b).into_owned(),
    )
}

/// The length of a fingerprint in a `begin` reply.
const FP: usize = 32;

impl Reply {
    /// A reply of `begin.lua`: one string whose first byte says what follows.
    pub(super) fn begun(reply: Value) -> Result<Reply> {
        let Value::BulkString(bytes) = reply else {
            return Err(unexpected("begin", &reply));
        };
        let malformed = || Error::store("begin", "unexpected reply from Redis");
        let number = |digits: &[u8]| {
            std::str::from_utf8(digits)
                .ok()
                .and_then(|text| text.parse::<u64>().ok())
                .map(|n| u32::try_from(n).unwrap_or(u32::MAX))
        };
        match bytes.first() {
            Some(b'c') => Ok(Reply::Claimed),
            Some(b'n') => Ok(Reply::ClaimedRetry),
            Some(b'f') => number(&bytes[1..]).map(Reply::Free).ok_or_else(malformed),
            Some(b'd') if bytes.len() > FP => {
                let bytes = Bytes::from(bytes);
                Ok(Reply::Done {
                    fingerprint: bytes.slice(1..=FP),
                    result: bytes.slice(FP + 1..),
                })
            }
            Some(b'r') if bytes.len() > FP => {
                let rest = &bytes[FP + 1..];
                let (token, holder) = match rest.iter().position(|&b| b == b' ') {
                    Some(space) => (rest[..space].to_vec(), rest[space + 1..].to_vec()),
                    None => (rest.to_vec(), Vec::new()),
                };
                Ok(Reply::Running {
                    fingerprint: Bytes::from(bytes).slice(1..=FP),
                    token,
                    holder,
                })
            }
            Some(b'x') => Ok(Reply::Corrupt(
                String::from_utf8_lossy(&bytes[1..]).into_owned(),
            )),
            Some(b'k') => number(&bytes[1..])
                .map(Reply::RefusedKey)
                .ok_or_else(malformed),
            Some(b't') => number(&bytes[1..])
                .map(Reply::RefusedTurn)
                .ok_or_else(malformed),
            Some(b'a') => number(&bytes[1..])
                .map(Reply::RefusedTool)
                .ok_or_else(malformed),
            _ => Err(malformed()),
        }
    }

    /// A reply of `get.lua`: `{'none'}`, `{'record', …}` or `{'corrupt', what}`.
    pub(super) fn parse(operation: &'static str, reply: Value) -> Result<Reply> {
        let Value::Array(items) = reply else {
            return Err(unexpected(operation, &reply));
        };
        let malformed = || Error::store(operation, "unexpected reply from Redis");
        let mut items = items.into_iter();
        let tag = match items.next() {
            Some(Value::BulkString(tag)) => tag,
            _ => return Err(malformed()),
        };
        match tag.as_slice() {
            b"none" => Ok(Reply::None),
            b"record" => {
                let fields = items
                    .map(|item| match item {
                        Value::BulkString(bytes) => Ok(Some(bytes)),
                        Value::Nil => Ok(None),
                        other => Err(unexpected(operation, &other)),
                    })
                    .collect::<Result<Vec<_>>>()?;
                Ok(Reply::Record(fields))
            }
            b"corrupt" => Ok(Reply::Corrupt(text(items.next()))),
            _ => Err(malformed()),
        }
    }
}

/// A fingerprint as stored (the scripts checked its length; a wrong one is corrupt anyway).
pub(super) fn fingerprint(key: &Key, bytes: &[u8]) -> Result<Fingerprint> {
    <[u8; 32]>::try_from(bytes)
        .map(Fingerprint::from_bytes)
        .map_err(|_| corrupt(key, "field `fp` is not 32 bytes"))
}

/// A reply of an unexpected shape (never data from the record: it may be large or private).
pub(super) fn unexpected(operation: &'static str, value: &Value) -> Error {
    let shape = match value {
        Value::Nil => "nil",
        Value::Int(_) => "an integer",
        Value::BulkString(_) => "a string",
        Value::Array(_) => "an array",
        Value::ServerError(_) => "an error",
        _ => "an unexpected type",
    };
    Error::store(operation, format!("unexpected reply from Redis: {shape}"))
}

pub(super) fn corrupt(key: &Key, message: impl Into<String>) -> Error {
    Error::CorruptRecord {
        key: key.short(),
        message: message.into(),
    }
}

pub(super) fn wrong_type(key: &Key, kind: &str) -> Error {
    corrupt(
        key,
        format!("the Redis key holds a {kind}, not an idem record (a hash)"),
    )
}

/// Builds a [`Record`] from the fields `state, fp, tool, created, exp, res, att, turn` (a
/// record written before records carried their turn has none: its turn is `""`).
pub(super) fn decode_record(
    namespace: &str,
    key: &Key,
    fields: &[Option<Vec<u8>>],
) -> Result<Record> {
    let [state, fp, tool, created, exp, res, att, turn] = fields else {
        return Err(corrupt(
            key,
            format!("expected 8 fields, got {}", fields.len()),
        ));
    };
    let field = |value: &Option<Vec<u8>>, name: &str| -> Result<Vec<u8>> {
        value
            .clone()
            .ok_or_else(|| corrupt(key, format!("field `{name}` is missing")))
    };
    let millis = |value: &Option<Vec<u8>>, name: &str| -> Result<u64> {
        let bytes = field(value, name)?;
        std::str::from_utf8(&bytes)
            .ok()
            .and_then(|text| text.parse().ok())
            .ok_or_else(|| corrupt(key, format!("field `{name}` is not a number of ms")))
    };
    let state = match field(state, "state")?.as_slice() {
        b"in_progress" => RecordState::InProgress,
        b"completed" => RecordState::Completed,
        _ => {
            return Err(corrupt(
                key,
                "field `state` is neither in_progress nor completed",
            ));
        }
    };
    let fingerprint = fingerprint(key, &field(fp, "fp")?)?;
    let tool = String::from_utf8(field(tool, "tool")?)
        .map_err(|_| corrupt(key, "field `tool` is not UTF-8"))?;
    let result = match state {
        RecordState::Completed => Some(field(res, "res")?),
        RecordState::InProgress => None,
    };
    let turn = String::from_utf8(turn.clone().unwrap_or_default())
        .map_err(|_| corrupt(key, "field `turn` is not UTF-8"))?;
    Ok(Record {
        namespace: namespace.to_owned(),
        key: *key,
        tool,
        turn,
        state,
        fingerprint,
        result,
        attempts: u32::try_from(millis(att, "att")?).unwrap_or(u32::MAX),
        created_at_ms: millis(created, "created")?,
        expires_at_ms: millis(exp, "exp")?,
        holder_gone: false,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn records_with_missing_or_bad_fields_are_corrupt() {
        let key = Key::from_bytes([7; 32]);
        let good = |state: &str| {
            vec![
                Some(state.as_bytes().to_vec()),
                Some(vec![1; 32]),
                Some(b"send".to_vec()),
                Some(b"1000".to_vec()),
                Some(b"2000".to_vec()),
                Some(b"result".to_vec()),
                Some(b"1".to_vec()),
                Some(b"turn-7".to_vec()),
            ]
        };
        let record = decode_record("ns", &key, &good("completed")).ok();
        assert_eq!(record.as_ref().map(|r| r.turn.as_str()), Some("turn-7"));
        assert_eq!(record.and_then(|r| r.result), Some(b"result".to_vec()));
        let mut untold = good("completed");
        untold[7] = None;
        let record = decode_record("ns", &key, &untold).ok();
        assert_eq!(
            record.map(|r| r.turn),
            Some(String::new()),
            "a record of no known turn"
        );
        let running = decode_record("ns", &key, &good("in_progress")).ok();
        assert_eq!(running.map(|r| r.result), Some(None));

        let mut bad_state = good("completed");
        bad_state[0] = Some(b"zzz".to_vec());
        let mut short_fp = good("completed");
        short_fp[1] = Some(vec![1; 31]);
        let mut no_result = good("completed");
        no_result[5] = None;
        let mut bad_time = good("completed");
        bad_time[3] = Some(b"soon".to_vec());
        for fields in [bad_state, short_fp, no_result, bad_time, vec![None]] {
            assert!(matches!(
                decode_record("ns", &key, &fields),
                Err(Error::CorruptRecord { .. })
            ));
        }
    }
}

//! The replies of the store's scripts, and records decoded from them.

use ::redis::Value;

use crate::key::{Fingerprint, Key};
use crate::store::{Record, RecordState};
use crate::{Error, Result};

/// The replies of the `begin` and `get` scripts.
pub(super) enum Reply {
    /// `{'claimed'}` or `{'none'}`.
    Tag(Vec<u8>),
    /// `{'record', state, fp, tool, created, exp, res}`: the six fields, `None` where absent.
    Record(Vec<Option<Vec<u8>>>),
    /// `{'wrongtype', type}`: the key holds another Redis type.
    WrongType(String),
    /// `{'exhausted_key', attempts, completed}`: the per-key budget refused the call.
    ExhaustedKey {
        /// Attempts with the key, this one included.
        attempts: u32,
        /// Whether the key holds a live completed record.
        completed: bool,
    },
    /// `{'exhausted_turn'}`: the turn-wide budget refused the call (the key allowed it).
    ExhaustedTurn,
}

impl Reply {
    pub(super) fn parse(operation: &'static str, reply: Value) -> Result<Reply> {
        let Value::Array(items) = reply else {
            return Err(unexpected(operation, &reply));
        };
        let mut items = items.into_iter();
        let tag = match items.next() {
            Some(Value::BulkString(tag)) => tag,
            _ => return Err(Error::store(operation, "unexpected reply from Redis")),
        };
        match tag.as_slice() {
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
            b"wrongtype" => {
                let kind = match items.next() {
                    Some(Value::BulkString(kind)) => String::from_utf8_lossy(&kind).into_owned(),
                    _ => "unknown".to_owned(),
                };
                Ok(Reply::WrongType(kind))
            }
            b"exhausted_key" => match (items.next(), items.next()) {
                (Some(Value::Int(attempts)), Some(Value::Int(completed))) => {
                    Ok(Reply::ExhaustedKey {
                        attempts: u32::try_from(attempts.max(0)).unwrap_or(u32::MAX),
                        completed: completed != 0,
                    })
                }
                _ => Err(Error::store(operation, "unexpected reply from Redis")),
            },
            b"exhausted_turn" => Ok(Reply::ExhaustedTurn),
            _ => Ok(Reply::Tag(tag)),
        }
    }
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

fn corrupt(key: &Key, message: impl Into<String>) -> Error {
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

/// Builds a [`Record`] from the fields `state, fp, tool, created, exp, res`.
pub(super) fn decode_record(
    namespace: &str,
    key: &Key,
    fields: &[Option<Vec<u8>>],
) -> Result<Record> {
    let [state, fp, tool, created, exp, res] = fields else {
        return Err(corrupt(
            key,
            format!("expected 6 fields, got {}", fields.len()),
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
    let fingerprint = <[u8; 32]>::try_from(field(fp, "fp")?.as_slice())
        .map(Fingerprint::from_bytes)
        .map_err(|_| corrupt(key, "field `fp` is not 32 bytes"))?;
    let tool = String::from_utf8(field(tool, "tool")?)
        .map_err(|_| corrupt(key, "field `tool` is not UTF-8"))?;
    let result = match state {
        RecordState::Completed => Some(field(res, "res")?),
        RecordState::InProgress => None,
    };
    Ok(Record {
        namespace: namespace.to_owned(),
        key: *key,
        tool,
        state,
        fingerprint,
        result,
        created_at_ms: millis(created, "created")?,
        expires_at_ms: millis(exp, "exp")?,
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
            ]
        };
        let record = decode_record("ns", &key, &good("completed")).ok();
        assert_eq!(record.and_then(|r| r.result), Some(b"result".to_vec()));
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

//! How results are recorded for replay.
//!
//! A completed record holds the tool's result as **JSON**, wrapped in a one-key envelope:
//! `{"ok": <T>}`, or `{"err": <E>}` for tools that cache errors. JSON was chosen over a compact
//! binary format because records are read by people: an operator inspecting a dedup table with
//! `sqlite3` or `redis-cli` sees what the agent was told the first time. It is also tolerant of
//! schema evolution (new `Option` fields with `#[serde(default)]` decode from old records), and a
//! result is small next to the network round trip of the tool it replaces.
//!
//! A record that no longer decodes into the tool's result type (corruption, or a type changed in
//! a new release without bumping the tool's `version`) yields [`Error::Decode`] naming the tool
//! and key; it never panics and never silently runs the tool again.

use serde::de::{DeserializeOwned, IgnoredAny};
use serde::{Deserialize, Serialize};

use crate::Error;
use crate::key::Key;

#[derive(Serialize)]
enum EnvelopeRef<'a, T, E> {
    #[serde(rename = "ok")]
    Ok(&'a T),
    #[serde(rename = "err")]
    Err(&'a E),
}

#[derive(Deserialize)]
enum Envelope<T, E> {
    #[serde(rename = "ok")]
    Ok(T),
    #[serde(rename = "err")]
    Err(E),
    #[serde(rename = "interrupted")]
    Interrupted,
    #[serde(rename = "unreplayable")]
    Unreplayable(String),
}

/// The record of a call interrupted mid-run: retries get [`Error::Interrupted`].
pub(crate) fn encode_interrupted() -> Vec<u8> {
    br#"{"interrupted":null}"#.to_vec()
}

/// The record of a call that ran but whose result cannot be replayed faithfully: retries get
/// [`Error::NotReplayable`] with `message`.
pub(crate) fn encode_unreplayable(message: &str) -> Vec<u8> {
    serde_json::to_vec(&serde_json::json!({ "unreplayable": message }))
        .unwrap_or_else(|_| br#"{"unreplayable":""}"#.to_vec())
}

/// Checks that `bytes` decode back as the codec's result type, before they are recorded.
pub(crate) fn verify<C: ResultCodec<T, E>, T, E>(
    tool: &'static str,
    key: &Key,
    bytes: &[u8],
) -> Result<(), Error> {
    C::decode(tool, key, bytes).map(drop)
}

fn marker(tool: &'static str, key: &Key, envelope: Envelope<IgnoredAny, IgnoredAny>) -> Error {
    match envelope {
        Envelope::Interrupted => Error::Interrupted {
            tool,
            key: key.short(),
        },
        Envelope::Unreplayable(message) => Error::NotReplayable {
            tool,
            key: key.short(),
            message,
        },
        Envelope::Ok(_) | Envelope::Err(_) => decode_error(tool, key, "unexpected envelope"),
    }
}

/// How one kind of tool records and replays its results.
pub(crate) trait ResultCodec<T, E> {
    /// The bytes to record for `result`, or `None` when the result must not be recorded (the
    /// key is then released so that a retry runs the tool again).
    fn encode(tool: &'static str, result: &Result<T, E>) -> Option<Result<Vec<u8>, Error>>;

    /// Decodes a recorded result.
    fn decode(tool: &'static str, key: &Key, bytes: &[u8]) -> Result<Result<T, E>, Error>;
}

/// Records `Ok` results only (the default).
pub(crate) struct OkOnly;

/// Records `Ok` and `Err` results (`cache_errors`).
pub(crate) struct OkAndErr;

fn encode_envelope<T: Serialize, E: Serialize>(
    tool: &'static str,
    envelope: &EnvelopeRef<'_, T, E>,
) -> Result<Vec<u8>, Error> {
    serde_json::to_vec(envelope).map_err(|e| Error::Encode {
        tool,
        what: "its result".to_owned(),
        message: e.to_string(),
    })
}

fn decode_error(tool: &'static str, key: &Key, message: impl ToString) -> Error {
    Error::Decode {
        tool,
        key: key.short(),
        message: message.to_string(),
    }
}

impl<T: Serialize + DeserializeOwned, E> ResultCodec<T, E> for OkOnly {
    fn encode(tool: &'static str, result: &Result<T, E>) -> Option<Result<Vec<u8>, Error>> {
        let value = result.as_ref().ok()?;
        Some(encode_envelope::<T, ()>(tool, &EnvelopeRef::Ok(value)))
    }

    fn decode(tool: &'static str, key: &Key, bytes: &[u8]) -> Result<Result<T, E>, Error> {
        match serde_json::from_slice::<Envelope<T, IgnoredAny>>(bytes) {
            Ok(Envelope::Ok(value)) => Ok(Ok(value)),
            Ok(Envelope::Err(_)) => Err(decode_error(
                tool,
                key,
                "the record holds a cached error but the tool does not cache errors",
            )),
            Ok(Envelope::Interrupted) => Err(marker(tool, key, Envelope::Interrupted)),
            Ok(Envelope::Unreplayable(m)) => Err(marker(tool, key, Envelope::Unreplayable(m))),
            Err(e) => Err(decode_error(tool, key, e)),
        }
    }
}

impl<T, E> ResultCodec<T, E> for OkAndErr
where
    T: Serialize + DeserializeOwned,
    E: Serialize + DeserializeOwned,
{
    fn encode(tool: &'static str, result: &Result<T, E>) -> Option<Result<Vec<u8>, Error>> {
        Some(match result {
            Ok(value) => encode_envelope::<T, E>(tool, &EnvelopeRef::Ok(value)),
            Err(error) => encode_envelope::<T, E>(tool, &EnvelopeRef::Err(error)),
        })
    }

    fn decode(tool: &'static str, key: &Key, bytes: &[u8]) -> Result<Result<T, E>, Error> {
        match serde_json::from_slice::<Envelope<T, E>>(bytes) {
            Ok(Envelope::Ok(value)) => Ok(Ok(value)),
            Ok(Envelope::Err(error)) => Ok(Err(error)),
            Ok(Envelope::Interrupted) => Err(marker(tool, key, Envelope::Interrupted)),
            Ok(Envelope::Unreplayable(m)) => Err(marker(tool, key, Envelope::Unreplayable(m))),
            Err(e) => Err(decode_error(tool, key, e)),
        }
    }
}

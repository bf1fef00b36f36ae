//! The two codecs the engine uses, and the fidelity check before recording.

use serde::Serialize;
use serde::de::DeserializeOwned;

use super::envelope::{Envelope, decode_error, encode_error, encode_record, marker_error, open};
use super::format::{FormatError, marker};
use super::ser::Names;
use super::{OkAndErr, OkOnly, ResultCodec, de, node, render, ser};
use crate::Error;
use crate::key::Key;

/// Checks that `recorded` (one value) decodes into `V` and encodes back to the same value;
/// returns the names the replayed value's types passed.
fn verify_value<V: Serialize + DeserializeOwned>(
    tool: &'static str,
    recorded: &[u8],
) -> Result<Names, Error> {
    let mut again = Vec::with_capacity(recorded.len());
    let replayed = match de::decode_value::<V>(recorded) {
        Ok(replayed) => Ok(ser::encode_value(&replayed, &mut again)),
        Err(e) => Err(e),
    };
    compared(tool, recorded, &again, replayed)
}

/// [`verify_value`]'s verdict, compiled once: `replayed` is the error decoding `recorded` failed
/// with, or what encoding the decoded value (into `again`) gave.
fn compared(
    tool: &'static str,
    recorded: &[u8],
    again: &[u8],
    replayed: Result<Result<Names, FormatError>, FormatError>,
) -> Result<Names, Error> {
    let names = match replayed {
        Ok(Ok(names)) => names,
        Ok(Err(e)) => return Err(encode_error(tool, e)),
        Err(e) => return Err(would_not_replay(tool, e)),
    };
    same_value(tool, recorded, again)?;
    Ok(names)
}

/// The error of a record that does not decode into its type.
fn would_not_replay(tool: &'static str, e: FormatError) -> Error {
    encode_error(tool, format!("it would not replay: {e}"))
}

/// Whether `again` (a value decoded from `recorded` and encoded back) is the value recorded;
/// compiled once, outside the generic code.
fn same_value(tool: &'static str, recorded: &[u8], again: &[u8]) -> Result<(), Error> {
    if again == recorded {
        return Ok(());
    }
    let (first, second) = match (node::parse(recorded), node::parse(again)) {
        (Ok(first), Ok(second)) => (first, second),
        (Err(e), _) | (_, Err(e)) => return Err(encode_error(tool, e)),
    };
    // Only maps and sets may come back in another order; a sequence must replay as it was.
    if first.clone().canonical() == second.clone().canonical() {
        return Ok(());
    }
    let shown = |node: &node::Node<'_>| {
        let mut text = String::new();
        render::write_node(&mut text, node, 0);
        let text = text.split_whitespace().collect::<Vec<_>>().join(" ");
        match text.char_indices().nth(200) {
            Some((cut, _)) => format!("{}…", &text[..cut]),
            None => text,
        }
    };
    Err(encode_error(
        tool,
        format!(
            "it would not replay as it was returned: recorded {}, replays as {}",
            shown(&first),
            shown(&second)
        ),
    ))
}

/// A record opened to decode it (the error names the tool and key). Compiled once, like
/// [`opened_to_verify`]: the generic code only calls it.
fn opened<'a>(tool: &'static str, key: &Key, bytes: &'a [u8]) -> Result<Envelope<'a>, Error> {
    open(bytes).map_err(|e| decode_error(tool, key, e))
}

/// A record just encoded, opened to verify it.
fn opened_to_verify<'a>(tool: &'static str, bytes: &'a [u8]) -> Result<Envelope<'a>, Error> {
    open(bytes).map_err(|e| encode_error(tool, e))
}

impl<T: Serialize + DeserializeOwned, E> ResultCodec<T, E> for OkOnly {
    fn encode_into(
        tool: &'static str,
        result: &Result<T, E>,
        out: &mut Vec<u8>,
    ) -> Option<Result<Names, Error>> {
        match result {
            Ok(value) => Some(encode_record(tool, marker::OK, value, out)),
            Err(_) => None,
        }
    }

    fn decode(tool: &'static str, key: &Key, bytes: &[u8]) -> Result<Result<T, E>, Error> {
        match opened(tool, key, bytes)? {
            Envelope::Ok(value) => match de::decode_value(value) {
                Ok(value) => Ok(Ok(value)),
                Err(e) => Err(decode_error(tool, key, e)),
            },
            other => Err(marker_error(tool, key, other)),
        }
    }

    fn verify(tool: &'static str, bytes: &[u8]) -> Result<Names, Error> {
        match opened_to_verify(tool, bytes)? {
            Envelope::Ok(value) => verify_value::<T>(tool, value),
            Envelope::Err(_) => Err(encode_error(
                tool,
                "this tool records `Ok` results only, in format version 1",
            )),
            Envelope::NotReplayable { .. } | Envelope::Interrupted { .. } => Ok(Names::default()),
        }
    }
}

impl<T, E> ResultCodec<T, E> for OkAndErr
where
    T: Serialize + DeserializeOwned,
    E: Serialize + DeserializeOwned,
{
    fn encode_into(
        tool: &'static str,
        result: &Result<T, E>,
        out: &mut Vec<u8>,
    ) -> Option<Result<Names, Error>> {
        Some(match result {
            Ok(value) => encode_record(tool, marker::OK, value, out),
            Err(error) => encode_record(tool, marker::ERR, error, out),
        })
    }

    fn decode(tool: &'static str, key: &Key, bytes: &[u8]) -> Result<Result<T, E>, Error> {
        match opened(tool, key, bytes)? {
            Envelope::Ok(value) => match de::decode_value(value) {
                Ok(value) => Ok(Ok(value)),
                Err(e) => Err(decode_error(tool, key, e)),
            },
            Envelope::Err(value) => match de::decode_value(value) {
                Ok(value) => Ok(Err(value)),
                Err(e) => Err(decode_error(tool, key, e)),
            },
            other => Err(marker_error(tool, key, other)),
        }
    }

    fn verify(tool: &'static str, bytes: &[u8]) -> Result<Names, Error> {
        match opened_to_verify(tool, bytes)? {
            Envelope::Ok(value) => verify_value::<T>(tool, value),
            Envelope::Err(value) => verify_value::<E>(tool, value),
            Envelope::NotReplayable { .. } | Envelope::Interrupted { .. } => Ok(Names::default()),
        }
    }
}

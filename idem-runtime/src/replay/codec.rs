//! The two codecs the engine uses, and the fidelity check before recording.

use serde::Serialize;
use serde::de::DeserializeOwned;

use super::envelope::{Envelope, decode_error, encode_error, encode_record, marker_error, open};
use super::format::{FormatError, marker, tri};
use super::ser::Names;
use super::{OkAndErr, OkOnly, ResultCodec, de, node, render, ser};
use crate::Error;
use crate::key::Key;

/// Decodes `recorded` (one value) into `V` and encodes that into `again`: the names its types
/// passed, or the error decoding or encoding failed with. The only part of the fidelity check
/// compiled for every result type; [`verify_value`] is the rest.
type RoundTrip = fn(&[u8], &mut Vec<u8>) -> Result<Result<Names, FormatError>, FormatError>;

/// A [`RoundTrip`] through `V`.
fn round_trip<V: Serialize + DeserializeOwned>(
    recorded: &[u8],
    again: &mut Vec<u8>,
) -> Result<Result<Names, FormatError>, FormatError> {
    match de::decode_value::<V>(recorded) {
        Ok(replayed) => Ok(ser::encode_value(&replayed, again)),
        Err(e) => Err(e),
    }
}

/// Checks that `recorded` (one value) decodes into its type and encodes back to the same value
/// (`round_trip`); returns the names the replayed value's types passed.
fn verify_value(
    tool: &'static str,
    recorded: &[u8],
    round_trip: RoundTrip,
) -> Result<Names, Error> {
    let mut again = Vec::with_capacity(recorded.len());
    let names = match round_trip(recorded, &mut again) {
        Ok(Ok(names)) => names,
        Ok(Err(e)) => return Err(encode_error(tool, e)),
        Err(e) => return Err(would_not_replay(tool, e)),
    };
    same_value(tool, recorded, &again)?;
    Ok(names)
}

/// Checks a record just encoded ([`ResultCodec::verify`]): an `Ok` value through `ok`, an `Err`
/// value through `err` (`None`: the tool records `Ok` results only); markers pass.
fn verify_record(
    tool: &'static str,
    bytes: &[u8],
    ok: RoundTrip,
    err: Option<RoundTrip>,
) -> Result<Names, Error> {
    match open(bytes).map_err(|e| encode_error(tool, e))? {
        Envelope::Ok(value) => verify_value(tool, value, ok),
        Envelope::Err(value) => match err {
            Some(err) => verify_value(tool, value, err),
            None => Err(encode_error(
                tool,
                "this tool records `Ok` results only, in format version 1",
            )),
        },
        Envelope::NotReplayable { .. } | Envelope::Interrupted { .. } => Ok(Names::default()),
    }
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

/// The value of an `Ok` record, to decode; else the error the record answers with (a
/// marker's), naming the tool and key. Compiled once: the generic code only calls it.
fn ok_value<'a>(tool: &'static str, key: &Key, bytes: &'a [u8]) -> Result<&'a [u8], Error> {
    match opened(tool, key, bytes)? {
        Envelope::Ok(value) => Ok(value),
        other => Err(marker_error(tool, key, other)),
    }
}

/// A record opened to decode it (the error names the tool and key).
fn opened<'a>(tool: &'static str, key: &Key, bytes: &'a [u8]) -> Result<Envelope<'a>, Error> {
    open(bytes).map_err(|e| decode_error(tool, key, e))
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
        match ok_value(tool, key, bytes) {
            Ok(value) => match de::decode_value(value) {
                Ok(value) => Ok(Ok(value)),
                Err(e) => Err(decode_error(tool, key, e)),
            },
            Err(error) => Err(error),
        }
    }

    fn verify(tool: &'static str, bytes: &[u8]) -> Result<Names, Error> {
        verify_record(tool, bytes, round_trip::<T>, None)
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
        match tri!(opened(tool, key, bytes)) {
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
        verify_record(tool, bytes, round_trip::<T>, Some(round_trip::<E>))
    }
}

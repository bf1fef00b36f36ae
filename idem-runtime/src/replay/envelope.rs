//! The record envelope: version byte, kind marker, then a value or a marker's fields.

use serde::Serialize;

use super::format::{FormatError, OLDEST_VERSION, Reader, VERSION, marker, put_str};
use super::ser::{self, Names};
use crate::Error;
use crate::key::Key;

/// The record of a tool that ran and finished but whose result cannot be replayed: decoding it
/// gives [`Error::NotReplayable`] with `reason`.
pub(crate) fn encode_unreplayable(tool: &str, reason: &str) -> Vec<u8> {
    let mut out = Vec::with_capacity(4 + tool.len() + reason.len());
    out.extend_from_slice(&[VERSION, marker::NOT_REPLAYABLE]);
    put_str(&mut out, tool);
    put_str(&mut out, reason);
    out
}

/// The record of a call that started and was interrupted before it finished: decoding it
/// gives [`Error::Interrupted`].
pub(crate) fn encode_interrupted(tool: &str) -> Vec<u8> {
    let mut out = Vec::with_capacity(3 + tool.len());
    out.extend_from_slice(&[VERSION, marker::INTERRUPTED]);
    put_str(&mut out, tool);
    out
}

/// A record, opened.
pub(super) enum Envelope<'a> {
    Ok(&'a [u8]),
    Err(&'a [u8]),
    NotReplayable { tool: &'a str, reason: &'a str },
    Interrupted { tool: &'a str },
}

pub(super) fn open(bytes: &[u8]) -> Result<Envelope<'_>, FormatError> {
    if bytes.len() > super::MAX_RECORD {
        return Err(FormatError::new(too_large(bytes.len())));
    }
    let mut r = Reader::new(bytes);
    let version = r
        .byte()
        .map_err(|_| FormatError::new("the record is empty"))?;
    if version == b'{' {
        return Err(FormatError::new(
            "a JSON record, written by a development build of idem before record format \
             version 1; this idem does not read it (remove it with `idem remove`)",
        ));
    }
    if !(OLDEST_VERSION..=VERSION).contains(&version) {
        return Err(FormatError::new(format!(
            "unknown record format version {version} (this idem reads versions \
             {OLDEST_VERSION} to {VERSION}); was it written by a newer idem?"
        )));
    }
    let envelope = match r.byte()? {
        marker::OK => return Ok(Envelope::Ok(r.rest())),
        marker::ERR => return Ok(Envelope::Err(r.rest())),
        marker::NOT_REPLAYABLE => {
            let tool = r.str()?;
            let reason = r.str()?;
            Envelope::NotReplayable { tool, reason }
        }
        marker::INTERRUPTED => Envelope::Interrupted { tool: r.str()? },
        other => {
            return Err(FormatError::new(format!(
                "unknown record kind {other} at byte 1"
            )));
        }
    };
    match r.remaining() {
        0 => Ok(envelope),
        n => Err(FormatError::new(format!(
            "{n} unexpected bytes after the record, at byte {}",
            r.offset()
        ))),
    }
}

pub(super) fn decode_error(tool: &'static str, key: &Key, message: impl ToString) -> Error {
    Error::Decode {
        tool,
        key: key.short(),
        message: message.to_string(),
    }
}

pub(super) fn encode_error(tool: &'static str, message: impl ToString) -> Error {
    Error::Encode {
        tool,
        what: "its result".to_owned(),
        message: message.to_string(),
    }
}

/// Writes the envelope and `value` into `out`, emptied first; returns the names `value`'s types
/// passed (see [`Names`]). Only the encoding of the value is compiled for every result type.
pub(super) fn encode_record<V: Serialize + ?Sized>(
    tool: &'static str,
    kind: u8,
    value: &V,
    out: &mut Vec<u8>,
) -> Result<Names, Error> {
    start_record(kind, out);
    let encoded = ser::encode_value(value, out);
    encoded_record(tool, out, encoded)
}

/// Empties `out` and writes the envelope of a record of `kind`.
fn start_record(kind: u8, out: &mut Vec<u8>) {
    out.clear();
    out.extend_from_slice(&[VERSION, kind]);
}

/// What encoding a record's value gave: the names its types passed, or the error, its partial
/// output cleared.
fn encoded_record(
    tool: &'static str,
    out: &mut Vec<u8>,
    encoded: Result<Names, FormatError>,
) -> Result<Names, Error> {
    encoded.map_err(|e| {
        out.clear();
        encode_error(tool, e)
    })
}

/// The result of a marker or of an envelope its codec cannot hold.
pub(super) fn marker_error(tool: &'static str, key: &Key, envelope: Envelope<'_>) -> Error {
    match envelope {
        Envelope::NotReplayable { reason, .. } => Error::NotReplayable {
            tool,
            key: key.short(),
            message: reason.to_owned(),
        },
        Envelope::Interrupted { .. } => Error::Interrupted {
            tool,
            key: key.short(),
        },
        Envelope::Err(_) => decode_error(
            tool,
            key,
            "the record holds an `Err`, but this tool records `Ok` results only (was \
             `cache_errors` removed?)",
        ),
        Envelope::Ok(_) => decode_error(tool, key, "unexpected record kind"),
    }
}

/// Why a record of `len` bytes is neither made nor read.
pub(super) fn too_large(len: usize) -> String {
    format!(
        "the record is {len} bytes, more than the {} bytes (64 MiB) idem records and replays",
        super::MAX_RECORD
    )
}

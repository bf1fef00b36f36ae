//! How results are recorded for replay, and how operators read the records.
//!
//! A retry must get back exactly what the tool returned the first time. Records therefore use a
//! small self-describing binary serde format of idem's own, chosen for fidelity:
//!
//! | what the tool returned | JSON | CBOR | MessagePack | bincode | postcard | idem |
//! |---|---|---|---|---|---|---|
//! | `NaN`, `±inf` (bit-exact) | ✗ `null` | ✓ | ✓ | ✓ | ✓ | ✓ |
//! | `Some(None)` distinct from `None` | ✗ | ✗ | ✗ | ✓ | ✓ | ✓ |
//! | map keys that are not strings (tuples, structs) | ✗ | ✓ | ✓ | ✓ | ✓ | ✓ |
//! | `deserialize_any`: untagged and internally tagged enums, `flatten`, `serde_json::Value` | ✓ | ✓ | ✓ | ✗ | ✗ | ✓ |
//! | a new `#[serde(default)]` field decodes from an old record | ✓ | ✓ | depends | ✗ | ✗ | ✓ |
//! | readable without the Rust type | ✓ | with a CBOR tool | with a tool | ✗ | ✗ | ✓ [`render`] |
//!
//! JSON, used before, turned `Ok(f64::NAN)` into `null` (every retry then failed to decode),
//! replayed `Ok(Some(None))` as `Ok(None)`, and could not record a `BTreeMap<(u8, u8), u32>` at
//! all. The binary formats without a self-description cannot decode untagged enums or
//! `serde_json::Value`; the self-describing ones have no way to say `Some(None)`.
//!
//! # The format
//!
//! A record is a version byte (2), an envelope marker — `Ok`, `Err`, *not replayable* (tool
//! name and reason follow) or *interrupted* (tool name follows) — then, for `Ok` and `Err`, one
//! value. Every value starts with a tag byte: `None`, `Some` (a value follows), unit, `false`,
//! `true`, each integer width from `u8` to `i128` (unsigned LEB128 varints, signed ones
//! zigzagged), `f32`/`f64` (their IEEE bits, little-endian), `char`, string, bytes, sequence,
//! set and map (an element count, then the elements), and unit, newtype, tuple and struct
//! variants (the variant's name, then its content). Structs are maps keyed by field name, so
//! fields can be added with `#[serde(default)]`; newtype structs are transparent. Types with a
//! readable and a compact form (addresses, timestamps, UUIDs) record the readable one.
//!
//! A *set* is a sequence whose order is not part of its value, recognised exactly as the key
//! encoder recognises sets (`docs/key-spec.md` §4.4, the same code): a `HashSet`, `BTreeSet` or
//! `hashbrown::HashSet` serialized by its serde impl, or a collection wrapped in
//! [`Unordered`](crate::key::Unordered). It decodes as the sequence it was written as. Format
//! version 2 added the set tag; records of version 1 (sets written as sequences) still decode.
//!
//! Encoding is a single pass without escaping or number formatting, and decoding borrows
//! strings from the record. On small structs (`benches/replay.rs`, a loaded 2-core machine)
//! encoding takes 0.3–0.5× the time of `serde_json` and decoding 0.8–0.9× (string allocations,
//! the same for both, dominate); records are 10–15 % smaller. Records written as JSON by
//! earlier versions (they start with `{`) still decode.
//!
//! Decoding never trusts the record: every length is checked against the bytes that remain
//! before anything is allocated, nesting is limited to 128 levels, and corrupt, truncated or
//! hostile bytes give [`Error::Decode`] naming the tool and key — never a panic, and never a
//! silent second execution.
//!
//! # Fidelity is checked before recording
//!
//! `ResultCodec::record` encodes a result, decodes the bytes back into the result type and
//! encodes that again (`ResultCodec::verify`). If the two encodings differ (up to the order of
//! map entries and set elements; a sequence must come back in its order), or the names of the
//! types and variants they passed to the serializer differ (which the record does not keep),
//! the result would not replay as it was returned — a `Deserialize` impl that drops data or
//! reorders a sequence, an untagged enum that decodes into another variant (one of other content,
//! or one holding another type of the same fields), a `u128` inside an untagged enum (serde
//! buffers those without 128-bit integers), a `HashSet` serialized through its iterator (not
//! recognised as a set: wrap it in `Unordered`) — and, as when it cannot be
//! encoded at all, a *not replayable* marker is recorded instead: a retry gets
//! [`Error::NotReplayable`], which tells the model the action already ran and must not be called
//! again, rather than running the tool a second time. A call that was interrupted before
//! finishing can be recorded as such: a retry gets [`Error::Interrupted`].
//!
//! What no serializer is shown cannot be checked: a field the type does not serialize
//! (`#[serde(skip)]`) replays as its `Deserialize` makes it, and untagged variants that
//! serialize alike (unit variants, struct variants with the same fields: serde names them all
//! after the enum) replay as the first of them. The README says so under "What is not
//! guaranteed".
//!
//! # Reading records
//!
//! [`render`] turns a record into JSON-like text, which is what `idem show KEY` prints:
//!
//! ```text
//! Ok({
//!   "ratio": NaN,
//!   "note": Some(null),
//!   "grid": {
//!     [0, 1]: 7
//!   },
//!   "digest": hex"00ff",
//!   "status": Sent {
//!     "at": 1733150000
//!   }
//! })
//! ```
//!
//! It differs from JSON only where JSON cannot say what was recorded: `NaN`, `inf` and `-inf`;
//! `Some(…)` where an `Option` holds `None` or another `Option` (elsewhere `Some(x)` is shown
//! as `x` and `None` as `null`); `()` for unit; `'c'` for a `char`; `hex"…"` for bytes; map
//! keys that are not strings written as values (`[0, 1]`, `7`, `Red`); enum variants as
//! `Name`, `Name(…)` and `Name {…}`. A not-replayable record reads
//! `NotReplayable { tool: "…", reason: "…" }`, an interrupted one `Interrupted { tool: "…" }`.

mod codec;
mod de;
mod envelope;
mod format;
mod head;
mod node;
mod render;
mod ser;
#[cfg(test)]
mod tests;

use std::any::Any;

use crate::Error;
use crate::key::Key;
use envelope::{Envelope, open};
use format::FormatError;
use ser::Names;

#[cfg(test)]
use envelope::encode_record;
pub(crate) use envelope::{encode_interrupted, encode_unreplayable};

/// The largest record idem makes or reads: 64 MiB. A larger result is recorded as not
/// replayable (a retry is told the tool ran), and a larger record in a store is a decode error
/// naming this limit, never a panic or an allocation of its size.
pub const MAX_RECORD: usize = 64 << 20;

/// Why a result whose record decodes into a value of other types or variants (that encode
/// alike) is not replayable.
const ANOTHER_VARIANT: &str = "it would not replay as it was returned: its record decodes into \
     another variant or type that encodes alike (an untagged enum whose variants hold types with the \
     same fields?)";

/// Initial capacity of a record buffer: enough for a small struct without reallocating.
const INITIAL_CAPACITY: usize = 128;

/// How one kind of tool records and replays its results.
pub(crate) trait ResultCodec<T, E> {
    /// Replaces the contents of `out` with the record of `result`, or returns `None` when the
    /// result must not be recorded (the key is then released so that a retry runs the tool
    /// again). Returns the names the result's types passed, which the record does not keep.
    fn encode_into(
        tool: &'static str,
        result: &Result<T, E>,
        out: &mut Vec<u8>,
    ) -> Option<Result<Names, Error>>;

    /// The bytes to record for `result`, or `None` when the result must not be recorded.
    #[cfg(test)]
    fn encode(tool: &'static str, result: &Result<T, E>) -> Option<Result<Vec<u8>, Error>> {
        let mut out = Vec::with_capacity(INITIAL_CAPACITY);
        let names = Self::encode_into(tool, result, &mut out)?;
        Some(names.map(|_| out))
    }

    /// Decodes a recorded result.
    fn decode(tool: &'static str, key: &Key, bytes: &[u8]) -> Result<Result<T, E>, Error>;

    /// Checks that `bytes`, just encoded, replay as the value they were encoded from: they
    /// decode into the result type, and that encodes to the same bytes (up to the order of map
    /// entries and set elements, not of sequence elements). Markers pass. [`Error::Encode`] says
    /// what would be lost. Returns the names the replayed value's types passed.
    fn verify(tool: &'static str, bytes: &[u8]) -> Result<Names, Error>;

    /// What to record for `result`: its bytes when they replay faithfully, else a
    /// not-replayable marker and the reason. `None` when the result must not be recorded.
    #[allow(clippy::manual_map)] // `map`'s closure would be compiled once more per result type
    fn record(tool: &'static str, result: &Result<T, E>) -> Option<Recorded> {
        let mut out = Vec::with_capacity(INITIAL_CAPACITY);
        match Self::encode_into(tool, result, &mut out) {
            Some(names) => Some(Recorded::checked(tool, out, names, Self::verify)),
            None => None,
        }
    }
}

/// What [`ResultCodec::record`] decided to record.
#[derive(Debug)]
pub(crate) enum Recorded {
    /// The result's record, checked to replay as returned.
    Faithful(Vec<u8>),
    /// A not-replayable marker, and why the result could not be recorded.
    Unreplayable {
        /// The marker's bytes.
        bytes: Vec<u8>,
        /// Why: log it for the operator.
        error: Error,
    },
}

impl Recorded {
    /// What to record for a result encoded as `bytes` (`names`: the names its types passed, or
    /// the error its encoding failed with), once `verify` says whether it replays as returned.
    /// Compiled once: the generic code passes its encoding and its check.
    fn checked(
        tool: &'static str,
        bytes: Vec<u8>,
        names: Result<Names, Error>,
        verify: fn(&'static str, &[u8]) -> Result<Names, Error>,
    ) -> Recorded {
        let checked = names
            .and_then(|names| match bytes.len() {
                len if len > MAX_RECORD => {
                    Err(envelope::encode_error(tool, envelope::too_large(len)))
                }
                _ => Ok(names),
            })
            .and_then(|names| match verify(tool, &bytes)? {
                replayed if replayed == names => Ok(bytes),
                _ => Err(envelope::encode_error(tool, ANOTHER_VARIANT)),
            });
        match checked {
            Ok(bytes) => Recorded::Faithful(bytes),
            Err(error) => Recorded::unreplayable(tool, error),
        }
    }

    /// What to record for a result whose `Serialize` or `Deserialize` panicked while it was
    /// encoded or checked (`panic` is the payload): the body ran, so a retry must be told that,
    /// not run it again.
    pub(crate) fn panicked(tool: &'static str, panic: &(dyn Any + Send)) -> Recorded {
        let reason = format!(
            "it would not replay: its `Serialize` or `Deserialize` panicked ({})",
            panic_text(panic)
        );
        Recorded::unreplayable(tool, envelope::encode_error(tool, reason))
    }

    /// A not-replayable marker for `error`.
    fn unreplayable(tool: &'static str, error: Error) -> Recorded {
        let reason = match &error {
            Error::Encode { message, .. } => message.clone(),
            other => other.to_string(),
        };
        Recorded::Unreplayable {
            bytes: encode_unreplayable(tool, &reason),
            error,
        }
    }
}

/// The error of a record whose `Deserialize` panicked while it was decoded for a retry (`panic`
/// is the payload).
pub(crate) fn decode_panicked(tool: &'static str, key: &Key, panic: &(dyn Any + Send)) -> Error {
    let message = format!("its `Deserialize` panicked: {}", panic_text(panic));
    envelope::decode_error(tool, key, message)
}

/// What a panic said (its payload), for an error that reports it.
fn panic_text(panic: &(dyn Any + Send)) -> &str {
    match (panic.downcast_ref::<&str>(), panic.downcast_ref::<String>()) {
        (Some(text), _) => text,
        (None, Some(text)) => text.as_str(),
        (None, None) => "a panic without a message",
    }
}

/// Records `Ok` results only (the default).
pub(crate) struct OkOnly;

/// Records `Ok` and `Err` results (`cache_errors`).
pub(crate) struct OkAndErr;

/// Renders a record as JSON-like text for operators (see the module docs for the notation).
///
/// # Errors
///
/// [`Error::UnreadableRecord`] if the bytes are not a record: corrupt, truncated, or written by
/// a newer version of idem.
pub fn render(bytes: &[u8]) -> Result<String, Error> {
    let unreadable = |e: FormatError| Error::UnreadableRecord { message: e.0 };
    let mut out = String::new();
    match open(bytes).map_err(unreadable)? {
        Envelope::Ok(value) => {
            out.push_str("Ok(");
            render::write_node(&mut out, &node::parse(value).map_err(unreadable)?, 0);
            out.push(')');
        }
        Envelope::Err(value) => {
            out.push_str("Err(");
            render::write_node(&mut out, &node::parse(value).map_err(unreadable)?, 0);
            out.push(')');
        }
        Envelope::NotReplayable { tool, reason } => {
            out.push_str("NotReplayable { tool: ");
            render::write_node(&mut out, &node::Node::Str(tool), 0);
            out.push_str(", reason: ");
            render::write_node(&mut out, &node::Node::Str(reason), 0);
            out.push_str(" }");
        }
        Envelope::Interrupted { tool } => {
            out.push_str("Interrupted { tool: ");
            render::write_node(&mut out, &node::Node::Str(tool), 0);
            out.push_str(" }");
        }
    }
    Ok(out)
}

/// Entry points for `benches/replay.rs`, which can only reach public items; not part of the
/// API.
#[doc(hidden)]
pub mod bench {
    use serde::Serialize;
    use serde::de::DeserializeOwned;

    use super::envelope::encode_record;
    use super::format::marker;
    use super::{OkOnly, ResultCodec};
    use crate::Error;
    use crate::key::Key;

    /// Encodes `Ok(value)` into `out` as the engine does.
    pub fn encode<T: Serialize + ?Sized>(value: &T, out: &mut Vec<u8>) -> Result<(), Error> {
        encode_record("bench", marker::OK, value, out).map(drop)
    }

    /// Decodes an `Ok` record as the engine does on a replay.
    pub fn decode<T: Serialize + DeserializeOwned>(bytes: &[u8]) -> Result<T, Error> {
        let key = Key::from_bytes([0; 32]);
        match <OkOnly as ResultCodec<T, ()>>::decode("bench", &key, bytes)? {
            Ok(value) => Ok(value),
            Err(()) => Err(Error::Config("not an Ok record".to_owned())),
        }
    }

    /// Runs the fidelity check the engine runs before recording.
    pub fn verify<T: Serialize + DeserializeOwned>(bytes: &[u8]) -> Result<(), Error> {
        <OkOnly as ResultCodec<T, ()>>::verify("bench", bytes).map(drop)
    }
}

/// What a record holds: a result, or a marker that answers retries with an error.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum RecordKind {
    /// An `Ok` result.
    Ok,
    /// An `Err` result (recorded by a tool with `cache_errors`).
    Err,
    /// A marker: the call that claimed the key was dropped mid-run, so whether its side effect
    /// happened is unknown; retries get [`Error::Interrupted`].
    Interrupted,
    /// A marker: the tool ran, but its result could not be recorded faithfully; retries get
    /// [`Error::NotReplayable`].
    NotReplayable {
        /// Why the result could not be recorded.
        reason: String,
    },
}

impl RecordKind {
    /// `ok`, `err`, `interrupted` or `not_replayable`, as the CLI spells it.
    pub fn as_str(&self) -> &'static str {
        match self {
            RecordKind::Ok => "ok",
            RecordKind::Err => "err",
            RecordKind::Interrupted => "interrupted",
            RecordKind::NotReplayable { .. } => "not_replayable",
        }
    }
}

/// What the record `bytes` holds, without decoding its value.
///
/// # Errors
/// [`Error::UnreadableRecord`] if the bytes are not a record.
pub fn kind(bytes: &[u8]) -> Result<RecordKind, Error> {
    let unreadable = |e: FormatError| Error::UnreadableRecord { message: e.0 };
    Ok(match open(bytes).map_err(unreadable)? {
        Envelope::Ok(_) => RecordKind::Ok,
        Envelope::Err(_) => RecordKind::Err,
        Envelope::Interrupted { .. } => RecordKind::Interrupted,
        Envelope::NotReplayable { reason, .. } => RecordKind::NotReplayable {
            reason: reason.to_owned(),
        },
    })
}

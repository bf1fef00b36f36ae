//! Canonical idempotency keys.
//!
//! A [`Key`] identifies one logical tool call: it is a BLAKE3 digest of the namespace, the turn
//! id, the tool name and version, and a canonical encoding of the arguments. A [`Fingerprint`]
//! digests all arguments of a call, to detect a key reused with different arguments.
//!
//! The encoding is a `serde` serializer writing into a buffer reused across calls; it is
//! independent of field order, map iteration order and integer width, and is specified byte for
//! byte in `docs/key-spec.md` (test vectors: `tests/vectors/keys.json`). In short:
//!
//! - structs and maps are unordered (a struct equals a map with the same string keys);
//! - `u32 5`, `u64 5` and `i64 5` are the same integer; `-0.0 == 0.0` and all NaNs are equal;
//! - `None`, `()`, a unit struct, `[]`, `{}` and an empty set are all different;
//! - enums are encoded by variant name, not index;
//! - `HashSet`/`BTreeSet` (and [`Unordered`] collections) are sets, other sequences are ordered;
//! - serde_json's `arbitrary_precision` numbers and `RawValue`s encode like plain JSON values, and
//!   JSON floats are read correctly rounded (this crate enables serde_json's `float_roundtrip`),
//!   so keys do not depend on which serde_json features a build enables (the few exceptions are
//!   listed in the spec, §4.7);
//! - strings and bytes of 1024 bytes or more are encoded by their length and BLAKE3 hash.
//!
//! A call is hashed twice: the arguments record once (the fingerprint, keyed BLAKE3), and the
//! namespace, turn id and that digest once more (the key); hash keys are derived from the
//! context strings once per process.
//!
//! Changing the encoding changes every key: bump [`ENCODING_VERSION`] and the context strings
//! (the vector test refuses a changed key otherwise).

mod args;
mod compound;
mod encode;
mod hash;
pub(crate) mod ignored;
mod json;
mod raw;
mod scratch;
pub(crate) mod sets;
mod types;
mod unordered;

#[cfg(test)]
mod args_tests;
#[cfg(test)]
mod json_tests;
#[cfg(test)]
mod tests;

use serde::Serialize;

pub use args::ArgsDigest;
pub use ignored::ignored;
pub use types::{Fingerprint, Key, ShortKey};
pub use unordered::{Unordered, unordered};

use crate::Error;
use encode::{EncodeError, encode_into};
use scratch::Pooled;

/// Version of the key material layout and value encoding; the first byte of all material.
pub const ENCODING_VERSION: u8 = 3;

/// BLAKE3 derive-key context of the hash key of [`Key`]s (derived once, with empty material).
pub const KEY_CONTEXT: &str = "idem 2026-12-04 idempotency key v3";

/// BLAKE3 derive-key context of the hash key of arguments digests, and so of [`Fingerprint`]s
/// (derived once, with empty material).
pub const FINGERPRINT_CONTEXT: &str = "idem 2026-12-04 arguments digest v3";

/// Tool name reported in errors of the functions that are not given one.
const UNKNOWN_TOOL: &str = "<unknown>";

fn encode_error(tool: &'static str, what: impl Into<String>, e: EncodeError) -> Error {
    Error::Encode {
        tool,
        what: what.into(),
        message: e.0,
    }
}

/// The arguments digest of the record `args` of a call of `tool`, in `s`.
fn args_digest<T: Serialize + ?Sized>(
    s: &mut scratch::Scratch,
    tool: &str,
    version: u32,
    args: &T,
) -> Result<hash::ArgsOutput, Error> {
    hash::put_args_header(s, tool, version);
    encode_into(s, args).map_err(|e| encode_error(UNKNOWN_TOOL, "the arguments", e))?;
    let digest = hash::args_digest(&s.bytes);
    s.bytes.clear();
    Ok(digest)
}

/// Key of a call whose arguments record is `args` (a struct/map of argument name -> value);
/// equals what [`ArgsDigest`] produces when each field is passed with [`ArgsDigest::arg`].
///
/// ```
/// # extern crate idem_tools_runtime as idem_tools;
/// use std::collections::HashMap;
/// use idem_tools::key::derive_key;
///
/// #[derive(serde::Serialize)]
/// struct SendEmail { to: String, subject: String }
///
/// let args = SendEmail { to: "ann@example.com".into(), subject: "Hi".into() };
/// let k1 = derive_key("mail", "turn-1", "send_email", 1, &args)?;
///
/// // Same entries as a map, in any order: same key.
/// let map = HashMap::from([("subject", "Hi"), ("to", "ann@example.com")]);
/// assert_eq!(k1, derive_key("mail", "turn-1", "send_email", 1, &map)?);
///
/// // Another turn: another key.
/// assert_ne!(k1, derive_key("mail", "turn-2", "send_email", 1, &args)?);
/// # Ok::<(), idem_tools::Error>(())
/// ```
///
/// # Errors
///
/// [`Error::Encode`] (with tool `"<unknown>"`) if a `Serialize` impl fails.
pub fn derive_key<T: Serialize + ?Sized>(
    namespace: &str,
    turn_id: &str,
    tool: &str,
    version: u32,
    args: &T,
) -> Result<Key, Error> {
    let mut s = Pooled::take();
    let digest = args_digest(&mut s, tool, version, args)?;
    Ok(Key::from_bytes(hash::turn_key(
        &mut s, namespace, turn_id, &digest,
    )))
}

/// Fingerprint of a call of `tool` whose record of all arguments is `args`; equals what
/// [`ArgsDigest`] produces when each field is passed with [`ArgsDigest::arg`] or
/// [`ArgsDigest::fingerprint_arg`].
///
/// # Errors
///
/// [`Error::Encode`] (with tool `"<unknown>"`) if a `Serialize` impl fails.
pub fn fingerprint<T: Serialize + ?Sized>(
    tool: &str,
    version: u32,
    args: &T,
) -> Result<Fingerprint, Error> {
    let mut s = Pooled::take();
    let digest = args_digest(&mut s, tool, version, args)?;
    Ok(Fingerprint::from_bytes(digest))
}

/// Canonical encoding of one value (for the spec, vectors and debugging).
///
/// ```
/// # extern crate idem_tools_runtime as idem_tools;
/// use idem_tools::key::encode_value;
///
/// let expected = [0x05, 0x00, 5]; // integer, non-negative, |5| in LEB128
/// assert_eq!(encode_value(&5u8)?, expected);
/// assert_eq!(encode_value(&5i64)?, expected);
/// # Ok::<(), idem_tools::Error>(())
/// ```
///
/// # Errors
///
/// [`Error::Encode`] (with tool `"<unknown>"`) if a `Serialize` impl fails.
pub fn encode_value<T: Serialize + ?Sized>(value: &T) -> Result<Vec<u8>, Error> {
    let mut s = Pooled::take();
    encode_into(&mut s, value).map_err(|e| encode_error(UNKNOWN_TOOL, "a value", e))?;
    Ok(s.bytes.clone())
}

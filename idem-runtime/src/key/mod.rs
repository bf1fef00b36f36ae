//! Canonical idempotency keys.
//!
//! A [`Key`] identifies one logical tool call: it is a BLAKE3 digest of the namespace, the turn
//! id, the tool name and version, and a canonical encoding of the arguments. A [`Fingerprint`]
//! digests all arguments of a call, to detect a key reused with different arguments.
//!
//! The encoding is a `serde` serializer that streams into the hasher; it is independent of field
//! order, map iteration order and integer width, and is specified byte for byte in
//! `docs/key-spec.md` (test vectors: `tests/vectors/keys.json`). In short:
//!
//! - structs and maps are unordered (a struct equals a map with the same string keys);
//! - `u32 5`, `u64 5` and `i64 5` are the same integer; `-0.0 == 0.0` and all NaNs are equal;
//! - `None`, `()`, a unit struct, `[]`, `{}` and an empty set are all different;
//! - enums are encoded by variant name, not index;
//! - `HashSet`/`BTreeSet` (and [`Unordered`] collections) are sets, other sequences are ordered.
//!
//! Changing the encoding changes every key: bump [`ENCODING_VERSION`] and the context strings.

mod encode;
mod types;
mod unordered;

#[cfg(test)]
mod tests;

use serde::Serialize;

pub use encode::ENTRY_CONTEXT;
pub use types::{Fingerprint, Key, ShortKey};
pub use unordered::{Unordered, unordered};

use crate::Error;
use encode::{Digests, EncodeError, Sink, encode_into, field_digest, put_str, tag};

/// Version of the key material layout and value encoding; the first byte of all material.
pub const ENCODING_VERSION: u8 = 1;

/// BLAKE3 derive-key context of [`Key`]s.
pub const KEY_CONTEXT: &str = "idem 2026-12-01 idempotency key v1";

/// BLAKE3 derive-key context of [`Fingerprint`]s.
pub const FINGERPRINT_CONTEXT: &str = "idem 2026-12-01 argument fingerprint v1";

/// Tool name reported in errors of the functions that are not given one.
const UNKNOWN_TOOL: &str = "<unknown>";

/// Mode byte of a key derived from the turn id and the arguments.
const MODE_TURN: u8 = b'T';
/// Mode byte of a key derived from a caller-supplied key.
const MODE_CALLER: u8 = b'C';

fn encode_error(tool: &'static str, what: impl Into<String>, e: EncodeError) -> Error {
    Error::Encode {
        tool,
        what: what.into(),
        message: e.0,
    }
}

fn key_hasher_turn(namespace: &str, turn_id: &str, tool: &str, version: u32) -> blake3::Hasher {
    let mut h = blake3::Hasher::new_derive_key(KEY_CONTEXT);
    h.put(&[ENCODING_VERSION, MODE_TURN]);
    put_str(&mut h, namespace);
    put_str(&mut h, turn_id);
    put_str(&mut h, tool);
    h.put(&version.to_le_bytes());
    h
}

fn fingerprint_hasher(tool: &str, version: u32) -> blake3::Hasher {
    let mut h = blake3::Hasher::new_derive_key(FINGERPRINT_CONTEXT);
    h.put(&[ENCODING_VERSION]);
    put_str(&mut h, tool);
    h.put(&version.to_le_bytes());
    h
}

/// Streams the arguments of one call into the key digest and the fingerprint digest.
///
/// Each argument is encoded once, as the entry `name: value` of the arguments record; the record
/// is unordered, so the order of the calls does not matter. With only [`arg`](Self::arg) calls,
/// the result equals [`derive_key`] and [`fingerprint`] of a struct with those fields.
///
/// ```
/// use idem_runtime::key::{ArgsDigest, derive_key};
///
/// #[derive(serde::Serialize)]
/// struct Args<'a> { to: &'a str, amount_cents: u64 }
///
/// let mut d = ArgsDigest::new("send_payment");
/// d.arg("to", "acct_42")?;
/// d.arg("amount_cents", &1250u32)?; // integer width does not matter
/// d.fingerprint_arg("memo", "lunch")?; // fingerprint only
/// let (key, fp) = d.finish("billing", "turn-7", "send_payment", 1);
///
/// let args = Args { to: "acct_42", amount_cents: 1250 };
/// assert_eq!(key, derive_key("billing", "turn-7", "send_payment", 1, &args)?);
/// assert_eq!(key.to_hex().len(), 64);
/// # let _ = fp;
/// # Ok::<(), idem_runtime::Error>(())
/// ```
#[derive(Clone)]
pub struct ArgsDigest {
    tool: &'static str,
    /// Entry digests of the arguments in the key.
    key_entries: Digests,
    /// Entry digests of all arguments (the fingerprint).
    all_entries: Digests,
    caller_key: Option<String>,
}

impl std::fmt::Debug for ArgsDigest {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("ArgsDigest")
            .field("tool", &self.tool)
            .field("caller_key", &self.caller_key.is_some())
            .finish_non_exhaustive()
    }
}

impl ArgsDigest {
    /// Starts the digests of a call of `tool` (the name is used in error messages).
    pub fn new(tool: &'static str) -> Self {
        ArgsDigest {
            tool,
            key_entries: Digests::new(),
            all_entries: Digests::new(),
            caller_key: None,
        }
    }

    /// An argument that is part of the key AND the fingerprint.
    ///
    /// # Errors
    ///
    /// [`Error::Encode`] if `value`'s `Serialize` impl fails; the digest is then unchanged.
    pub fn arg<T: Serialize + ?Sized>(&mut self, name: &str, value: &T) -> Result<(), Error> {
        let d = field_digest(name, value)
            .map_err(|e| encode_error(self.tool, format!("argument `{name}`"), e))?;
        self.key_entries.push(d);
        self.all_entries.push(d);
        Ok(())
    }

    /// An argument left out of the key (`skip(..)`) but still part of the fingerprint.
    ///
    /// # Errors
    ///
    /// [`Error::Encode`] if `value`'s `Serialize` impl fails; the digest is then unchanged.
    pub fn fingerprint_arg<T: Serialize + ?Sized>(
        &mut self,
        name: &str,
        value: &T,
    ) -> Result<(), Error> {
        let d = field_digest(name, value)
            .map_err(|e| encode_error(self.tool, format!("argument `{name}`"), e))?;
        self.all_entries.push(d);
        Ok(())
    }

    /// A caller-supplied idempotency key (`#[key]` parameter): the key is then derived from
    /// namespace, tool, version and this string only (turn id and other args excluded); other
    /// args still go in the fingerprint. The caller key itself is not part of the fingerprint.
    /// If called more than once, the last value counts.
    pub fn caller_key(&mut self, key: &str) {
        self.caller_key = Some(key.to_owned());
    }

    /// Finishes both digests.
    pub fn finish(
        mut self,
        namespace: &str,
        turn_id: &str,
        tool: &str,
        version: u32,
    ) -> (Key, Fingerprint) {
        let key = match &self.caller_key {
            Some(caller_key) => {
                let mut h = blake3::Hasher::new_derive_key(KEY_CONTEXT);
                h.put(&[ENCODING_VERSION, MODE_CALLER]);
                put_str(&mut h, namespace);
                put_str(&mut h, tool);
                h.put(&version.to_le_bytes());
                put_str(&mut h, caller_key);
                h.finalize()
            }
            None => {
                let mut h = key_hasher_turn(namespace, turn_id, tool, version);
                h.put(&[tag::MAP]);
                self.key_entries.write_sorted(&mut h);
                h.finalize()
            }
        };
        let mut h = fingerprint_hasher(tool, version);
        h.put(&[tag::MAP]);
        self.all_entries.write_sorted(&mut h);
        (
            Key::from_bytes(*key.as_bytes()),
            Fingerprint::from_bytes(*h.finalize().as_bytes()),
        )
    }
}

/// Key of a call whose arguments record is `args` (a struct/map of argument name -> value);
/// equals what [`ArgsDigest`] produces when each field is passed with [`ArgsDigest::arg`].
///
/// ```
/// use std::collections::HashMap;
/// use idem_runtime::key::derive_key;
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
/// # Ok::<(), idem_runtime::Error>(())
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
    let mut h = key_hasher_turn(namespace, turn_id, tool, version);
    encode_into(&mut h, args).map_err(|e| encode_error(UNKNOWN_TOOL, "the arguments", e))?;
    Ok(Key::from_bytes(*h.finalize().as_bytes()))
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
    let mut h = fingerprint_hasher(tool, version);
    encode_into(&mut h, args).map_err(|e| encode_error(UNKNOWN_TOOL, "the arguments", e))?;
    Ok(Fingerprint::from_bytes(*h.finalize().as_bytes()))
}

/// Canonical encoding of one value (for the spec, vectors and debugging).
///
/// ```
/// use idem_runtime::key::encode_value;
///
/// let mut expected = vec![0x05, 0x00, 5]; // integer, non-negative, |5| as 16 bytes LE
/// expected.extend([0; 15]);
/// assert_eq!(encode_value(&5u8)?, expected);
/// assert_eq!(encode_value(&5i64)?, expected);
/// # Ok::<(), idem_runtime::Error>(())
/// ```
///
/// # Errors
///
/// [`Error::Encode`] (with tool `"<unknown>"`) if a `Serialize` impl fails.
pub fn encode_value<T: Serialize + ?Sized>(value: &T) -> Result<Vec<u8>, Error> {
    let mut out = Vec::new();
    encode_into(&mut out, value).map_err(|e| encode_error(UNKNOWN_TOOL, "a value", e))?;
    Ok(out)
}

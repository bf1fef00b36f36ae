//! The two BLAKE3 hashes of v3: the **arguments digest** of a record of arguments (over the
//! tool, version and record; the digest of all arguments is the fingerprint) and the **key**
//! (over the namespace, the turn id and the arguments digest of the key's arguments, or over a
//! caller-supplied key). Both are keyed hashes whose keys are derived once from the context
//! strings.

use std::sync::LazyLock;

use super::scratch::Scratch;
use super::{ENCODING_VERSION, FINGERPRINT_CONTEXT, KEY_CONTEXT};

/// Mode byte of a key derived from the turn id and the arguments.
pub(crate) const MODE_TURN: u8 = b'T';
/// Mode byte of a key derived from a caller-supplied key.
pub(crate) const MODE_CALLER: u8 = b'C';

/// `K_ARGS = BLAKE3-derive_key(FINGERPRINT_CONTEXT, "")`.
static ARGS_HASH_KEY: LazyLock<[u8; 32]> =
    LazyLock::new(|| blake3::derive_key(FINGERPRINT_CONTEXT, b""));

/// `K_KEY = BLAKE3-derive_key(KEY_CONTEXT, "")`.
static KEY_HASH_KEY: LazyLock<[u8; 32]> = LazyLock::new(|| blake3::derive_key(KEY_CONTEXT, b""));

/// An arguments digest.
pub(crate) type ArgsOutput = [u8; 32];

/// The arguments digest of the whole material `header ‖ value(record)`.
pub(crate) fn args_digest(material: &[u8]) -> ArgsOutput {
    *blake3::keyed_hash(&ARGS_HASH_KEY, material).as_bytes()
}

/// A hasher of arguments digests, for material given in pieces.
pub(crate) fn args_hasher() -> blake3::Hasher {
    blake3::Hasher::new_keyed(&ARGS_HASH_KEY)
}

/// Appends the header of the arguments material: `u8(3) ‖ str(tool) ‖ uv(version)`.
pub(crate) fn put_args_header(s: &mut Scratch, tool: &str, version: u32) {
    s.put_u8(ENCODING_VERSION);
    s.put_str(tool);
    s.put_uv(u128::from(version));
}

/// Hashes `material` (appended to `s` by `write`, then removed) with the key's hash key.
fn key_hash(s: &mut Scratch, write: impl FnOnce(&mut Scratch)) -> [u8; 32] {
    let start = s.len();
    write(s);
    let key = blake3::keyed_hash(&KEY_HASH_KEY, s.bytes.get(start..).unwrap_or_default());
    s.bytes.truncate(start);
    *key.as_bytes()
}

/// Turn-mode key: `u8(3) ‖ 'T' ‖ str(namespace) ‖ str(turn_id) ‖ args digest`.
pub(crate) fn turn_key(
    s: &mut Scratch,
    namespace: &str,
    turn_id: &str,
    args: &ArgsOutput,
) -> [u8; 32] {
    key_hash(s, |s| {
        s.put(&[ENCODING_VERSION, MODE_TURN]);
        s.put_str(namespace);
        s.put_str(turn_id);
        s.put(args);
    })
}

/// Caller-key mode: `u8(3) ‖ 'C' ‖ str(namespace) ‖ str(tool) ‖ uv(version) ‖ str(caller_key)`.
pub(crate) fn caller_key(
    s: &mut Scratch,
    namespace: &str,
    tool: &str,
    version: u32,
    caller_key: &str,
) -> [u8; 32] {
    key_hash(s, |s| {
        s.put(&[ENCODING_VERSION, MODE_CALLER]);
        s.put_str(namespace);
        s.put_str(tool);
        s.put_uv(u128::from(version));
        s.put_str(caller_key);
    })
}

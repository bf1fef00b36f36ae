//! The two BLAKE3 hashes of v2: the **arguments digest** (64 bytes of extended output over the
//! tool, version and arguments record; its first 32 bytes are the fingerprint) and the **key**
//! (over the namespace, the turn id and the last 32 bytes of the arguments digest, or over a
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

/// 64 bytes of an arguments digest: `[..32]` is the fingerprint, `[32..]` goes into the key.
pub(crate) type ArgsOutput = [u8; 64];

/// A hasher of arguments digests.
pub(crate) fn args_hasher() -> blake3::Hasher {
    blake3::Hasher::new_keyed(&ARGS_HASH_KEY)
}

/// The 64-byte extended output of an arguments hasher.
pub(crate) fn args_output(hasher: &blake3::Hasher) -> ArgsOutput {
    let mut out = [0u8; 64];
    hasher.finalize_xof().fill(&mut out);
    out
}

/// Appends the header of the arguments material: `u8(2) ‖ str(tool) ‖ uv(version)`.
pub(crate) fn put_args_header(s: &mut Scratch, tool: &str, version: u32) {
    s.put_u8(ENCODING_VERSION);
    s.put_str(tool);
    s.put_uv(u128::from(version));
}

/// The fingerprint half of an arguments digest.
pub(crate) fn fingerprint_half(out: &ArgsOutput) -> [u8; 32] {
    let mut fp = [0u8; 32];
    fp.copy_from_slice(out.get(..32).unwrap_or(&[0; 32]));
    fp
}

/// Hashes `material` (appended to `s` by `write`, then removed) with the key's hash key.
fn key_hash(s: &mut Scratch, write: impl FnOnce(&mut Scratch)) -> [u8; 32] {
    let start = s.len();
    write(s);
    let mut h = blake3::Hasher::new_keyed(&KEY_HASH_KEY);
    h.update(s.bytes.get(start..).unwrap_or_default());
    s.bytes.truncate(start);
    *h.finalize().as_bytes()
}

/// Turn-mode key: `u8(2) ‖ 'T' ‖ str(namespace) ‖ str(turn_id) ‖ args digest[32..64]`.
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
        s.put(args.get(32..).unwrap_or_default());
    })
}

/// Caller-key mode: `u8(2) ‖ 'C' ‖ str(namespace) ‖ str(tool) ‖ uv(version) ‖ str(caller_key)`.
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

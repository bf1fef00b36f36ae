//! Turn budgets as stores keep them: counters named by the turn's identity, not by a `Turn`
//! value.
//!
//! A turn's identity is [`TurnIdentity`]: `BLAKE3(namespace, turn id)`, a keyed hash whose key
//! is derived once from its own context, each part prefixed by its length as 8 bytes
//! little-endian. It is computed once per [`Turn`](crate::Turn), not per call. A turn-wide count
//! is named by the identity's first 16 bytes, and a per-key count by the first 16 bytes of
//! `BLAKE3(identity ‖ key)` (64 bytes: one compression per call), keyed from a second context:
//! fixed-size names that never spell out a turn id.

use std::collections::HashMap;
use std::fmt;
use std::sync::LazyLock;

use super::Exhausted;
use crate::key::Key;

/// The name of one budget counter.
pub type CounterId = [u8; 16];

static KEY_COUNTER: LazyLock<[u8; 32]> =
    LazyLock::new(|| blake3::derive_key("idem 2026-12-02 per-key attempt counter", b""));
static TURN_COUNTER: LazyLock<[u8; 32]> =
    LazyLock::new(|| blake3::derive_key("idem 2026-12-02 turn call counter", b""));

/// The identity a turn's budget belongs to: a digest of its namespace and id, which every
/// `Turn` value with that namespace and id shares, in every process.
///
/// ```
/// use idem_tools_runtime::store::budget::TurnIdentity;
///
/// let a = TurnIdentity::new("acme", "turn-7");
/// assert_eq!(a, TurnIdentity::new("acme", "turn-7"));
/// assert_ne!(a, TurnIdentity::new("ac", "meturn-7"));
/// ```
#[derive(Clone, Copy, PartialEq, Eq, Hash)]
pub struct TurnIdentity([u8; 32]);

impl TurnIdentity {
    /// The identity of the turn `turn` in `namespace`.
    pub fn new(namespace: &str, turn: &str) -> Self {
        let mut hasher = blake3::Hasher::new_keyed(&TURN_COUNTER);
        for part in [namespace.as_bytes(), turn.as_bytes()] {
            hasher.update(&(part.len() as u64).to_le_bytes());
            hasher.update(part);
        }
        TurnIdentity(*hasher.finalize().as_bytes())
    }

    /// The counter of attempts with `key` in this turn.
    pub fn key_counter(&self, key: &Key) -> CounterId {
        let mut material = [0u8; 64];
        material[..32].copy_from_slice(&self.0);
        material[32..].copy_from_slice(key.as_bytes());
        truncate(blake3::keyed_hash(&KEY_COUNTER, &material).as_bytes())
    }

    /// The counter of state-changing calls in this turn.
    pub fn turn_counter(&self) -> CounterId {
        truncate(&self.0)
    }
}

impl fmt::Debug for TurnIdentity {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "TurnIdentity(")?;
        for b in &self.0[..6] {
            write!(f, "{b:02x}")?;
        }
        write!(f, "…)")
    }
}

fn truncate(digest: &[u8; 32]) -> CounterId {
    let mut id = [0; 16];
    id.copy_from_slice(&digest[..16]);
    id
}

/// An in-memory count with its expiry (ms), for stores that keep counters in a map.
#[derive(Debug, Clone, Copy)]
pub(crate) struct Count {
    pub(crate) n: u32,
    pub(crate) expires_at_ms: u64,
}

/// The live count in `map` (0 if absent or expired).
pub(crate) fn live<S: std::hash::BuildHasher>(
    map: &HashMap<CounterId, Count, S>,
    id: &CounterId,
    now: u64,
) -> u32 {
    map.get(id)
        .filter(|c| now < c.expires_at_ms)
        .map_or(0, |c| c.n)
}

/// The decision of one charge, given the counts before it: `Ok((attempts, calls))` to store,
/// or why it is refused. `completed` tells whether the key holds a completed record.
pub(crate) fn decide(
    attempts_before: u32,
    calls_before: Option<u32>,
    max_attempts: u32,
    max_calls: Option<u32>,
    completed: bool,
) -> Result<(u32, Option<u32>), (Exhausted, u32)> {
    let attempts = attempts_before.saturating_add(1);
    if attempts > max_attempts {
        let refused = Exhausted::Key {
            attempts,
            limit: max_attempts,
            completed,
        };
        // The refused attempt is still counted against the key, so that its number in the
        // next refusal is honest; it does not count against the turn.
        return Err((refused, attempts));
    }
    let calls = match (calls_before, max_calls) {
        (Some(before), Some(limit)) => {
            let calls = before.saturating_add(1);
            if calls > limit {
                return Err((Exhausted::Turn { calls, limit }, attempts_before));
            }
            Some(calls)
        }
        _ => None,
    };
    Ok((attempts, calls))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn hex(id: CounterId) -> String {
        id.iter().map(|b| format!("{b:02x}")).collect()
    }

    /// Durable stores keep counts under these names: they must not change silently.
    #[test]
    fn counter_ids_are_stable() {
        let key = Key::from_bytes([0x11; 32]);
        let turn = TurnIdentity::new("acme", "turn-7");
        assert_eq!(
            hex(turn.key_counter(&key)),
            "5fc18a439e00829e80d9031c84b6f524"
        );
        assert_eq!(hex(turn.turn_counter()), "ea5e5aeed0db3dd30e7f0136dbcf828e");
        assert_ne!(
            TurnIdentity::new("ac", "meturn-7").turn_counter(),
            turn.turn_counter()
        );
        assert_ne!(
            turn.key_counter(&Key::from_bytes([0x12; 32])),
            turn.key_counter(&key)
        );
    }

    #[test]
    fn decide_counts_the_refused_attempt_but_not_against_the_turn() {
        assert_eq!(decide(0, Some(0), 1, Some(1), false), Ok((1, Some(1))));
        assert_eq!(
            decide(1, Some(1), 1, Some(5), true),
            Err((
                Exhausted::Key {
                    attempts: 2,
                    limit: 1,
                    completed: true
                },
                2
            ))
        );
        assert_eq!(
            decide(0, Some(5), 3, Some(5), false),
            Err((Exhausted::Turn { calls: 6, limit: 5 }, 0))
        );
    }
}

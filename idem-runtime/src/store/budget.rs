//! Turn budgets as stores keep them: counters named by the turn's identity, not by a `Turn`
//! value.
//!
//! A per-key count is named by `BLAKE3(namespace, turn id, key)` and a turn-wide count by
//! `BLAKE3(namespace, turn id)` — keyed hashes whose keys are derived once from their own
//! contexts, each part prefixed by its length as 8 bytes little-endian — truncated to 16
//! bytes: fixed-size names that never spell out a turn id.

use std::collections::HashMap;
use std::sync::LazyLock;

use super::Exhausted;
use crate::key::Key;

/// The name of one budget counter.
pub type CounterId = [u8; 16];

fn counter_id(key: &LazyLock<[u8; 32]>, parts: &[&[u8]]) -> CounterId {
    let mut hasher = blake3::Hasher::new_keyed(key);
    for part in parts {
        hasher.update(&(part.len() as u64).to_le_bytes());
        hasher.update(part);
    }
    let mut id = [0; 16];
    id.copy_from_slice(&hasher.finalize().as_bytes()[..16]);
    id
}

static KEY_COUNTER: LazyLock<[u8; 32]> =
    LazyLock::new(|| blake3::derive_key("idem 2026-12-02 per-key attempt counter", b""));
static TURN_COUNTER: LazyLock<[u8; 32]> =
    LazyLock::new(|| blake3::derive_key("idem 2026-12-02 turn call counter", b""));

/// The counter of attempts with `key` in the turn `(namespace, turn)`.
pub fn key_counter(namespace: &str, turn: &str, key: &Key) -> CounterId {
    counter_id(
        &KEY_COUNTER,
        &[namespace.as_bytes(), turn.as_bytes(), key.as_bytes()],
    )
}

/// The counter of state-changing calls in the turn `(namespace, turn)`.
pub fn turn_counter(namespace: &str, turn: &str) -> CounterId {
    counter_id(&TURN_COUNTER, &[namespace.as_bytes(), turn.as_bytes()])
}

/// An in-memory count with its expiry (ms), for stores that keep counters in a map.
#[derive(Debug, Clone, Copy)]
pub(crate) struct Count {
    pub(crate) n: u32,
    pub(crate) expires_at_ms: u64,
}

/// The live count in `map` (0 if absent or expired).
pub(crate) fn live(map: &HashMap<CounterId, Count>, id: &CounterId, now: u64) -> u32 {
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
        assert_eq!(
            hex(key_counter("acme", "turn-7", &key)),
            "bd19ebcf5c5e77f81d2aa106f06a289f"
        );
        assert_eq!(
            hex(turn_counter("acme", "turn-7")),
            "ea5e5aeed0db3dd30e7f0136dbcf828e"
        );
        assert_ne!(
            turn_counter("ac", "meturn-7"),
            turn_counter("acme", "turn-7")
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

//! How often this process refused each key for being reused with other arguments, so that a
//! model that keeps rewording (and so keeps being refused) is told to stop
//! ([`Error::PayloadMismatch`](crate::Error::PayloadMismatch)'s `refused`). A key names its
//! namespace and turn, so the count is the turn's, across the `Turn` values of its runs here
//! (an MCP server makes one per call).

use std::collections::HashMap;
use std::sync::{LazyLock, Mutex, PoisonError};

use crate::Key;

/// The most keys counted at once (about a megabyte): past it, of the keys refused the fewest
/// times, the one refused longest ago is forgotten, so that a long-lived process keeps no
/// memory per key. A key a model keeps reusing is refused more than most and kept; only one
/// refused once, then again after this many other keys were, starts its count again.
const MAX_KEYS: usize = 16_384;

/// Each key's count of refusals, and when it was last refused (a tick of `next`), in that
/// order: the fewest refusals, then the oldest, is forgotten first.
#[derive(Default)]
struct Counts {
    keys: HashMap<Key, (u32, u64)>,
    next: u64,
}

static REFUSALS: LazyLock<Mutex<Counts>> = LazyLock::new(Mutex::default);

/// Counts a refusal of `key`: how many this process made, this one included.
pub(super) fn count(key: Key) -> u32 {
    let mut counts = REFUSALS.lock().unwrap_or_else(PoisonError::into_inner);
    let Counts { keys, next } = &mut *counts;
    *next += 1;
    if keys.len() >= MAX_KEYS && !keys.contains_key(&key) {
        let oldest = keys
            .iter()
            .min_by_key(|(_, counted)| **counted)
            .map(|(k, _)| *k);
        if let Some(oldest) = oldest {
            keys.remove(&oldest);
        }
    }
    let (count, at) = keys.entry(key).or_insert((0, 0));
    *count = count.saturating_add(1);
    *at = *next;
    *count
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn counts_are_per_key_and_bounded_and_a_key_refused_often_is_kept() {
        let key = |n: u32| {
            let mut bytes = [0xa5; 32];
            bytes[..4].copy_from_slice(&n.to_le_bytes());
            Key::from_bytes(bytes)
        };
        assert_eq!((count(key(1)), count(key(1)), count(key(2))), (1, 2, 1));
        // Many other keys refused in between (found by a review: every count was cleared at
        // once, so a model looping among other refusals was never told to stop).
        for n in 3..(MAX_KEYS as u32 + 100) {
            count(key(n));
            if n % 1000 == 0 {
                count(key(1));
            }
        }
        assert!(REFUSALS.lock().unwrap().keys.len() <= MAX_KEYS);
        assert!(count(key(1)) > 3, "the looping key kept its count");
    }
}

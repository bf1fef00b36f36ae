//! How often this process refused each key for being reused with other arguments, so that a
//! model that keeps rewording (and so keeps being refused) is told to stop
//! ([`Error::PayloadMismatch`](crate::Error::PayloadMismatch)'s `refused`). A key names its
//! namespace and turn, so the count is the turn's, across the `Turn` values of its runs here
//! (an MCP server makes one per call).

use std::collections::HashMap;
use std::sync::{LazyLock, Mutex, PoisonError};

use crate::Key;

/// The most keys counted at once: past it the counts start again (a count lost only delays a
/// model's "stop" by one refusal), so that a long-lived process keeps no memory per key.
const MAX_KEYS: usize = 4096;

static REFUSALS: LazyLock<Mutex<HashMap<Key, u32>>> = LazyLock::new(Mutex::default);

/// Counts a refusal of `key`: how many this process made, this one included.
pub(super) fn count(key: Key) -> u32 {
    let mut refusals = REFUSALS.lock().unwrap_or_else(PoisonError::into_inner);
    if refusals.len() >= MAX_KEYS && !refusals.contains_key(&key) {
        refusals.clear();
    }
    let count = refusals.entry(key).or_insert(0);
    *count = count.saturating_add(1);
    *count
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn counts_are_per_key_and_bounded() {
        let key = |n: u32| {
            let mut bytes = [0xa5; 32];
            bytes[..4].copy_from_slice(&n.to_le_bytes());
            Key::from_bytes(bytes)
        };
        assert_eq!((count(key(1)), count(key(1)), count(key(2))), (1, 2, 1));
        for n in 3..(MAX_KEYS as u32 + 10) {
            count(key(n));
        }
        assert!(REFUSALS.lock().unwrap().len() <= MAX_KEYS);
    }
}

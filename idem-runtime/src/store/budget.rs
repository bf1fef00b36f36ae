//! Retry budgets as stores keep them: the rule ([`charge`]) and the name of a turn's count.
//!
//! Two counts limit claims. A key's **attempt count** (claims since its last recorded result)
//! lives with the key in the store; the key already stands for one action of one turn. A
//! turn's **count of started actions** (only kept when the turn has a cap) is named by the
//! turn's identity, [`TurnIdentity`]: `BLAKE3(namespace, turn id)`, a keyed hash whose key is
//! derived once from its own context, each part prefixed by its length as 8 bytes
//! little-endian, computed once per [`Turn`](crate::Turn); the count's name is its first 16
//! bytes, which never spell out a turn id.

use std::fmt;
use std::sync::LazyLock;

use super::{Charge, Exhausted};

/// The name of one budget counter.
pub type CounterId = [u8; 16];

static TURN_COUNTER: LazyLock<[u8; 32]> =
    LazyLock::new(|| blake3::derive_key("idem 2026-12-02 turn call counter", b""));

/// The identity a turn's budget belongs to: a digest of its namespace and id, which every
/// `Turn` value with that namespace and id shares, in every process.
///
/// ```
/// # extern crate idem_tools_runtime as idem_tools;
/// use idem_tools::store::budget::TurnIdentity;
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

    /// The name of this turn's count of started actions.
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

/// The budget rule every store applies when `begin` finds no live record, atomically with the
/// claim: given the live counts before this request — `attempts`, the key's claims since its
/// last recorded result, and `calls`, the turn's started actions (0 when absent or expired) —
/// may it claim?
///
/// `Ok(())`: claim, and store `attempts + 1` (and `calls + 1` when the turn has a cap), each
/// expiring `charge.window` from now. `Err`: answer [`Begin::Refused`](super::Begin::Refused)
/// and change nothing. The per-key limit is checked first, so a call refused by it is never
/// counted against the turn.
///
/// ```
/// # extern crate idem_tools_runtime as idem_tools;
/// use std::time::Duration;
/// use idem_tools::store::budget::{TurnIdentity, charge};
/// use idem_tools::store::{Charge, Exhausted};
///
/// let rule = Charge {
///     turn: TurnIdentity::new("", "turn-1"),
///     max_attempts: 3,
///     max_calls: Some(10),
///     window: Duration::from_secs(86_400),
/// };
/// assert_eq!(charge(2, 0, &rule), Ok(()));
/// assert_eq!(charge(3, 0, &rule), Err(Exhausted::Key { attempts: 3, limit: 3 }));
/// assert_eq!(charge(0, 10, &rule), Err(Exhausted::Turn { calls: 10, limit: 10 }));
/// ```
///
/// # Errors
/// The spent budget, per-key first.
pub fn charge(attempts: u32, calls: u32, charge: &Charge) -> Result<(), Exhausted> {
    if attempts >= charge.max_attempts {
        return Err(Exhausted::Key {
            attempts,
            limit: charge.max_attempts,
        });
    }
    if let Some(limit) = charge.max_calls
        && calls >= limit
    {
        return Err(Exhausted::Turn { calls, limit });
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Durable stores keep counts under these names: they must not change silently.
    #[test]
    fn counter_ids_are_stable() {
        let turn = TurnIdentity::new("acme", "turn-7");
        assert_eq!(
            hex::encode(turn.turn_counter()),
            "ea5e5aeed0db3dd30e7f0136dbcf828e"
        );
        assert_ne!(
            TurnIdentity::new("ac", "meturn-7").turn_counter(),
            turn.turn_counter()
        );
    }

    #[test]
    fn the_per_key_limit_is_checked_before_the_turn_cap() {
        let rule = Charge {
            turn: TurnIdentity::new("", "t"),
            max_attempts: 1,
            max_calls: Some(1),
            window: std::time::Duration::from_secs(1),
        };
        assert_eq!(charge(0, 0, &rule), Ok(()));
        assert_eq!(
            charge(1, 1, &rule),
            Err(Exhausted::Key {
                attempts: 1,
                limit: 1
            })
        );
        assert_eq!(
            charge(0, 1, &rule),
            Err(Exhausted::Turn { calls: 1, limit: 1 })
        );
        let uncapped = Charge {
            max_calls: None,
            ..rule
        };
        assert_eq!(charge(0, u32::MAX, &uncapped), Ok(()));
    }
}

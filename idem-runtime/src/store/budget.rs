//! Retry budgets as stores keep them: the rule ([`charge`]) and the names of a turn's counts.
//!
//! Three counts limit claims. A key's **attempt count** (claims of the key by the turn that
//! holds it, since its last recorded result) lives with the key in the store, next to that
//! turn's id: a claim by another turn (possible only with a caller-supplied key) starts from 0.
//! A claim that finds the count at 0 starts a **new action**; one that finds it above 0 is a
//! **retry** of an action already started. A turn's **count of started actions** (kept when the
//! turn has a cap) and each tool's **count of started actions in the turn** (kept when the
//! per-tool cap is set, as it is by default) count new actions only, never retries.
//!
//! The counts are named by the turn's identity, [`TurnIdentity`]: `BLAKE3(namespace, turn id)`,
//! a keyed hash whose key is derived once from its own context, each part prefixed by its length
//! as 8 bytes little-endian, computed once per [`Turn`](crate::Turn). The turn's count is named
//! by its first 16 bytes ([`TurnIdentity::turn_counter`]); a tool's count by the first 16 bytes
//! of `BLAKE3(identity, tool name)`, keyed by a key of its own context
//! ([`TurnIdentity::tool_counter`]). Neither spells out a turn id or a tool name.

use std::fmt;
use std::sync::LazyLock;

use super::{Charge, Exhausted};

/// The name of one budget counter.
pub type CounterId = [u8; 16];

static TURN_COUNTER: LazyLock<[u8; 32]> =
    LazyLock::new(|| blake3::derive_key("idem 2026-12-02 turn call counter", b""));

static TOOL_COUNTER: LazyLock<[u8; 32]> =
    LazyLock::new(|| blake3::derive_key("idem 2026-12-09 tool action counter", b""));

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

    /// The name of `tool`'s count of started actions in this turn: the first 16 bytes of a
    /// keyed BLAKE3 of the identity and the tool's name (prefixed by its length as 8 bytes
    /// little-endian).
    ///
    /// ```
    /// # extern crate idem_tools_runtime as idem_tools;
    /// use idem_tools::store::budget::TurnIdentity;
    ///
    /// let turn = TurnIdentity::new("acme", "turn-7");
    /// assert_ne!(turn.tool_counter("charge"), turn.tool_counter("refund"));
    /// assert_ne!(turn.tool_counter("charge"), turn.turn_counter());
    /// ```
    pub fn tool_counter(&self, tool: &str) -> CounterId {
        // Hashed in one piece from the stack when it fits (a tool's name usually does): the
        // same digest as the incremental hasher's, without setting one up on every call.
        let mut input = [0u8; 128];
        let len = 40 + tool.len();
        if let Some(buf) = input.get_mut(..len) {
            buf[..32].copy_from_slice(&self.0);
            buf[32..40].copy_from_slice(&(tool.len() as u64).to_le_bytes());
            buf[40..].copy_from_slice(tool.as_bytes());
            return truncate(blake3::keyed_hash(&TOOL_COUNTER, buf).as_bytes());
        }
        let mut hasher = blake3::Hasher::new_keyed(&TOOL_COUNTER);
        hasher.update(&self.0);
        hasher.update(&(tool.len() as u64).to_le_bytes());
        hasher.update(tool.as_bytes());
        truncate(hasher.finalize().as_bytes())
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

/// The live counts a claim is charged against, read by the store atomically with the claim.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Counts {
    /// Claims of the key by this turn since its last recorded result (0 if the key's count
    /// belongs to another turn, is absent or expired).
    pub attempts: u32,
    /// Actions the turn started (0 when absent or expired; read only for a new action of a turn
    /// with a cap).
    pub calls: u32,
    /// Actions this tool started in the turn (0 when absent or expired; read only for a new
    /// action when the per-tool cap is set).
    pub tool_actions: u32,
}

/// Whether a claim that finds `attempts` (the key's claims by this turn since its last
/// recorded result) starts a new action: then it is checked against, and counted in, the
/// turn's and the tool's counts of started actions. Otherwise it is a retry of an action
/// already started, charged to the key's attempt count alone.
pub const fn is_new_action(attempts: u32) -> bool {
    attempts == 0
}

/// The budget rule every store applies when `begin` finds no live record, atomically with the
/// claim: given the live [`Counts`] before this request, may it claim?
///
/// - Every claim is checked against the per-key limit first (`attempts < max_attempts`).
/// - A **retry** (`attempts > 0`) is charged to the key alone: `Ok(())` means claim and store
///   `attempts + 1`.
/// - A **new action** (`attempts == 0`, [`is_new_action`]) is also checked against the turn's
///   cap (`max_calls`, when set) and then the tool's (`max_tool_actions`, when set): `Ok(())`
///   means claim, store `attempts` = 1, and add one to each count that has a cap.
///
/// Every count written expires `charge.window` from now. `Err`: answer
/// [`Begin::Refused`](super::Begin::Refused) and change nothing.
///
/// ```
/// # extern crate idem_tools_runtime as idem_tools;
/// use std::time::Duration;
/// use idem_tools::store::budget::{Counts, TurnIdentity, charge};
/// use idem_tools::store::{Charge, Exhausted};
///
/// let rule = Charge {
///     turn: TurnIdentity::new("", "turn-1"),
///     max_attempts: 3,
///     max_calls: Some(10),
///     max_tool_actions: Some(5),
///     window: Duration::from_secs(86_400),
/// };
/// let counts = |attempts, calls, tool_actions| Counts { attempts, calls, tool_actions };
/// assert_eq!(charge(counts(2, 10, 5), &rule), Ok(())); // a retry: the key's count only
/// assert_eq!(charge(counts(3, 0, 0), &rule), Err(Exhausted::Key { attempts: 3, limit: 3 }));
/// assert_eq!(charge(counts(0, 10, 0), &rule), Err(Exhausted::Turn { calls: 10, limit: 10 }));
/// assert_eq!(charge(counts(0, 9, 5), &rule), Err(Exhausted::Tool { calls: 5, limit: 5 }));
/// ```
///
/// # Errors
/// The spent budget: per-key first, then the turn's, then the tool's.
pub fn charge(counts: Counts, charge: &Charge) -> Result<(), Exhausted> {
    if counts.attempts >= charge.max_attempts {
        return Err(Exhausted::Key {
            attempts: counts.attempts,
            limit: charge.max_attempts,
        });
    }
    if !is_new_action(counts.attempts) {
        return Ok(());
    }
    if let Some(limit) = charge.max_calls
        && counts.calls >= limit
    {
        return Err(Exhausted::Turn {
            calls: counts.calls,
            limit,
        });
    }
    if let Some(limit) = charge.max_tool_actions
        && counts.tool_actions >= limit
    {
        return Err(Exhausted::Tool {
            calls: counts.tool_actions,
            limit,
        });
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
        assert_eq!(hex::encode(turn.tool_counter("charge")), TOOL_VECTOR);
        assert_ne!(
            TurnIdentity::new("acme", "turn-8").tool_counter("charge"),
            turn.tool_counter("charge")
        );
    }

    /// A tool's count is named as documented whatever its name's length: hashed from the stack
    /// (names up to 88 bytes) or incrementally (longer ones).
    #[test]
    fn tool_counters_are_the_documented_digest_at_every_length() {
        let turn = TurnIdentity::new("acme", "turn-7");
        for len in [0, 1, 6, 87, 88, 89, 200] {
            let tool = "t".repeat(len);
            let mut hasher = blake3::Hasher::new_keyed(&TOOL_COUNTER);
            hasher.update(&turn.0);
            hasher.update(&(tool.len() as u64).to_le_bytes());
            hasher.update(tool.as_bytes());
            assert_eq!(
                turn.tool_counter(&tool),
                truncate(hasher.finalize().as_bytes()),
                "{len}"
            );
        }
    }

    /// The name of the count of `charge` in turn `turn-7` of `acme`.
    const TOOL_VECTOR: &str = "9e28552a6e1f90604529b9fbd461a8ea";

    #[test]
    fn the_per_key_limit_is_checked_first_and_retries_skip_the_action_caps() {
        let rule = Charge {
            turn: TurnIdentity::new("", "t"),
            max_attempts: 1,
            max_calls: Some(1),
            max_tool_actions: Some(1),
            window: std::time::Duration::from_secs(1),
        };
        let counts = |attempts, calls, tool_actions| Counts {
            attempts,
            calls,
            tool_actions,
        };
        assert_eq!(charge(counts(0, 0, 0), &rule), Ok(()));
        assert_eq!(
            charge(counts(1, 1, 1), &rule),
            Err(Exhausted::Key {
                attempts: 1,
                limit: 1
            })
        );
        assert_eq!(
            charge(counts(0, 1, 1), &rule),
            Err(Exhausted::Turn { calls: 1, limit: 1 })
        );
        assert_eq!(
            charge(counts(0, 0, 1), &rule),
            Err(Exhausted::Tool { calls: 1, limit: 1 })
        );
        let retries = Charge {
            max_attempts: 3,
            ..rule
        };
        assert_eq!(
            charge(counts(2, 9, 9), &retries),
            Ok(()),
            "a retry of an action already started is not a new action"
        );
        let uncapped = Charge {
            max_calls: None,
            max_tool_actions: None,
            ..rule
        };
        assert_eq!(charge(counts(0, u32::MAX, u32::MAX), &uncapped), Ok(()));
    }
}

//! What stores answer and show: the answer of `begin`, and records as the admin API shows them.

use bytes::Bytes;

use crate::Result;
use crate::key::{Fingerprint, Key};

/// The state of a live record.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum RecordState {
    /// A caller holds a lease and is running the tool.
    InProgress,
    /// The tool finished; the record holds its encoded result (or a marker: see
    /// [`replay::RecordKind`](crate::replay::RecordKind)).
    Completed,
}

impl RecordState {
    /// `in_progress` or `completed`, as stores and the CLI spell it.
    pub const fn as_str(self) -> &'static str {
        match self {
            RecordState::InProgress => "in_progress",
            RecordState::Completed => "completed",
        }
    }
}

/// One remembered key, as [`Store::get`](super::Store::get) and
/// [`Store::list`](super::Store::list) show it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Record {
    /// Namespace the key belongs to.
    pub namespace: String,
    /// The idempotency key.
    pub key: Key,
    /// The tool that claimed the key.
    pub tool: String,
    /// The id of the turn that claimed the key (the last one to, if several turns did).
    pub turn: String,
    /// In progress or completed.
    pub state: RecordState,
    /// Digest of the arguments of the call that claimed the key.
    pub fingerprint: Fingerprint,
    /// The encoded result; `Some` exactly when completed.
    pub result: Option<Vec<u8>>,
    /// Claims of this key by [`turn`](Record::turn) since its last recorded result (0 once
    /// completed), within the budget window.
    pub attempts: u32,
    /// When the key was claimed (ms since the Unix epoch).
    pub created_at_ms: u64,
    /// When the record stops counting: the lease's end while in progress, the TTL's end once
    /// completed (ms since the Unix epoch). A record is live while `now < expires_at_ms`.
    pub expires_at_ms: u64,
    /// In progress, and the store knows its holder is gone for good with nothing of it left to
    /// land: the next [`begin`](super::Store::begin) takes the key over at once, and the claim
    /// will never be completed. SQLite says so of a claim whose process is certainly gone on
    /// this host; the network stores, where a gone holder's last request may still be on its
    /// way, never do (their `begin` frees such a claim after a reply timeout).
    pub holder_gone: bool,
}

/// What [`Store::remove_shown`](super::Store::remove_shown) did.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Removed {
    /// The record shown was deleted, with its key's attempt count; `live`: whether it was
    /// still live (a lease can run out between showing and removing).
    Deleted {
        /// Whether the record was live when deleted.
        live: bool,
    },
    /// The key holds another record than the one shown (the claim completed, or the key was
    /// claimed again): kept.
    Changed,
    /// The key holds no record any more: nothing is stored for it, or only the attempt count
    /// of a claim that was given back (kept).
    Gone,
}

/// Why [`Store::begin`](super::Store::begin) refused a claim: a budget is spent. Nothing was
/// claimed or counted.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Exhausted {
    /// The key was claimed `attempts` times since its last recorded result, the most
    /// `limit` allows.
    Key {
        /// Claims of this key since its last recorded result (not counting this request).
        attempts: u32,
        /// The per-key limit.
        limit: u32,
    },
    /// The turn started `calls` actions, the most `limit` allows; this request would have
    /// started a new one.
    Turn {
        /// Actions started in the turn (not counting this request).
        calls: u32,
        /// The turn-wide limit.
        limit: u32,
    },
    /// The request's tool started `calls` actions in this turn, the most `limit` allows; this
    /// request would have started a new one.
    Tool {
        /// Actions the tool started in the turn (not counting this request).
        calls: u32,
        /// The per-tool limit.
        limit: u32,
    },
}

/// The answer of [`Store::begin`](super::Store::begin).
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Begin {
    /// The key had no live record: the caller now holds it with the request's token and must
    /// run the tool, then `complete` or `release` it.
    Claimed,
    /// The key was handled already: replay its first result.
    Completed(FirstResult),
    /// Another caller holds a live lease on the key; `fingerprint` is that call's.
    InFlight {
        /// Digest of the arguments of the call that holds the key.
        fingerprint: Fingerprint,
    },
    /// The charge was refused: nothing was claimed or counted.
    Refused(Exhausted),
}

impl Begin {
    /// The answer for a live record found by `begin`: [`Begin::Completed`] or
    /// [`Begin::InFlight`].
    ///
    /// # Errors
    /// [`Error::CorruptRecord`](crate::Error::CorruptRecord) for a completed record without a
    /// result.
    pub fn found(record: Record) -> Result<Begin> {
        match (record.state, record.result) {
            (RecordState::InProgress, _) => Ok(Begin::InFlight {
                fingerprint: record.fingerprint,
            }),
            (RecordState::Completed, Some(result)) => Ok(Begin::Completed(FirstResult {
                fingerprint: record.fingerprint,
                result: Bytes::from(result),
            })),
            (RecordState::Completed, None) => Err(crate::Error::CorruptRecord {
                key: record.key.short(),
                message: "completed without a result".to_owned(),
            }),
        }
    }
}

/// What a replay needs of a completed key: the encoded first result, and the fingerprint of
/// the arguments it was recorded under.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct FirstResult {
    /// Digest of the arguments of the call that completed the key.
    pub fingerprint: Fingerprint,
    /// The encoded result (cloning shares the bytes).
    pub result: Bytes,
}

/// `records` in the order they were claimed (then by key), the first `limit` of them: what
/// [`Store::list_turn`](super::Store::list_turn) answers.
pub fn in_claim_order(mut records: Vec<Record>, limit: usize) -> Vec<Record> {
    records.sort_by(|a, b| {
        (a.created_at_ms, a.key.as_bytes()).cmp(&(b.created_at_ms, b.key.as_bytes()))
    });
    records.truncate(limit);
    records
}

//! Call outcomes and the counters kept for them.

use std::fmt;
use std::sync::atomic::{AtomicU64, Ordering};

/// What happened to one call of a state-changing tool (the `outcome` field of its log event).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
#[non_exhaustive]
pub enum Outcome {
    /// The tool ran and its result was recorded.
    Executed,
    /// The tool ran and returned an error; the key was released so a retry runs again.
    Failed,
    /// The key was handled before: the first result was returned without running the tool.
    Replayed,
    /// An identical call was running in this process: this call waited for it and shares its
    /// result.
    Joined,
    /// The turn's retry budget was used up; nothing ran.
    BudgetExhausted,
    /// The key was reused with different arguments; nothing ran.
    PayloadMismatch,
    /// The key stayed in flight in another process past the wait bound; nothing ran.
    InFlight,
    /// The store failed; nothing ran (or the result was not recorded).
    StoreError,
    /// A stored result could not be decoded.
    DecodeError,
    /// The caller dropped the call before it had an answer, while it was not running the tool
    /// itself: waiting for the store or for an identical call, or claimed but not yet started
    /// (the key was given back) — or while it ran a `release_on_cancel` tool. A panic
    /// elsewhere in the caller's task (a sibling in a `join!`) that unwinds through the call
    /// drops it the same way.
    Cancelled,
    /// The tool's body panicked; the key was released and the panic propagated.
    Panicked,
    /// The caller dropped the call while the tool ran (or a panic elsewhere in its task
    /// unwound through it): the key is kept as interrupted, and retries are told the outcome
    /// is unknown.
    Interrupted,
    /// The key was kept as interrupted by an earlier call: this one was told the outcome is
    /// unknown; nothing ran.
    WasInterrupted,
    /// The key's result was recorded as not replayable: this one was told the tool already
    /// ran; nothing ran.
    NotReplayable,
    /// The tool ran but its lease could not be kept (the store was unreachable, or another
    /// caller took the key over): the body was stopped, or its result was not recorded.
    LeaseLost,
    /// A tool called itself (directly or through other tools) with a key its task holds.
    Reentrant,
    /// The call could not be made as configured (no turn, an invalid lease, two tools with
    /// one name — in this process, or sharing the store: [`Error::NameClash`](crate::Error::NameClash));
    /// nothing ran.
    ConfigError,
}

impl Outcome {
    /// All outcomes, in the order of [`Stats`] fields.
    pub const ALL: [Outcome; 17] = [
        Outcome::Executed,
        Outcome::Failed,
        Outcome::Replayed,
        Outcome::Joined,
        Outcome::BudgetExhausted,
        Outcome::PayloadMismatch,
        Outcome::InFlight,
        Outcome::StoreError,
        Outcome::DecodeError,
        Outcome::Cancelled,
        Outcome::Panicked,
        Outcome::Interrupted,
        Outcome::WasInterrupted,
        Outcome::NotReplayable,
        Outcome::LeaseLost,
        Outcome::Reentrant,
        Outcome::ConfigError,
    ];

    /// The snake_case name used in logs.
    pub const fn as_str(self) -> &'static str {
        match self {
            Outcome::Executed => "executed",
            Outcome::Failed => "failed",
            Outcome::Replayed => "replayed",
            Outcome::Joined => "joined",
            Outcome::BudgetExhausted => "budget_exhausted",
            Outcome::PayloadMismatch => "payload_mismatch",
            Outcome::InFlight => "in_flight",
            Outcome::StoreError => "store_error",
            Outcome::DecodeError => "decode_error",
            Outcome::Cancelled => "cancelled",
            Outcome::Panicked => "panicked",
            Outcome::Interrupted => "interrupted",
            Outcome::WasInterrupted => "was_interrupted",
            Outcome::NotReplayable => "not_replayable",
            Outcome::LeaseLost => "lease_lost",
            Outcome::Reentrant => "reentrant",
            Outcome::ConfigError => "config_error",
        }
    }

    const fn index(self) -> usize {
        self as usize
    }
}

impl fmt::Display for Outcome {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

/// A snapshot of call counters, per outcome. A durable turn's model steps are calls too (of the
/// pseudo-tool `idem:model`): a step asked live counts as `executed`, a recorded step read back
/// as `replayed`.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
#[non_exhaustive]
pub struct Stats {
    /// Calls that ran the tool and recorded its result.
    pub executed: u64,
    /// Calls that ran the tool and got an error (key released).
    pub failed: u64,
    /// Calls answered from the store without running the tool.
    pub replayed: u64,
    /// Calls that waited for an identical call in this process.
    pub joined: u64,
    /// Calls refused by a retry budget.
    pub budget_exhausted: u64,
    /// Calls refused because the key was reused with other arguments.
    pub payload_mismatch: u64,
    /// Calls that gave up waiting for another process.
    pub in_flight: u64,
    /// Calls that hit a store failure.
    pub store_error: u64,
    /// Calls whose stored result did not decode.
    pub decode_error: u64,
    /// Calls dropped by their caller while not running the tool (see [`Outcome::Cancelled`]).
    pub cancelled: u64,
    /// Calls whose tool panicked.
    pub panicked: u64,
    /// Calls dropped while the tool ran, their key kept as interrupted.
    pub interrupted: u64,
    /// Calls refused because an earlier call of their key was interrupted.
    pub was_interrupted: u64,
    /// Calls refused because their key's result could not be replayed.
    pub not_replayable: u64,
    /// Calls whose lease could not be kept.
    pub lease_lost: u64,
    /// Calls refused because their task already holds the key.
    pub reentrant: u64,
    /// Calls refused by their configuration (no turn, invalid lease, duplicate tool name).
    pub config_error: u64,
}

impl Stats {
    /// The counter for one outcome.
    pub fn get(&self, outcome: Outcome) -> u64 {
        match outcome {
            Outcome::Executed => self.executed,
            Outcome::Failed => self.failed,
            Outcome::Replayed => self.replayed,
            Outcome::Joined => self.joined,
            Outcome::BudgetExhausted => self.budget_exhausted,
            Outcome::PayloadMismatch => self.payload_mismatch,
            Outcome::InFlight => self.in_flight,
            Outcome::StoreError => self.store_error,
            Outcome::DecodeError => self.decode_error,
            Outcome::Cancelled => self.cancelled,
            Outcome::Panicked => self.panicked,
            Outcome::Interrupted => self.interrupted,
            Outcome::WasInterrupted => self.was_interrupted,
            Outcome::NotReplayable => self.not_replayable,
            Outcome::LeaseLost => self.lease_lost,
            Outcome::Reentrant => self.reentrant,
            Outcome::ConfigError => self.config_error,
        }
    }

    /// Calls counted in all outcomes.
    pub fn total(&self) -> u64 {
        Outcome::ALL.iter().map(|o| self.get(*o)).sum()
    }
}

/// How many copies of the counters are kept, so that threads counting at once rarely write
/// the same cache line.
const STRIPES: usize = 8;

/// One copy of the counters, alone on its cache lines.
#[repr(align(128))]
struct Stripe([AtomicU64; Outcome::ALL.len()]);

/// Lock-free counters, one per outcome, striped over threads: a thread adds to its own stripe
/// (chosen when it first counts), a snapshot sums the stripes.
pub(crate) struct StatsCounters([Stripe; STRIPES]);

impl Default for StatsCounters {
    fn default() -> Self {
        Self::new()
    }
}

/// This thread's stripe.
fn stripe() -> usize {
    use std::cell::Cell;
    use std::sync::atomic::AtomicUsize;
    static NEXT: AtomicUsize = AtomicUsize::new(0);
    thread_local! {
        static STRIPE: Cell<Option<usize>> = const { Cell::new(None) };
    }
    STRIPE
        .try_with(|s| match s.get() {
            Some(stripe) => stripe,
            None => {
                let stripe = NEXT.fetch_add(1, Ordering::Relaxed) % STRIPES;
                s.set(Some(stripe));
                stripe
            }
        })
        .unwrap_or(0)
}

impl StatsCounters {
    pub(crate) const fn new() -> Self {
        StatsCounters(
            [const { Stripe([const { AtomicU64::new(0) }; Outcome::ALL.len()]) }; STRIPES],
        )
    }

    pub(crate) fn add(&self, outcome: Outcome) {
        self.0[stripe()].0[outcome.index()].fetch_add(1, Ordering::Relaxed);
    }

    pub(crate) fn snapshot(&self) -> Stats {
        let c = |o: Outcome| {
            self.0
                .iter()
                .map(|s| s.0[o.index()].load(Ordering::Relaxed))
                .sum()
        };
        Stats {
            executed: c(Outcome::Executed),
            failed: c(Outcome::Failed),
            replayed: c(Outcome::Replayed),
            joined: c(Outcome::Joined),
            budget_exhausted: c(Outcome::BudgetExhausted),
            payload_mismatch: c(Outcome::PayloadMismatch),
            in_flight: c(Outcome::InFlight),
            store_error: c(Outcome::StoreError),
            decode_error: c(Outcome::DecodeError),
            cancelled: c(Outcome::Cancelled),
            panicked: c(Outcome::Panicked),
            interrupted: c(Outcome::Interrupted),
            was_interrupted: c(Outcome::WasInterrupted),
            not_replayable: c(Outcome::NotReplayable),
            lease_lost: c(Outcome::LeaseLost),
            reentrant: c(Outcome::Reentrant),
            config_error: c(Outcome::ConfigError),
        }
    }
}

pub(crate) static GLOBAL: StatsCounters = StatsCounters::new();

/// Counters of all calls in this process since it started.
///
/// Each [`Turn`](crate::Turn) keeps its own counters too ([`Turn::stats`](crate::Turn::stats)).
pub fn stats() -> Stats {
    GLOBAL.snapshot()
}

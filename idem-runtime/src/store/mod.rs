//! Dedup stores: where handled keys and their first results are remembered.
//!
//! A [`Store`] is a small state machine per key, designed so that a database can implement every
//! transition atomically:
//!
//! ```text
//!            begin (absent or expired)                complete (matching token)
//!   absent ───────────────────────────▶ in progress ───────────────────────────▶ completed
//!      ▲                                  │     │ renew (matching token)           │
//!      │   release (matching token)       │     ▼                                  │
//!      ├──────────────────────────────────┘   lease expiry: claimable again        │
//!      └────────────────────────────────────────────────────── TTL expiry ─────────┘
//! ```
//!
//! Every claim hands out a fresh [`LeaseToken`] (a fencing token): `complete`, `renew` and
//! `release` only act when the caller still holds the newest token, so a holder whose lease
//! expired cannot overwrite the work of the caller that took over.

pub mod budget;
mod bytes;
pub mod conformance;
pub mod fault;
mod future;
pub mod memory;
#[cfg(feature = "redis")]
pub mod redis;
#[cfg(feature = "sqlite")]
pub mod sqlite;

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, LazyLock};
use std::time::Duration;

use crate::Result;
use crate::key::{Fingerprint, Key};

#[cfg(feature = "redis")]
pub use self::redis::RedisStore;
pub use bytes::ResultBytes;
pub use future::StoreFuture;
pub use memory::MemoryStore;
#[cfg(feature = "sqlite")]
pub use sqlite::SqliteStore;

/// How long completed records are kept when a tool sets no `ttl`: one day.
pub const DEFAULT_TTL: Duration = Duration::from_secs(24 * 60 * 60);

/// How long a claim lasts before another caller may take over, when a tool sets no `lease`.
///
/// The engine renews the lease while the tool runs, so this bounds how long a crashed holder
/// blocks its key, not how long a tool may run.
pub const DEFAULT_LEASE: Duration = Duration::from_secs(30);

/// A fencing token: proof of holding the current claim on a key.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct LeaseToken(pub u64);

impl LeaseToken {
    /// A new token, unique within this process and random across processes.
    pub fn generate() -> LeaseToken {
        static SEED: LazyLock<u64> = LazyLock::new(|| {
            let mut hasher = blake3::Hasher::new();
            hasher.update(&std::process::id().to_le_bytes());
            let nanos = std::time::SystemTime::now()
                .duration_since(std::time::UNIX_EPOCH)
                .map_or(0, |d| d.as_nanos());
            hasher.update(&nanos.to_le_bytes());
            let local = 0u8;
            hasher.update(&(std::ptr::from_ref(&local) as usize).to_le_bytes());
            let mut seed = [0u8; 8];
            seed.copy_from_slice(&hasher.finalize().as_bytes()[..8]);
            u64::from_le_bytes(seed)
        });
        // Each thread takes its numbers from the shared counter a block at a time, so that
        // threads generating tokens at once rarely write the same cache line.
        const BLOCK: u64 = 1 << 16;
        static COUNTER: AtomicU64 = AtomicU64::new(0);
        thread_local! {
            static NEXT: std::cell::Cell<(u64, u64)> = const { std::cell::Cell::new((0, 0)) };
        }
        let take = || COUNTER.fetch_add(BLOCK, Ordering::Relaxed);
        let n = NEXT
            .try_with(|next| {
                let (mut n, mut end) = next.get();
                if n == end {
                    n = take();
                    end = n + BLOCK;
                }
                next.set((n + 1, end));
                n
            })
            .unwrap_or_else(|_| take());
        // splitmix64 is a bijection, so distinct counters give distinct tokens.
        let mut z = SEED.wrapping_add(n.wrapping_mul(0x9E37_79B9_7F4A_7C15));
        z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
        LeaseToken(z ^ (z >> 31))
    }
}

/// The shortest lease a tool may ask for: below it, store round trips and timer granularity
/// eat the whole lease and exclusion means nothing.
pub const MIN_LEASE: Duration = Duration::from_millis(10);

/// The longest lease a tool may ask for: a crashed holder blocks its key for at most this long.
pub const MAX_LEASE: Duration = Duration::from_secs(24 * 60 * 60);

/// How long a turn's budget counters are kept after their last charge, unless the turn says
/// otherwise ([`Turn::with_budget_window`](crate::Turn::with_budget_window)): one day.
pub const DEFAULT_BUDGET_WINDOW: Duration = Duration::from_secs(24 * 60 * 60);

/// A claim on a key: handed out by [`Store::begin`], taken by [`Store::renew`],
/// [`Store::complete`] and [`Store::release`].
///
/// The token is chosen by the caller *before* `begin` is sent ([`LeaseToken::generate`]), so a
/// caller that gives up on an unanswered `begin` can still give back a claim that did land.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub struct Lease {
    /// Tenant or namespace the key belongs to.
    pub namespace: Arc<str>,
    /// The idempotency key.
    pub key: Key,
    /// The fencing token of the claim.
    pub token: LeaseToken,
}

/// What a call charges to its turn's retry budget, atomically with its claim.
///
/// Counts belong to the turn's identity (namespace + turn id) in the store, not to a `Turn`
/// value: every process sharing the store shares them, and they outlive restarts with a
/// durable store. Each count expires `window` after its last charge.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Charge {
    /// The turn's identity: [`TurnIdentity::new`](budget::TurnIdentity::new) of the request's
    /// namespace and the turn id. It names the turn's counters.
    pub turn: budget::TurnIdentity,
    /// Which counter counts the attempts with the request's key in this turn.
    pub counter: KeyCounter,
    /// Attempts allowed with this key in this turn.
    pub max_attempts: u32,
    /// State-changing calls allowed in this turn, whatever their keys (`None`: no cap).
    pub max_calls: Option<u32>,
    /// How long counts are kept after their last charge.
    pub window: Duration,
}

impl Charge {
    /// The name of the counter of attempts with `key` in this turn: the key's first 16 bytes
    /// for [`KeyCounter::Key`], [`TurnIdentity::key_counter`](budget::TurnIdentity::key_counter)
    /// for [`KeyCounter::TurnAndKey`].
    pub fn key_counter(&self, key: &Key) -> budget::CounterId {
        match self.counter {
            KeyCounter::Key => {
                let mut id = [0; 16];
                id.copy_from_slice(&key.as_bytes()[..16]);
                id
            }
            KeyCounter::TurnAndKey => self.turn.key_counter(key),
        }
    }
}

/// Which counter counts the attempts with a key in a turn.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum KeyCounter {
    /// The key itself: it was derived from the turn id (the key of an `#[idempotent]` call
    /// without a caller-supplied key), so it already stands for one (turn, key) pair. A store
    /// may keep the count with the key's record.
    Key,
    /// The pair (turn, key), for a key that does not depend on the turn (a caller-supplied
    /// key, or one whose derivation is unknown).
    TurnAndKey,
}

/// What [`Store::begin`] is asked to claim.
#[derive(Debug, Clone, Copy)]
pub struct BeginRequest<'a> {
    /// Tenant or namespace the key belongs to (keys already commit to it).
    pub namespace: &'a str,
    /// The idempotency key.
    pub key: &'a Key,
    /// The tool's name, kept in the record for inspection.
    pub tool: &'a str,
    /// Digest of all arguments, to detect a key reused with different arguments.
    pub fingerprint: &'a Fingerprint,
    /// How long the claim lasts unless renewed.
    pub lease: Duration,
    /// The fencing token the claim gets if this request claims the key.
    pub token: LeaseToken,
    /// The attempt to charge to the turn's budget before anything else (`None`: charge
    /// nothing, e.g. when a call polls again for a key in flight elsewhere).
    pub charge: Option<Charge>,
}

/// The state of a stored record.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum RecordState {
    /// A caller holds a lease and is running the tool.
    InProgress,
    /// The tool finished; the record holds its encoded result.
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

/// One remembered key.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Record {
    /// Namespace the key belongs to.
    pub namespace: String,
    /// The idempotency key.
    pub key: Key,
    /// The tool that claimed the key.
    pub tool: String,
    /// In progress or completed.
    pub state: RecordState,
    /// Digest of the arguments of the call that claimed the key.
    pub fingerprint: Fingerprint,
    /// The encoded result; `Some` exactly when completed.
    pub result: Option<Vec<u8>>,
    /// When the key was first claimed (ms since the Unix epoch).
    pub created_at_ms: u64,
    /// When the record stops counting: the lease's end while in progress, the TTL's end once
    /// completed (ms since the Unix epoch). A record is live while `now < expires_at_ms`.
    pub expires_at_ms: u64,
}

/// Why [`Store::begin`] refused to charge the turn's budget.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Exhausted {
    /// This key was attempted `attempts` times in the turn (this one included), over `limit`.
    Key {
        /// Attempts with this key, this one included.
        attempts: u32,
        /// The per-key limit.
        limit: u32,
        /// Whether the key holds a completed record: the action already happened.
        completed: bool,
    },
    /// The turn made `calls` state-changing calls (this one included), over `limit`.
    Turn {
        /// Calls in the turn, this one included.
        calls: u32,
        /// The turn-wide limit.
        limit: u32,
    },
}

/// The answer of [`Store::begin`].
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Begin {
    /// The key was free (absent, expired, or its lease ran out): the caller now holds it with
    /// the request's token and must run the tool, then `complete` or `release` it.
    Claimed,
    /// The key was handled already: replay its first result.
    Completed(FirstResult),
    /// Another caller holds a live lease on the key; `fingerprint` is that call's.
    InFlight {
        /// Digest of the arguments of the call that holds the key.
        fingerprint: Fingerprint,
    },
    /// The charge was refused: nothing was claimed.
    Exhausted(Exhausted),
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
                result: ResultBytes::from(result),
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
    /// The encoded result (an in-memory store hands it out without allocating).
    pub result: ResultBytes,
}

/// A dedup store.
///
/// Implementations must make each method atomic with respect to the others for the same key:
/// of any number of concurrent `begin` calls on a free key exactly one returns
/// [`Begin::Claimed`]. `complete`, `renew` and `release` must fail with
/// [`Error::LeaseLost`](crate::Error::LeaseLost) unless the lease's token is the newest
/// claim's token — except that `complete` repeated with the token that completed the record
/// succeeds again without changing it (a retried `complete` whose first reply was lost).
/// Keys already commit to their namespace, so a store may index by key alone.
///
/// `begin` with a [`Charge`] first counts the attempt against the turn's budget, in the same
/// atomic step: past the per-key limit it answers [`Begin::Exhausted`] (saying whether the key
/// is completed) and claims nothing; past the turn-wide limit likewise, without counting the
/// attempt against the key. A refused per-key attempt does not count against the turn.
pub trait Store: Send + Sync + 'static {
    /// Charges `req.charge`, then claims `req.key` with `req.token`, or reports that it is
    /// completed or in flight.
    fn begin<'a>(&'a self, req: BeginRequest<'a>) -> StoreFuture<'a, Begin>;

    /// Extends `lease` to `duration` from now.
    fn renew<'a>(&'a self, lease: &'a Lease, duration: Duration) -> StoreFuture<'a, ()>;

    /// Stores `result` for the key held with `lease` and keeps it for `ttl`.
    fn complete<'a>(
        &'a self,
        lease: &'a Lease,
        result: &'a [u8],
        ttl: Duration,
    ) -> StoreFuture<'a, ()>;

    /// Gives up `lease`, so that a retry can run the tool.
    fn release<'a>(&'a self, lease: &'a Lease) -> StoreFuture<'a, ()>;

    /// The live (unexpired) record for a key, if any.
    fn get<'a>(&'a self, namespace: &'a str, key: &'a Key) -> StoreFuture<'a, Option<Record>>;

    /// Deletes expired records (and expired budget counts); returns how many records were
    /// deleted.
    fn purge_expired(&self) -> StoreFuture<'_, u64>;

    /// Admin: up to `limit` live records, optionally of one namespace, in no particular order.
    fn list<'a>(&'a self, namespace: Option<&'a str>, limit: usize)
    -> StoreFuture<'a, Vec<Record>>;

    /// Admin: deletes a record whatever its state; returns whether one existed.
    fn remove<'a>(&'a self, namespace: &'a str, key: &'a Key) -> StoreFuture<'a, bool>;

    /// Whether [`begin`](Store::begin) always answers at once ([`StoreFuture::ready`]), as an
    /// in-memory store does: the engine then takes the answer in the call's first poll
    /// without building the future of a call that waits. A store that says so and then
    /// returns a future that is not ready fails the call with a store error. Default: `false`.
    fn answers_at_once(&self) -> bool {
        false
    }
}

static DEFAULT_STORE: std::sync::OnceLock<Arc<dyn Store>> = std::sync::OnceLock::new();

/// The process-wide store used by tools and turns that name none: a [`MemoryStore`] unless
/// [`set_default_store`] chose another before first use.
pub fn default_store() -> &'static Arc<dyn Store> {
    DEFAULT_STORE.get_or_init(|| Arc::new(MemoryStore::new()))
}

/// Chooses the process-wide default store. Call it once at start-up, before any tool runs.
///
/// # Errors
/// [`Error::Config`](crate::Error::Config) if a default store was already chosen or used.
pub fn set_default_store(store: Arc<dyn Store>) -> Result<()> {
    DEFAULT_STORE.set(store).map_err(|_| {
        crate::Error::Config(
            "the default store was already set or used; call idem_tools::set_default_store once, \
             before the first tool call"
                .to_owned(),
        )
    })
}

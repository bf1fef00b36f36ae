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

pub mod conformance;
pub mod memory;
#[cfg(feature = "redis")]
pub mod redis;
#[cfg(feature = "sqlite")]
pub mod sqlite;

use std::future::Future;
use std::pin::Pin;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, LazyLock};
use std::time::Duration;

use crate::Result;
use crate::key::{Fingerprint, Key};

#[cfg(feature = "redis")]
pub use self::redis::RedisStore;
pub use memory::MemoryStore;
#[cfg(feature = "sqlite")]
pub use sqlite::SqliteStore;

/// The future returned by [`Store`] methods.
pub type StoreFuture<'a, T> = Pin<Box<dyn Future<Output = Result<T>> + Send + 'a>>;

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
        static COUNTER: AtomicU64 = AtomicU64::new(0);
        let n = COUNTER.fetch_add(1, Ordering::Relaxed);
        // splitmix64 is a bijection, so distinct counters give distinct tokens.
        let mut z = SEED.wrapping_add(n.wrapping_mul(0x9E37_79B9_7F4A_7C15));
        z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
        LeaseToken(z ^ (z >> 31))
    }
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
}

/// The state of a stored record.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum RecordState {
    /// A caller holds a lease and is running the tool.
    InProgress,
    /// The tool finished; the record holds its encoded result.
    Completed,
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
    /// completed (ms since the Unix epoch).
    pub expires_at_ms: u64,
}

/// The answer of [`Store::begin`].
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Begin {
    /// The key was free (absent, expired, or its lease ran out): the caller now holds it and
    /// must run the tool, then `complete` or `release` with this token.
    Claimed(LeaseToken),
    /// The key was handled already: replay this record.
    Completed(Record),
    /// Another caller holds a live lease on the key.
    InFlight(Record),
}

/// A dedup store.
///
/// Implementations must make each method atomic with respect to the others for the same key:
/// of any number of concurrent `begin` calls on a free key exactly one returns
/// [`Begin::Claimed`]. `complete`, `renew` and `release` must fail with
/// [`Error::LeaseLost`](crate::Error::LeaseLost) unless `token` is the newest claim's token.
/// Keys already commit to their namespace, so a store may index by key alone.
pub trait Store: Send + Sync + 'static {
    /// Claims `req.key`, or reports that it is completed or in flight.
    fn begin<'a>(&'a self, req: BeginRequest<'a>) -> StoreFuture<'a, Begin>;

    /// Extends the lease held with `token` to `lease` from now.
    fn renew<'a>(
        &'a self,
        namespace: &'a str,
        key: &'a Key,
        token: LeaseToken,
        lease: Duration,
    ) -> StoreFuture<'a, ()>;

    /// Stores `result` for the key held with `token` and keeps it for `ttl`.
    fn complete<'a>(
        &'a self,
        namespace: &'a str,
        key: &'a Key,
        token: LeaseToken,
        result: &'a [u8],
        ttl: Duration,
    ) -> StoreFuture<'a, ()>;

    /// Gives up the claim held with `token`, so that a retry can run the tool.
    fn release<'a>(
        &'a self,
        namespace: &'a str,
        key: &'a Key,
        token: LeaseToken,
    ) -> StoreFuture<'a, ()>;

    /// The live (unexpired) record for a key, if any.
    fn get<'a>(&'a self, namespace: &'a str, key: &'a Key) -> StoreFuture<'a, Option<Record>>;

    /// Deletes expired records; returns how many were deleted.
    fn purge_expired(&self) -> StoreFuture<'_, u64>;

    /// Admin: up to `limit` live records, optionally of one namespace, in no particular order.
    fn list<'a>(&'a self, namespace: Option<&'a str>, limit: usize)
    -> StoreFuture<'a, Vec<Record>>;

    /// Admin: deletes a record whatever its state; returns whether one existed.
    fn remove<'a>(&'a self, namespace: &'a str, key: &'a Key) -> StoreFuture<'a, bool>;
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
            "the default store was already set or used; call idem::set_default_store once, \
             before the first tool call"
                .to_owned(),
        )
    })
}

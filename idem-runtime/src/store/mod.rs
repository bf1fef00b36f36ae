//! Dedup stores: where handled keys, their first results and their attempt counts are kept.
//!
//! # The contract
//!
//! A [`Store`] keeps, per key (within its namespace), a small state machine and the id of the
//! turn that last claimed it, and per turn counts of started actions. Every invariant below is
//! checked by the conformance suite ([`conformance`], feature `conformance`); a store that
//! passes it works with the engine.
//!
//! ```text
//!              begin: charge, then claim                 complete (newest token)
//!   no record ───────────────────────────▶ in progress ─────────────────────────▶ completed
//!       ▲                                    │     │ renew (newest token)            │
//!       │   release (newest token)           │     ▼                                 │
//!       ├────────────────────────────────────┘   lease end: no record again          │
//!       └───────────────────────────────────────────────────────── TTL end ──────────┘
//! ```
//!
//! 1. **Atomic transitions.** Each method is atomic with respect to the others for the same key:
//!    of any number of concurrent `begin`s on a key with no live record, exactly one answers
//!    [`Begin::Claimed`] ([`conformance::concurrent_begins_claim_once`]).
//! 2. **A live record answers without charging or writing.** `begin` on a key whose record is
//!    live answers [`Begin::Completed`] with the first result, or [`Begin::InFlight`] with the
//!    holder's fingerprint, and changes nothing: a replay and a wait are reads
//!    ([`conformance::claim_complete_replay`], [`conformance::replays_and_waits_are_not_charged`]).
//! 3. **A claim is charged, atomically with it.** `begin` on a key with no live record applies
//!    the budget rule ([`budget::charge`]) to the key's attempt count and — for a new action
//!    ([`budget::is_new_action`]: no claim of the key by this turn since its last recorded
//!    result) — the turn's count of started actions (when the turn has a cap) and the tool's
//!    count of started actions in the turn (when the per-tool cap is set): refused, it answers
//!    [`Begin::Refused`] and changes nothing; allowed, it adds one to the key's count (and for
//!    a new action to each capped count) and claims the key with the request's token and lease
//!    ([`conformance::budget_counts_claims_per_key`], [`conformance::budget_caps_the_turn`],
//!    [`conformance::budget_caps_each_tool`],
//!    [`conformance::retries_are_not_new_actions`],
//!    [`conformance::budget_is_atomic_under_concurrency`],
//!    [`conformance::turn_cap_is_atomic_under_concurrency`]).
//! 4. **Counts.** A key's attempt count lives with the key and belongs to the turn that claimed
//!    it: a claim by another turn counts from 0 and makes the count its own
//!    ([`conformance::attempts_belong_to_the_claiming_turn`]). It survives `release` and the end
//!    of a lease, is reset to zero by `complete` (a recorded result ends a run of failures), and
//!    expires `window` after its last charge, as do a turn's and a tool's counts
//!    ([`conformance::budget_counts_expire`], [`conformance::complete_resets_the_attempts`]).
//! 5. **Fencing.** `renew`, `complete` and `release` act only for the newest claim's token on a
//!    live in-progress record, else fail with [`Error::LeaseLost`](crate::Error::LeaseLost) —
//!    except that `complete` repeated with the token that completed the record succeeds again
//!    without changing it (a retried `complete` whose first reply was lost)
//!    ([`conformance::stale_holder_is_fenced_off`], [`conformance::complete_is_idempotent`]).
//! 6. **Time.** A record is live while `now < expires_at_ms`: an in-progress record until its
//!    lease ends (`renew` moves that to `now + duration`), a completed one until its TTL ends.
//!    The boundary is exclusive in every store ([`conformance::expiry_boundary_is_exclusive`],
//!    [`conformance::lease_expiry_makes_the_key_claimable`],
//!    [`conformance::ttl_expiry_forgets_the_result`], [`conformance::renew_extends_the_lease`]).
//! 7. **Given back.** `release` removes the in-progress record (keeping the count), so the next
//!    `begin` claims the key; a claim whose `begin` reply was lost can be given back with the
//!    token chosen before sending ([`conformance::release_frees_the_key`],
//!    [`conformance::abandoned_claim_is_given_back`]).
//! 8. **Admin.** `get` and `list` show live records only (with their attempt counts and the id
//!    of the turn that claimed them); `list_turn` shows a turn's live records in the order they
//!    were claimed; `remove` deletes a key's record and its attempt count, whatever its state;
//!    `remove_shown` does so only if the key still holds the record shown (the same claim in
//!    the same state); `purge_expired` deletes what has expired
//!    ([`conformance::admin_list_and_remove`],
//!    [`conformance::remove_shown_deletes_only_what_was_shown`],
//!    [`conformance::records_carry_their_turn`], [`conformance::purge_deletes_expired_records`]).
//! 9. **Bytes.** Results are stored byte for byte, a mebibyte and more
//!    ([`conformance::large_results_round_trip`]); a record the backend cannot parse is an
//!    error, never a panic ([`conformance::corrupt_records_are_errors`]).
//!
//! Keys already commit to their namespace, so a store may index by key alone.

pub mod budget;
#[cfg(feature = "conformance")]
pub mod conformance;
pub mod holder;
pub mod memory;
#[cfg(feature = "postgres")]
pub mod postgres;
mod record;
#[cfg(feature = "redis")]
pub mod redis;
#[cfg(feature = "sqlite")]
pub mod sqlite;

use std::future::Future;
use std::pin::Pin;
use std::sync::{Arc, OnceLock};
use std::time::Duration;

use crate::Result;
use crate::key::{Fingerprint, Key};

#[cfg(feature = "redis")]
pub use self::redis::RedisStore;
pub use bytes::Bytes;
pub use memory::MemoryStore;
#[cfg(feature = "postgres")]
pub use postgres::PostgresStore;
pub use record::{Begin, Exhausted, FirstResult, Record, RecordState, Removed, in_claim_order};
#[cfg(feature = "sqlite")]
pub use sqlite::SqliteStore;

/// What every [`Store`] method returns: its answer — ready at once from a store that answers in
/// place, such as [`MemoryStore`] (nothing is allocated), or a boxed future of it.
///
/// ```
/// # extern crate idem_tools_runtime as idem_tools;
/// use idem_tools::store::StoreFuture;
///
/// let now: StoreFuture<'_, u64> = StoreFuture::ready(Ok(7));
/// let later: StoreFuture<'_, u64> = StoreFuture::new(async { Ok(7) });
/// # let _ = (now, later);
/// ```
#[must_use = "a store operation does nothing unless awaited"]
pub struct StoreFuture<'a, T>(Answering<'a, T>);

enum Answering<'a, T> {
    /// The answer, until it is taken.
    Ready(Option<Result<T>>),
    Later(Pin<Box<dyn Future<Output = Result<T>> + Send + 'a>>),
}

impl<'a, T> StoreFuture<'a, T> {
    /// An answer known now.
    pub fn ready(answer: Result<T>) -> Self {
        StoreFuture(Answering::Ready(Some(answer)))
    }

    /// An answer `future` gives (boxed).
    pub fn new(future: impl Future<Output = Result<T>> + Send + 'a) -> Self {
        StoreFuture(Answering::Later(Box::pin(future)))
    }

    /// The answer, if the store gave it at once (taken: the future is spent).
    pub(crate) fn answered_now(&mut self) -> Option<Result<T>> {
        match &mut self.0 {
            Answering::Ready(answer) => answer.take(),
            Answering::Later(_) => None,
        }
    }
}

impl<T> Future for StoreFuture<'_, T> {
    type Output = Result<T>;

    fn poll(
        mut self: Pin<&mut Self>,
        cx: &mut std::task::Context<'_>,
    ) -> std::task::Poll<Result<T>> {
        match &mut self.0 {
            Answering::Ready(answer) => {
                std::task::Poll::Ready(answer.take().unwrap_or_else(|| {
                    Err(crate::Error::store(
                        "store",
                        "an operation was polled after it answered",
                    ))
                }))
            }
            Answering::Later(future) => future.as_mut().poll(cx),
        }
    }
}

impl<T> Unpin for StoreFuture<'_, T> {}

impl<T> std::fmt::Debug for StoreFuture<'_, T> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let state = match &self.0 {
            Answering::Ready(_) => "ready",
            Answering::Later(_) => "later",
        };
        f.debug_tuple("StoreFuture").field(&state).finish()
    }
}

/// How long completed records are kept when a tool sets no `ttl`: one day.
pub const DEFAULT_TTL: Duration = Duration::from_secs(24 * 60 * 60);

/// How long a claim lasts before another caller may take over, when a tool sets no `lease`.
///
/// The engine renews the lease while the tool runs, so this bounds how long a crashed holder
/// blocks its key, not how long a tool may run.
pub const DEFAULT_LEASE: Duration = Duration::from_secs(30);

/// The shortest lease a tool may ask for: below it, store round trips and timer granularity
/// eat the whole lease and exclusion means nothing.
pub const MIN_LEASE: Duration = Duration::from_millis(10);

/// The longest lease a tool may ask for: a crashed holder blocks its key for at most this long.
pub const MAX_LEASE: Duration = Duration::from_secs(24 * 60 * 60);

/// How long a turn's budget counts are kept after their last charge, unless the turn says
/// otherwise ([`Turn::with_budget_window`](crate::Turn::with_budget_window)): one day.
pub const DEFAULT_BUDGET_WINDOW: Duration = Duration::from_secs(24 * 60 * 60);

/// The longest TTL, lease or budget window a store keeps (about a hundred years): a longer one
/// (up to `Duration::MAX`) is taken as this, on every store, so that `now + duration` fits
/// every store's clock.
pub const MAX_DURATION: Duration = Duration::from_secs(100 * 365 * 24 * 60 * 60);

/// A fencing token: proof of holding the newest claim on a key.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct LeaseToken(pub u64);

impl LeaseToken {
    /// A new random token (64 bits from a cryptographically seeded generator: two claims of one
    /// key draw the same token with probability 2⁻⁶⁴).
    pub fn generate() -> LeaseToken {
        LeaseToken(rand::random())
    }
}

/// A claim on a key: made by [`Store::begin`], taken by [`Store::renew`], [`Store::complete`]
/// and [`Store::release`].
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

/// What a claim charges to its turn's retry budget, atomically with it (see
/// [`budget::charge`] for the rule).
///
/// Counts belong to the turn's identity (namespace + turn id) and the key in the store, not to
/// a `Turn` value: every process sharing the store shares them, and they outlive restarts with
/// a durable store.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Charge {
    /// The turn's identity; [`TurnIdentity::turn_counter`](budget::TurnIdentity::turn_counter)
    /// names its count of started actions, and
    /// [`TurnIdentity::tool_counter`](budget::TurnIdentity::tool_counter) each tool's.
    pub turn: budget::TurnIdentity,
    /// Claims allowed for this key by this turn since its last recorded result.
    pub max_attempts: u32,
    /// New actions allowed in this turn, whatever their tools (`None`: no cap, and no turn
    /// count is kept).
    pub max_calls: Option<u32>,
    /// New actions allowed to this request's tool in this turn (`None`: no cap, and no tool
    /// count is kept).
    pub max_tool_actions: Option<u32>,
    /// How long counts are kept after their last charge.
    pub window: Duration,
}

impl Charge {
    /// A charge that refuses nothing (it still counts the key's attempts): for tools and tests
    /// that claim keys directly, outside any turn's budget.
    pub fn unlimited() -> Charge {
        Charge {
            turn: budget::TurnIdentity::new("", ""),
            max_attempts: u32::MAX,
            max_calls: None,
            max_tool_actions: None,
            window: DEFAULT_BUDGET_WINDOW,
        }
    }
}

/// What [`Store::begin`] is asked to claim.
#[derive(Debug, Clone, Copy)]
pub struct BeginRequest<'a> {
    /// Tenant or namespace the key belongs to (keys already commit to it).
    pub namespace: &'a str,
    /// The idempotency key.
    pub key: &'a Key,
    /// The tool's name, kept in the record for inspection; with the turn, it names the tool's
    /// count of started actions.
    pub tool: &'static str,
    /// The id of the turn making the request, kept in the record (a record belongs to the turn
    /// that last claimed it: its attempt count counts that turn's claims).
    pub turn: &'a str,
    /// Digest of all arguments, to detect a key reused with different arguments.
    pub fingerprint: &'a Fingerprint,
    /// How long the claim lasts unless renewed.
    pub lease: Duration,
    /// How long the result will be kept once recorded: a store that keeps an index of a turn's
    /// records apart from them keeps it at least this long past the claim.
    pub ttl: Duration,
    /// The fencing token the claim gets if this request claims the key.
    pub token: LeaseToken,
    /// What a claim charges (a request that finds a live record charges nothing); its
    /// [`turn`](Charge::turn) is the identity of `namespace` and `turn`.
    pub charge: Charge,
}

impl BeginRequest<'_> {
    /// The lease this request claims, if it claims its key.
    pub fn lease(&self) -> Lease {
        Lease {
            namespace: Arc::from(self.namespace),
            key: *self.key,
            token: self.token,
        }
    }
}

/// A dedup store: see [the contract](self#the-contract).
///
/// `Any` lets the engine find a particular store behind `Arc<dyn Store>` (transactional tools
/// need a `PostgresStore`).
pub trait Store: std::any::Any + Send + Sync + 'static {
    /// Answers a live record without charging (completed: its result; in progress: in
    /// flight), else charges `req.charge` and claims `req.key` with `req.token` — all in one
    /// atomic step.
    fn begin<'a>(&'a self, req: BeginRequest<'a>) -> StoreFuture<'a, Begin>;

    /// Extends `lease` to `duration` from now.
    fn renew<'a>(&'a self, lease: &'a Lease, duration: Duration) -> StoreFuture<'a, ()>;

    /// Stores `result` for the key held with `lease`, keeps it for `ttl`, and resets the key's
    /// attempt count.
    fn complete<'a>(
        &'a self,
        lease: &'a Lease,
        result: &'a [u8],
        ttl: Duration,
    ) -> StoreFuture<'a, ()>;

    /// Gives up `lease` (its attempt count stays), so that a retry can run the tool.
    fn release<'a>(&'a self, lease: &'a Lease) -> StoreFuture<'a, ()>;

    /// The live record of a key, if any.
    fn get<'a>(&'a self, namespace: &'a str, key: &'a Key) -> StoreFuture<'a, Option<Record>>;

    /// Deletes expired records and counts; returns how many records were deleted.
    fn purge_expired(&self) -> StoreFuture<'_, u64>;

    /// Admin: up to `limit` live records, optionally of one namespace, in no particular order.
    fn list<'a>(&'a self, namespace: Option<&'a str>, limit: usize)
    -> StoreFuture<'a, Vec<Record>>;

    /// Admin: up to `limit` live records of `namespace` claimed by turn `turn`, in the order
    /// they were claimed (oldest first; ties by key).
    ///
    /// The default reads every live record of the namespace through [`list`](Store::list) and
    /// keeps the turn's: correct, but as slow as the namespace is large. The stores of this
    /// crate find a turn's records through an index.
    fn list_turn<'a>(
        &'a self,
        namespace: &'a str,
        turn: &'a str,
        limit: usize,
    ) -> StoreFuture<'a, Vec<Record>> {
        StoreFuture::new(async move {
            let mut records = self.list(Some(namespace), usize::MAX).await?;
            records.retain(|r| r.turn == turn && r.namespace == namespace);
            Ok(in_claim_order(records, limit))
        })
    }

    /// Admin: deletes a key's record and its attempt count, whatever its state; returns
    /// whether a live record existed. The turn's count of started actions is kept.
    fn remove<'a>(&'a self, namespace: &'a str, key: &'a Key) -> StoreFuture<'a, bool>;

    /// Admin: deletes `shown` — a record as [`get`](Store::get) or [`list`](Store::list)
    /// showed it — with its key's attempt count, if the key still holds that record: the same
    /// claim (its claim time) in the same state, whatever its lease did meanwhile. A record
    /// that changed since (the claim completed, or the key was claimed again) is kept, so that
    /// an operator's confirmation never deletes a record they were not shown; a claim given
    /// back since ([`release`](Store::release)) left no record, and its attempt count is kept
    /// ([`Removed::Gone`]). The turn's count of started actions is kept.
    fn remove_shown<'a>(&'a self, shown: &'a Record) -> StoreFuture<'a, Removed>;
}

static DEFAULT_STORE: OnceLock<Arc<dyn Store>> = OnceLock::new();

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
            "the default store was already set or used; call idem_tools::set_default_store \
             once, before the first tool call"
                .to_owned(),
        )
    })
}

/// Whether `error` says the store did not answer in time (so a request it keeps may still run
/// later), rather than that it answered with a failure: a cause of a [`Error::Store`] is a
/// timeout of the store's client (an I/O timeout, PostgreSQL's reply or pool timeout, Redis's).
pub(crate) fn did_not_answer(error: &crate::Error) -> bool {
    let crate::Error::Store { source, .. } = error else {
        return false;
    };
    let mut cause: Option<&(dyn std::error::Error + 'static)> = Some(source.as_ref());
    while let Some(error) = cause {
        if let Some(io) = error.downcast_ref::<std::io::Error>()
            && io.kind() == std::io::ErrorKind::TimedOut
        {
            return true;
        }
        #[cfg(feature = "postgres")]
        if error.is::<postgres::conn::Unanswered>()
            || matches!(
                error.downcast_ref::<sqlx::Error>(),
                Some(sqlx::Error::PoolTimedOut)
            )
        {
            return true;
        }
        #[cfg(feature = "redis")]
        if let Some(redis) = error.downcast_ref::<::redis::RedisError>()
            && redis.is_timeout()
        {
            return true;
        }
        cause = error.source();
    }
    false
}

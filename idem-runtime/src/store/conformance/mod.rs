//! The store conformance suite: the behaviour every [`Store`] must show, as one test per property.
//!
//! Enable the `conformance` feature in your dev-dependencies and run [`run_all`] against your
//! store through a [`Harness`] that tells the suite how time passes for it. Each check is one
//! invariant of [the contract](super#the-contract); the suite talks to the store alone, not
//! through the engine:
//!
//! ```
//! # extern crate idem_tools_runtime as idem_tools;
//! use std::sync::Arc;
//! use std::time::Duration;
//! use idem_tools::clock::ManualClock;
//! use idem_tools::key::Key;
//! use idem_tools::store::conformance::{self, Harness};
//! use idem_tools::MemoryStore;
//! use idem_tools::store::{Store, StoreFuture};
//!
//! struct Memory {
//!     clock: ManualClock,
//!     store: Arc<dyn Store>,
//! }
//!
//! impl Harness for Memory {
//!     fn store(&self) -> Arc<dyn Store> {
//!         Arc::clone(&self.store)
//!     }
//!     fn short(&self) -> Duration {
//!         Duration::from_secs(30)
//!     }
//!     fn advance(&self, by: Duration) -> StoreFuture<'_, ()> {
//!         self.clock.advance(by);
//!         StoreFuture::ready(Ok(()))
//!     }
//!     fn corrupt<'a>(&'a self, _: &'a str, _: &'a Key) -> Option<StoreFuture<'a, ()>> {
//!         None // typed memory cannot hold a corrupt record
//!     }
//! }
//!
//! # #[tokio::main(flavor = "current_thread")] async fn main() {
//! let clock = ManualClock::new(1_000_000);
//! let store = Arc::new(MemoryStore::with_clock(Arc::new(clock.clone())));
//! conformance::run_all(&Memory { clock, store }).await;
//! # }
//! ```
//!
//! Every check uses fresh random keys, so a shared server can be used; a failing check panics
//! with the name of the property it broke.

mod actions;
mod admin;
mod budgets;
mod records;
mod turns;

use std::sync::Arc;
use std::time::Duration;

pub use actions::{
    attempts_belong_to_the_claiming_turn, budget_caps_each_tool, retries_are_not_new_actions,
};
pub use admin::{
    admin_list_and_remove, corrupt_records_are_errors, large_results_round_trip,
    purge_deletes_expired_records, remove_shown_deletes_only_what_was_shown,
};
pub use budgets::{
    budget_caps_the_turn, budget_counts_claims_per_key, budget_counts_expire,
    budget_is_atomic_under_concurrency, complete_resets_the_attempts, remove_resets_the_key,
    replays_and_waits_are_not_charged, turn_cap_is_atomic_under_concurrency,
};
pub use records::{
    abandoned_claim_is_given_back, claim_complete_replay, complete_is_idempotent,
    concurrent_begins_claim_once, expiry_boundary_is_exclusive, fingerprint_is_kept,
    lease_expiry_makes_the_key_claimable, longest_durations_are_taken, release_frees_the_key,
    renew_extends_the_lease, stale_holder_is_fenced_off, ttl_expiry_forgets_the_result,
};
pub use turns::records_carry_their_turn;

use super::budget::TurnIdentity;
use super::{Begin, BeginRequest, Charge, Lease, LeaseToken, Store, StoreFuture};
use crate::Error;
use crate::key::{Fingerprint, Key};

/// How the suite drives one store.
pub trait Harness: Send + Sync {
    /// The store under test. Called once per check; it may return the same store every time.
    fn store(&self) -> Arc<dyn Store>;

    /// A duration used for leases and TTLs in the checks: with a manual clock anything, with
    /// real time short enough to sleep through a few times (a few hundred milliseconds).
    fn short(&self) -> Duration;

    /// Lets `by` pass as the store sees time: advance a manual clock, or sleep.
    fn advance(&self, by: Duration) -> StoreFuture<'_, ()>;

    /// Overwrites the stored record of `key` with bytes the backend cannot parse, or `None` if
    /// the backend cannot hold a corrupt record.
    fn corrupt<'a>(&'a self, namespace: &'a str, key: &'a Key) -> Option<StoreFuture<'a, ()>>;

    /// Whether the backend deletes expired records by itself, so that
    /// [`Store::purge_expired`] may find nothing to delete.
    fn expires_by_itself(&self) -> bool {
        false
    }

    /// Whether [`Harness::advance`] moves the store's clock exactly (a manual clock), so that
    /// the expiry boundary can be checked to the millisecond.
    fn exact_time(&self) -> bool {
        false
    }
}

/// Runs every check.
pub async fn run_all(h: &impl Harness) {
    claim_complete_replay(h).await;
    release_frees_the_key(h).await;
    lease_expiry_makes_the_key_claimable(h).await;
    stale_holder_is_fenced_off(h).await;
    renew_extends_the_lease(h).await;
    ttl_expiry_forgets_the_result(h).await;
    longest_durations_are_taken(h).await;
    fingerprint_is_kept(h).await;
    concurrent_begins_claim_once(h).await;
    admin_list_and_remove(h).await;
    remove_shown_deletes_only_what_was_shown(h).await;
    purge_deletes_expired_records(h).await;
    large_results_round_trip(h).await;
    corrupt_records_are_errors(h).await;
    expiry_boundary_is_exclusive(h).await;
    abandoned_claim_is_given_back(h).await;
    complete_is_idempotent(h).await;
    replays_and_waits_are_not_charged(h).await;
    budget_counts_claims_per_key(h).await;
    complete_resets_the_attempts(h).await;
    budget_caps_the_turn(h).await;
    budget_caps_each_tool(h).await;
    retries_are_not_new_actions(h).await;
    attempts_belong_to_the_claiming_turn(h).await;
    budget_is_atomic_under_concurrency(h).await;
    turn_cap_is_atomic_under_concurrency(h).await;
    budget_counts_expire(h).await;
    remove_resets_the_key(h).await;
    records_carry_their_turn(h).await;
}

/// A key no other check or run uses.
pub fn fresh_key(label: &str) -> Key {
    let mut hasher = blake3::Hasher::new();
    hasher.update(label.as_bytes());
    hasher.update(&LeaseToken::generate().0.to_le_bytes());
    hasher.update(&std::process::id().to_le_bytes());
    Key::from_bytes(*hasher.finalize().as_bytes())
}

pub(super) fn fingerprint(label: &str) -> Fingerprint {
    Fingerprint::from_bytes(*blake3::hash(label.as_bytes()).as_bytes())
}

pub(super) const NS: &str = "conformance";

/// The namespace of the checks.
pub(super) fn ns() -> &'static Arc<str> {
    static NS_ARC: std::sync::LazyLock<Arc<str>> = std::sync::LazyLock::new(|| Arc::from(NS));
    &NS_ARC
}

/// The turn of the checks that need no turn of their own.
pub(super) const TURN: &str = "conformance-turn";

/// A charge that never refuses, in [`TURN`].
pub(super) fn generous() -> Charge {
    Charge {
        turn: TurnIdentity::new(NS, TURN),
        max_attempts: u32::MAX,
        max_calls: None,
        max_tool_actions: None,
        window: Duration::from_secs(3600),
    }
}

pub(super) fn request<'a>(key: &'a Key, fp: &'a Fingerprint, lease: Duration) -> BeginRequest<'a> {
    BeginRequest {
        namespace: NS,
        key,
        tool: "conformance_tool",
        turn: TURN,
        fingerprint: fp,
        lease,
        ttl: lease,
        token: LeaseToken::generate(),
        charge: generous(),
    }
}

/// The lease a request claims if it claims its key.
pub fn lease_of(req: &BeginRequest<'_>) -> Lease {
    req.lease()
}

pub(super) async fn claim(
    store: &dyn Store,
    key: &Key,
    fp: &Fingerprint,
    lease: Duration,
) -> Lease {
    let req = request(key, fp, lease);
    let held = lease_of(&req);
    match store.begin(req).await {
        Ok(Begin::Claimed) => held,
        other => panic!("begin on a free key must claim it, got {other:?}"),
    }
}

pub(super) fn stranger(key: &Key) -> Lease {
    Lease {
        namespace: Arc::clone(ns()),
        key: *key,
        token: LeaseToken::generate(),
    }
}

pub(super) async fn advance(h: &impl Harness, by: Duration) {
    if let Err(error) = h.advance(by).await {
        panic!("the harness could not advance time: {error}");
    }
}

pub(super) fn is_lease_lost<T: std::fmt::Debug>(result: &Result<T, Error>) -> bool {
    matches!(result, Err(Error::LeaseLost { .. }))
}

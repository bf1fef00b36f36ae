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
//! use idem_tools::store::{MemoryStore, Store, StoreFuture};
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
//!         Box::pin(async { Ok(()) })
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

use std::collections::HashSet;
use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::Duration;

use super::budget::TurnIdentity;
use super::{
    Begin, BeginRequest, Charge, Exhausted, Lease, LeaseToken, RecordState, Store, StoreFuture,
};
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
    fingerprint_is_kept(h).await;
    concurrent_begins_claim_once(h).await;
    admin_list_and_remove(h).await;
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
    budget_is_atomic_under_concurrency(h).await;
    turn_cap_is_atomic_under_concurrency(h).await;
    budget_counts_expire(h).await;
    remove_resets_the_key(h).await;
}

/// A key no other check or run uses.
pub fn fresh_key(label: &str) -> Key {
    let mut hasher = blake3::Hasher::new();
    hasher.update(label.as_bytes());
    hasher.update(&LeaseToken::generate().0.to_le_bytes());
    hasher.update(&std::process::id().to_le_bytes());
    Key::from_bytes(*hasher.finalize().as_bytes())
}

fn fingerprint(label: &str) -> Fingerprint {
    Fingerprint::from_bytes(*blake3::hash(label.as_bytes()).as_bytes())
}

const NS: &str = "conformance";

/// The namespace of the checks.
fn ns() -> &'static Arc<str> {
    static NS_ARC: std::sync::LazyLock<Arc<str>> = std::sync::LazyLock::new(|| Arc::from(NS));
    &NS_ARC
}

/// A charge that never refuses, in a turn of its own.
fn generous() -> Charge {
    Charge {
        turn: TurnIdentity::new(NS, &format!("turn-{}", LeaseToken::generate().0)),
        max_attempts: u32::MAX,
        max_calls: None,
        window: Duration::from_secs(3600),
    }
}

fn request<'a>(key: &'a Key, fp: &'a Fingerprint, lease: Duration) -> BeginRequest<'a> {
    BeginRequest {
        namespace: NS,
        key,
        tool: "conformance_tool",
        fingerprint: fp,
        lease,
        token: LeaseToken::generate(),
        charge: generous(),
    }
}

/// The lease a request claims if it claims its key.
pub fn lease_of(req: &BeginRequest<'_>) -> Lease {
    req.lease()
}

async fn claim(store: &dyn Store, key: &Key, fp: &Fingerprint, lease: Duration) -> Lease {
    let req = request(key, fp, lease);
    let held = lease_of(&req);
    match store.begin(req).await {
        Ok(Begin::Claimed) => held,
        other => panic!("begin on a free key must claim it, got {other:?}"),
    }
}

fn stranger(key: &Key) -> Lease {
    Lease {
        namespace: Arc::clone(ns()),
        key: *key,
        token: LeaseToken::generate(),
    }
}

async fn advance(h: &impl Harness, by: Duration) {
    if let Err(error) = h.advance(by).await {
        panic!("the harness could not advance time: {error}");
    }
}

fn is_lease_lost<T: std::fmt::Debug>(result: &Result<T, Error>) -> bool {
    matches!(result, Err(Error::LeaseLost { .. }))
}

/// begin claims a free key; a second begin sees it in flight; complete records the result and
/// later begins and gets replay it.
pub async fn claim_complete_replay(h: &impl Harness) {
    let store = h.store();
    let (key, fp) = (fresh_key("claim"), fingerprint("claim"));
    let lease = h.short() * 4;
    let token = claim(&*store, &key, &fp, lease).await;
    match store.begin(request(&key, &fp, lease)).await {
        Ok(Begin::InFlight { fingerprint }) => {
            assert_eq!(fingerprint, fp, "claim_complete_replay: fingerprint");
        }
        other => panic!("claim_complete_replay: a claimed key must be in flight, got {other:?}"),
    }
    match store.get(NS, &key).await {
        Ok(Some(record)) => {
            assert_eq!(
                record.state,
                RecordState::InProgress,
                "claim_complete_replay"
            );
            assert_eq!(record.key, key, "claim_complete_replay: key");
            assert_eq!(record.result, None, "claim_complete_replay: no result yet");
        }
        other => panic!("claim_complete_replay: get must show the claim, got {other:?}"),
    }
    store
        .complete(&token, b"{\"ok\":1}", lease)
        .await
        .expect("claim_complete_replay: complete with the current token");
    match store.begin(request(&key, &fp, lease)).await {
        Ok(Begin::Completed(first)) => {
            assert_eq!(
                &*first.result, b"{\"ok\":1}",
                "claim_complete_replay: result"
            );
            assert_eq!(first.fingerprint, fp, "claim_complete_replay: fingerprint");
        }
        other => panic!("claim_complete_replay: a completed key must replay, got {other:?}"),
    }
    match store.get(NS, &key).await {
        Ok(Some(record)) => {
            assert_eq!(
                record.state,
                RecordState::Completed,
                "claim_complete_replay"
            );
            assert_eq!(record.result.as_deref(), Some(&b"{\"ok\":1}"[..]));
            assert_eq!(record.tool, "conformance_tool");
            assert_eq!(record.namespace, NS);
        }
        other => panic!("claim_complete_replay: get must return the record, got {other:?}"),
    }
    store.complete(&token, b"{\"ok\":2}", lease).await.expect(
        "claim_complete_replay: complete repeated by its own lease (a lost reply) succeeds",
    );
    let kept = store
        .get(NS, &key)
        .await
        .expect("get")
        .and_then(|r| r.result);
    assert_eq!(
        kept,
        Some(b"{\"ok\":1}".to_vec()),
        "claim_complete_replay: a repeated complete must not change the recorded result"
    );
    let other = stranger(&key);
    let foreign = store.complete(&other, b"{\"ok\":3}", lease).await;
    assert!(
        is_lease_lost(&foreign),
        "claim_complete_replay: completing with another token must be refused, got {foreign:?}"
    );
    let unclaimed = fresh_key("never-claimed");
    let stray = store.complete(&stranger(&unclaimed), b"x", lease).await;
    assert!(
        is_lease_lost(&stray),
        "claim_complete_replay: completing an unclaimed key must be refused, got {stray:?}"
    );
}

/// release gives the key back: the next begin claims it.
pub async fn release_frees_the_key(h: &impl Harness) {
    let store = h.store();
    let (key, fp) = (fresh_key("release"), fingerprint("release"));
    let lease = h.short() * 4;
    let token = claim(&*store, &key, &fp, lease).await;
    store
        .release(&token)
        .await
        .expect("release_frees_the_key: release with the current token");
    assert_eq!(store.get(NS, &key).await.expect("get"), None);
    let again = claim(&*store, &key, &fp, lease).await;
    assert_ne!(
        again, token,
        "release_frees_the_key: a new claim gets a new token"
    );
}

/// An in-progress record whose lease ran out can be claimed by the next caller.
pub async fn lease_expiry_makes_the_key_claimable(h: &impl Harness) {
    let store = h.store();
    let (key, fp) = (fresh_key("lease"), fingerprint("lease"));
    let token = claim(&*store, &key, &fp, h.short()).await;
    advance(h, h.short() + h.short() / 2).await;
    let second = claim(&*store, &key, &fp, h.short() * 4).await;
    assert_ne!(
        second, token,
        "lease_expiry: the takeover must get a new token"
    );
}

/// A holder whose lease expired and was taken over cannot complete, renew or release.
pub async fn stale_holder_is_fenced_off(h: &impl Harness) {
    let store = h.store();
    let (key, fp) = (fresh_key("fencing"), fingerprint("fencing"));
    let stale = claim(&*store, &key, &fp, h.short()).await;
    advance(h, h.short() + h.short() / 2).await;
    let fresh = claim(&*store, &key, &fp, h.short() * 4).await;
    let late = store.complete(&stale, b"stale", h.short() * 4).await;
    assert!(
        is_lease_lost(&late),
        "fencing: stale complete must fail, got {late:?}"
    );
    let renew = store.renew(&stale, h.short() * 4).await;
    assert!(
        is_lease_lost(&renew),
        "fencing: stale renew must fail, got {renew:?}"
    );
    let release = store.release(&stale).await;
    assert!(
        is_lease_lost(&release),
        "fencing: stale release must fail, got {release:?}"
    );
    store
        .complete(&fresh, b"fresh", h.short() * 4)
        .await
        .expect("fencing: the current holder completes");
    let record = store.get(NS, &key).await.expect("get").expect("record");
    assert_eq!(
        record.result.as_deref(),
        Some(&b"fresh"[..]),
        "fencing: result"
    );
}

/// renew pushes the lease's end forward.
pub async fn renew_extends_the_lease(h: &impl Harness) {
    let store = h.store();
    let (key, fp) = (fresh_key("renew"), fingerprint("renew"));
    let lease = h.short() * 2;
    let token = claim(&*store, &key, &fp, lease).await;
    advance(h, h.short()).await;
    store
        .renew(&token, lease)
        .await
        .expect("renew: the holder renews");
    advance(h, h.short() + h.short() / 2).await;
    match store.begin(request(&key, &fp, lease)).await {
        Ok(Begin::InFlight { .. }) => {}
        other => panic!("renew: the renewed lease must still hold, got {other:?}"),
    }
    store
        .complete(&token, b"done", lease)
        .await
        .expect("renew: the holder still completes");
}

/// A completed record is forgotten after its TTL: the key runs again.
pub async fn ttl_expiry_forgets_the_result(h: &impl Harness) {
    let store = h.store();
    let (key, fp) = (fresh_key("ttl"), fingerprint("ttl"));
    let token = claim(&*store, &key, &fp, h.short() * 4).await;
    store
        .complete(&token, b"once", h.short())
        .await
        .expect("ttl: complete");
    assert!(store.get(NS, &key).await.expect("get").is_some());
    advance(h, h.short() + h.short() / 2).await;
    assert_eq!(
        store.get(NS, &key).await.expect("get"),
        None,
        "ttl: expired record is gone"
    );
    claim(&*store, &key, &fp, h.short()).await;
}

/// The fingerprint of the claiming call is kept, so a reuse with other arguments is detected.
pub async fn fingerprint_is_kept(h: &impl Harness) {
    let store = h.store();
    let key = fresh_key("fingerprint");
    let (first, other) = (fingerprint("first args"), fingerprint("other args"));
    let lease = h.short() * 4;
    let token = claim(&*store, &key, &first, lease).await;
    store.complete(&token, b"r", lease).await.expect("complete");
    match store.begin(request(&key, &other, lease)).await {
        Ok(Begin::Completed(recorded)) => assert_eq!(recorded.fingerprint, first, "fingerprint"),
        other => panic!("fingerprint: expected the completed record, got {other:?}"),
    }
}

/// Of many concurrent begins on one free key, exactly one claims it.
pub async fn concurrent_begins_claim_once(h: &impl Harness) {
    let store = h.store();
    for round in 0..4 {
        let key = fresh_key(&format!("storm {round}"));
        let fp = fingerprint("storm");
        let lease = h.short() * 4;
        let mut tasks = Vec::new();
        for _ in 0..64 {
            let store = Arc::clone(&store);
            tasks.push(tokio::spawn(async move {
                let fp = fp;
                matches!(
                    store.begin(request(&key, &fp, lease)).await,
                    Ok(Begin::Claimed)
                )
            }));
        }
        let mut claimed = 0;
        for task in tasks {
            claimed += usize::from(task.await.expect("begin task"));
        }
        assert_eq!(
            claimed, 1,
            "concurrent_begins: exactly one of 64 begins claims"
        );
    }
}

/// list shows live records (filtered by namespace); remove deletes one.
pub async fn admin_list_and_remove(h: &impl Harness) {
    let store = h.store();
    let namespace = format!("admin-{}", LeaseToken::generate().0);
    let lease = h.short() * 4;
    let fp = fingerprint("admin");
    let mut keys = HashSet::new();
    for i in 0..3 {
        let key = fresh_key(&format!("admin {i}"));
        let req = BeginRequest {
            namespace: &namespace,
            ..request(&key, &fp, lease)
        };
        let token = lease_of(&req);
        let Ok(Begin::Claimed) = store.begin(req).await else {
            panic!("admin: claim");
        };
        if i > 0 {
            store
                .complete(&token, b"r", lease)
                .await
                .expect("admin: complete");
        }
        keys.insert(key);
    }
    let listed = store.list(Some(&namespace), 100).await.expect("list");
    let listed_keys: HashSet<Key> = listed.iter().map(|r| r.key).collect();
    assert_eq!(
        listed_keys, keys,
        "admin: list shows the namespace's records"
    );
    assert!(listed.iter().all(|r| r.namespace == namespace));
    let limited = store.list(Some(&namespace), 2).await.expect("list");
    assert_eq!(limited.len(), 2, "admin: list honours its limit");
    let victim = *keys.iter().next().expect("a key");
    assert!(store.remove(&namespace, &victim).await.expect("remove"));
    assert!(
        !store
            .remove(&namespace, &victim)
            .await
            .expect("remove twice")
    );
    assert_eq!(store.get(&namespace, &victim).await.expect("get"), None);
    assert_eq!(
        store.list(Some(&namespace), 100).await.expect("list").len(),
        2
    );
}

/// purge_expired deletes expired records and leaves live ones.
pub async fn purge_deletes_expired_records(h: &impl Harness) {
    let store = h.store();
    let fp = fingerprint("purge");
    let (old, live) = (fresh_key("purge old"), fresh_key("purge live"));
    let token = claim(&*store, &old, &fp, h.short() * 4).await;
    store
        .complete(&token, b"r", h.short())
        .await
        .expect("complete");
    let token = claim(&*store, &live, &fp, h.short() * 40).await;
    store
        .complete(&token, b"r", h.short() * 40)
        .await
        .expect("complete");
    advance(h, h.short() * 2).await;
    let purged = store.purge_expired().await.expect("purge");
    if !h.expires_by_itself() {
        assert!(purged >= 1, "purge: at least the expired record is deleted");
    }
    assert_eq!(store.get(NS, &old).await.expect("get"), None);
    assert!(
        store.get(NS, &live).await.expect("get").is_some(),
        "purge kept a live record"
    );
}

/// Results of a mebibyte and more are stored and returned byte for byte.
pub async fn large_results_round_trip(h: &impl Harness) {
    let store = h.store();
    let (key, fp) = (fresh_key("large"), fingerprint("large"));
    let lease = h.short() * 4;
    let big: Vec<u8> = (0..(1 << 20) + 12_345)
        .map(|i: u32| (i % 251) as u8)
        .collect();
    let token = claim(&*store, &key, &fp, lease).await;
    store
        .complete(&token, &big, lease)
        .await
        .expect("complete large");
    match store.begin(request(&key, &fp, lease)).await {
        Ok(Begin::Completed(recorded)) => assert!(*recorded.result == big[..]),
        other => panic!("large: expected completed, got {:?}", other.map(|_| ())),
    }
}

/// A record the backend cannot parse is an error from begin and get, never a panic.
pub async fn corrupt_records_are_errors(h: &impl Harness) {
    let store = h.store();
    let (key, fp) = (fresh_key("corrupt"), fingerprint("corrupt"));
    let lease = h.short() * 4;
    let token = claim(&*store, &key, &fp, lease).await;
    store.complete(&token, b"r", lease).await.expect("complete");
    let Some(corrupt) = h.corrupt(NS, &key) else {
        return;
    };
    corrupt.await.expect("the harness corrupts the record");
    let begin = store.begin(request(&key, &fp, lease)).await;
    assert!(
        matches!(
            begin,
            Err(Error::CorruptRecord { .. } | Error::Store { .. })
        ),
        "corrupt: begin must report the corruption, got {begin:?}"
    );
    let get = store.get(NS, &key).await;
    assert!(
        get.is_err(),
        "corrupt: get must report the corruption, got {get:?}"
    );
}

/// A record is live while `now < expires_at_ms`, and gone at `expires_at_ms` exactly — the
/// same boundary in every store.
pub async fn expiry_boundary_is_exclusive(h: &impl Harness) {
    if !h.exact_time() {
        return;
    }
    let store = h.store();
    let (key, fp) = (fresh_key("boundary"), fingerprint("boundary"));
    let lease = claim(&*store, &key, &fp, h.short() * 4).await;
    store
        .complete(&lease, b"r", h.short())
        .await
        .expect("complete");
    let record = store.get(NS, &key).await.expect("get").expect("live");
    let until = record.expires_at_ms - record.created_at_ms;
    advance(h, Duration::from_millis(until.saturating_sub(1))).await;
    assert!(
        store.get(NS, &key).await.expect("get").is_some(),
        "boundary: a record is live 1 ms before its expiry"
    );
    advance(h, Duration::from_millis(1)).await;
    assert_eq!(
        store.get(NS, &key).await.expect("get"),
        None,
        "boundary: a record is gone at its expiry"
    );
}

/// A claim whose `begin` reply never reached the caller is given back with the token chosen
/// before sending: the key is free again at once.
pub async fn abandoned_claim_is_given_back(h: &impl Harness) {
    let store = h.store();
    let (key, fp) = (fresh_key("abandoned"), fingerprint("abandoned"));
    let req = request(&key, &fp, h.short() * 40);
    let lease = lease_of(&req);
    let _lost_reply = store.begin(req).await;
    store
        .release(&lease)
        .await
        .expect("abandoned: release with the pre-chosen token");
    claim(&*store, &key, &fp, h.short() * 4).await;
}

/// `complete` repeated by the lease that completed the record (its first reply was lost)
/// succeeds again and changes nothing; by any other token it is refused.
pub async fn complete_is_idempotent(h: &impl Harness) {
    let store = h.store();
    let (key, fp) = (fresh_key("repeat"), fingerprint("repeat"));
    let lease = h.short() * 4;
    let token = claim(&*store, &key, &fp, lease).await;
    store
        .complete(&token, b"first", lease)
        .await
        .expect("complete");
    store
        .complete(&token, b"second", lease)
        .await
        .expect("complete_is_idempotent: a repeated complete by its own lease succeeds");
    let kept = store
        .get(NS, &key)
        .await
        .expect("get")
        .and_then(|r| r.result);
    assert_eq!(
        kept.as_deref(),
        Some(&b"first"[..]),
        "complete_is_idempotent: the recorded result is unchanged"
    );
    let foreign = store.complete(&stranger(&key), b"third", lease).await;
    assert!(
        is_lease_lost(&foreign),
        "complete_is_idempotent: another token is refused, got {foreign:?}"
    );
}

/// A request charging `max_attempts` per key and `max_calls` per turn `turn`.
fn charged<'a>(
    key: &'a Key,
    fp: &'a Fingerprint,
    turn: &str,
    max_attempts: u32,
    max_calls: Option<u32>,
    window: Duration,
) -> BeginRequest<'a> {
    BeginRequest {
        charge: Charge {
            turn: TurnIdentity::new(NS, turn),
            max_attempts,
            max_calls,
            window,
        },
        ..request(key, fp, window)
    }
}

/// A turn id no other check or run uses.
fn fresh_turn(label: &str) -> String {
    format!("{label}-{}", LeaseToken::generate().0)
}

/// A `begin` that finds a live record — completed or in flight — charges nothing, even past
/// every limit: a replay and a wait always get the true answer.
pub async fn replays_and_waits_are_not_charged(h: &impl Harness) {
    let store = h.store();
    let turn = fresh_turn("free");
    let window = h.short() * 40;
    let (done, busy) = (fresh_key("free done"), fresh_key("free busy"));
    let fp = fingerprint("free");
    let claim_one = |key| charged(key, &fp, &turn, 1, Some(2), window);
    let req = claim_one(&done);
    let token = lease_of(&req);
    assert_eq!(
        store.begin(req).await.ok(),
        Some(Begin::Claimed),
        "free: claim"
    );
    store
        .complete(&token, b"r", window)
        .await
        .expect("complete");
    assert_eq!(
        store.begin(claim_one(&busy)).await.ok(),
        Some(Begin::Claimed),
        "free: the second action is within the turn's cap"
    );
    for _ in 0..5 {
        match store.begin(claim_one(&done)).await {
            Ok(Begin::Completed(first)) => assert_eq!(&*first.result, b"r"),
            other => panic!("free: a replay is never refused or charged, got {other:?}"),
        }
        match store.begin(claim_one(&busy)).await {
            Ok(Begin::InFlight { .. }) => {}
            other => panic!("free: a wait is never refused or charged, got {other:?}"),
        }
    }
    let record = store.get(NS, &busy).await.expect("get").expect("in flight");
    assert_eq!(record.attempts, 1, "free: waiting added no attempt");
    let third = fresh_key("free third");
    match store.begin(claim_one(&third)).await {
        Ok(Begin::Refused(Exhausted::Turn { calls: 2, limit: 2 })) => {}
        other => panic!("free: the turn counted the two claims only, got {other:?}"),
    }
}

/// Each claim is one attempt with its key; `release` keeps the count; past the limit a claim
/// is refused (saying how many attempts were made) and nothing is claimed or counted; another
/// key counts apart.
pub async fn budget_counts_claims_per_key(h: &impl Harness) {
    let store = h.store();
    let turn = fresh_turn("per-key");
    let (key, other) = (fresh_key("per-key"), fresh_key("per-key other"));
    let fp = fingerprint("per-key");
    let window = h.short() * 40;
    for attempt in 1..=3 {
        let req = charged(&key, &fp, &turn, 3, None, window);
        let token = lease_of(&req);
        assert_eq!(
            store.begin(req).await.ok(),
            Some(Begin::Claimed),
            "per-key: attempt {attempt} of 3 claims"
        );
        let record = store.get(NS, &key).await.expect("get").expect("claimed");
        assert_eq!(
            record.attempts, attempt,
            "per-key: the record counts its claims"
        );
        store.release(&token).await.expect("per-key: release");
    }
    for _ in 0..2 {
        match store
            .begin(charged(&key, &fp, &turn, 3, None, window))
            .await
        {
            Ok(Begin::Refused(Exhausted::Key {
                attempts: 3,
                limit: 3,
            })) => {}
            other => panic!("per-key: the 4th claim is refused after 3 attempts, got {other:?}"),
        }
    }
    assert_eq!(
        store.get(NS, &key).await.expect("get"),
        None,
        "per-key: a refusal claims nothing"
    );
    assert_eq!(
        store
            .begin(charged(&other, &fp, &turn, 3, None, window))
            .await
            .ok(),
        Some(Begin::Claimed),
        "per-key: another key counts apart"
    );
}

/// A recorded result resets its key's attempt count: once its record expires, the key may be
/// attempted `limit` times again.
pub async fn complete_resets_the_attempts(h: &impl Harness) {
    let store = h.store();
    let turn = fresh_turn("reset");
    let (key, fp) = (fresh_key("reset"), fingerprint("reset"));
    let window = h.short() * 40;
    let req = charged(&key, &fp, &turn, 2, None, window);
    let token = lease_of(&req);
    assert_eq!(store.begin(req).await.ok(), Some(Begin::Claimed));
    store.release(&token).await.expect("release");
    let req = charged(&key, &fp, &turn, 2, None, window);
    let token = lease_of(&req);
    assert_eq!(
        store.begin(req).await.ok(),
        Some(Begin::Claimed),
        "reset: 2nd of 2"
    );
    store
        .complete(&token, b"r", h.short())
        .await
        .expect("complete");
    let record = store.get(NS, &key).await.expect("get").expect("completed");
    assert_eq!(
        record.attempts, 0,
        "reset: a recorded result resets the count"
    );
    advance(h, h.short() * 2).await;
    for attempt in 1..=2 {
        let req = charged(&key, &fp, &turn, 2, None, window);
        let token = lease_of(&req);
        assert_eq!(
            store.begin(req).await.ok(),
            Some(Begin::Claimed),
            "reset: attempt {attempt} after the record expired"
        );
        store.release(&token).await.expect("release");
    }
    match store
        .begin(charged(&key, &fp, &turn, 2, None, window))
        .await
    {
        Ok(Begin::Refused(Exhausted::Key {
            attempts: 2,
            limit: 2,
        })) => {}
        other => panic!("reset: refused after 2 more attempts, got {other:?}"),
    }
}

/// The turn-wide cap counts claims of every key; a claim refused by its per-key limit does not
/// count against it, nor does a refused one.
pub async fn budget_caps_the_turn(h: &impl Harness) {
    let store = h.store();
    let turn = fresh_turn("turn-cap");
    let fp = fingerprint("turn-cap");
    let window = h.short() * 40;
    let spent = fresh_key("turn-cap spent");
    let req = charged(&spent, &fp, &turn, 1, Some(3), window);
    let token = lease_of(&req);
    assert_eq!(store.begin(req).await.ok(), Some(Begin::Claimed));
    store.release(&token).await.expect("release");
    match store
        .begin(charged(&spent, &fp, &turn, 1, Some(3), window))
        .await
    {
        Ok(Begin::Refused(Exhausted::Key { .. })) => {}
        other => panic!("turn-cap: the per-key limit refuses first, got {other:?}"),
    }
    for i in 0..2 {
        let key = fresh_key(&format!("turn-cap {i}"));
        assert_eq!(
            store
                .begin(charged(&key, &fp, &turn, 1, Some(3), window))
                .await
                .ok(),
            Some(Begin::Claimed),
            "turn-cap: claims {} of 3",
            i + 2
        );
    }
    for _ in 0..2 {
        let key = fresh_key("turn-cap over");
        match store
            .begin(charged(&key, &fp, &turn, 1, Some(3), window))
            .await
        {
            Ok(Begin::Refused(Exhausted::Turn { calls: 3, limit: 3 })) => {}
            other => panic!("turn-cap: the 4th action is refused after 3, got {other:?}"),
        }
    }
    let elsewhere = fresh_turn("turn-cap other");
    let key = fresh_key("turn-cap other");
    assert_eq!(
        store
            .begin(charged(&key, &fp, &elsewhere, 1, Some(3), window))
            .await
            .ok(),
        Some(Begin::Claimed),
        "turn-cap: another turn counts apart"
    );
}

/// Of many concurrent charged `begin`s with one key, each released after it claims, exactly
/// `limit` claim.
pub async fn budget_is_atomic_under_concurrency(h: &impl Harness) {
    let store = h.store();
    let turn = fresh_turn("atomic");
    let (key, fp) = (fresh_key("atomic"), fingerprint("atomic"));
    let window = h.short() * 40;
    let claimed = Arc::new(AtomicUsize::new(0));
    let mut tasks = Vec::new();
    for _ in 0..32 {
        let (store, claimed, turn) = (Arc::clone(&store), Arc::clone(&claimed), turn.clone());
        tasks.push(tokio::spawn(async move {
            let fp = fp;
            let req = charged(&key, &fp, &turn, 5, None, window);
            let token = lease_of(&req);
            if let Ok(Begin::Claimed) = store.begin(req).await {
                claimed.fetch_add(1, Ordering::SeqCst);
                store.release(&token).await.expect("release");
            }
        }));
    }
    for task in tasks {
        task.await.expect("task");
    }
    // Concurrent begins that found the key claimed saw it in flight; ask until refused.
    loop {
        let req = charged(&key, &fp, &turn, 5, None, window);
        let token = lease_of(&req);
        match store.begin(req).await {
            Ok(Begin::Claimed) => {
                claimed.fetch_add(1, Ordering::SeqCst);
                store.release(&token).await.expect("release");
            }
            Ok(Begin::Refused(_)) => break,
            other => panic!("atomic: unexpected {other:?}"),
        }
    }
    assert_eq!(
        claimed.load(Ordering::SeqCst),
        5,
        "atomic: exactly the limit of claims"
    );
}

/// Many concurrent claims of different keys in one turn with a cap: exactly the cap claim.
pub async fn turn_cap_is_atomic_under_concurrency(h: &impl Harness) {
    let store = h.store();
    let turn = fresh_turn("turn-atomic");
    let fp = fingerprint("turn-atomic");
    let window = h.short() * 40;
    let claimed = Arc::new(AtomicUsize::new(0));
    let mut tasks = Vec::new();
    for i in 0..48 {
        let (store, claimed, turn) = (Arc::clone(&store), Arc::clone(&claimed), turn.clone());
        tasks.push(tokio::spawn(async move {
            let key = fresh_key(&format!("turn-atomic {i}"));
            let fp = fp;
            match store
                .begin(charged(&key, &fp, &turn, 3, Some(7), window))
                .await
            {
                Ok(Begin::Claimed) => {
                    claimed.fetch_add(1, Ordering::SeqCst);
                }
                Ok(Begin::Refused(Exhausted::Turn { limit: 7, .. })) => {}
                other => panic!("turn-atomic: unexpected {other:?}"),
            }
        }));
    }
    for task in tasks {
        task.await.expect("task");
    }
    assert_eq!(
        claimed.load(Ordering::SeqCst),
        7,
        "turn-atomic: exactly the turn's cap of concurrent claims"
    );
}

/// Counts expire `window` after their last charge: the key and the turn may claim again.
pub async fn budget_counts_expire(h: &impl Harness) {
    let store = h.store();
    let turn = fresh_turn("expire");
    let (key, fp) = (fresh_key("expire"), fingerprint("expire"));
    let window = h.short();
    let req = charged(&key, &fp, &turn, 1, Some(1), window);
    let token = lease_of(&req);
    assert_eq!(store.begin(req).await.ok(), Some(Begin::Claimed));
    store.release(&token).await.expect("release");
    match store
        .begin(charged(&key, &fp, &turn, 1, Some(1), window))
        .await
    {
        Ok(Begin::Refused(_)) => {}
        other => panic!("expire: refused within the window, got {other:?}"),
    }
    advance(h, window + window / 2).await;
    assert_eq!(
        store
            .begin(charged(&key, &fp, &turn, 1, Some(1), window))
            .await
            .ok(),
        Some(Begin::Claimed),
        "expire: counts are forgotten after their window"
    );
}

/// `remove` deletes a key's record and its attempt count: the next claim is its first attempt.
pub async fn remove_resets_the_key(h: &impl Harness) {
    let store = h.store();
    let turn = fresh_turn("remove");
    let (key, fp) = (fresh_key("remove"), fingerprint("remove"));
    let window = h.short() * 40;
    let req = charged(&key, &fp, &turn, 1, None, window);
    let token = lease_of(&req);
    assert_eq!(store.begin(req).await.ok(), Some(Begin::Claimed));
    store.release(&token).await.expect("release");
    match store
        .begin(charged(&key, &fp, &turn, 1, None, window))
        .await
    {
        Ok(Begin::Refused(_)) => {}
        other => panic!("remove: refused before the remove, got {other:?}"),
    }
    let req = charged(&key, &fp, &turn, 1, None, window);
    assert!(
        !store.remove(NS, &key).await.expect("remove"),
        "remove: no live record to report"
    );
    assert_eq!(
        store.begin(req).await.ok(),
        Some(Begin::Claimed),
        "remove: the key is runnable again"
    );
    assert!(
        store.remove(NS, &key).await.expect("remove"),
        "remove: a live record"
    );
    assert_eq!(store.get(NS, &key).await.expect("get"), None);
}

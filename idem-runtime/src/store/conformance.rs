//! The store conformance suite: the behaviour every [`Store`] must show, as one test per property.
//!
//! Enable the `conformance` feature in your dev-dependencies and run [`run_all`] against your
//! store through a [`Harness`] that tells the suite how time passes for it:
//!
//! ```
//! use std::sync::Arc;
//! use std::time::Duration;
//! use idem_tools_runtime::clock::ManualClock;
//! use idem_tools_runtime::key::Key;
//! use idem_tools_runtime::store::conformance::{self, Harness};
//! use idem_tools_runtime::store::{MemoryStore, Store, StoreFuture};
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
//!         StoreFuture::new(async { Ok(()) })
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
    Begin, BeginRequest, Charge, Exhausted, KeyCounter, Lease, LeaseToken, RecordState, Store,
    StoreFuture,
};
use crate::key::{Fingerprint, Key};
use crate::{Call, Error, ToolInfo, Turn, execute};

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
    budget_counts_attempts_per_key(h).await;
    budget_says_whether_the_key_completed(h).await;
    budget_caps_the_turn(h).await;
    budget_is_atomic_under_concurrency(h).await;
    budget_counts_expire(h).await;
    engine_executes_once(h).await;
    engine_budget_follows_the_turn_id(h).await;
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

fn request<'a>(key: &'a Key, fp: &'a Fingerprint, lease: Duration) -> BeginRequest<'a> {
    BeginRequest {
        namespace: NS,
        key,
        tool: "conformance_tool",
        fingerprint: fp,
        lease,
        token: LeaseToken::generate(),
        charge: None,
    }
}

/// The lease a request claims if it claims its key.
pub fn lease_of(req: &BeginRequest<'_>) -> Lease {
    Lease {
        namespace: Arc::from(req.namespace),
        key: *req.key,
        token: req.token,
    }
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
        namespace: Arc::from(NS),
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

/// Both ways a store may be asked to name a key's attempt counter.
const COUNTERS: [KeyCounter; 2] = [KeyCounter::Key, KeyCounter::TurnAndKey];

fn charged<'a>(
    key: &'a Key,
    fp: &'a Fingerprint,
    turn: &'a str,
    max_attempts: u32,
    max_calls: Option<u32>,
    window: Duration,
) -> BeginRequest<'a> {
    charged_by(
        KeyCounter::TurnAndKey,
        key,
        fp,
        turn,
        max_attempts,
        max_calls,
        window,
    )
}

fn charged_by<'a>(
    counter: KeyCounter,
    key: &'a Key,
    fp: &'a Fingerprint,
    turn: &'a str,
    max_attempts: u32,
    max_calls: Option<u32>,
    window: Duration,
) -> BeginRequest<'a> {
    BeginRequest {
        charge: Some(Charge {
            turn: TurnIdentity::new(NS, turn),
            counter,
            max_attempts,
            max_calls,
            window,
        }),
        ..request(key, fp, window)
    }
}

/// Each charged `begin` is one attempt with its key in its turn; past the limit it is refused
/// without claiming; an uncharged `begin` (a poll) counts nothing; another turn counts apart.
///
/// Checked with both [`KeyCounter`]s.
pub async fn budget_counts_attempts_per_key(h: &impl Harness) {
    for counter in COUNTERS {
        budget_counts_attempts_per_key_by(h, counter).await;
    }
}

async fn budget_counts_attempts_per_key_by(h: &impl Harness, counter: KeyCounter) {
    let store = h.store();
    let (key, fp) = (fresh_key("budget"), fingerprint("budget"));
    let turn = format!("turn-{}", LeaseToken::generate().0);
    let window = h.short() * 40;
    let first = charged_by(counter, &key, &fp, &turn, 2, None, window);
    let lease = lease_of(&first);
    assert_eq!(store.begin(first).await.expect("begin"), Begin::Claimed);
    store.release(&lease).await.expect("release");
    for _ in 0..3 {
        let poll = request(&key, &fp, window);
        let poll_lease = lease_of(&poll);
        assert_eq!(
            store.begin(poll).await.expect("poll"),
            Begin::Claimed,
            "budget: an uncharged begin is not refused"
        );
        store.release(&poll_lease).await.expect("release");
    }
    let second = charged_by(counter, &key, &fp, &turn, 2, None, window);
    let lease = lease_of(&second);
    assert_eq!(store.begin(second).await.expect("begin"), Begin::Claimed);
    store.release(&lease).await.expect("release");
    for attempts in 3..5 {
        match store
            .begin(charged_by(counter, &key, &fp, &turn, 2, None, window))
            .await
        {
            Ok(Begin::Exhausted(Exhausted::Key {
                attempts: got,
                limit: 2,
                completed: false,
            })) => assert_eq!(got, attempts, "budget: the refusal counts honestly"),
            other => panic!("budget: attempt {attempts} of 2 must be refused, got {other:?}"),
        }
    }
    assert_eq!(
        store.get(NS, &key).await.expect("get"),
        None,
        "budget: a refused begin claims nothing"
    );
    // A key counted by itself stands for one turn: only a pair-counted key meets another
    // turn. Another key has its own count either way.
    let (other_turn, other_key) = (format!("{turn}-other"), fresh_key("budget other"));
    let fresh = match counter {
        KeyCounter::Key => charged_by(counter, &other_key, &fp, &turn, 2, None, window),
        KeyCounter::TurnAndKey => charged_by(counter, &key, &fp, &other_turn, 2, None, window),
    };
    assert_eq!(
        store.begin(fresh).await.expect("begin"),
        Begin::Claimed,
        "budget: another turn (or key) has its own count"
    );
}

/// Past the limit on a key whose record is completed, the refusal says so: the action
/// already happened.
///
/// Checked with both [`KeyCounter`]s.
pub async fn budget_says_whether_the_key_completed(h: &impl Harness) {
    for counter in COUNTERS {
        budget_says_whether_the_key_completed_by(h, counter).await;
    }
}

async fn budget_says_whether_the_key_completed_by(h: &impl Harness, counter: KeyCounter) {
    let store = h.store();
    let (key, fp) = (fresh_key("budget done"), fingerprint("budget done"));
    let turn = format!("turn-{}", LeaseToken::generate().0);
    let window = h.short() * 40;
    let first = charged_by(counter, &key, &fp, &turn, 1, None, window);
    let lease = lease_of(&first);
    assert_eq!(store.begin(first).await.expect("begin"), Begin::Claimed);
    store
        .complete(&lease, b"r", window)
        .await
        .expect("complete");
    match store
        .begin(charged_by(counter, &key, &fp, &turn, 1, None, window))
        .await
    {
        Ok(Begin::Exhausted(Exhausted::Key {
            attempts: 2,
            completed: true,
            ..
        })) => {}
        other => panic!("budget: a completed key past its limit says so, got {other:?}"),
    }
}

/// The turn-wide cap counts charged calls of every key; a call refused by its per-key limit
/// does not count against it.
pub async fn budget_caps_the_turn(h: &impl Harness) {
    let store = h.store();
    let fp = fingerprint("turn cap");
    let turn = format!("turn-{}", LeaseToken::generate().0);
    let window = h.short() * 40;
    let a = fresh_key("turn cap a");
    let first = charged(&a, &fp, &turn, 1, Some(3), window);
    assert_eq!(store.begin(first).await.expect("begin"), Begin::Claimed);
    // Refused per key (1 attempt allowed): must not use up the turn's calls.
    for _ in 0..3 {
        let refused = store
            .begin(charged(&a, &fp, &turn, 1, Some(3), window))
            .await;
        assert!(
            matches!(refused, Ok(Begin::Exhausted(Exhausted::Key { .. }))),
            "turn cap: refused per key, got {refused:?}"
        );
    }
    for i in 0..2 {
        let key = fresh_key(&format!("turn cap {i}"));
        let req = charged(&key, &fp, &turn, 1, Some(3), window);
        assert_eq!(store.begin(req).await.expect("begin"), Begin::Claimed);
    }
    let key = fresh_key("turn cap last");
    match store
        .begin(charged(&key, &fp, &turn, 1, Some(3), window))
        .await
    {
        Ok(Begin::Exhausted(Exhausted::Turn { calls: 4, limit: 3 })) => {}
        other => panic!("turn cap: the 4th call of the turn is refused, got {other:?}"),
    }
    assert_eq!(store.get(NS, &key).await.expect("get"), None);
}

/// Of many concurrent charged `begin`s with one key, exactly `limit` are counted as allowed.
///
/// Checked with both [`KeyCounter`]s.
pub async fn budget_is_atomic_under_concurrency(h: &impl Harness) {
    for counter in COUNTERS {
        budget_is_atomic_under_concurrency_by(h, counter).await;
    }
}

async fn budget_is_atomic_under_concurrency_by(h: &impl Harness, counter: KeyCounter) {
    let store = h.store();
    let turn: Arc<str> = Arc::from(format!("turn-{}", LeaseToken::generate().0));
    let window = h.short() * 40;
    let key = fresh_key("budget storm");
    let mut tasks = Vec::new();
    for _ in 0..48 {
        let (store, turn) = (Arc::clone(&store), Arc::clone(&turn));
        tasks.push(tokio::spawn(async move {
            let fp = fingerprint("budget storm");
            let req = charged_by(counter, &key, &fp, &turn, 5, None, window);
            store.begin(req).await
        }));
    }
    let mut allowed = 0;
    for task in tasks {
        match task.await.expect("task") {
            Ok(Begin::Exhausted(_)) => {}
            Ok(_) => allowed += 1,
            Err(error) => panic!("budget storm: begin failed: {error}"),
        }
    }
    assert_eq!(allowed, 5, "budget storm: exactly the limit is allowed");
}

/// Budget counts expire `window` after their last charge.
///
/// Checked with both [`KeyCounter`]s.
pub async fn budget_counts_expire(h: &impl Harness) {
    for counter in COUNTERS {
        budget_counts_expire_by(h, counter).await;
    }
}

async fn budget_counts_expire_by(h: &impl Harness, counter: KeyCounter) {
    let store = h.store();
    let (key, fp) = (fresh_key("budget window"), fingerprint("budget window"));
    let turn = format!("turn-{}", LeaseToken::generate().0);
    let window = h.short();
    let first = charged_by(counter, &key, &fp, &turn, 1, None, window);
    let lease = lease_of(&first);
    assert_eq!(store.begin(first).await.expect("begin"), Begin::Claimed);
    store.release(&lease).await.expect("release");
    let refused = store
        .begin(charged_by(counter, &key, &fp, &turn, 1, None, window))
        .await;
    assert!(
        matches!(refused, Ok(Begin::Exhausted(_))),
        "window: refused, got {refused:?}"
    );
    advance(h, h.short() * 2).await;
    let later = store
        .begin(charged_by(counter, &key, &fp, &turn, 1, None, window))
        .await;
    assert_eq!(
        later.expect("begin"),
        Begin::Claimed,
        "window: counts expire after the window"
    );
}

/// Through the engine: a lost response replays, and concurrent identical calls run once.
pub async fn engine_executes_once(h: &impl Harness) {
    const TOOL: ToolInfo = ToolInfo::idempotent("conformance_send");
    let store = h.store();
    let turn = Turn::new(format!("conformance-{}", LeaseToken::generate().0))
        .with_store(Arc::clone(&store))
        .with_max_attempts_per_key(100);
    let runs = Arc::new(AtomicUsize::new(0));
    let key = fresh_key("engine");
    let fp = fingerprint("engine");
    let mut tasks = Vec::new();
    for _ in 0..32 {
        let (turn, runs) = (turn.clone(), Arc::clone(&runs));
        tasks.push(tokio::spawn(async move {
            execute(Call::new(&TOOL, &turn, key, fp), async {
                tokio::time::sleep(Duration::from_millis(5)).await;
                Ok::<_, Error>(runs.fetch_add(1, Ordering::SeqCst))
            })
            .await
        }));
    }
    for task in tasks {
        assert_eq!(
            task.await.expect("task").expect("call"),
            0,
            "engine: same result"
        );
    }
    let lost = execute(Call::new(&TOOL, &turn, key, fp), async {
        Ok::<_, Error>(runs.fetch_add(1, Ordering::SeqCst))
    })
    .await;
    assert_eq!(lost.expect("replay"), 0);
    assert_eq!(runs.load(Ordering::SeqCst), 1, "engine: the tool ran once");
}

/// Through the engine, with a new `Turn` value per call (a server building one per request):
/// concurrent duplicates are one attempt, the 4th sequential call of a succeeded action says it
/// already succeeded, and the 4th call of a failing one says it is stuck.
pub async fn engine_budget_follows_the_turn_id(h: &impl Harness) {
    const TOOL: ToolInfo = ToolInfo::idempotent("conformance_budget");
    let store = h.store();
    let id = format!("conformance-budget-{}", LeaseToken::generate().0);
    let turn = || Turn::new(id.clone()).with_store(Arc::clone(&store));
    let runs = Arc::new(AtomicUsize::new(0));
    let ok_key = fresh_key("budget ok");
    let fp = fingerprint("budget ok");
    let mut tasks = Vec::new();
    for _ in 0..64 {
        let (turn, runs) = (turn(), Arc::clone(&runs));
        tasks.push(tokio::spawn(async move {
            execute(Call::new(&TOOL, &turn, ok_key, fp), async {
                tokio::time::sleep(Duration::from_millis(50)).await;
                Ok::<_, Error>(runs.fetch_add(1, Ordering::SeqCst))
            })
            .await
        }));
    }
    for task in tasks {
        assert_eq!(
            task.await.expect("task").expect("fan-out call"),
            0,
            "engine budget: a concurrent fan-out is one attempt with one result"
        );
    }
    for _ in 0..2 {
        let replay = execute(Call::new(&TOOL, &turn(), ok_key, fp), async {
            Ok::<_, Error>(usize::MAX)
        });
        assert_eq!(replay.await.expect("replay within budget"), 0);
    }
    let fourth = execute(Call::new(&TOOL, &turn(), ok_key, fp), async {
        Ok::<_, Error>(usize::MAX)
    })
    .await;
    assert!(
        matches!(fourth, Err(Error::AlreadySucceeded { .. })),
        "engine budget: the 4th call of a succeeded action, got {fourth:?}"
    );
    let failing = fresh_key("budget failing");
    let mut answers = Vec::new();
    for _ in 0..4 {
        let runs = Arc::clone(&runs);
        answers.push(
            execute(Call::new(&TOOL, &turn(), failing, fp), async move {
                runs.fetch_add(1, Ordering::SeqCst);
                Err::<usize, _>(Error::Config("upstream down".to_owned()))
            })
            .await,
        );
    }
    assert!(
        matches!(answers[3], Err(Error::BudgetExhausted { attempts: 4, .. })),
        "engine budget: the 4th call of a failing action is stuck, got {:?}",
        answers[3]
    );
    assert_eq!(
        runs.load(Ordering::SeqCst),
        4,
        "engine budget: one execution of the succeeded action, three of the failing one"
    );
}

//! The store conformance suite: the behaviour every [`Store`] must show, as one test per property.
//!
//! Enable the `conformance` feature in your dev-dependencies and run [`run_all`] against your
//! store through a [`Harness`] that tells the suite how time passes for it:
//!
//! ```
//! use std::sync::Arc;
//! use std::time::Duration;
//! use idem_runtime::clock::ManualClock;
//! use idem_runtime::key::Key;
//! use idem_runtime::store::conformance::{self, Harness};
//! use idem_runtime::store::{MemoryStore, Store, StoreFuture};
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

use super::{Begin, BeginRequest, LeaseToken, RecordState, Store, StoreFuture};
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
    engine_executes_once(h).await;
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
    }
}

async fn claim(store: &dyn Store, key: &Key, fp: &Fingerprint, lease: Duration) -> LeaseToken {
    match store.begin(request(key, fp, lease)).await {
        Ok(Begin::Claimed(token)) => token,
        other => panic!("begin on a free key must claim it, got {other:?}"),
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
        Ok(Begin::InFlight(record)) => {
            assert_eq!(
                record.state,
                RecordState::InProgress,
                "claim_complete_replay"
            );
            assert_eq!(record.fingerprint, fp, "claim_complete_replay: fingerprint");
            assert_eq!(record.key, key, "claim_complete_replay: key");
        }
        other => panic!("claim_complete_replay: a claimed key must be in flight, got {other:?}"),
    }
    store
        .complete(NS, &key, token, b"{\"ok\":1}", lease)
        .await
        .expect("claim_complete_replay: complete with the current token");
    match store.begin(request(&key, &fp, lease)).await {
        Ok(Begin::Completed(record)) => {
            assert_eq!(record.state, RecordState::Completed);
            assert_eq!(record.result.as_deref(), Some(&b"{\"ok\":1}"[..]));
            assert_eq!(record.tool, "conformance_tool");
            assert_eq!(record.namespace, NS);
        }
        other => panic!("claim_complete_replay: a completed key must replay, got {other:?}"),
    }
    let got = store.get(NS, &key).await.expect("get");
    assert_eq!(
        got.and_then(|r| r.result),
        Some(b"{\"ok\":1}".to_vec()),
        "claim_complete_replay: get returns the result"
    );
    let again = store.complete(NS, &key, token, b"{\"ok\":2}", lease).await;
    assert!(
        is_lease_lost(&again),
        "claim_complete_replay: a second complete must be refused, got {again:?}"
    );
    let unclaimed = fresh_key("never-claimed");
    let stray = store
        .complete(NS, &unclaimed, LeaseToken::generate(), b"x", lease)
        .await;
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
        .release(NS, &key, token)
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
    let late = store
        .complete(NS, &key, stale, b"stale", h.short() * 4)
        .await;
    assert!(
        is_lease_lost(&late),
        "fencing: stale complete must fail, got {late:?}"
    );
    let renew = store.renew(NS, &key, stale, h.short() * 4).await;
    assert!(
        is_lease_lost(&renew),
        "fencing: stale renew must fail, got {renew:?}"
    );
    let release = store.release(NS, &key, stale).await;
    assert!(
        is_lease_lost(&release),
        "fencing: stale release must fail, got {release:?}"
    );
    store
        .complete(NS, &key, fresh, b"fresh", h.short() * 4)
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
        .renew(NS, &key, token, lease)
        .await
        .expect("renew: the holder renews");
    advance(h, h.short() + h.short() / 2).await;
    match store.begin(request(&key, &fp, lease)).await {
        Ok(Begin::InFlight(_)) => {}
        other => panic!("renew: the renewed lease must still hold, got {other:?}"),
    }
    store
        .complete(NS, &key, token, b"done", lease)
        .await
        .expect("renew: the holder still completes");
}

/// A completed record is forgotten after its TTL: the key runs again.
pub async fn ttl_expiry_forgets_the_result(h: &impl Harness) {
    let store = h.store();
    let (key, fp) = (fresh_key("ttl"), fingerprint("ttl"));
    let token = claim(&*store, &key, &fp, h.short() * 4).await;
    store
        .complete(NS, &key, token, b"once", h.short())
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
    store
        .complete(NS, &key, token, b"r", lease)
        .await
        .expect("complete");
    match store.begin(request(&key, &other, lease)).await {
        Ok(Begin::Completed(record)) => assert_eq!(record.fingerprint, first, "fingerprint"),
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
                    Ok(Begin::Claimed(_))
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
        let Ok(Begin::Claimed(token)) = store.begin(req).await else {
            panic!("admin: claim");
        };
        if i > 0 {
            store
                .complete(&namespace, &key, token, b"r", lease)
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
        .complete(NS, &old, token, b"r", h.short())
        .await
        .expect("complete");
    let token = claim(&*store, &live, &fp, h.short() * 40).await;
    store
        .complete(NS, &live, token, b"r", h.short() * 40)
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
        .complete(NS, &key, token, &big, lease)
        .await
        .expect("complete large");
    match store.begin(request(&key, &fp, lease)).await {
        Ok(Begin::Completed(record)) => assert!(record.result.as_deref() == Some(&big[..])),
        other => panic!("large: expected completed, got {:?}", other.map(|_| ())),
    }
}

/// A record the backend cannot parse is an error from begin and get, never a panic.
pub async fn corrupt_records_are_errors(h: &impl Harness) {
    let store = h.store();
    let (key, fp) = (fresh_key("corrupt"), fingerprint("corrupt"));
    let lease = h.short() * 4;
    let token = claim(&*store, &key, &fp, lease).await;
    store
        .complete(NS, &key, token, b"r", lease)
        .await
        .expect("complete");
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

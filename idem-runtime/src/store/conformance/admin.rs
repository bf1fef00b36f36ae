//! What operators and large results need: list, remove, purge, big and corrupt records.

use std::collections::HashSet;
use std::time::Duration;

use super::{Harness, NS, advance, claim, fingerprint, fresh_key, lease_of, request};
use crate::Error;
use crate::key::Key;
use crate::store::{Begin, BeginRequest, LeaseToken, RecordState, Removed};

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

/// `remove_shown` deletes the record an operator was shown and nothing else: a claim that
/// completed since, or a key claimed again, is kept; a claim given back since leaves nothing
/// to remove (its attempt count stays); a claim whose lease ran out since is still the one
/// shown.
pub async fn remove_shown_deletes_only_what_was_shown(h: &impl Harness) {
    let store = h.store();
    let lease = h.short() * 4;
    let fp = fingerprint("shown");
    let shown = async |key: &Key| {
        let found = store.get(NS, key).await.expect("remove_shown: get");
        found.expect("remove_shown: the record to show")
    };

    // Shown in progress, completed before the removal: kept.
    let key = fresh_key("shown completed");
    let token = claim(&*store, &key, &fp, lease).await;
    let in_progress = shown(&key).await;
    store
        .complete(&token, b"sent", lease)
        .await
        .expect("remove_shown: complete");
    let removed = store
        .remove_shown(&in_progress)
        .await
        .expect("remove_shown");
    assert_eq!(
        removed,
        Removed::Changed,
        "remove_shown: a claim that completed"
    );
    let completed = shown(&key).await;
    assert_eq!(completed.result.as_deref(), Some(&b"sent"[..]), "kept");
    // Shown completed: deleted, then gone.
    let removed = store.remove_shown(&completed).await.expect("remove_shown");
    assert_eq!(removed, Removed::Deleted { live: true });
    assert_eq!(store.get(NS, &key).await.expect("get"), None);
    let removed = store.remove_shown(&completed).await.expect("remove_shown");
    assert_eq!(removed, Removed::Gone, "remove_shown: twice");

    // Shown in progress, then given back: no record is left to remove, and the attempt count
    // the claim left is kept (a claim that ended is not a stuck one).
    let key = fresh_key("shown given back");
    let token = claim(&*store, &key, &fp, lease).await;
    let given_back = shown(&key).await;
    store.release(&token).await.expect("remove_shown: release");
    let removed = store.remove_shown(&given_back).await.expect("remove_shown");
    assert_eq!(removed, Removed::Gone, "remove_shown: a claim given back");
    advance(h, Duration::from_millis(5)).await;
    claim(&*store, &key, &fp, lease).await;
    assert_eq!(
        shown(&key).await.attempts,
        2,
        "remove_shown: the count of a claim given back is kept"
    );

    // Shown in progress, given back and claimed again: the new claim is kept.
    let key = fresh_key("shown claimed again");
    let token = claim(&*store, &key, &fp, lease).await;
    let first = shown(&key).await;
    store.release(&token).await.expect("remove_shown: release");
    advance(h, Duration::from_millis(5)).await;
    let again = claim(&*store, &key, &fp, lease).await;
    let removed = store.remove_shown(&first).await.expect("remove_shown");
    assert_eq!(
        removed,
        Removed::Changed,
        "remove_shown: a key claimed again"
    );
    assert_eq!(shown(&key).await.state, RecordState::InProgress, "kept");
    // ... and that claim given back too: the key holds no record, whichever claim left it
    // (the memory store said `Changed`, the others `Gone`; found by `store_differential`).
    store.release(&again).await.expect("remove_shown: release");
    let removed = store.remove_shown(&first).await.expect("remove_shown");
    assert_eq!(
        removed,
        Removed::Gone,
        "remove_shown: a key claimed again and given back"
    );

    // Shown in progress, its lease run out: still the claim shown, deleted with its count.
    let key = fresh_key("shown expired");
    claim(&*store, &key, &fp, h.short()).await;
    let stuck = shown(&key).await;
    advance(h, h.short() * 2).await;
    let removed = store.remove_shown(&stuck).await.expect("remove_shown");
    let expected = Removed::Deleted { live: false };
    assert!(
        removed == expected || (h.expires_by_itself() && removed == Removed::Gone),
        "remove_shown: a claim whose lease ran out, got {removed:?}"
    );
    let req = request(&key, &fp, lease);
    assert!(
        matches!(store.begin(req).await, Ok(Begin::Claimed)),
        "remove_shown: the key is free"
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

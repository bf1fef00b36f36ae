//! The budget rule, as every store applies it atomically with its claims.

use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::Duration;

use super::{Harness, NS, advance, fingerprint, fresh_key, lease_of, request};
use crate::key::{Fingerprint, Key};
use crate::store::budget::TurnIdentity;
use crate::store::{Begin, BeginRequest, Charge, Exhausted, LeaseToken};

/// A request of turn `turn` charging `max_attempts` per key and `max_calls` per turn (no
/// per-tool cap).
pub(super) fn charged<'a>(
    key: &'a Key,
    fp: &'a Fingerprint,
    turn: &'a str,
    max_attempts: u32,
    max_calls: Option<u32>,
    window: Duration,
) -> BeginRequest<'a> {
    BeginRequest {
        turn,
        charge: Charge {
            turn: TurnIdentity::new(NS, turn),
            max_attempts,
            max_calls,
            max_tool_actions: None,
            window,
        },
        ..request(key, fp, window)
    }
}

/// A turn id no other check or run uses.
pub(super) fn fresh_turn(label: &str) -> String {
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
    let turn = Arc::new(fresh_turn("atomic"));
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

/// Many concurrent claims of different keys in one turn with a cap: exactly the cap claim; and
/// so with a tool's cap.
pub async fn turn_cap_is_atomic_under_concurrency(h: &impl Harness) {
    super::actions::new_actions_race(h, "turn-atomic", (3, Some(7), None)).await;
    super::actions::new_actions_race(h, "tool-atomic", (3, None, Some(7))).await;
}

/// Counts expire `window` after their last charge: the key, the turn and the tool may claim
/// again.
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
    let tool_turn = fresh_turn("expire tool");
    let capped = |key| BeginRequest {
        charge: Charge {
            max_tool_actions: Some(1),
            ..charged(key, &fp, &tool_turn, 1, None, window).charge
        },
        ..charged(key, &fp, &tool_turn, 1, None, window)
    };
    let (first, second) = (fresh_key("expire tool 1"), fresh_key("expire tool 2"));
    assert_eq!(store.begin(capped(&first)).await.ok(), Some(Begin::Claimed));
    match store.begin(capped(&second)).await {
        Ok(Begin::Refused(Exhausted::Tool { calls: 1, limit: 1 })) => {}
        other => panic!("expire: the tool's cap refuses within the window, got {other:?}"),
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
    assert_eq!(
        store.begin(capped(&second)).await.ok(),
        Some(Begin::Claimed),
        "expire: a tool's count is forgotten after its window"
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

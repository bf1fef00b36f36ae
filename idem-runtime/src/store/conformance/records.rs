//! The record's state machine: claim, complete, replay, release, leases, fencing, TTL.

use std::sync::Arc;
use std::time::Duration;

use super::{
    Harness, NS, advance, claim, fingerprint, fresh_key, is_lease_lost, lease_of, request, stranger,
};
use crate::store::budget::TurnIdentity;
use crate::store::{Begin, BeginRequest, Charge, RecordState};

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
    let kept = async || {
        store
            .get(NS, &key)
            .await
            .expect("get")
            .and_then(|r| r.result)
    };
    assert_eq!(
        kept().await.as_deref(),
        Some(&b"first"[..]),
        "complete_is_idempotent: the recorded result is unchanged"
    );
    let foreign = store.complete(&stranger(&key), b"third", lease).await;
    assert!(
        is_lease_lost(&foreign),
        "complete_is_idempotent: another token is refused, got {foreign:?}"
    );
    // A release by the lease that completed the key (a model step whose record's reply was
    // lost gives its claim back, then looks for the record): refused, the record kept.
    let release = store.release(&token).await;
    assert!(
        is_lease_lost(&release),
        "complete_is_idempotent: a release after the complete is refused, got {release:?}"
    );
    assert_eq!(
        kept().await.as_deref(),
        Some(&b"first"[..]),
        "complete_is_idempotent: a release after the complete keeps the record"
    );
}

/// A lease, budget window and TTL of `Duration::MAX` are taken (as
/// [`MAX_DURATION`](crate::store::MAX_DURATION)): the claim, its charge, the completion and
/// the replay all succeed.
pub async fn longest_durations_are_taken(h: &impl Harness) {
    let store = h.store();
    let (key, fp) = (fresh_key("longest"), fingerprint("longest"));
    let turn = format!("longest-{}", crate::store::LeaseToken::generate().0);
    let req = BeginRequest {
        turn: &turn,
        ttl: Duration::MAX,
        charge: Charge {
            turn: TurnIdentity::new(NS, &turn),
            max_attempts: 3,
            max_calls: Some(10),
            max_tool_actions: Some(10),
            window: Duration::MAX,
        },
        ..request(&key, &fp, Duration::MAX)
    };
    let held = lease_of(&req);
    match store.begin(req).await {
        Ok(Begin::Claimed) => {}
        other => panic!("longest durations: begin must claim, got {other:?}"),
    }
    store
        .renew(&held, Duration::MAX)
        .await
        .expect("longest durations: renew");
    store
        .complete(&held, b"kept", Duration::MAX)
        .await
        .expect("longest durations: complete");
    match store.begin(request(&key, &fp, h.short())).await {
        Ok(Begin::Completed(record)) => assert_eq!(record.result, &b"kept"[..]),
        other => panic!("longest durations: expected the replay, got {other:?}"),
    }
    store
        .remove(NS, &key)
        .await
        .expect("longest durations: remove");
}

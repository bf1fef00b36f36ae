//! Records carry the turn that claimed them, and a turn's records can be listed.

use super::budgets::fresh_turn;
use super::{Harness, NS, advance, fingerprint, fresh_key, generous, lease_of, request};
use crate::key::{Fingerprint, Key};
use crate::store::budget::TurnIdentity;
use crate::store::{Begin, BeginRequest, Charge, LeaseToken, RecordState};

/// A request of turn `turn` in `namespace`, charged to that turn's identity.
fn of_turn<'a>(
    namespace: &'a str,
    turn: &'a str,
    key: &'a Key,
    fp: &'a Fingerprint,
    lease: std::time::Duration,
) -> BeginRequest<'a> {
    BeginRequest {
        namespace,
        turn,
        charge: Charge {
            turn: TurnIdentity::new(namespace, turn),
            ..generous()
        },
        ..request(key, fp, lease)
    }
}

/// `get` shows the id of the turn that claimed a record, in progress and completed;
/// `list_turn` shows a turn's live records, oldest claim first, and no other turn's or
/// namespace's, within its limit.
pub async fn records_carry_their_turn(h: &impl Harness) {
    let store = h.store();
    let namespace = format!("turns-{}", LeaseToken::generate().0);
    let (turn, other) = (fresh_turn("listed"), fresh_turn("not listed"));
    let fp = fingerprint("turns");
    let lease = h.short() * 40;
    let keys = [
        fresh_key("turn 0"),
        fresh_key("turn 1"),
        fresh_key("turn 2"),
    ];
    let stray = fresh_key("turn stray");
    let elsewhere = fresh_key("turn elsewhere");
    let mut tokens = Vec::new();
    for key in &keys {
        let req = of_turn(&namespace, &turn, key, &fp, lease);
        tokens.push(lease_of(&req));
        assert_eq!(
            store.begin(req).await.ok(),
            Some(Begin::Claimed),
            "turns: claim"
        );
        advance(h, h.short() / 8).await;
    }
    let req = of_turn(&namespace, &other, &stray, &fp, lease);
    assert_eq!(store.begin(req).await.ok(), Some(Begin::Claimed));
    let req = of_turn(NS, &turn, &elsewhere, &fp, lease);
    assert_eq!(store.begin(req).await.ok(), Some(Begin::Claimed));
    let record = store
        .get(&namespace, &keys[0])
        .await
        .expect("get")
        .expect("claimed");
    assert_eq!(
        record.turn, turn,
        "turns: an in-progress record carries its turn"
    );
    store
        .complete(&tokens[0], b"done", lease)
        .await
        .expect("complete");
    let record = store
        .get(&namespace, &keys[0])
        .await
        .expect("get")
        .expect("completed");
    assert_eq!(record.state, RecordState::Completed);
    assert_eq!(
        record.turn, turn,
        "turns: a completed record keeps its turn"
    );
    let listed = store
        .list_turn(&namespace, &turn, 100)
        .await
        .expect("list_turn");
    let listed_keys: Vec<_> = listed.iter().map(|r| r.key).collect();
    assert_eq!(
        listed_keys, keys,
        "turns: the turn's records, in the order they were claimed"
    );
    assert!(
        listed
            .iter()
            .all(|r| r.turn == turn && r.namespace == namespace)
    );
    assert_eq!(
        store
            .list_turn(&namespace, &turn, 2)
            .await
            .expect("list_turn")
            .len(),
        2,
        "turns: list_turn honours its limit"
    );
    let strays = store
        .list_turn(&namespace, &other, 100)
        .await
        .expect("list_turn");
    assert_eq!(strays.iter().map(|r| r.key).collect::<Vec<_>>(), [stray]);
    assert!(
        store
            .list_turn(NS, &other, 100)
            .await
            .expect("list_turn")
            .is_empty(),
        "turns: another namespace's records are not the turn's"
    );
}

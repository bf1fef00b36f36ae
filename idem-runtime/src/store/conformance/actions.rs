//! New actions and retries: the per-tool cap, and whose claims a key's attempt count counts.

use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::Duration;

use super::budgets::{charged, fresh_turn};
use super::{Harness, NS, fingerprint, fresh_key, lease_of};
use crate::key::{Fingerprint, Key};
use crate::store::{Begin, BeginRequest, Charge, Exhausted};

/// A request of `tool` in turn `turn`, charging `max_attempts` per key, `max_calls` per turn and
/// `max_tool_actions` per tool.
fn of_tool<'a>(
    key: &'a Key,
    fp: &'a Fingerprint,
    turn: &'a str,
    tool: &'static str,
    limits: (u32, Option<u32>, Option<u32>),
    window: Duration,
) -> BeginRequest<'a> {
    let (max_attempts, max_calls, max_tool_actions) = limits;
    let base = charged(key, fp, turn, max_attempts, max_calls, window);
    BeginRequest {
        tool,
        charge: Charge {
            max_tool_actions,
            ..base.charge
        },
        ..base
    }
}

/// Each tool may start `max_tool_actions` new actions per turn: past it a new action of that
/// tool is refused (saying how many it started) and nothing is claimed or counted; another tool
/// and another turn count apart.
pub async fn budget_caps_each_tool(h: &impl Harness) {
    let store = h.store();
    let turn = fresh_turn("tool-cap");
    let fp = fingerprint("tool-cap");
    let window = h.short() * 40;
    let limits = (3, None, Some(2));
    for i in 0..2 {
        let key = fresh_key(&format!("tool-cap {i}"));
        assert_eq!(
            store
                .begin(of_tool(&key, &fp, &turn, "charge", limits, window))
                .await
                .ok(),
            Some(Begin::Claimed),
            "tool-cap: new action {} of 2",
            i + 1
        );
    }
    let over = fresh_key("tool-cap over");
    for _ in 0..2 {
        match store
            .begin(of_tool(&over, &fp, &turn, "charge", limits, window))
            .await
        {
            Ok(Begin::Refused(Exhausted::Tool { calls: 2, limit: 2 })) => {}
            other => panic!("tool-cap: the 3rd new action is refused after 2, got {other:?}"),
        }
    }
    assert_eq!(
        store.get(NS, &over).await.expect("get"),
        None,
        "tool-cap: a refusal claims nothing"
    );
    let other_tool = fresh_key("tool-cap other tool");
    assert_eq!(
        store
            .begin(of_tool(&other_tool, &fp, &turn, "refund", limits, window))
            .await
            .ok(),
        Some(Begin::Claimed),
        "tool-cap: another tool counts apart"
    );
    let elsewhere = fresh_turn("tool-cap other turn");
    let other_turn = fresh_key("tool-cap other turn");
    assert_eq!(
        store
            .begin(of_tool(
                &other_turn,
                &fp,
                &elsewhere,
                "charge",
                limits,
                window
            ))
            .await
            .ok(),
        Some(Begin::Claimed),
        "tool-cap: another turn counts apart"
    );
    // A turn cap and a tool cap: a new action refused by the tool's is not counted by the turn.
    let both = fresh_turn("tool-cap both");
    let limits = (3, Some(2), Some(1));
    let (a, b, c) = (
        fresh_key("both a"),
        fresh_key("both b"),
        fresh_key("both c"),
    );
    let begin = |key, tool| store.begin(of_tool(key, &fp, &both, tool, limits, window));
    assert_eq!(begin(&a, "charge").await.ok(), Some(Begin::Claimed));
    match begin(&b, "charge").await {
        Ok(Begin::Refused(Exhausted::Tool { calls: 1, limit: 1 })) => {}
        other => panic!("tool-cap: the tool's cap refuses, got {other:?}"),
    }
    assert_eq!(
        begin(&c, "refund").await.ok(),
        Some(Begin::Claimed),
        "tool-cap: the refused action did not count against the turn"
    );
    match begin(&b, "other").await {
        Ok(Begin::Refused(Exhausted::Turn { calls: 2, limit: 2 })) => {}
        other => panic!("tool-cap: the turn's cap is checked before the tool's, got {other:?}"),
    }
}

/// A claim of a key its turn already claimed since the key's last recorded result is a retry:
/// it is charged to the key alone, and never refused by (nor counted in) the turn's or the
/// tool's cap. A new action is.
pub async fn retries_are_not_new_actions(h: &impl Harness) {
    let store = h.store();
    let turn = fresh_turn("retries");
    let fp = fingerprint("retries");
    let window = h.short() * 40;
    let limits = (3, Some(1), Some(1));
    let key = fresh_key("retries");
    for attempt in 1..=3 {
        let req = of_tool(&key, &fp, &turn, "charge", limits, window);
        let token = lease_of(&req);
        assert_eq!(
            store.begin(req).await.ok(),
            Some(Begin::Claimed),
            "retries: attempt {attempt} of 3 of one action, with caps of 1 action"
        );
        store.release(&token).await.expect("retries: release");
    }
    match store
        .begin(of_tool(&key, &fp, &turn, "charge", limits, window))
        .await
    {
        Ok(Begin::Refused(Exhausted::Key {
            attempts: 3,
            limit: 3,
        })) => {}
        other => panic!("retries: the key's own limit still holds, got {other:?}"),
    }
    let new = fresh_key("retries new");
    match store
        .begin(of_tool(&new, &fp, &turn, "charge", limits, window))
        .await
    {
        Ok(Begin::Refused(Exhausted::Turn { calls: 1, limit: 1 })) => {}
        other => panic!("retries: the three claims were one action, got {other:?}"),
    }
}

/// A key's attempt count counts the claims of the turn that holds it: a claim by another turn
/// (a caller-supplied key) starts from 0, takes the count over, and is a new action of its turn.
pub async fn attempts_belong_to_the_claiming_turn(h: &impl Harness) {
    let store = h.store();
    let (first, second) = (fresh_turn("owner one"), fresh_turn("owner two"));
    let (key, fp) = (fresh_key("owner"), fingerprint("owner"));
    let window = h.short() * 40;
    let claim = |turn| of_tool(&key, &fp, turn, "charge", (1, None, Some(1)), window);
    let req = claim(&first);
    let token = lease_of(&req);
    assert_eq!(store.begin(req).await.ok(), Some(Begin::Claimed));
    store.release(&token).await.expect("release");
    match store.begin(claim(&first)).await {
        Ok(Begin::Refused(Exhausted::Key { attempts: 1, .. })) => {}
        other => panic!("owner: the first turn spent its attempt, got {other:?}"),
    }
    let req = claim(&second);
    let token = lease_of(&req);
    assert_eq!(
        store.begin(req).await.ok(),
        Some(Begin::Claimed),
        "owner: another turn counts the key's attempts from 0"
    );
    let record = store.get(NS, &key).await.expect("get").expect("claimed");
    assert_eq!(
        record.turn, second,
        "owner: the record is the claiming turn's"
    );
    assert_eq!(record.attempts, 1, "owner: the count is the second turn's");
    store.release(&token).await.expect("release");
    match store.begin(claim(&second)).await {
        Ok(Begin::Refused(Exhausted::Key { attempts: 1, .. })) => {}
        other => panic!("owner: the second turn spent its attempt, got {other:?}"),
    }
    match store.begin(claim(&first)).await {
        Ok(Begin::Refused(Exhausted::Tool { calls: 1, limit: 1 })) => {}
        other => panic!("owner: back in the first turn, the key is a new action, got {other:?}"),
    }
}

/// 48 concurrent new actions of one tool in one turn whose caps (`limits`: per key, turn, tool)
/// allow 7: exactly 7 claim, the others are refused by the cap.
pub(super) async fn new_actions_race(
    h: &impl Harness,
    label: &'static str,
    limits: (u32, Option<u32>, Option<u32>),
) {
    let store = h.store();
    let turn = Arc::new(fresh_turn(label));
    let window = h.short() * 40;
    let claimed = Arc::new(AtomicUsize::new(0));
    let mut tasks = Vec::new();
    for i in 0..48 {
        let (store, claimed, turn) = (Arc::clone(&store), Arc::clone(&claimed), turn.clone());
        tasks.push(tokio::spawn(async move {
            let (key, fp) = (fresh_key(&format!("{label} {i}")), fingerprint(label));
            let req = of_tool(&key, &fp, &turn, "charge", limits, window);
            match store.begin(req).await {
                Ok(Begin::Claimed) => {
                    claimed.fetch_add(1, Ordering::SeqCst);
                }
                Ok(Begin::Refused(
                    Exhausted::Turn { limit: 7, .. } | Exhausted::Tool { limit: 7, .. },
                )) => {}
                other => panic!("{label}: unexpected {other:?}"),
            }
        }));
    }
    for task in tasks {
        task.await.expect("task");
    }
    assert_eq!(
        claimed.load(Ordering::SeqCst),
        7,
        "{label}: exactly the cap of concurrent new actions"
    );
}

//! Durable turns: two runs of one turn at once (an orchestrator that resumed a turn twice). A
//! tool call that fails in one run and goes through in the other must not leave the two models
//! reading different outcomes: the run whose model read the failure could start the action
//! again with reworded arguments.

#[path = "overlap_common/mod.rs"]
mod overlap_common;

use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicU32, Ordering};
use std::time::Duration;

use idem_tools_runtime::engine::{Call, Codec, execute, execute_detached};
use idem_tools_runtime::key::ArgsDigest;
use idem_tools_runtime::store::{MemoryStore, Store};
use idem_tools_runtime::{Conversation, Error, Turn};

use overlap_common::*;

/// A call of the `#[idempotent]` tool `charge` for `cents` in `turn`, whose body counts its
/// runs in `ran` and fails (the key given back) if `fail`.
async fn charge(turn: &Turn, cents: u32, ran: &AtomicU32, fail: bool) -> Result<u32, Failed> {
    let mut args = ArgsDigest::new(CHARGE.name);
    args.arg("cents", &cents)?;
    let (key, fingerprint) = args.finish(turn.namespace(), turn.id(), CHARGE.name, CHARGE.version);
    let call = Call::new(&CHARGE, turn, key, fingerprint);
    execute(call, Codec::ok_only(), async {
        ran.fetch_add(1, Ordering::SeqCst);
        if fail {
            Err(Failed("the card network timed out".into()))
        } else {
            Ok(cents)
        }
    })
    .await
}

/// The model's call of `charge` for 500 after the latest step of `chat`, made as in [`charge`].
async fn asks_charge(chat: &Conversation, ran: &AtomicU32, fail: bool) -> Result<u32, Failed> {
    let call = charge(chat.turn(), 500, ran, fail);
    chat.model_tool_call("charge", &500, call).await
}

/// A first run asked step 0 and was cut off; two runs resumed at once replay it.
async fn two_runs(store: &Arc<dyn Store>) -> (Conversation, Conversation) {
    let turn = || Turn::new("conv-1/turn-1").with_store(Arc::clone(store));
    let first = turn().conversation("assistant");
    first.step("step 0", model(0)).await.expect("step 0");
    let a = turn().conversation("assistant");
    let b = turn().conversation("assistant");
    a.step("step 0", model(0)).await.expect("a replays step 0");
    b.step("step 0", model(0)).await.expect("b replays step 0");
    (a, b)
}

/// Run A's charge fails, run B makes it again and it goes through. A claims its next step and
/// finds the charge made since: it stops before its model is asked (which would have read the
/// failure and could have charged again under reworded arguments), and B goes on.
#[tokio::test]
async fn a_run_whose_failed_call_another_run_made_again_stops_before_asking() {
    let store: Arc<dyn Store> = Arc::new(MemoryStore::new());
    let (a, b) = two_runs(&store).await;
    let ran = AtomicU32::new(0);
    let read_a = asks_charge(&a, &ran, true).await;
    assert_eq!(read_a, Err(Failed("the card network timed out".into())));
    let read_b = asks_charge(&b, &ran, false).await;
    assert_eq!(read_b, Ok(500));

    let asked = AtomicBool::new(false);
    let answer = async {
        asked.store(true, Ordering::SeqCst);
        model(1).await
    };
    let next = a.step(&format!("after {read_a:?}"), answer).await;
    assert!(
        matches!(&next, Err(Error::RunOverlap { tool, step: 0, .. }) if tool == "charge"),
        "{next:?}"
    );
    assert!(!asked.load(Ordering::SeqCst), "A's model was not asked");
    // The step was given back: B asks it.
    let next_b = b.step(&format!("after {read_b:?}"), model(1)).await;
    assert_eq!(next_b.expect("B goes on"), "step 1: charge 500");
    assert_eq!(
        ran.load(Ordering::SeqCst),
        2,
        "A's failed attempt and B's charge"
    );
}

/// Run B reads the next step (not asked yet), then run A claims it and finds nothing made
/// since its charge failed, and asks its model. B's charge then claims its key: it reads the
/// next step again, waits for A's, and reads the failure A's model read — the charge does not
/// run, and the two runs tell one story.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_call_that_claims_its_key_while_another_run_asks_the_next_step_reads_its_failure() {
    let store: Arc<dyn Store> = Arc::new(MemoryStore::new());
    let (a, b) = two_runs(&store).await;
    let ran = Arc::new(AtomicU32::new(0));
    let read_a = asks_charge(&a, &ran, true).await;
    assert!(read_a.is_err());

    let (reached, go) = (
        Arc::new(tokio::sync::Notify::new()),
        Arc::new(tokio::sync::Notify::new()),
    );
    let run_b = {
        let (ran, reached, go) = (Arc::clone(&ran), Arc::clone(&reached), Arc::clone(&go));
        tokio::spawn(async move {
            let call = async {
                // Past B's read of the next step: held until A asks its model.
                reached.notify_one();
                go.notified().await;
                charge(b.turn(), 500, &ran, false).await
            };
            b.model_tool_call("charge", &500, call).await
        })
    };
    reached.notified().await;
    let answer = async {
        go.notify_one();
        tokio::time::sleep(Duration::from_millis(300)).await;
        model(1).await
    };
    let next = a.step(&format!("after {read_a:?}"), answer).await;
    assert_eq!(next.expect("A asks its next step"), "step 1: charge 500");
    let read_b = run_b.await.expect("run B");
    assert_eq!(read_b, read_a, "B read the failure A's model read");
    assert_eq!(ran.load(Ordering::SeqCst), 1, "only A's failed attempt ran");
}

/// A call that failed and was then made again by the same run, and went through, is no sign
/// of another run: the next step is asked.
#[tokio::test]
async fn a_call_that_failed_then_went_through_in_the_same_run_does_not_stop_it() {
    let store: Arc<dyn Store> = Arc::new(MemoryStore::new());
    let (a, _b) = two_runs(&store).await;
    let ran = AtomicU32::new(0);
    let first = asks_charge(&a, &ran, true).await;
    let again = asks_charge(&a, &ran, false).await;
    assert_eq!(again, Ok(500));
    let next = a
        .step(&format!("after {first:?}, {again:?}"), model(1))
        .await;
    assert_eq!(next.expect("the step is asked"), "step 1: charge 500");
}

/// A run's own call, cut off by its caller (a timeout around a detached tool), whose body then
/// goes through: no other run made it, and the next step is asked.
#[tokio::test]
async fn a_call_cut_off_by_its_caller_whose_body_then_went_through_does_not_stop_the_run() {
    let store: Arc<dyn Store> = Arc::new(MemoryStore::new());
    let (a, _b) = two_runs(&store).await;
    let turn = a.turn().clone();
    let mut args = ArgsDigest::new(CHARGE.name);
    args.arg("cents", &500).expect("encodes");
    let (key, fingerprint) = args.finish(turn.namespace(), turn.id(), CHARGE.name, CHARGE.version);
    let slow = async {
        tokio::time::sleep(Duration::from_millis(100)).await;
        Ok::<u32, Failed>(500)
    };
    let charge = execute_detached(
        Call::new(&CHARGE, &turn, key, fingerprint),
        Codec::ok_only(),
        slow,
    );
    let cut_off = async {
        match tokio::time::timeout(Duration::from_millis(10), charge).await {
            Ok(charged) => charged,
            Err(_) => Err(Failed("the charge timed out".into())),
        }
    };
    let read = a.model_tool_call("charge", &500, cut_off).await;
    assert_eq!(read, Err(Failed("the charge timed out".into())));
    tokio::time::sleep(Duration::from_millis(300)).await; // the body went through meanwhile
    let next = a.step(&format!("after {read:?}"), model(1)).await;
    assert_eq!(next.expect("the step is asked"), "step 1: charge 500");
}

/// Two conversations of one run make the same call: the planner's fails, the writer's runs
/// and goes through. That is no other run: the planner's next step is asked.
#[tokio::test]
async fn the_same_call_failing_for_one_agent_and_going_through_for_another_of_the_run_stops_nothing()
 {
    let store: Arc<dyn Store> = Arc::new(MemoryStore::new());
    let turn = Turn::new("conv-1/turn-1").with_store(Arc::clone(&store));
    let (planner, writer) = (turn.conversation("planner"), turn.conversation("writer"));
    planner
        .step("plan", model(0))
        .await
        .expect("planner step 0");
    writer.step("write", model(0)).await.expect("writer step 0");
    let ran = AtomicU32::new(0);
    let failed = asks_charge(&planner, &ran, true).await;
    let charged = asks_charge(&writer, &ran, false).await;
    assert_eq!(charged, Ok(500));
    let next = planner.step(&format!("after {failed:?}"), model(1)).await;
    assert_eq!(next.expect("the planner goes on"), "step 1: charge 500");
}

/// A tool call made inside its conversation's own next step (the model's answer runs a tool
/// while the model is asked): the step is this run's, held by this run — the call does not
/// wait for it, and runs at once.
#[tokio::test]
async fn a_tool_call_made_inside_its_conversations_next_step_runs_at_once() {
    let store: Arc<dyn Store> = Arc::new(MemoryStore::new());
    let chat = Turn::new("conv-1/turn-1")
        .with_store(Arc::clone(&store))
        .conversation("assistant");
    chat.step("step 0", model(0)).await.expect("step 0");
    let ran = AtomicU32::new(0);
    let inner = chat.clone();
    let answer = async {
        let charged = asks_charge(&inner, &ran, false).await;
        Ok::<_, Error>(format!("{charged:?}"))
    };
    let step = chat.step("answer while charging", answer);
    let answered = tokio::time::timeout(Duration::from_secs(5), step).await;
    assert_eq!(answered.expect("no wait").expect("a step"), "Ok(500)");
    assert_eq!(ran.load(Ordering::SeqCst), 1);
}

//! Schedules of two (or three) runs of one turn at once, found by a review of the overlap
//! handshake (`conversation/overlap.rs`): no model is asked with a failure of a call whose body
//! went through (or may have) in another run, and no single run is stopped with `RunOverlap`
//! for its own calls.

#[path = "overlap_common/mod.rs"]
mod overlap_common;

use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicU32, Ordering};
use std::time::Duration;

use idem_tools_runtime::engine::{Codec, execute, execute_detached};
use idem_tools_runtime::store::{MemoryStore, Store};
use idem_tools_runtime::{Conversation, Error, ToolInfo, Turn};
use tokio::sync::Notify;

use overlap_common::*;

static CHARGE_RC: ToolInfo = ToolInfo::idempotent("charge").with_release_on_cancel();

/// `charge` whose body counts its runs in `ran` and, if it succeeds, in `ok`.
async fn charge(
    turn: &Turn,
    cents: u32,
    ran: &AtomicU32,
    ok: &AtomicU32,
    fail: bool,
) -> Result<u32, Failed> {
    execute(call_of(&CHARGE, turn, cents), Codec::ok_only(), async {
        ran.fetch_add(1, Ordering::SeqCst);
        if fail {
            Err(Failed("the card network timed out".into()))
        } else {
            ok.fetch_add(1, Ordering::SeqCst);
            Ok(cents)
        }
    })
    .await
}

/// A first run asked step 0; runs `a` and `b` (of the turns given) replay it.
async fn replayed(store: &Arc<dyn Store>, a: Turn, b: Turn) -> (Conversation, Conversation) {
    turn_on(store)
        .conversation("assistant")
        .step("step 0", model(0))
        .await
        .expect("step 0");
    let (a, b) = (a.conversation("assistant"), b.conversation("assistant"));
    a.step("step 0", model(0)).await.expect("a replays step 0");
    b.step("step 0", model(0)).await.expect("b replays step 0");
    (a, b)
}

/// A's next step, with whether its model was asked.
async fn next_step(a: &Conversation, read: &impl std::fmt::Debug) -> (Result<String, Error>, bool) {
    let asked = AtomicBool::new(false);
    let answer = async {
        asked.store(true, Ordering::SeqCst);
        model(1).await
    };
    let next = a.step(&format!("after {read:?}"), answer).await;
    (next, asked.load(Ordering::SeqCst))
}

/// A's detached charge is cut off by its caller (a timeout): the model reads "timed out". Its
/// body fails after that and gives the key back; B then charges. A's next step sees the key B
/// claimed, and stops before its model is asked.
#[tokio::test]
async fn a_detached_call_that_fails_after_its_caller_gave_up_is_seen_by_the_next_step() {
    let store: Arc<dyn Store> = Arc::new(MemoryStore::new());
    let (a, b) = replayed(&store, turn_on(&store), turn_on(&store)).await;
    let turn = a.turn().clone();
    let slow_fail = async {
        tokio::time::sleep(Duration::from_millis(100)).await;
        Err::<u32, Failed>(Failed("declined".into()))
    };
    let detached = execute_detached(call_of(&CHARGE, &turn, 500), Codec::ok_only(), slow_fail);
    let cut_off = async {
        match tokio::time::timeout(Duration::from_millis(10), detached).await {
            Ok(charged) => charged,
            Err(_) => Err(Failed("the charge timed out".into())),
        }
    };
    let read_a = a.model_tool_call("charge", &500, cut_off).await;
    assert_eq!(read_a, Err(Failed("the charge timed out".into())));
    tokio::time::sleep(Duration::from_millis(300)).await; // A's body failed, key given back

    let (ran, ok) = (AtomicU32::new(0), AtomicU32::new(0));
    let read_b = b
        .model_tool_call("charge", &500, charge(b.turn(), 500, &ran, &ok, false))
        .await;
    assert_eq!(read_b, Ok(500), "B charged");
    let (next, asked) = next_step(&a, &read_a).await;
    assert!(
        !asked,
        "A's model was asked (step 1: {next:?}) reading {read_a:?}, while B charged"
    );
}

/// A's charge (a tool declared `with_release_on_cancel`) is cut off by a timeout mid-body: the
/// call's guard gives the key back. B charges; A's next step sees it, and stops.
#[tokio::test]
async fn a_release_on_cancel_call_cut_off_mid_body_is_seen_by_the_next_step() {
    let store: Arc<dyn Store> = Arc::new(MemoryStore::new());
    let (a, b) = replayed(&store, turn_on(&store), turn_on(&store)).await;
    let turn = a.turn().clone();
    let slow = async {
        tokio::time::sleep(Duration::from_secs(5)).await;
        Ok::<u32, Failed>(500)
    };
    let cut_off = async {
        let charge = execute(call_of(&CHARGE_RC, &turn, 500), Codec::ok_only(), slow);
        match tokio::time::timeout(Duration::from_millis(20), charge).await {
            Ok(charged) => charged,
            Err(_) => Err(Failed("the charge timed out".into())),
        }
    };
    let read_a = a.model_tool_call("charge", &500, cut_off).await;
    assert!(read_a.is_err());
    tokio::time::sleep(Duration::from_millis(50)).await; // the key was given back

    let ok = AtomicU32::new(0);
    let b_call = execute(
        call_of(&CHARGE_RC, b.turn(), 500),
        Codec::ok_only(),
        async {
            ok.fetch_add(1, Ordering::SeqCst);
            Ok::<u32, Failed>(500)
        },
    );
    let read_b = b.model_tool_call("charge", &500, b_call).await;
    assert_eq!(read_b, Ok(500), "B charged");
    let (next, asked) = next_step(&a, &read_a).await;
    assert!(
        !asked,
        "A's model was asked (step 1: {next:?}) reading {read_a:?}, while B charged"
    );
}

/// A's charge fails; B's charge passes its handshake (A has not asked step 1), its body does the
/// side effect, and run B is killed mid-body: the key is marked interrupted. Whether B charged
/// is unknown: A stops at its next step rather than ask its model with the failure.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_charge_another_run_was_killed_in_stops_the_run_that_read_a_failure() {
    let store: Arc<dyn Store> = Arc::new(MemoryStore::new());
    let (a, b) = replayed(&store, turn_on(&store), turn_on(&store)).await;
    let (ran, ok) = (AtomicU32::new(0), AtomicU32::new(0));
    let read_a = a
        .model_tool_call("charge", &500, charge(a.turn(), 500, &ran, &ok, true))
        .await;
    assert!(read_a.is_err());

    let charged = Arc::new(AtomicU32::new(0));
    let reached = Arc::new(Notify::new());
    let run_b = {
        let (charged, reached) = (charged.clone(), reached.clone());
        tokio::spawn(async move {
            let turn = b.turn().clone();
            let body = async move {
                charged.fetch_add(1, Ordering::SeqCst); // the side effect
                reached.notify_one();
                std::future::pending::<()>().await; // waits for the provider's answer
                Ok::<u32, Failed>(500)
            };
            let call = execute(call_of(&CHARGE, &turn, 500), Codec::ok_only(), body);
            b.model_tool_call("charge", &500, call).await
        })
    };
    reached.notified().await;
    run_b.abort(); // run B killed mid-charge
    let _ = run_b.await;
    tokio::time::sleep(Duration::from_millis(100)).await; // marked interrupted
    let (next, asked) = next_step(&a, &read_a).await;
    assert!(
        !asked,
        "A's model was asked (step 1: {next:?}) reading {read_a:?}; B's body ran {} time(s) \
         and its outcome is unknown",
        charged.load(Ordering::SeqCst)
    );
}

/// One run: the model's charge fails; its next call hands the job to a sub-agent (a
/// conversation inside the call), whose own charge — the same tool key — goes through. No other
/// run exists: the outer conversation's next step is asked.
#[tokio::test]
async fn a_sub_agent_whose_charge_goes_through_after_the_outer_failure_stops_nothing() {
    let store: Arc<dyn Store> = Arc::new(MemoryStore::new());
    let turn = turn_on(&store);
    let chat = turn.conversation("assistant");
    chat.step("step 0", model(0)).await.expect("step 0");
    let (ran, ok) = (AtomicU32::new(0), AtomicU32::new(0));
    let first = chat
        .model_tool_call("charge", &500, charge(&turn, 500, &ran, &ok, true))
        .await;
    assert!(first.is_err());
    let agent = async {
        let sub = turn.conversation("payer");
        sub.step("pay 500", async { Ok::<_, Error>("charge 500".to_owned()) })
            .await
            .map_err(Failed::from)?;
        sub.model_tool_call("charge", &500, charge(&turn, 500, &ran, &ok, false))
            .await
    };
    let delegated = chat.model_tool_call("pay_agent", &500, agent).await;
    assert_eq!(delegated, Ok(500));
    let (next, _) = next_step(&chat, &(first, delegated)).await;
    assert!(next.is_ok(), "one run, no overlap: {next:?}");
}

/// One run, two conversations: a planner's charge fails; a writer then makes the same charge
/// (one action to the tool's key) and it goes through. The planner's next step is asked.
#[tokio::test]
async fn a_planners_failed_charge_made_by_a_writer_of_the_run_stops_nothing() {
    let store: Arc<dyn Store> = Arc::new(MemoryStore::new());
    let turn = turn_on(&store);
    let planner = turn.conversation("planner");
    let writer = turn.conversation("writer");
    planner.step("p0", model(0)).await.expect("p0");
    writer.step("w0", model(0)).await.expect("w0");
    let (ran, ok) = (AtomicU32::new(0), AtomicU32::new(0));
    let p = planner
        .model_tool_call("charge", &500, charge(&turn, 500, &ran, &ok, true))
        .await;
    let w = writer
        .model_tool_call("charge", &500, charge(&turn, 500, &ran, &ok, false))
        .await;
    assert_eq!(w, Ok(500));
    let (next, _) = next_step(&planner, &p).await;
    assert!(next.is_ok(), "one run, no overlap: {next:?}");
}

// ---- schedules that held (kept as regression checks) ----

/// A's step 1 is asked and the model fails (the step given back); B charges meanwhile; A's
/// retry of step 1 finds the charge and stops.
#[tokio::test]
async fn a_retried_step_after_a_failed_ask_sees_the_charge_another_run_made() {
    let store: Arc<dyn Store> = Arc::new(MemoryStore::new());
    let (a, b) = replayed(&store, turn_on(&store), turn_on(&store)).await;
    let (ran, ok) = (AtomicU32::new(0), AtomicU32::new(0));
    let read_a = a
        .model_tool_call("charge", &500, charge(a.turn(), 500, &ran, &ok, true))
        .await;
    let failed = a
        .step(&format!("after {read_a:?}"), async {
            Err::<String, _>(Error::Config("model down".into()))
        })
        .await;
    assert!(failed.is_err());
    let read_b = b
        .model_tool_call("charge", &500, charge(b.turn(), 500, &ran, &ok, false))
        .await;
    assert_eq!(read_b, Ok(500));
    let (next, asked) = next_step(&a, &read_a).await;
    assert!(matches!(next, Err(Error::RunOverlap { .. })), "{next:?}");
    assert!(!asked);
}

/// Three runs: A's and C's charges fail; B's goes through. A and C both stop.
#[tokio::test]
async fn of_three_runs_the_two_whose_charge_failed_stop() {
    let store: Arc<dyn Store> = Arc::new(MemoryStore::new());
    let (a, b) = replayed(&store, turn_on(&store), turn_on(&store)).await;
    let c = turn_on(&store).conversation("assistant");
    c.step("step 0", model(0)).await.expect("c replays");
    let (ran, ok) = (AtomicU32::new(0), AtomicU32::new(0));
    let ra = a
        .model_tool_call("charge", &500, charge(a.turn(), 500, &ran, &ok, true))
        .await;
    let rc = c
        .model_tool_call("charge", &500, charge(c.turn(), 500, &ran, &ok, true))
        .await;
    let rb = b
        .model_tool_call("charge", &500, charge(b.turn(), 500, &ran, &ok, false))
        .await;
    assert_eq!(rb, Ok(500));
    let (na, aa) = next_step(&a, &ra).await;
    let (nc, ac) = next_step(&c, &rc).await;
    assert!(!aa && !ac, "{na:?} {nc:?}");
}

/// Two identical calls (order 0 and 1) in A, both failing; B's order 0 goes through: A stops.
#[tokio::test]
async fn two_identical_failed_calls_stop_the_run_once_another_run_charges() {
    let store: Arc<dyn Store> = Arc::new(MemoryStore::new());
    let (a, b) = replayed(&store, turn_on(&store), turn_on(&store)).await;
    let (ran, ok) = (AtomicU32::new(0), AtomicU32::new(0));
    let r0 = a
        .model_tool_call("charge", &500, charge(a.turn(), 500, &ran, &ok, true))
        .await;
    let r1 = a
        .model_tool_call("charge", &500, charge(a.turn(), 500, &ran, &ok, true))
        .await;
    let rb = b
        .model_tool_call("charge", &500, charge(b.turn(), 500, &ran, &ok, false))
        .await;
    assert_eq!(rb, Ok(500));
    let (next, asked) = next_step(&a, &(r0, r1)).await;
    assert!(!asked, "{next:?}");
}

/// A asks step 1 (model slow) after its charge failed; B's charge claims its key, waits for
/// step 1 and reads A's failure: it does not run.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_charge_waits_for_the_step_another_run_asks_and_reads_its_failure() {
    let store: Arc<dyn Store> = Arc::new(MemoryStore::new());
    let (a, b) = replayed(&store, turn_on(&store), turn_on(&store)).await;
    let (ran, ok) = (Arc::new(AtomicU32::new(0)), Arc::new(AtomicU32::new(0)));
    let read_a = a
        .model_tool_call("charge", &500, charge(a.turn(), 500, &ran, &ok, true))
        .await;
    let asking = Arc::new(Notify::new());
    let step_a = {
        let (a, asking, read_a) = (a.clone(), asking.clone(), read_a.clone());
        tokio::spawn(async move {
            let answer = async {
                asking.notify_one();
                tokio::time::sleep(Duration::from_millis(300)).await;
                model(1).await
            };
            a.step(&format!("after {read_a:?}"), answer).await
        })
    };
    asking.notified().await;
    let rb = b
        .model_tool_call("charge", &500, charge(b.turn(), 500, &ran, &ok, false))
        .await;
    assert!(step_a.await.expect("a").is_ok());
    assert_eq!(rb, read_a);
    assert_eq!(ok.load(Ordering::SeqCst), 0);
}

/// The model's call `pay_agent` runs a sub-agent directly in the call (a conversation inside
/// it). In A the sub-agent's charge fails; B's sub-agent replays A's inner step 0 and charges
/// (A has not asked inner step 1). A's inner step 1 stops with `RunOverlap`, which the agent
/// returns as its failure; the outer conversation's next step sees B's charge too (the key is
/// doubted up the calls it was made in), and stops.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_sub_agents_failed_charge_is_seen_by_the_outer_conversations_next_step() {
    let store: Arc<dyn Store> = Arc::new(MemoryStore::new());
    let (a, b) = replayed(&store, turn_on(&store), turn_on(&store)).await;
    let (ran, ok) = (Arc::new(AtomicU32::new(0)), Arc::new(AtomicU32::new(0)));
    let (failed, go) = (Arc::new(Notify::new()), Arc::new(Notify::new()));
    let run_a = {
        let (a, ran, ok, failed, go) = (
            a.clone(),
            ran.clone(),
            ok.clone(),
            failed.clone(),
            go.clone(),
        );
        tokio::spawn(async move {
            let turn = a.turn().clone();
            let agent = async {
                let sub = turn.conversation("payer");
                let r0 = sub
                    .step("pay 500", async { Ok::<_, Error>("charge 500".to_owned()) })
                    .await
                    .map_err(Failed::from)?;
                let charged = sub
                    .model_tool_call("charge", &500, charge(&turn, 500, &ran, &ok, true))
                    .await;
                failed.notify_one();
                go.notified().await;
                let r1 = sub
                    .step(&format!("after {charged:?}"), async {
                        Ok::<_, Error>("give up".to_owned())
                    })
                    .await
                    .map_err(Failed::from)?;
                Err::<u32, Failed>(Failed(format!("{r0} / {r1}: could not pay")))
            };
            let read = a.model_tool_call("pay_agent", &500, agent).await;
            let (next, asked) = next_step(&a, &read).await;
            (read, next, asked)
        })
    };
    failed.notified().await;
    let turn = b.turn().clone();
    let agent_b = async {
        let sub = turn.conversation("payer");
        sub.step("pay 500", async { Ok::<_, Error>("charge 500".to_owned()) })
            .await
            .map_err(Failed::from)?;
        sub.model_tool_call("charge", &500, charge(&turn, 500, &ran, &ok, false))
            .await
    };
    let read_b = b.model_tool_call("pay_agent", &500, agent_b).await;
    go.notify_one();
    let (read_a, next_a, asked_a) = run_a.await.expect("run A");
    assert_eq!(read_b, Ok(500), "B's sub-agent charged");
    assert!(
        !asked_a,
        "A's outer model was asked ({next_a:?}) reading {read_a:?}, while B's charge went through \
         (ok bodies: {})",
        ok.load(Ordering::SeqCst)
    );
}

/// One run: the model's charge fails; the model tries again (order 1), a detached charge cut
/// off by its caller's timeout, whose body then goes through in this run. The run's own late
/// success is no other run's: the next step is asked.
#[tokio::test]
async fn a_failure_then_the_runs_own_cut_off_retry_going_through_stops_nothing() {
    let store: Arc<dyn Store> = Arc::new(MemoryStore::new());
    let (a, _b) = replayed(&store, turn_on(&store), turn_on(&store)).await;
    let (ran, ok) = (AtomicU32::new(0), AtomicU32::new(0));
    let first = a
        .model_tool_call("charge", &500, charge(a.turn(), 500, &ran, &ok, true))
        .await;
    assert!(first.is_err());
    let turn = a.turn().clone();
    let slow = async {
        tokio::time::sleep(Duration::from_millis(100)).await;
        Ok::<u32, Failed>(500)
    };
    let detached = execute_detached(call_of(&CHARGE, &turn, 500), Codec::ok_only(), slow);
    let cut_off = async {
        match tokio::time::timeout(Duration::from_millis(10), detached).await {
            Ok(charged) => charged,
            Err(_) => Err(Failed("the charge timed out".into())),
        }
    };
    let again = a.model_tool_call("charge", &500, cut_off).await;
    assert_eq!(again, Err(Failed("the charge timed out".into())));
    tokio::time::sleep(Duration::from_millis(300)).await; // its body went through
    let (next, _) = next_step(&a, &(first, again)).await;
    assert!(next.is_ok(), "one run, no overlap: {next:?}");
}

/// One run: the model asked for the same charge twice in one response (order 0 and 1), run in
/// parallel. Order 0's charge fails and its call does a little async work before it returns
/// the failure (a backoff, a log write); meanwhile order 1 goes through. The next step is
/// asked.
#[tokio::test]
async fn parallel_identical_calls_one_failing_late_stop_nothing() {
    let store: Arc<dyn Store> = Arc::new(MemoryStore::new());
    let (a, _b) = replayed(&store, turn_on(&store), turn_on(&store)).await;
    let (ran, ok) = (AtomicU32::new(0), AtomicU32::new(0));
    let order0 = a.model_tool_call("charge", &500, async {
        let failed = charge(a.turn(), 500, &ran, &ok, true).await;
        tokio::time::sleep(Duration::from_millis(50)).await;
        failed
    });
    let order1 = a.model_tool_call("charge", &500, charge(a.turn(), 500, &ran, &ok, false));
    let (r0, r1) = tokio::join!(order0, order1);
    assert!(r0.is_err() && r1 == Ok(500), "{r0:?} {r1:?}");
    let (next, _) = next_step(&a, &(r0, r1)).await;
    assert!(next.is_ok(), "one run, no overlap: {next:?}");
}

/// Run C asks step 1 for long. B (whose step 0 replayed) makes its charge: it reads step 1
/// before the call and again once its key is claimed, and waits for C one in-flight wait in
/// all, then fails with `RunOverlap` without charging.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_call_waits_for_the_step_another_run_asks_once_not_twice() {
    let store: Arc<dyn Store> = Arc::new(MemoryStore::new());
    let wait = Duration::from_millis(400);
    let b_turn = turn_on(&store).with_in_flight_wait(wait);
    let (c, b) = replayed(&store, turn_on(&store), b_turn).await;
    let asking = Arc::new(Notify::new());
    let run_c = {
        let asking = asking.clone();
        tokio::spawn(async move {
            let answer = async {
                asking.notify_one();
                tokio::time::sleep(Duration::from_secs(3)).await;
                model(1).await
            };
            c.step("c's step 1", answer).await
        })
    };
    asking.notified().await;
    let started = tokio::time::Instant::now();
    let (ran, ok) = (AtomicU32::new(0), AtomicU32::new(0));
    let read_b = b
        .model_tool_call("charge", &500, charge(b.turn(), 500, &ran, &ok, false))
        .await;
    let waited = started.elapsed();
    run_c.abort();
    assert_eq!(ok.load(Ordering::SeqCst), 0, "nothing started");
    assert!(
        waited < wait + wait / 2,
        "B's call answered ({read_b:?}) after {waited:?}, the in-flight wait being {wait:?}"
    );
}

/// The charge's `Call` uses a store of its own (`Call::with_store`: tools on one database, the
/// conversation on another). A's charge fails; B's goes through. A's next step reads the key
/// in the tool's store, finds B's charge, and stops.
#[tokio::test]
async fn a_tool_on_a_store_of_its_own_is_read_there_by_the_next_step() {
    let store: Arc<dyn Store> = Arc::new(MemoryStore::new());
    let tools: Arc<dyn Store> = Arc::new(MemoryStore::new());
    let (a, b) = replayed(&store, turn_on(&store), turn_on(&store)).await;
    let ok = AtomicU32::new(0);
    let charge_on = |turn: &Turn, fail: bool| {
        let call = call_of(&CHARGE, turn, 500).with_store(&tools);
        let ok = &ok;
        execute(call, Codec::ok_only(), async move {
            if fail {
                Err(Failed("the card network timed out".into()))
            } else {
                ok.fetch_add(1, Ordering::SeqCst);
                Ok::<u32, Failed>(500)
            }
        })
    };
    let read_a = a
        .model_tool_call("charge", &500, charge_on(a.turn(), true))
        .await;
    assert!(read_a.is_err());
    let read_b = b
        .model_tool_call("charge", &500, charge_on(b.turn(), false))
        .await;
    assert_eq!(read_b, Ok(500), "B charged");
    let (next, asked) = next_step(&a, &read_a).await;
    assert!(
        !asked,
        "A's model was asked (step 1: {next:?}) reading {read_a:?}, while B charged"
    );
}

static CHARGE_CACHED: ToolInfo = ToolInfo::idempotent("charge_cached").with_cache_errors();

/// A tool that records its errors (`Codec::ok_and_err()`): B replays A's failure.
#[tokio::test]
async fn a_tool_that_records_its_errors_replays_the_failure_in_the_other_run() {
    let store: Arc<dyn Store> = Arc::new(MemoryStore::new());
    let (a, b) = replayed(&store, turn_on(&store), turn_on(&store)).await;
    let ok = AtomicU32::new(0);
    let charge_c = |turn: &Turn, fail: bool| {
        let ok = &ok;
        execute(
            call_of(&CHARGE_CACHED, turn, 500),
            Codec::ok_and_err(),
            async move {
                if fail {
                    Err(Failed("declined".into()))
                } else {
                    ok.fetch_add(1, Ordering::SeqCst);
                    Ok::<u32, Failed>(500)
                }
            },
        )
    };
    let read_a = a
        .model_tool_call("charge", &500, charge_c(a.turn(), true))
        .await;
    let read_b = b
        .model_tool_call("charge", &500, charge_c(b.turn(), false))
        .await;
    assert_eq!(read_a, read_b);
    assert_eq!(ok.load(Ordering::SeqCst), 0);
    let (next, asked) = next_step(&a, &read_a).await;
    assert!(next.is_ok() && asked);
}

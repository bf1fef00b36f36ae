//! Schedules found by a second review of the overlap handshake (`conversation/overlap.rs`):
//! a lone run, and runs restarted one after another, are never stopped with `RunOverlap` by
//! their own calls; and two runs at once still never tell their models different outcomes.

#[path = "overlap_common/mod.rs"]
mod overlap_common;

use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicU32, Ordering};
use std::time::Duration;

use idem_tools_runtime::engine::{Codec, execute, spawn};
use idem_tools_runtime::store::{MemoryStore, Store};
use idem_tools_runtime::{Conversation, Error, ToolInfo, Turn};

use overlap_common::*;

static CHECKOUT: ToolInfo = ToolInfo::idempotent("checkout");

/// A run whose step 0 is answered live.
async fn stepped(store: &Arc<dyn Store>) -> Conversation {
    let chat = turn_on(store).conversation("assistant");
    chat.step("step 0", model(0)).await.expect("step 0");
    chat
}

// ---------------------------------------------------------------------------------------------
// (2) one run, stopped with RunOverlap
// ---------------------------------------------------------------------------------------------

/// One run: the model's charge fails; the model tries again (order 1) with a plain (not
/// detached) charge that its caller cuts off by a timeout mid-body: the key is marked
/// interrupted by this run's own claim. The next step is asked.
#[tokio::test]
async fn a_lone_run_whose_retry_is_cut_off_mid_body_is_not_stopped() {
    let store: Arc<dyn Store> = Arc::new(MemoryStore::new());
    let a = stepped(&store).await;
    let ok = AtomicU32::new(0);
    let first = a
        .model_tool_call("charge", &500, charge(a.turn(), &ok, true))
        .await;
    assert!(first.is_err());
    let turn = a.turn().clone();
    let cut_off = async {
        let slow = async {
            tokio::time::sleep(Duration::from_secs(5)).await;
            Ok::<u32, Failed>(500)
        };
        let call = execute(call_of(&CHARGE, &turn, 500), Codec::ok_only(), slow);
        match tokio::time::timeout(Duration::from_millis(20), call).await {
            Ok(charged) => charged,
            Err(_) => Err(Failed("the charge timed out".into())),
        }
    };
    let again = a.model_tool_call("charge", &500, cut_off).await;
    assert!(again.is_err());
    tokio::time::sleep(Duration::from_millis(50)).await; // marked interrupted
    let (next, _) = next_step(&a, 1, &(first, again)).await;
    assert!(next.is_ok(), "one run, no overlap: {next:?}");
}

/// One run: the model's charge fails; the model then asks for `checkout`, an `#[idempotent]`
/// tool whose body charges the same amount (the same `charge` key, made inside the checkout's
/// body): it goes through. The run claimed the key itself: the next step is asked.
#[tokio::test]
async fn a_lone_run_whose_failed_charge_goes_through_inside_another_tool_is_not_stopped() {
    let store: Arc<dyn Store> = Arc::new(MemoryStore::new());
    let a = stepped(&store).await;
    let ok = AtomicU32::new(0);
    let first = a
        .model_tool_call("charge", &500, charge(a.turn(), &ok, true))
        .await;
    assert!(first.is_err());
    let turn = a.turn().clone();
    let checkout = execute(call_of(&CHECKOUT, &turn, 500), Codec::ok_only(), async {
        charge(&turn, &ok, false).await
    });
    let second = a.model_tool_call("checkout", &500, checkout).await;
    assert_eq!(second, Ok(500));
    let (next, _) = next_step(&a, 1, &(first, second)).await;
    assert!(next.is_ok(), "one run, no overlap: {next:?}");
}

/// One run: the model's charge fails; the application retries the charge itself, outside
/// `model_tool_call` (its own retry policy), and it goes through. The next step is asked.
#[tokio::test]
async fn a_lone_run_whose_failed_charge_the_app_retries_itself_is_not_stopped() {
    let store: Arc<dyn Store> = Arc::new(MemoryStore::new());
    let a = stepped(&store).await;
    let ok = AtomicU32::new(0);
    let first = a
        .model_tool_call("charge", &500, charge(a.turn(), &ok, true))
        .await;
    assert!(first.is_err());
    let retried = charge(a.turn(), &ok, false).await;
    assert_eq!(retried, Ok(500));
    let (next, _) = next_step(&a, 1, &(first, retried)).await;
    assert!(next.is_ok(), "one run, no overlap: {next:?}");
}

// ---------------------------------------------------------------------------------------------
// (1) a model reads a failure of a call another run made
// ---------------------------------------------------------------------------------------------

/// Run A's charge (a short TTL) goes through after step 0, and its record expires. After step
/// 1 the model asks for the same charge again; it fails in A (key given back). Run B (steps
/// replayed) charges after step 1, and it goes through. A's claim after step 0 came before
/// the key was given back: A's step 2 stops.
#[tokio::test]
async fn a_charge_the_run_made_before_its_record_expired_hides_no_other_runs() {
    let store: Arc<dyn Store> = Arc::new(MemoryStore::new());
    let a = stepped(&store).await;
    let ttl = Duration::from_millis(200);
    let ok = AtomicU32::new(0);
    let short = |turn: &Turn| call_of(&CHARGE, turn, 500).with_ttl(ttl);
    let r0 = a
        .model_tool_call("charge", &500, charge_call(short(a.turn()), &ok, false))
        .await;
    assert_eq!(r0, Ok(500));
    let (s1, _) = next_step(&a, 1, &r0).await;
    s1.expect("step 1");
    tokio::time::sleep(ttl + Duration::from_millis(100)).await; // the charge's record expired

    let read_a = a
        .model_tool_call("charge", &500, charge_call(short(a.turn()), &ok, true))
        .await;
    assert!(read_a.is_err());

    let b = turn_on(&store).conversation("assistant");
    b.step("step 0", model(0)).await.expect("b replays step 0");
    b.step(&format!("after {r0:?}"), model(1))
        .await
        .expect("b replays step 1");
    let before = ok.load(Ordering::SeqCst);
    let read_b = b
        .model_tool_call("charge", &500, charge_call(short(b.turn()), &ok, false))
        .await;
    assert_eq!(read_b, Ok(500));
    assert_eq!(ok.load(Ordering::SeqCst), before + 1, "B's body charged");

    let (next, asked) = next_step(&a, 2, &read_a).await;
    assert!(
        !asked,
        "A's model was asked (step 2: {next:?}) reading {read_a:?}, while B charged"
    );
}

// ---------------------------------------------------------------------------------------------
// held (expected to pass)
// ---------------------------------------------------------------------------------------------

/// R1 fails the charge and dies before step 1; R2 replays step 0, charges (goes through),
/// and asks step 1.
#[tokio::test]
async fn a_restart_after_a_failed_charge_and_a_death_before_the_next_step_goes_on() {
    let store: Arc<dyn Store> = Arc::new(MemoryStore::new());
    let ok = AtomicU32::new(0);
    {
        let r1 = stepped(&store).await;
        let read = r1
            .model_tool_call("charge", &500, charge(r1.turn(), &ok, true))
            .await;
        assert!(read.is_err());
    } // R1 dies
    let r2 = turn_on(&store).conversation("assistant");
    r2.step("step 0", model(0)).await.expect("replays");
    let read = r2
        .model_tool_call("charge", &500, charge(r2.turn(), &ok, false))
        .await;
    assert_eq!(read, Ok(500));
    let (next, asked) = next_step(&r2, 1, &read).await;
    assert!(next.is_ok() && asked, "{next:?}");
}

/// R1 fails the charge, the model retries and it goes through, R1 dies before step 1; R2
/// replays step 0, its charge replays R1's `Ok` (nothing given back), and step 1 is asked.
#[tokio::test]
async fn a_restart_after_a_failure_a_success_and_a_death_goes_on() {
    let store: Arc<dyn Store> = Arc::new(MemoryStore::new());
    let ok = AtomicU32::new(0);
    {
        let r1 = stepped(&store).await;
        let a = r1
            .model_tool_call("charge", &500, charge(r1.turn(), &ok, true))
            .await;
        assert!(a.is_err());
        let b = r1
            .model_tool_call("charge", &500, charge(r1.turn(), &ok, false))
            .await;
        assert_eq!(b, Ok(500));
    }
    let r2 = turn_on(&store).conversation("assistant");
    r2.step("step 0", model(0)).await.expect("replays");
    let a = r2
        .model_tool_call("charge", &500, charge(r2.turn(), &ok, true))
        .await;
    let (next, _) = next_step(&r2, 1, &a).await;
    assert!(next.is_ok(), "{next:?}");
    assert_eq!(ok.load(Ordering::SeqCst), 1);
}

/// R1 asks step 1 and is "killed" (the step future leaked, its claim left to its lease). R2
/// replays step 0 and makes the charge: it waits for the step's lease, then charges.
#[tokio::test]
async fn a_restart_after_a_kill_while_asking_waits_for_the_steps_lease_only() {
    let store: Arc<dyn Store> = Arc::new(MemoryStore::new());
    let ok = AtomicU32::new(0);
    {
        let r1 = turn_on(&store)
            .conversation("assistant")
            .with_lease(Duration::from_millis(500));
        r1.step("step 0", model(0)).await.expect("step 0");
        let read = r1
            .model_tool_call("charge", &500, charge(r1.turn(), &ok, true))
            .await;
        let request = format!("after {read:?}");
        let mut step1 = Box::pin(r1.step(&request, async {
            std::future::pending::<()>().await;
            model(1).await
        }));
        let _ = futures_poll_once(step1.as_mut()).await;
        std::mem::forget(step1);
    }
    let r2 = turn_on(&store)
        .with_in_flight_wait(Duration::from_secs(2))
        .conversation("assistant");
    r2.step("step 0", model(0)).await.expect("replays");
    let started = tokio::time::Instant::now();
    let read = r2
        .model_tool_call("charge", &500, charge(r2.turn(), &ok, false))
        .await;
    assert_eq!(read, Ok(500), "after {:?}", started.elapsed());
    assert_eq!(ok.load(Ordering::SeqCst), 1);
    assert!(
        started.elapsed() < Duration::from_secs(2),
        "waited for the step's lease only"
    );
    // (R2's own step 1 is not asked here: the leaked step future stays the single-flight
    // leader of step 1's key in this process, an artifact of emulating SIGKILL by a leak.)
}

async fn futures_poll_once<F: std::future::Future + Unpin>(mut f: F) -> Option<F::Output> {
    std::future::poll_fn(|cx| {
        std::task::Poll::Ready(match std::pin::Pin::new(&mut f).poll(cx) {
            std::task::Poll::Ready(out) => Some(out),
            std::task::Poll::Pending => None,
        })
    })
    .await
}

/// One run: the model's charge fails; it retries in a task spawned with `engine::spawn`
/// inside the model's call, which goes through. The next step is asked.
#[tokio::test]
async fn a_lone_run_whose_retry_runs_in_a_spawned_task_is_not_stopped() {
    let store: Arc<dyn Store> = Arc::new(MemoryStore::new());
    let a = stepped(&store).await;
    let ok = Arc::new(AtomicU32::new(0));
    let first = a
        .model_tool_call("charge", &500, charge(a.turn(), &ok, true))
        .await;
    assert!(first.is_err());
    let turn = a.turn().clone();
    let ok2 = Arc::clone(&ok);
    let again = a
        .model_tool_call("charge", &500, async move {
            spawn(async move { charge(&turn, &ok2, false).await })
                .await
                .expect("joined")
        })
        .await;
    assert_eq!(again, Ok(500));
    let (next, _) = next_step(&a, 1, &(first, again)).await;
    assert!(next.is_ok(), "one run, no overlap: {next:?}");
}

/// One run, two conversations at once (a planner and a writer). The planner's charge fails;
/// the writer's model asks for the same charge (one action, the same key), and its charge is
/// still running when the planner asks its next step: the key is held by this run's own
/// claim, and the next step is asked.
#[tokio::test]
async fn a_lone_run_whose_other_conversation_is_still_charging_is_not_stopped() {
    let store: Arc<dyn Store> = Arc::new(MemoryStore::new());
    let turn = turn_on(&store);
    let planner = turn.conversation("planner");
    let writer = turn.conversation("writer");
    planner.step("p0", model(0)).await.expect("p0");
    writer.step("w0", model(0)).await.expect("w0");
    let ok = AtomicU32::new(0);
    let read_p = planner
        .model_tool_call("charge", &500, charge(&turn, &ok, true))
        .await;
    assert!(read_p.is_err());
    let writer_charges = writer.model_tool_call(
        "charge",
        &500,
        execute(call_of(&CHARGE, &turn, 500), Codec::ok_only(), async {
            tokio::time::sleep(Duration::from_millis(200)).await;
            ok.fetch_add(1, Ordering::SeqCst);
            Ok::<u32, Failed>(500)
        }),
    );
    let planner_next = async {
        tokio::time::sleep(Duration::from_millis(50)).await; // the writer's charge runs
        next_step(&planner, 1, &read_p).await
    };
    let (read_w, (next, _)) = tokio::join!(writer_charges, planner_next);
    assert_eq!(read_w, Ok(500));
    assert!(next.is_ok(), "one run, no overlap: {next:?}");
}

/// Run A asked step 0 live; run B (resumed while A lives) replays it. B's charge fails; B asks
/// step 1 and its model takes a while. Run A asks step 1 too: it waits for B's claim of the
/// step. Meanwhile A makes the charge (a call after step 0 still running alongside A's next
/// step: a background tool call). A's call claims the key and reads step 1 — B's, not its own
/// — waits for it, and returns the failure B's model read: the charge does not run.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_call_alongside_its_runs_step_waiting_for_another_run_reads_that_step() {
    let store: Arc<dyn Store> = Arc::new(MemoryStore::new());
    let a = stepped(&store).await; // A asked step 0 live
    let b = turn_on(&store).conversation("assistant");
    b.step("step 0", model(0)).await.expect("b replays");
    let ok = Arc::new(AtomicU32::new(0));
    let read_b = b
        .model_tool_call("charge", &500, charge(b.turn(), &ok, true))
        .await;
    assert!(read_b.is_err());
    let asking = Arc::new(tokio::sync::Notify::new());
    let b_asked = Arc::new(AtomicBool::new(false));
    let run_b = {
        let (asking, b_asked) = (asking.clone(), b_asked.clone());
        let request = format!("after {read_b:?}");
        tokio::spawn(async move {
            let answer = async {
                b_asked.store(true, Ordering::SeqCst);
                asking.notify_one();
                tokio::time::sleep(Duration::from_millis(400)).await;
                model(1).await
            };
            b.step(&request, answer).await
        })
    };
    asking.notified().await;
    let a_step = a.step("after Ok(500)", model(1));
    let a_call = async {
        tokio::time::sleep(Duration::from_millis(50)).await; // A waits on B's step by now
        a.model_tool_call("charge", &500, charge(a.turn(), &ok, false))
            .await
    };
    let (_a_next, read_a) = tokio::join!(a_step, a_call);
    let b_next = run_b.await.expect("joined");
    assert!(b_next.is_ok() && b_asked.load(Ordering::SeqCst));
    assert_eq!(
        ok.load(Ordering::SeqCst),
        0,
        "A's charge went through ({read_a:?}) while B's model read {read_b:?} (step 1 recorded it)"
    );
}

/// One run: the charge fails, step 1's ask fails twice (model errors), the third ask answers.
/// The run is not stopped.
#[tokio::test]
async fn a_lone_run_whose_step_is_asked_again_after_failed_asks_is_not_stopped() {
    let store: Arc<dyn Store> = Arc::new(MemoryStore::new());
    let a = stepped(&store).await;
    let ok = AtomicU32::new(0);
    let read = a
        .model_tool_call("charge", &500, charge(a.turn(), &ok, true))
        .await;
    let request = format!("after {read:?}");
    for _ in 0..2 {
        let failed: Result<String, Error> = a
            .step(&request, async { Err(Error::Config("model down".into())) })
            .await;
        assert!(failed.is_err());
    }
    let next = a.step(&request, model(1)).await;
    assert!(next.is_ok(), "{next:?}");
}

static RESEARCH: ToolInfo = ToolInfo::idempotent("research");

/// A sub-agent inside an `#[idempotent]` tool the model calls: its charge fails, the tool
/// fails, run R1 dies before the outer step 1. R2 replays, the tool runs again, the sub-agent
/// replays its step 0 and charges (goes through); the outer step 1 is asked.
#[tokio::test]
async fn a_restart_with_a_sub_agent_whose_charge_failed_goes_on() {
    let store: Arc<dyn Store> = Arc::new(MemoryStore::new());
    let ok = Arc::new(AtomicU32::new(0));
    async fn research(turn: Turn, ok: Arc<AtomicU32>, fail: bool) -> Result<u32, Failed> {
        let t2 = turn.clone();
        execute(call_of(&RESEARCH, &turn, 1), Codec::ok_only(), async move {
            let sub = t2.conversation("researcher");
            sub.step("sub 0", model(0)).await.map_err(Failed::from)?;
            let r = sub
                .model_tool_call("charge", &500, charge(&t2, &ok, fail))
                .await;
            r?;
            sub.step("sub 1", model(1)).await.map_err(Failed::from)?;
            Ok(1)
        })
        .await
    }
    {
        let r1 = stepped(&store).await;
        let read = r1
            .model_tool_call(
                "research",
                &1,
                research(r1.turn().clone(), ok.clone(), true),
            )
            .await;
        assert!(read.is_err());
    }
    let r2 = turn_on(&store).conversation("assistant");
    r2.step("step 0", model(0)).await.expect("replays");
    let read = r2
        .model_tool_call(
            "research",
            &1,
            research(r2.turn().clone(), ok.clone(), false),
        )
        .await;
    assert_eq!(read, Ok(1));
    let (next, asked) = next_step(&r2, 1, &read).await;
    assert!(next.is_ok() && asked, "{next:?}");
}

/// Two runs in sequence through `Turn::model_tool_call` (rig's path, with
/// `expect_tool_call`): R1's charge fails, it records step 1, R1's model retries after step 1
/// and it goes through; R2 replays everything without running or stopping.
#[tokio::test]
async fn a_rig_like_restart_replays_a_failure_then_a_success() {
    let store: Arc<dyn Store> = Arc::new(MemoryStore::new());
    let ok = AtomicU32::new(0);
    for run in 0..2 {
        let turn = turn_on(&store);
        let chat = turn.conversation("assistant");
        chat.step("step 0", model(0)).await.expect("step 0");
        chat.expect_tool_call("charge", &500);
        let first = turn
            .model_tool_call("charge", &500, charge(&turn, &ok, true))
            .await;
        assert!(first.is_err(), "run {run}");
        let s1 = chat.step(&format!("after {first:?}"), model(1)).await;
        assert!(s1.is_ok(), "run {run}: {s1:?}");
        chat.expect_tool_call("charge", &500);
        let again = turn
            .model_tool_call("charge", &500, charge(&turn, &ok, false))
            .await;
        assert_eq!(again, Ok(500), "run {run}");
        let s2 = chat.step(&format!("after {again:?}"), model(2)).await;
        assert!(s2.is_ok(), "run {run}: {s2:?}");
    }
    assert_eq!(ok.load(Ordering::SeqCst), 1);
}

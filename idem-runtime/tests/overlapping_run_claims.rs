//! Schedules found by a third review of the overlap handshake (`conversation/overlap.rs`):
//! what counts as this run's own claim of a key, and which records are another run's.

#[path = "overlap_common/mod.rs"]
mod overlap_common;

use std::alloc::{GlobalAlloc, Layout, System};
use std::cell::Cell;
use std::sync::Arc;
use std::sync::atomic::{AtomicU32, Ordering};

use idem_tools_runtime::engine::{Call, Codec, execute};
use idem_tools_runtime::key::ArgsDigest;
use idem_tools_runtime::store::{MemoryStore, Store};
use idem_tools_runtime::{Conversation, Error, ToolInfo, Turn};

use overlap_common::*;

// --- net bytes allocated by this thread (for the memory test) --------------------------------

struct Counting;

thread_local! {
    static NET: Cell<isize> = const { Cell::new(0) };
}

unsafe impl GlobalAlloc for Counting {
    unsafe fn alloc(&self, layout: Layout) -> *mut u8 {
        let _ = NET.try_with(|n| n.set(n.get() + layout.size() as isize));
        unsafe { System.alloc(layout) }
    }
    unsafe fn dealloc(&self, ptr: *mut u8, layout: Layout) {
        let _ = NET.try_with(|n| n.set(n.get() - layout.size() as isize));
        unsafe { System.dealloc(ptr, layout) }
    }
    unsafe fn realloc(&self, ptr: *mut u8, layout: Layout, new_size: usize) -> *mut u8 {
        let _ = NET.try_with(|n| n.set(n.get() + new_size as isize - layout.size() as isize));
        unsafe { System.realloc(ptr, layout, new_size) }
    }
}

#[global_allocator]
static COUNTING: Counting = Counting;

fn net() -> isize {
    NET.with(Cell::get)
}

// --- helpers ---------------------------------------------------------------------------------

static CHECKOUT: ToolInfo = ToolInfo::idempotent("checkout");

/// A call of `charge` with a caller-supplied key (`#[key] order`): the same key in every turn.
fn keyed_call(turn: &Turn, order: &str, cents: u32) -> Call {
    let mut args = ArgsDigest::new(CHARGE.name);
    args.caller_key(order);
    args.arg("cents", &cents).expect("encodes");
    let (key, fingerprint) = args.finish(turn.namespace(), turn.id(), CHARGE.name, CHARGE.version);
    Call::new(&CHARGE, turn, key, fingerprint)
}

/// A first run asked step 0; runs `a` and `b` replay it.
async fn replayed(store: &Arc<dyn Store>) -> (Conversation, Conversation) {
    turn_on(store)
        .conversation("assistant")
        .step("step 0", model(0))
        .await
        .expect("step 0");
    let (a, b) = (
        turn_on(store).conversation("assistant"),
        turn_on(store).conversation("assistant"),
    );
    a.step("step 0", model(0)).await.expect("a replays step 0");
    b.step("step 0", model(0)).await.expect("b replays step 0");
    (a, b)
}

// ---------------------------------------------------------------------------------------------
// (1) a model asked with a failure of a call whose body went through in another run
// ---------------------------------------------------------------------------------------------

/// Runs A and B replay step 0. A's model charges: it fails (key given back). A's application
/// retries the charge itself, outside `model_tool_call`, and that fails too (key given back
/// again). B's model charges, and it goes through. A's own retry gave the key back, so it is
/// not taken for "A made it again": A's step 1 stops.
#[tokio::test]
async fn a_failed_retry_by_the_application_hides_no_other_runs_charge() {
    let store: Arc<dyn Store> = Arc::new(MemoryStore::new());
    let (a, b) = replayed(&store).await;
    let ok = AtomicU32::new(0);
    let read_a = a
        .model_tool_call("charge", &500, charge(a.turn(), &ok, true))
        .await;
    assert!(read_a.is_err());
    let retried = charge(a.turn(), &ok, true).await; // the app's own retry, failing too
    assert!(retried.is_err());

    let read_b = b
        .model_tool_call("charge", &500, charge(b.turn(), &ok, false))
        .await;
    assert_eq!(read_b, Ok(500), "B charged");
    assert_eq!(ok.load(Ordering::SeqCst), 1);
    let (next, asked) = next_step(&a, 1, &read_a).await;
    assert!(
        !asked,
        "A's model was asked (step 1: {next:?}) reading {read_a:?}, while B charged"
    );
}

/// As above, the failed second claim made inside another tool's body: A's model asks for
/// `checkout` (whose body charges the same amount: the same `charge` key) and its charge fails
/// too. B charges; A's step 1 stops.
#[tokio::test]
async fn a_failed_charge_inside_another_tool_hides_no_other_runs_charge() {
    let store: Arc<dyn Store> = Arc::new(MemoryStore::new());
    let (a, b) = replayed(&store).await;
    let ok = AtomicU32::new(0);
    let read_a = a
        .model_tool_call("charge", &500, charge(a.turn(), &ok, true))
        .await;
    assert!(read_a.is_err());
    let turn = a.turn().clone();
    let checkout = execute(call_of(&CHECKOUT, &turn, 500), Codec::ok_only(), async {
        charge(&turn, &ok, true).await
    });
    let second = a.model_tool_call("checkout", &500, checkout).await;
    assert!(second.is_err());

    let read_b = b
        .model_tool_call("charge", &500, charge(b.turn(), &ok, false))
        .await;
    assert_eq!(read_b, Ok(500), "B charged");
    let (next, asked) = next_step(&a, 1, &(read_a.clone(), second)).await;
    assert!(
        !asked,
        "A's model was asked (step 1: {next:?}) reading {read_a:?}, while B charged"
    );
}

// ---------------------------------------------------------------------------------------------
// (2) a lone run stopped with RunOverlap
// ---------------------------------------------------------------------------------------------

/// One run of turn 1. Its model charges order 77 (a caller-supplied key, the same in every
/// turn): it fails. Turn 2 of the conversation (another turn, not another run of this one)
/// charges order 77, and it goes through. Turn 1's next step is asked.
#[tokio::test]
async fn a_caller_key_another_turn_charged_does_not_stop_a_lone_run() {
    let store: Arc<dyn Store> = Arc::new(MemoryStore::new());
    let a = stepped_on(turn_on(&store)).await;
    let ok = AtomicU32::new(0);
    let first = a
        .model_tool_call(
            "charge",
            &500,
            charge_call(keyed_call(a.turn(), "order-77", 500), &ok, true),
        )
        .await;
    assert!(first.is_err());
    let other = Turn::new("conv-1/turn-2").with_store(Arc::clone(&store));
    let charged = charge_call(keyed_call(&other, "order-77", 500), &ok, false).await;
    assert_eq!(charged, Ok(500));
    let (next, _) = next_step(&a, 1, &first).await;
    assert!(next.is_ok(), "one run of turn 1, no overlap: {next:?}");
}

// ---------------------------------------------------------------------------------------------
// (4) memory growing per call
// ---------------------------------------------------------------------------------------------

/// Net bytes a lone run keeps for `calls` further steps, each with a charge of a new amount,
/// after step 0 (and one failed charge first, if `fail_first`). Store and run are kept alive.
async fn kept_for(calls: u32, fail_first: bool) -> isize {
    let store: Arc<dyn Store> = Arc::new(MemoryStore::new());
    let turn = turn_on(&store)
        .with_max_model_steps(u32::MAX)
        .with_actions_per_tool(u32::MAX);
    let a = stepped_on(turn.clone()).await;
    let ok = AtomicU32::new(0);
    if fail_first {
        let failed = a
            .model_tool_call(
                "charge",
                &1,
                charge_call(call_of(&CHARGE, &turn, 1), &ok, true),
            )
            .await;
        assert!(failed.is_err());
    }
    // Warm up (first allocations of maps, tracing, ...).
    for n in 0..50 {
        a.step(&format!("warm {n}"), model(n)).await.expect("step");
    }
    let before = net();
    for n in 0..calls {
        let cents = 10_000 + n;
        let charged = a
            .model_tool_call(
                "charge",
                &cents,
                charge_call(call_of(&CHARGE, &turn, cents), &ok, false),
            )
            .await;
        assert!(charged.is_ok());
        a.step(&format!("after {n}"), model(n)).await.expect("step");
    }
    let kept = net() - before;
    drop((a, turn, store));
    kept
}

/// A long lone run that once read a failed charge keeps nothing per key it claims afterwards
/// (each tool call and each model step): only keys given back are watched.
#[tokio::test]
async fn a_long_run_keeps_no_claim_per_call_after_one_failure() {
    const CALLS: u32 = 2_000;
    let baseline = kept_for(CALLS, false).await;
    let after_failure = kept_for(CALLS, true).await;
    let extra = after_failure - baseline;
    assert!(
        extra < (CALLS as isize) * 8,
        "after one failure the run keeps {extra} more bytes for {CALLS} calls \
         ({} per call): baseline {baseline}, after a failure {after_failure}",
        extra / CALLS as isize
    );
}

// ---------------------------------------------------------------------------------------------
// (1) again: a skipped argument (`skip(trace)`: out of the key, in the fingerprint)
// ---------------------------------------------------------------------------------------------

static CHARGE_SKIP: ToolInfo = ToolInfo::idempotent("charge").with_skipped(&["trace"]);

/// `charge(cents, trace)` with `skip(trace)`: each run passes its own trace id.
fn traced_call(turn: &Turn, cents: u32, trace: &str) -> Call {
    let mut args = ArgsDigest::new(CHARGE_SKIP.name);
    args.arg("cents", &cents).expect("encodes");
    args.fingerprint_arg("trace", trace).expect("encodes");
    let (key, fingerprint) = args.finish(
        turn.namespace(),
        turn.id(),
        CHARGE_SKIP.name,
        CHARGE_SKIP.version,
    );
    Call::new(&CHARGE_SKIP, turn, key, fingerprint)
}

/// Runs A and B replay step 0; each passes its own trace id to `charge` (skipped: the same
/// key, another fingerprint). A's charge fails (key given back). B's goes through. A's step 1
/// reads the key's record — the same action, whatever its fingerprint — and stops.
#[tokio::test]
async fn a_charge_with_another_runs_skipped_argument_is_seen_by_the_next_step() {
    let store: Arc<dyn Store> = Arc::new(MemoryStore::new());
    let (a, b) = replayed(&store).await;
    let ok = AtomicU32::new(0);
    let read_a = a
        .model_tool_call(
            "charge",
            &500,
            charge_call(traced_call(a.turn(), 500, "trace-a"), &ok, true),
        )
        .await;
    assert!(read_a.is_err());
    let read_b = b
        .model_tool_call(
            "charge",
            &500,
            charge_call(traced_call(b.turn(), 500, "trace-b"), &ok, false),
        )
        .await;
    assert_eq!(read_b, Ok(500), "B charged");
    assert_eq!(ok.load(Ordering::SeqCst), 1);
    let (next, asked) = next_step(&a, 1, &read_a).await;
    assert!(
        !asked,
        "A's model was asked (step 1: {next:?}) reading {read_a:?}, while B charged"
    );
}

// ---------------------------------------------------------------------------------------------
// (1) again: a sub-agent's call reads only its own conversation's next step
// ---------------------------------------------------------------------------------------------

/// The model's call `pay_agent` runs a sub-agent (conversation "payer" inside the call). In A
/// the sub-agent's charge fails and the agent gives up at once (no inner step 1): A's outer
/// model will read "could not pay". B's `pay_agent` starts (its read of the outer step 1 finds
/// nothing yet) and replays the inner step 0. A asks its outer step 1. B's inner charge then
/// claims the key and reads the inner step 1 and the outer one A asked: it returns A's
/// failure of `pay_agent`, and does not run.
#[tokio::test]
async fn a_sub_agents_charge_reads_the_outer_step_another_run_asked() {
    use tokio::sync::Notify;
    let store: Arc<dyn Store> = Arc::new(MemoryStore::new());
    let (a, b) = replayed(&store).await;
    let ok = Arc::new(AtomicU32::new(0));

    let turn = a.turn().clone();
    let agent_a = async {
        let sub = turn.conversation("payer");
        sub.step("pay 500", async { Ok::<_, Error>("charge 500".to_owned()) })
            .await
            .map_err(Failed::from)?;
        sub.model_tool_call("charge", &500, charge(&turn, &ok, true))
            .await?; // the agent gives up on a failed charge
        Ok::<u32, Failed>(500)
    };
    let read_a = a.model_tool_call("pay_agent", &500, agent_a).await;
    assert!(read_a.is_err());

    let (entered, go) = (Arc::new(Notify::new()), Arc::new(Notify::new()));
    let run_b = {
        let (b, ok, entered, go) = (b.clone(), ok.clone(), entered.clone(), go.clone());
        tokio::spawn(async move {
            let turn = b.turn().clone();
            let agent_b = async {
                let sub = turn.conversation("payer");
                sub.step("pay 500", async { Ok::<_, Error>("not asked".to_owned()) })
                    .await
                    .map_err(Failed::from)?;
                entered.notify_one();
                go.notified().await; // B's sub-agent is a little slower
                sub.model_tool_call("charge", &500, charge(&turn, &ok, false))
                    .await
            };
            b.model_tool_call("pay_agent", &500, agent_b).await
        })
    };
    entered.notified().await;
    let (next, asked) = next_step(&a, 1, &read_a).await;
    go.notify_one();
    let read_b = run_b.await.expect("run B");
    assert!(
        !(asked && read_b.is_ok()),
        "A's outer model was asked ({next:?}) reading {read_a:?}, while B's pay_agent charged \
         ({read_b:?}, ok bodies: {})",
        ok.load(Ordering::SeqCst)
    );
}

// ---------------------------------------------------------------------------------------------
// (1) again: a call refused after its claim (another run still asks the step) tells no watch
// ---------------------------------------------------------------------------------------------

/// Runs A (in-flight wait 200 ms) and B replay step 0. B asks step 1; its model is slow (500
/// ms) and then fails. Meanwhile A's model charges: the key is claimed, B still asks step 1
/// past A's wait, so the call is refused with RunOverlap and the key given back. B's ask
/// fails; B's model charges, and it goes through. A's step 1 finds the key it gave back
/// claimed by B, and stops.
#[tokio::test]
async fn a_charge_refused_after_its_claim_is_seen_by_the_next_step() {
    use std::time::Duration;
    let store: Arc<dyn Store> = Arc::new(MemoryStore::new());
    turn_on(&store)
        .conversation("assistant")
        .step("step 0", model(0))
        .await
        .expect("step 0");
    let a = turn_on(&store)
        .with_in_flight_wait(Duration::from_millis(200))
        .conversation("assistant");
    let b = turn_on(&store).conversation("assistant");
    a.step("step 0", model(0)).await.expect("a replays step 0");
    b.step("step 0", model(0)).await.expect("b replays step 0");
    let ok = Arc::new(AtomicU32::new(0));

    let b_step = {
        let b = b.clone();
        tokio::spawn(async move {
            b.step("b: step 1", async {
                tokio::time::sleep(Duration::from_millis(500)).await;
                Err::<String, Error>(Error::Config("the model is overloaded".into()))
            })
            .await
        })
    };
    tokio::time::sleep(Duration::from_millis(20)).await; // B claimed step 1
    let read_a = a
        .model_tool_call("charge", &500, charge(a.turn(), &ok, false))
        .await;
    assert!(read_a.is_err(), "A's charge was refused: {read_a:?}");
    assert!(b_step.await.expect("B").is_err(), "B's ask failed");

    let read_b = b
        .model_tool_call("charge", &500, charge(b.turn(), &ok, false))
        .await;
    assert_eq!(read_b, Ok(500), "B charged");
    let (next, asked) = next_step(&a, 1, &read_a).await;
    assert!(
        !asked,
        "A's model was asked (step 1: {next:?}) reading {read_a:?}, while B charged"
    );
}

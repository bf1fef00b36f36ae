//! Durable turns: a failed tool call that the model read is read again by a restarted run
//! (`Turn::model_tool_call`), so the run's next request is the recorded one.

#[path = "fault_store/mod.rs"]
mod fault_store;

use std::sync::Arc;
use std::sync::atomic::{AtomicU32, AtomicUsize, Ordering};
use std::time::Duration;

use fault_store::{Fault, FaultStore, Op};

use idem_tools_runtime::store::{MemoryStore, Store};
use idem_tools_runtime::{Error, Turn};
use serde::{Deserialize, Serialize};

/// What the model reads of a failed call.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
struct Failed(String);

impl From<Error> for Failed {
    fn from(error: Error) -> Self {
        Failed(error.model_text())
    }
}

/// What the mail server answers a message it sent (the same every time: a tool's success
/// replays from its own key).
const SENT: u32 = 7;

/// A mail server that fails the calls it is told to fail, in order, then succeeds.
#[derive(Default)]
struct Mail {
    calls: AtomicU32,
}

impl Mail {
    async fn send(&self, failures: &[&str]) -> Result<u32, Failed> {
        let n = self.calls.fetch_add(1, Ordering::SeqCst);
        tokio::task::yield_now().await;
        match failures.get(n as usize) {
            Some(text) => Err(Failed((*text).to_owned())),
            None => Ok(SENT),
        }
    }

    fn calls(&self) -> u32 {
        self.calls.load(Ordering::SeqCst)
    }
}

/// What a scripted model answers at each step: which tool to call (always the same call).
async fn model(step: u32) -> Result<String, Error> {
    Ok(format!("step {step}: send_mail to ada"))
}

/// One run of the turn: `calls` times a model step, then the call it asks for; then a last
/// step, whose request holds what the model read of the last call (as every step's request
/// holds what it read of the call before). Returns what the model read of each call.
async fn run(
    turn: Turn,
    durable: bool,
    mail: &Mail,
    failures: &[&str],
    calls: u32,
) -> Vec<Result<u32, Failed>> {
    run_until(turn, durable, mail, failures, calls, true).await
}

/// [`run`], cut off before its last step unless `last_step`.
async fn run_until(
    turn: Turn,
    durable: bool,
    mail: &Mail,
    failures: &[&str],
    calls: u32,
    last_step: bool,
) -> Vec<Result<u32, Failed>> {
    let chat = durable.then(|| turn.conversation("assistant"));
    let mut read = Vec::new();
    for step in 0..=calls {
        if let Some(chat) = &chat
            && (step < calls || last_step)
        {
            // A request that differs from the recorded one fails the run here.
            let request = format!("step {step}, after {:?}", read.last());
            chat.step(&request, model(step))
                .await
                .expect("a model step");
        }
        if step < calls {
            let call = mail.send(failures);
            read.push(turn.model_tool_call("send_mail", "ada", call).await);
        }
    }
    read
}

fn turn(store: &Arc<dyn Store>) -> Turn {
    Turn::new("conv-1/turn-1").with_store(Arc::clone(store))
}

#[tokio::test]
async fn a_failure_the_model_read_is_read_again_by_a_restarted_run() {
    let store: Arc<dyn Store> = Arc::new(MemoryStore::new());
    let mail = Mail::default();
    let first = run(turn(&store), true, &mail, &["timed out"], 2).await;
    assert_eq!(first, [Err(Failed("timed out".into())), Ok(SENT)]);
    assert_eq!(mail.calls(), 2);

    // Restarted from the top, the server would now answer every call: the first call is not
    // made, the model reads the failure it read before; the second call runs (a success is the
    // tool's own key's to replay).
    let restarted = run(turn(&store), true, &mail, &[], 2).await;
    assert_eq!(restarted[0], first[0]);
    assert!(restarted[1].is_ok());
    assert_eq!(mail.calls(), 3, "only the call that succeeded ran again");
}

/// On a durable store, the restart in another process's place: a new store handle.
#[cfg(feature = "sqlite")]
#[tokio::test]
async fn a_failure_recorded_in_sqlite_is_read_again_through_a_new_handle() {
    use idem_test_support::TempDir;
    use idem_tools_runtime::SqliteStore;
    let dir = TempDir::new("tool-failures");
    let open = || -> Arc<dyn Store> { Arc::new(SqliteStore::open(dir.db()).expect("open")) };
    let mail = Mail::default();
    let first = run(turn(&open()), true, &mail, &["timed out"], 2).await;
    let restarted = run(turn(&open()), true, &mail, &[], 2).await;
    assert_eq!(restarted[0], first[0]);
    assert_eq!(mail.calls(), 3, "only the call that succeeded ran again");
}

#[tokio::test]
async fn the_failures_of_one_call_after_successive_steps_are_each_read_again() {
    let store: Arc<dyn Store> = Arc::new(MemoryStore::new());
    let mail = Mail::default();
    let failures = ["timed out", "rate limited"];
    let first = run(turn(&store), true, &mail, &failures, 3).await;
    assert_eq!(
        first,
        [
            Err(Failed("timed out".into())),
            Err(Failed("rate limited".into())),
            Ok(SENT)
        ]
    );

    let restarted = run(turn(&store), true, &mail, &[], 3).await;
    assert_eq!(restarted[..2], first[..2], "each failure read where it was");
    assert_eq!(mail.calls(), 4, "the failed calls were not made again");
}

#[tokio::test]
async fn outside_a_durable_turn_a_failed_call_runs_again() {
    let store: Arc<dyn Store> = Arc::new(MemoryStore::new());
    let mail = Mail::default();
    let first = run(turn(&store), false, &mail, &["timed out"], 1).await;
    assert_eq!(first, [Err(Failed("timed out".into()))]);
    let restarted = run(turn(&store), false, &mail, &[], 1).await;
    assert_eq!(restarted, [Ok(SENT)], "nothing was recorded: the call ran");
}

#[tokio::test]
async fn a_restarted_run_that_asks_its_model_live_makes_its_calls() {
    let store: Arc<dyn Store> = Arc::new(MemoryStore::new());
    let mail = Mail::default();
    run(turn(&store), true, &mail, &["timed out"], 1).await;

    // Another turn id: every step is asked live, so no failure of the first turn applies.
    let other = Turn::new("conv-1/turn-2").with_store(Arc::clone(&store));
    let read = run(other, true, &mail, &[], 1).await;
    assert_eq!(read, [Ok(SENT)]);
    assert_eq!(mail.calls(), 2);
}

/// A failure is kept with the model's next step: a run cut off before that step (or one that
/// diverges there) leaves nothing a later run would read, and the restarted run makes the call.
#[tokio::test]
async fn a_failure_read_after_the_last_recorded_step_is_not_kept() {
    let store: Arc<dyn Store> = Arc::new(MemoryStore::new());
    let mail = Mail::default();
    let first = run_until(turn(&store), true, &mail, &["timed out"], 1, false).await;
    assert_eq!(first, [Err(Failed("timed out".into()))]);
    let restarted = run(turn(&store), true, &mail, &[], 1).await;
    assert_eq!(restarted, [Ok(SENT)], "the call was made again");
    assert_eq!(mail.calls(), 2);
}

/// A run that replays a step, makes a call that fails this time (it went through before) and
/// so diverges at the next step: its failure is not kept, and a later restart replays the
/// turn as it was first recorded.
#[tokio::test]
async fn a_failure_read_by_a_run_that_diverges_is_not_read_by_a_later_run() {
    let store: Arc<dyn Store> = Arc::new(MemoryStore::new());
    let mail = Mail::default();
    let done = run(turn(&store), true, &mail, &[], 1).await;
    assert_eq!(done, [Ok(SENT)]);
    // The second run's call fails (the service is down for a moment): its next request
    // differs from the recorded one.
    let diverged = turn(&store);
    let chat = diverged.conversation("assistant");
    chat.step("step 0, after None", model(0))
        .await
        .expect("replayed");
    let read = diverged
        .model_tool_call("send_mail", "ada", async {
            Err::<u32, _>(Failed("503".into()))
        })
        .await;
    let next = chat
        .step(&format!("step 1, after {:?}", Some(&read)), model(1))
        .await;
    assert!(
        matches!(next, Err(Error::ModelStepDiverged { .. })),
        "{next:?}"
    );
    // The service is up again: the turn replays to its end.
    let again = run(turn(&store), true, &mail, &[], 1).await;
    assert_eq!(again, [Ok(SENT)]);
}

/// A restarted run in which one conversation asks its model live while another replays: the
/// replaying one still reads the failures its calls met.
#[tokio::test]
async fn a_conversation_that_replays_reads_its_failures_while_another_asks_live() {
    let store: Arc<dyn Store> = Arc::new(MemoryStore::new());
    let mail = Mail::default();
    let first = turn(&store);
    first
        .conversation("writer")
        .step("draft", model(0))
        .await
        .expect("the writer's step");
    let call = mail.send(&["timed out"]);
    let read = first.model_tool_call("send_mail", "ada", call).await;
    assert_eq!(read, Err(Failed("timed out".into())));
    step_of(&first, "writer", "draft, after it timed out").await;
    // The run dies before its planner asks anything.

    let restarted = turn(&store);
    restarted
        .conversation("planner")
        .step("plan", model(1))
        .await
        .expect("the planner asks live");
    restarted
        .conversation("writer")
        .step("draft", model(0))
        .await
        .expect("the writer's step replays");
    let call = mail.send(&[]);
    let again = restarted.model_tool_call("send_mail", "ada", call).await;
    assert_eq!(again, read, "the writer read its failure again");
    assert_eq!(mail.calls(), 1, "the failed call was not made again");
}

/// A step of the conversation `label`, answered by a scripted model.
async fn step_of(turn: &Turn, label: &str, request: &str) {
    let answer = async { Ok::<_, Error>(format!("{label}: send_mail to ada")) };
    turn.conversation(label)
        .step(request, answer)
        .await
        .expect("a model step");
}

/// Two conversations make the same call, the planner's fails and the writer's goes through; a
/// restarted run replays them in the other order, and each reads what it read: a call is told
/// apart by the step whose response made it, not by how many times the run made it.
#[tokio::test]
async fn conversations_that_make_the_same_call_read_their_own_outcomes_in_any_order() {
    let store: Arc<dyn Store> = Arc::new(MemoryStore::new());
    for by_conversation in [true, false] {
        let id = format!("conv-1/turn-order-{by_conversation}");
        let turn = || Turn::new(&id).with_store(Arc::clone(&store));
        // `Conversation::model_tool_call` names the conversation; `Turn::model_tool_call` takes
        // the run's latest step (agents run one after another here).
        let call = async |turn: &Turn, label: &str, up: bool| -> Result<u32, Failed> {
            let mail = if up {
                Ok(1)
            } else {
                Err(Failed("timed out".into()))
            };
            if by_conversation {
                let chat = turn.conversation(label);
                chat.model_tool_call("send_mail", "ada", async { mail })
                    .await
            } else {
                turn.model_tool_call("send_mail", "ada", async { mail })
                    .await
            }
        };
        let first = turn();
        step_of(&first, "planner", "plan").await;
        let planned = call(&first, "planner", false).await;
        step_of(&first, "writer", "write").await;
        let written = call(&first, "writer", true).await;
        assert_eq!(planned, Err(Failed("timed out".into())));
        assert_eq!(written, Ok(1));
        step_of(&first, "planner", &format!("after {planned:?}")).await;
        step_of(&first, "writer", &format!("after {written:?}")).await;

        let restarted = turn();
        step_of(&restarted, "writer", "write").await;
        let written_again = call(&restarted, "writer", true).await;
        step_of(&restarted, "planner", "plan").await;
        let planned_again = call(&restarted, "planner", true).await;
        assert_eq!(written_again, written, "by conversation: {by_conversation}");
        assert_eq!(planned_again, planned, "by conversation: {by_conversation}");
    }
}

/// One response asks for two calls: an `#[idempotent]` tool that runs a sub-agent (its own
/// conversation, steps and calls), then `send_mail`, which fails. Restarted, the tool's result
/// replays and the sub-agent asks nothing, and `send_mail` still reads its failure: the steps
/// a call asks while it runs do not come before the next call.
#[tokio::test]
async fn a_call_after_a_tool_that_ran_a_sub_agent_reads_its_failure_again() {
    use idem_tools_runtime::key::ArgsDigest;
    use idem_tools_runtime::{Call, Codec, ToolInfo, execute};
    static RESEARCH: ToolInfo = ToolInfo::idempotent("research");
    async fn research(turn: &Turn) -> Result<String, Failed> {
        let mut args = ArgsDigest::new(RESEARCH.name);
        args.arg("q", "ada")?;
        let (key, fingerprint) = args.finish(turn.namespace(), turn.id(), "research", 1);
        let call = Call::new(&RESEARCH, turn, key, fingerprint);
        execute(call, Codec::ok_only(), async {
            step_of(turn, "researcher", "research").await;
            let lookup = async { Err::<u32, _>(Failed("not found".into())) };
            let read = turn.model_tool_call("lookup", "ada", lookup).await;
            step_of(turn, "researcher", &format!("after {read:?}")).await;
            Ok(format!("researched: {read:?}"))
        })
        .await
    }
    let store: Arc<dyn Store> = Arc::new(MemoryStore::new());
    let mail = Mail::default();
    let respond = async |turn: &Turn, failures: &[&str]| {
        step_of(turn, "assistant", "go").await;
        let researched = turn
            .model_tool_call("research", "ada", research(turn))
            .await;
        let sent = turn
            .model_tool_call("send_mail", "ada", mail.send(failures))
            .await;
        step_of(
            turn,
            "assistant",
            &format!("after {researched:?}, {sent:?}"),
        )
        .await;
        (researched, sent)
    };
    let first = respond(&turn(&store), &["timed out"]).await;
    assert_eq!(first.1, Err(Failed("timed out".into())));
    let again = respond(&turn(&store), &[]).await;
    assert_eq!(again, first);
    assert_eq!(mail.calls(), 1, "send_mail was not made again");
}

/// One response asks for the same call twice (the first fails, the second goes through): the
/// two are told apart by their order among the step's calls.
#[tokio::test]
async fn the_same_call_twice_after_one_step_is_told_apart_by_its_order() {
    let store: Arc<dyn Store> = Arc::new(MemoryStore::new());
    let mail = Mail::default();
    let twice = async |turn: &Turn, failures: &[&str]| {
        step_of(turn, "assistant", "go").await;
        let first = turn
            .model_tool_call("send_mail", "ada", mail.send(failures))
            .await;
        let second = turn
            .model_tool_call("send_mail", "ada", mail.send(failures))
            .await;
        step_of(turn, "assistant", &format!("after {first:?}, {second:?}")).await;
        [first, second]
    };
    let read = twice(&turn(&store), &["timed out"]).await;
    assert_eq!(read, [Err(Failed("timed out".into())), Ok(SENT)]);
    let again = twice(&turn(&store), &[]).await;
    assert_eq!(again[0], read[0]);
    assert_eq!(again[1], Ok(SENT));
    assert_eq!(mail.calls(), 3, "the second call ran again, the first not");
}

/// A call made from inside its conversation's own step (a model client that runs tools while
/// it answers) does not wait for the step: it counts as a call after the step before.
#[tokio::test]
async fn a_call_made_inside_its_conversations_step_does_not_wait_for_it() {
    let store: Arc<dyn Store> = Arc::new(MemoryStore::new());
    let chat = turn(&store).conversation("assistant");
    step_of(chat.turn(), "assistant", "go").await;
    let inner = chat.clone();
    let answer = async move {
        let sent = inner
            .model_tool_call("send_mail", "ada", async { Ok::<_, Failed>(SENT) })
            .await;
        Ok::<_, Error>(format!("{sent:?}"))
    };
    let step = chat.step("answer while calling", answer);
    let answered = tokio::time::timeout(std::time::Duration::from_secs(5), step).await;
    assert_eq!(answered.expect("no deadlock").expect("a step"), "Ok(7)");
}

// Schedules found by an adversarial review: a read of the next step's failures that lands
// after the step, a read the store fails, an agent's call while another agent's call runs, a
// failed ask of the step that carries the failures.

/// A store whose first `get` meets `fault`, the others not.
fn first_get(inner: &Arc<dyn Store>, fault: Fault) -> Arc<dyn Store> {
    let gets = AtomicUsize::new(0);
    Arc::new(FaultStore::new(Arc::clone(inner), move |op| match op {
        Op::Get if gets.fetch_add(1, Ordering::SeqCst) == 0 => fault,
        _ => Fault::None,
    }))
}

/// A call that counts its runs in `ran` and fails if `fail`.
async fn counted(ran: &AtomicU32, fail: bool) -> Result<u32, Failed> {
    ran.fetch_add(1, Ordering::SeqCst);
    if fail {
        Err(Failed("timed out".into()))
    } else {
        Ok(SENT)
    }
}

/// A clone of the conversation reads the failures recorded with step 1 slowly, and the
/// conversation answers step 1 meanwhile: what the read brings back is step 1's, not step
/// 2's, so the call after step 1 (which the first run never made) runs.
#[tokio::test]
async fn a_read_of_the_next_steps_failures_that_lands_after_the_step_is_not_taken_for_the_next() {
    let memory: Arc<dyn Store> = Arc::new(MemoryStore::new());
    let ran = AtomicU32::new(0);
    let first = turn(&memory).conversation("assistant");
    first.step("step 0", model(0)).await.expect("step 0");
    let read = first
        .model_tool_call("send_mail", "ada", counted(&ran, true))
        .await;
    first
        .step(&format!("step 1 after {read:?}"), model(1))
        .await
        .expect("step 1");
    // Cut off here.

    let slow = first_get(&memory, Fault::Delay(Duration::from_millis(200)));
    let chat = turn(&slow).conversation("assistant");
    chat.step("step 0", model(0)).await.expect("step 0 replays");
    let clone = chat.clone();
    let lookup = async move {
        clone
            .model_tool_call("lookup", "ada", async { Ok::<u32, Failed>(1) })
            .await
    };
    let main = async {
        let read = chat
            .model_tool_call("send_mail", "ada", counted(&ran, false))
            .await;
        assert_eq!(read, Err(Failed("timed out".into())), "read again");
        chat.step(&format!("step 1 after {read:?}"), model(1))
            .await
            .expect("step 1");
        tokio::time::sleep(Duration::from_millis(400)).await;
        chat.model_tool_call("send_mail", "ada", counted(&ran, false))
            .await
    };
    let (_, after_step_1) = tokio::join!(lookup, main);
    assert_eq!(after_step_1, Ok(SENT), "the call after step 1 ran");
    assert_eq!(ran.load(Ordering::SeqCst), 2);
    chat.step(&format!("step 2 after {after_step_1:?}"), model(2))
        .await
        .expect("step 2");

    // A plain restart replays to its end.
    let again = turn(&memory).conversation("assistant");
    again
        .step("step 0", model(0))
        .await
        .expect("step 0 replays");
    let read = again
        .model_tool_call("send_mail", "ada", counted(&ran, false))
        .await;
    again
        .step(&format!("step 1 after {read:?}"), model(1))
        .await
        .expect("step 1 replays");
    let read = again
        .model_tool_call("send_mail", "ada", counted(&ran, false))
        .await;
    let step_2 = again
        .step(&format!("step 2 after {read:?}"), model(2))
        .await;
    assert!(step_2.is_ok(), "{step_2:?}");
}

/// The store fails the first read of the failures recorded with step 1: that call runs (and
/// fails again, as before); the next call, with the store back, reads its recorded failure.
#[tokio::test]
async fn a_read_the_store_fails_is_made_again_by_the_next_call() {
    let memory: Arc<dyn Store> = Arc::new(MemoryStore::new());
    let failing = |to: &'static str| async move { Err::<u32, _>(Failed(to.into())) };
    let first = turn(&memory).conversation("assistant");
    first.step("step 0", model(0)).await.expect("step 0");
    let ada = first
        .model_tool_call("send_mail", "ada", failing("ada"))
        .await;
    let bob = first
        .model_tool_call("send_mail", "bob", failing("bob"))
        .await;
    first
        .step(&format!("after {ada:?} {bob:?}"), model(1))
        .await
        .expect("step 1");

    let flaky = first_get(&memory, Fault::FailBefore);
    let chat = turn(&flaky).conversation("assistant");
    chat.step("step 0", model(0)).await.expect("step 0 replays");
    let ada = chat
        .model_tool_call("send_mail", "ada", failing("ada"))
        .await;
    let ran = AtomicU32::new(0);
    let bob = chat
        .model_tool_call("send_mail", "bob", counted(&ran, false))
        .await;
    assert_eq!(bob, Err(Failed("bob".into())), "read again");
    assert_eq!(ran.load(Ordering::SeqCst), 0);
    let step_1 = chat.step(&format!("after {ada:?} {bob:?}"), model(1)).await;
    assert!(step_1.is_ok(), "{step_1:?}");
}

/// Agent a's slow call is still running when agent b answers its step and makes a call: b's
/// call follows b's step, whatever a's call was attributed to.
#[tokio::test]
async fn a_call_of_one_agent_while_anothers_call_runs_follows_its_own_step() {
    let memory: Arc<dyn Store> = Arc::new(MemoryStore::new());
    let script = async |restart: bool| {
        let turn = turn(&memory);
        let (a, b) = (turn.conversation("a"), turn.conversation("b"));
        a.step("a0", model(0)).await.expect("a's step");
        let (done, wait) = tokio::sync::oneshot::channel::<()>();
        let a_calls = turn.model_tool_call("slow", "x", async {
            wait.await.ok();
            Ok::<u32, Failed>(1)
        });
        let b_runs = async {
            b.step("b0", model(0)).await.expect("b's step");
            done.send(()).ok();
            tokio::time::sleep(Duration::from_millis(10)).await;
            let mail = async {
                if restart {
                    Ok(SENT)
                } else {
                    Err(Failed("timed out".into()))
                }
            };
            let read = turn.model_tool_call("send_mail", "ada", mail).await;
            b.step(&format!("b1 after {read:?}"), model(1)).await
        };
        tokio::join!(a_calls, b_runs).1
    };
    script(false).await.expect("the first run");
    let again = script(true).await;
    assert!(again.is_ok(), "b read its failure again: {again:?}");
}

/// A restarted run replays step 0, its call fails (step 1 was never recorded), the ask of step
/// 1 fails once and is asked again: the failure is recorded with the step as asked again.
#[tokio::test]
async fn a_failure_is_recorded_with_the_step_asked_again_after_a_failed_ask() {
    let memory: Arc<dyn Store> = Arc::new(MemoryStore::new());
    let first = turn(&memory).conversation("assistant");
    first.step("step 0", model(0)).await.expect("step 0");
    // Cut off.

    let chat = turn(&memory).conversation("assistant");
    chat.step("step 0", model(0)).await.expect("step 0 replays");
    let read = chat
        .model_tool_call("send_mail", "ada", async {
            Err::<u32, _>(Failed("x".into()))
        })
        .await;
    let request = format!("step 1 after {read:?}");
    let down = async { Err::<String, Error>(Error::Config("the provider is down".into())) };
    assert!(chat.step(&request, down).await.is_err());
    chat.step(&request, model(1)).await.expect("asked again");

    let again = turn(&memory).conversation("assistant");
    again
        .step("step 0", model(0))
        .await
        .expect("step 0 replays");
    let read = again
        .model_tool_call("send_mail", "ada", async { Ok::<u32, Failed>(SENT) })
        .await;
    let step_1 = again
        .step(&format!("step 1 after {read:?}"), model(1))
        .await;
    assert!(step_1.is_ok(), "{step_1:?}");
}

/// As `a_call_after_a_tool_that_ran_a_sub_agent_reads_its_failure_again`, the tool run detached
/// (in a task of its own, where the sub-agent's steps are not inside the call), with the
/// outer step saying which calls it asked for (as rig's `RecordedModel` does): `send_mail` is
/// the outer conversation's call whatever answered a step since.
#[tokio::test]
async fn a_call_the_step_asked_for_is_its_conversations_whatever_answered_since() {
    use idem_tools_runtime::key::ArgsDigest;
    use idem_tools_runtime::{Call, Codec, ToolInfo, execute_detached};
    static RESEARCH: ToolInfo = ToolInfo::idempotent("research");
    async fn research(turn: Turn) -> Result<String, Failed> {
        let mut args = ArgsDigest::new(RESEARCH.name);
        args.arg("q", "ada")?;
        let (key, fingerprint) = args.finish(turn.namespace(), turn.id(), "research", 1);
        let call = Call::new(&RESEARCH, &turn, key, fingerprint);
        execute_detached(call, Codec::ok_only(), async move {
            step_of(&turn, "researcher", "research").await;
            Ok("researched".to_owned())
        })
        .await
    }
    let store: Arc<dyn Store> = Arc::new(MemoryStore::new());
    let mail = Mail::default();
    let respond = async |turn: &Turn, failures: &[&str]| {
        step_of(turn, "assistant", "go").await;
        let assistant = turn.conversation("assistant");
        assistant.expect_tool_call("research", "ada");
        assistant.expect_tool_call("send_mail", "ada");
        let researched = turn
            .model_tool_call("research", "ada", research(turn.clone()))
            .await;
        let sent = turn
            .model_tool_call("send_mail", "ada", mail.send(failures))
            .await;
        let request = format!("after {researched:?}, {sent:?}");
        assistant.step(&request, model(1)).await.map(|_| sent)
    };
    let first = respond(&turn(&store), &["timed out"]).await;
    assert_eq!(
        first.expect("the first run"),
        Err(Failed("timed out".into()))
    );
    let again = respond(&turn(&store), &[]).await;
    assert_eq!(again.expect("replays"), Err(Failed("timed out".into())));
    assert_eq!(mail.calls(), 1, "send_mail was not made again");
}

/// An orchestrator restarts a run that is still alive: the first run read a call's failure and
/// is asking its next step (the model is slow) when the restarted run replays the step before
/// and makes the call. The restarted run waits for that step, as for its key, and reads the
/// failure the first run's model read: the call does not run (it ran once, and failed), and
/// both runs go on alike. (Reading "no failure" of a step still being asked ran the call, and
/// the first run, which had read the failure, made a second action.)
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_restarted_run_waits_for_the_next_step_another_run_is_asking() {
    let store: Arc<dyn Store> = Arc::new(MemoryStore::new());
    let mail = Arc::new(Mail::default());
    let asking = Arc::new(tokio::sync::Notify::new());
    let script = {
        let (mail, asking) = (Arc::clone(&mail), Arc::clone(&asking));
        move |store: Arc<dyn Store>, slow: bool| {
            let (mail, asking) = (Arc::clone(&mail), Arc::clone(&asking));
            async move {
                let chat = turn(&store).conversation("assistant");
                chat.step("step 0", model(0)).await.expect("step 0");
                let read = chat
                    .model_tool_call("send_mail", "ada", mail.send(&["timed out"]))
                    .await;
                let request = format!("step 1, after {read:?}");
                let answer = async {
                    if slow {
                        asking.notify_one();
                        tokio::time::sleep(Duration::from_millis(300)).await;
                    }
                    model(1).await
                };
                chat.step(&request, answer).await.expect("step 1");
                read
            }
        }
    };
    let first = tokio::spawn(script(Arc::clone(&store), true));
    asking.notified().await;
    let restarted = script(Arc::clone(&store), false).await;
    let first = first.await.expect("the first run");
    assert_eq!(first, Err(Failed("timed out".into())));
    assert_eq!(
        restarted, first,
        "the restarted run read what the first one read"
    );
    assert_eq!(mail.calls(), 1, "the call ran once");
}

/// The read of the next step's failures is bounded like every store call: a store that never
/// answers it holds the call up for the turn's in-flight wait, then the call runs, as it does
/// when the store fails.
#[tokio::test]
async fn a_read_of_the_next_step_that_never_answers_is_given_up() {
    let memory: Arc<dyn Store> = Arc::new(MemoryStore::new());
    let first = turn(&memory).conversation("assistant");
    first.step("step 0", model(0)).await.expect("step 0");
    let failed = first
        .model_tool_call("send_mail", "ada", async {
            Err::<u32, _>(Failed("down".into()))
        })
        .await;
    first
        .step(&format!("after {failed:?}"), model(1))
        .await
        .expect("step 1");

    let hung = first_get(&memory, Fault::HangAfter);
    let chat = turn(&hung)
        .with_in_flight_wait(Duration::from_millis(100))
        .conversation("assistant");
    chat.step("step 0", model(0)).await.expect("step 0 replays");
    let ran = AtomicU32::new(0);
    let call = chat.model_tool_call("send_mail", "ada", counted(&ran, false));
    let read = tokio::time::timeout(Duration::from_secs(5), call).await;
    assert_eq!(read, Ok(Ok(SENT)), "given up, the call ran");
    assert_eq!(ran.load(Ordering::SeqCst), 1);
}

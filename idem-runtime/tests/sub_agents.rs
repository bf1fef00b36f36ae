//! Durable turns with agents run inside tool calls (an agent used as a tool, a tool that asks a
//! model of its own): the agent's conversation belongs to the call, so a restarted run whose
//! call replays — from the tool's key, or as a failure the model read — does not shift the
//! steps of the turn's other conversations or of the next calls, and a call made inside a tool
//! is not the calling model's. Also a few schedules of steps: cut off, a record landed whose
//! reply was lost, model steps and the turn's cap of actions.

#[path = "fault_store/mod.rs"]
mod fault_store;

use std::sync::Arc;
use std::sync::atomic::{AtomicU32, AtomicUsize, Ordering};
use std::time::Duration;

use fault_store::{Fault, FaultStore, Op};

use idem_tools_runtime::key::ArgsDigest;
use idem_tools_runtime::store::{MemoryStore, Store};
use idem_tools_runtime::{Call, Codec, Error, ToolInfo, Turn, execute};
use serde::{Deserialize, Serialize};

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
struct Failed(String);

impl From<Error> for Failed {
    fn from(error: Error) -> Self {
        Failed(error.model_text())
    }
}

fn turn(store: &Arc<dyn Store>) -> Turn {
    Turn::new("conv-1/turn-1").with_store(Arc::clone(store))
}

async fn step_of(turn: &Turn, label: &str, request: &str) -> Result<String, Error> {
    let answer = async { Ok::<_, Error>(format!("{label}: answer to {request}")) };
    turn.conversation(label).step(request, answer).await
}

/// A tool (not keyed itself, e.g. an agent-as-tool) that runs a sub-agent: the researcher's
/// first step, a lookup the researcher's model reads, the researcher's second step. Fails if
/// the lookup failed. Each call of it is a researcher conversation of its own.
async fn research(turn: &Turn, lookup_up: bool, lookups: &AtomicU32) -> Result<String, Failed> {
    step_of(turn, "researcher", "research ada").await?;
    let lookup = async {
        lookups.fetch_add(1, Ordering::SeqCst);
        if lookup_up {
            Ok::<u32, Failed>(1)
        } else {
            Err(Failed("not found".into()))
        }
    };
    let read = turn.model_tool_call("lookup", "ada", lookup).await;
    step_of(turn, "researcher", &format!("after {read:?}")).await?;
    read.map(|n| format!("found {n}"))
}

/// The outer model asks for `research`, it fails (the lookup is down), the model reads the
/// failure and asks again, and the second time it goes through. A restart replays the first
/// call's failure without running it; the second call's sub-agent has steps of its own (not
/// the first call's), so it goes through again and the run replays to its end.
#[tokio::test]
async fn a_sub_agent_tool_whose_first_failure_replays_keeps_its_retrys_own_steps() {
    let store: Arc<dyn Store> = Arc::new(MemoryStore::new());
    let lookups = AtomicU32::new(0);
    let script = async |up_first: bool| -> Result<(), Error> {
        let turn = turn(&store);
        let chat = turn.conversation("assistant");
        chat.step("go", async { Ok::<_, Error>("call research".to_owned()) })
            .await?;
        let first = chat
            .model_tool_call("research", "ada", research(&turn, up_first, &lookups))
            .await;
        chat.step(&format!("after {first:?}"), async {
            Ok::<_, Error>("call research again".to_owned())
        })
        .await?;
        let second = chat
            .model_tool_call("research", "ada", research(&turn, true, &lookups))
            .await;
        chat.step(&format!("after {second:?}"), async {
            Ok::<_, Error>("done".to_owned())
        })
        .await?;
        Ok(())
    };
    script(false).await.expect("the first run");
    let again = script(true).await;
    assert!(again.is_ok(), "the restarted run: {again:?}");
}

static RESEARCH: ToolInfo = ToolInfo::idempotent("research_keyed").with_release_on_cancel();

/// As above with an `#[idempotent]` research tool (both calls have one key): its first call
/// fails, its second is cut off (the process dies) after the sub-agent's lookup went through.
/// The restarted run's second call runs its own sub-conversation, not the first call's.
#[tokio::test]
async fn a_keyed_sub_agent_tool_retried_with_one_key_runs_its_retrys_own_steps() {
    async fn keyed(
        turn: &Turn,
        up: bool,
        lookups: &AtomicU32,
        hang: bool,
    ) -> Result<String, Failed> {
        let mut args = ArgsDigest::new(RESEARCH.name);
        args.arg("q", "ada")?;
        let (key, fingerprint) = args.finish(turn.namespace(), turn.id(), RESEARCH.name, 1);
        let call = Call::new(&RESEARCH, turn, key, fingerprint);
        execute(call, Codec::ok_only(), async {
            let out = research(turn, up, lookups).await;
            if hang {
                std::future::pending::<()>().await;
            }
            out
        })
        .await
    }
    let store: Arc<dyn Store> = Arc::new(MemoryStore::new());
    let lookups = AtomicU32::new(0);

    // Run 1: research fails, the model asks again, the second research is cut off.
    {
        let turn = turn(&store);
        let chat = turn.conversation("assistant");
        chat.step("go", async { Ok::<_, Error>("call research".to_owned()) })
            .await
            .unwrap();
        let first = chat
            .model_tool_call("research", "ada", keyed(&turn, false, &lookups, false))
            .await;
        assert!(first.is_err());
        chat.step(&format!("after {first:?}"), async {
            Ok::<_, Error>("call research again".to_owned())
        })
        .await
        .unwrap();
        let second = tokio::time::timeout(
            Duration::from_millis(200),
            chat.model_tool_call("research", "ada", keyed(&turn, true, &lookups, true)),
        )
        .await;
        assert!(second.is_err(), "cut off");
    }
    assert_eq!(lookups.load(Ordering::SeqCst), 2);
    let turn = turn(&store);
    let chat = turn.conversation("assistant");
    chat.step("go", async { Ok::<_, Error>("call research".to_owned()) })
        .await
        .unwrap();
    let first = chat
        .model_tool_call("research", "ada", keyed(&turn, true, &lookups, false))
        .await;
    chat.step(&format!("after {first:?}"), async {
        Ok::<_, Error>("call research again".to_owned())
    })
    .await
    .unwrap();
    let second = chat
        .model_tool_call("research", "ada", keyed(&turn, true, &lookups, false))
        .await;
    // The first run's second call met a working lookup; the restarted one should try it.
    assert!(
        second.is_ok() || lookups.load(Ordering::SeqCst) == 3,
        "restart second: {second:?}, lookups={}",
        lookups.load(Ordering::SeqCst)
    );
}

/// A tool whose body makes a call of another tool through `Turn::model_tool_call` (the model
/// did not ask for it): that inner call is not the outer conversation's, so the model's own call
/// of it after the tool is the first of its kind, whether the tool ran or (restarted) replayed
/// from its key; it never reads the inner call's failure.
#[tokio::test]
async fn a_call_made_inside_a_tool_is_not_the_calling_models() {
    static WRAP: ToolInfo = ToolInfo::idempotent("wrap");
    async fn wrap(turn: &Turn, up: bool) -> Result<String, Failed> {
        let mut args = ArgsDigest::new(WRAP.name);
        args.arg("q", "ada")?;
        let (key, fingerprint) = args.finish(turn.namespace(), turn.id(), WRAP.name, 1);
        let call = Call::new(&WRAP, turn, key, fingerprint);
        execute(call, Codec::ok_only(), async {
            // The tool tries to send first, and does without it.
            let inner = async {
                if up {
                    Ok::<u32, Failed>(7)
                } else {
                    Err(Failed("timed out".into()))
                }
            };
            let sent = turn.model_tool_call("send_mail", "ada", inner).await;
            Ok(format!("wrapped, sent: {}", sent.is_ok()))
        })
        .await
    }
    let store: Arc<dyn Store> = Arc::new(MemoryStore::new());
    let sends = AtomicUsize::new(0);
    let script = async |restart: bool| -> Result<(), Error> {
        let turn = turn(&store);
        let chat = turn.conversation("assistant");
        chat.step("go", async { Ok::<_, Error>("wrap, send_mail".to_owned()) })
            .await?;
        let wrapped = turn
            .model_tool_call("wrap", "ada", wrap(&turn, restart))
            .await;
        let sent = turn
            .model_tool_call("send_mail", "ada", async {
                sends.fetch_add(1, Ordering::SeqCst);
                Ok::<u32, Failed>(7)
            })
            .await;
        assert_eq!(sent, Ok(7), "restart: {restart}");
        chat.step(&format!("after {wrapped:?} {sent:?}"), async {
            Ok::<_, Error>("done".to_owned())
        })
        .await?;
        Ok(())
    };
    script(false).await.expect("the first run");
    script(true).await.expect("the restarted run");
}

/// A step cut off by its caller is asked again by the same run at once (not after a wait).
#[tokio::test]
async fn a_step_cut_off_is_asked_again_by_the_same_run_at_once() {
    let store: Arc<dyn Store> = Arc::new(MemoryStore::new());
    let chat = turn(&store).conversation("assistant");
    let slow = async {
        tokio::time::sleep(Duration::from_secs(60)).await;
        Ok::<_, Error>("late".to_owned())
    };
    let cut = tokio::time::timeout(Duration::from_millis(20), chat.step("plan", slow)).await;
    assert!(cut.is_err());
    let start = std::time::Instant::now();
    let again = chat
        .step("plan", async { Ok::<_, Error>("now".to_owned()) })
        .await
        .unwrap();
    assert_eq!(again, "now");
    assert!(
        start.elapsed() < Duration::from_secs(1),
        "{:?}",
        start.elapsed()
    );
}

/// The step's `complete` lands but its reply is lost: the step finds its record and answers it
/// (it failed: asked again by the same run, it replayed the recorded answer, but a run that went
/// another way acted on what a restart would not take), and a restart replays it with the
/// failures recorded before it.
#[tokio::test]
async fn a_step_whose_record_landed_but_failed_replays_with_its_failures() {
    let memory: Arc<dyn Store> = Arc::new(MemoryStore::new());
    let completes = AtomicUsize::new(0);
    let flaky: Arc<dyn Store> =
        Arc::new(FaultStore::new(Arc::clone(&memory), move |op| match op {
            Op::Complete if completes.fetch_add(1, Ordering::SeqCst) == 1 => Fault::FailAfter,
            _ => Fault::None,
        }));
    let asks = AtomicU32::new(0);
    let ask = |text: &'static str| {
        asks.fetch_add(1, Ordering::SeqCst);
        async move { Ok::<_, Error>(text.to_owned()) }
    };
    let chat = turn(&flaky).conversation("assistant");
    chat.step("go", ask("send")).await.unwrap();
    let read = chat
        .model_tool_call("send_mail", "ada", async {
            Err::<u32, _>(Failed("down".into()))
        })
        .await;
    let request = format!("after {read:?}");
    let answered = chat.step(&request, ask("retry")).await.unwrap();
    assert_eq!(answered, "retry");

    let restarted = turn(&memory).conversation("assistant");
    restarted.step("go", ask("x")).await.unwrap();
    let read2 = restarted
        .model_tool_call("send_mail", "ada", async { Ok::<u32, Failed>(7) })
        .await;
    assert_eq!(read2, read);
    let replayed = restarted
        .step(&format!("after {read2:?}"), ask("y"))
        .await
        .unwrap();
    assert_eq!(replayed, answered);
}

/// Model steps do not eat the turn's cap of tool actions.
#[tokio::test]
async fn model_steps_leave_the_turns_cap_of_actions_to_tools() {
    static SEND: ToolInfo = ToolInfo::idempotent("send");
    let store: Arc<dyn Store> = Arc::new(MemoryStore::new());
    let turn = turn(&store).with_max_calls(2);
    let chat = turn.conversation("assistant");
    for n in 0..4 {
        chat.step(&n, async { Ok::<_, Error>("x".to_owned()) })
            .await
            .unwrap();
    }
    for to in ["ada", "bob"] {
        let mut args = ArgsDigest::new(SEND.name);
        args.arg("to", to).unwrap();
        let (key, fp) = args.finish(turn.namespace(), turn.id(), SEND.name, 1);
        let r = execute(Call::new(&SEND, &turn, key, fp), Codec::ok_only(), async {
            Ok::<u32, Error>(1)
        })
        .await;
        assert!(r.is_ok(), "{r:?}");
    }
}

/// An `#[idempotent]` tool running a sub-agent is called for "a" (it goes through, recorded),
/// then for "b", cut off mid-run (release_on_cancel: its key is given back). The restarted run
/// replays "a" from its key without running its sub-agent, and "b"'s sub-agent, a conversation
/// of "b"'s call, is asked live: the turn finishes.
#[tokio::test]
async fn a_keyed_sub_agent_tool_replayed_by_its_key_leaves_the_next_calls_steps_alone() {
    static RESEARCH_Q: ToolInfo = ToolInfo::idempotent("research_q").with_release_on_cancel();
    async fn keyed(turn: &Turn, q: &str, hang: bool) -> Result<String, Failed> {
        let mut args = ArgsDigest::new(RESEARCH_Q.name);
        args.arg("q", q)?;
        let (key, fingerprint) = args.finish(turn.namespace(), turn.id(), RESEARCH_Q.name, 1);
        let call = Call::new(&RESEARCH_Q, turn, key, fingerprint);
        execute(call, Codec::ok_only(), async {
            let answer = step_of(turn, "researcher", &format!("research {q}")).await?;
            if hang {
                std::future::pending::<()>().await;
            }
            Ok(answer)
        })
        .await
    }
    let store: Arc<dyn Store> = Arc::new(MemoryStore::new());
    {
        let turn = turn(&store);
        let chat = turn.conversation("assistant");
        chat.step("go", async { Ok::<_, Error>("research a".to_owned()) })
            .await
            .unwrap();
        let a = chat
            .model_tool_call("research", "a", keyed(&turn, "a", false))
            .await;
        assert!(a.is_ok(), "{a:?}");
        chat.step(&format!("after {a:?}"), async {
            Ok::<_, Error>("research b".to_owned())
        })
        .await
        .unwrap();
        let b = tokio::time::timeout(
            Duration::from_millis(100),
            chat.model_tool_call("research", "b", keyed(&turn, "b", true)),
        )
        .await;
        assert!(b.is_err(), "cut off");
    }
    for restart in 0..2 {
        let turn = turn(&store);
        let chat = turn.conversation("assistant");
        chat.step("go", async { Ok::<_, Error>("x".to_owned()) })
            .await
            .unwrap();
        let a = chat
            .model_tool_call("research", "a", keyed(&turn, "a", false))
            .await;
        chat.step(&format!("after {a:?}"), async {
            Ok::<_, Error>("x".to_owned())
        })
        .await
        .unwrap();
        let b = chat
            .model_tool_call("research", "b", keyed(&turn, "b", false))
            .await;
        assert!(b.is_ok(), "restart {restart}: the model reads {b:?}");
    }
}

/// rig's agents all record under the route label "default" unless told otherwise: a sub-agent
/// run by an `#[idempotent]` tool has the outer agent's label, but is the call's conversation.
/// A restart replays the tool from its key without running the sub-agent, and the outer
/// agent's next step keeps its index: the restart of a run that went through replays.
#[tokio::test]
async fn a_sub_agent_with_the_outer_label_inside_a_keyed_tool_is_a_conversation_of_its_own() {
    static SUB: ToolInfo = ToolInfo::idempotent("sub");
    async fn sub(turn: &Turn) -> Result<String, Failed> {
        let mut args = ArgsDigest::new(SUB.name);
        args.arg("q", "ada")?;
        let (key, fingerprint) = args.finish(turn.namespace(), turn.id(), SUB.name, 1);
        let call = Call::new(&SUB, turn, key, fingerprint);
        execute(call, Codec::ok_only(), async {
            Ok(step_of(turn, "default", "sub-agent: research ada").await?)
        })
        .await
    }
    let store: Arc<dyn Store> = Arc::new(MemoryStore::new());
    let script = async || -> Result<String, Error> {
        let turn = turn(&store);
        step_of(&turn, "default", "go").await?;
        let researched = turn.model_tool_call("sub", "ada", sub(&turn)).await;
        step_of(&turn, "default", &format!("after {researched:?}")).await
    };
    script().await.expect("the first run");
    let again = script().await;
    assert!(again.is_ok(), "the restart of a finished run: {again:?}");
}

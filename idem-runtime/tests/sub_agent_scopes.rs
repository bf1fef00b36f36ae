//! Where an agent's conversation lives (`conversation/scope.rs`), case by case: a conversation
//! made outside a tool call and used inside it (an agent loop wrapped in a tool, a sub-agent
//! built at setup) is the call's there; a retried key's detached body runs in the scope of its
//! own call (carried into its task); an agent of a helper tool called directly does not take
//! the calls of the agent around it; a sub-agent handed to `spawn` stays in its call's scope.

use std::sync::Arc;
use std::sync::atomic::{AtomicU32, Ordering};

use idem_tools_runtime::key::ArgsDigest;
use idem_tools_runtime::store::{MemoryStore, Store};
use idem_tools_runtime::{Call, Codec, Error, ToolInfo, Turn, execute, execute_detached, spawn};
use serde::{Deserialize, Serialize};

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
struct Failed(String);

impl From<Error> for Failed {
    fn from(error: Error) -> Self {
        Failed(error.model_text())
    }
}

fn turn(store: &Arc<dyn Store>, id: &str) -> Turn {
    Turn::new(id).with_store(Arc::clone(store))
}

async fn step_of(turn: &Turn, label: &str, request: &str) -> Result<String, Error> {
    let answer = async { Ok::<_, Error>(format!("{label}: answer to {request}")) };
    turn.conversation(label).step(request, answer).await
}

/// The researcher sub-agent: a step, a lookup its model reads, a step.
async fn research(turn: Turn, lookup_up: bool, lookups: Arc<AtomicU32>) -> Result<String, Failed> {
    step_of(&turn, "researcher", "research ada").await?;
    let lookup = async {
        lookups.fetch_add(1, Ordering::SeqCst);
        if lookup_up {
            Ok::<u32, Failed>(1)
        } else {
            Err(Failed("not found".into()))
        }
    };
    let read = turn.model_tool_call("lookup", "ada", lookup).await;
    step_of(&turn, "researcher", &format!("after {read:?}")).await?;
    read.map(|n| format!("found {n}"))
}

static RESEARCH: ToolInfo = ToolInfo::idempotent("research_keyed").with_release_on_cancel();

async fn keyed(
    turn: &Turn,
    up: bool,
    lookups: &Arc<AtomicU32>,
    detached: bool,
) -> Result<String, Failed> {
    let mut args = ArgsDigest::new(RESEARCH.name);
    args.arg("q", "ada")?;
    let (key, fingerprint) = args.finish(turn.namespace(), turn.id(), RESEARCH.name, 1);
    let call = Call::new(&RESEARCH, turn, key, fingerprint);
    let body = research(turn.clone(), up, Arc::clone(lookups));
    if detached {
        execute_detached(call, Codec::ok_only(), body).await
    } else {
        execute(call, Codec::ok_only(), body).await
    }
}

/// The model calls the keyed research tool, it fails (lookup down), the model reads it and the
/// first run dies right after its next step was recorded. The restarted run replays the first
/// call's failure, the model asks again, and the second call (same key) should run its own
/// sub-agent: the lookup is up now, so it is tried and goes through.
async fn retried_key_after_crash(detached: bool) -> (Result<String, Failed>, u32) {
    let store: Arc<dyn Store> = Arc::new(MemoryStore::new());
    let lookups = Arc::new(AtomicU32::new(0));
    let id = if detached { "t/detached" } else { "t/attached" };
    {
        let turn = turn(&store, id);
        let chat = turn.conversation("assistant");
        chat.step("go", async { Ok::<_, Error>("call research".to_owned()) })
            .await
            .unwrap();
        let first = chat
            .model_tool_call("research", "ada", keyed(&turn, false, &lookups, detached))
            .await;
        assert!(first.is_err());
        chat.step(&format!("after {first:?}"), async {
            Ok::<_, Error>("call research again".to_owned())
        })
        .await
        .unwrap();
        // The process dies here.
    }
    assert_eq!(lookups.load(Ordering::SeqCst), 1);
    let turn = turn(&store, id);
    let chat = turn.conversation("assistant");
    chat.step("go", async { Ok::<_, Error>("x".to_owned()) })
        .await
        .unwrap();
    let first = chat
        .model_tool_call("research", "ada", keyed(&turn, true, &lookups, detached))
        .await;
    assert!(first.is_err(), "replayed failure: {first:?}");
    chat.step(&format!("after {first:?}"), async {
        Ok::<_, Error>("x".to_owned())
    })
    .await
    .unwrap();
    let second = chat
        .model_tool_call("research", "ada", keyed(&turn, true, &lookups, detached))
        .await;
    (second, lookups.load(Ordering::SeqCst))
}

#[tokio::test]
async fn attached_retried_key_after_crash_runs_its_own_sub_agent() {
    let (second, lookups) = retried_key_after_crash(false).await;
    assert_eq!((second, lookups), (Ok("found 1".to_owned()), 2));
}

#[tokio::test]
async fn detached_retried_key_after_crash_runs_its_own_sub_agent() {
    let (second, lookups) = retried_key_after_crash(true).await;
    assert_eq!((second, lookups), (Ok("found 1".to_owned()), 2));
}

static SUMMARIZE: ToolInfo = ToolInfo::idempotent("summarize");

/// An `#[idempotent]` helper tool called directly (not by a model) whose body runs an agent of
/// its own ("writer").
async fn summarize(turn: &Turn, detached: bool) -> Result<String, Failed> {
    let mut args = ArgsDigest::new(SUMMARIZE.name);
    args.arg("q", "ada")?;
    let (key, fingerprint) = args.finish(turn.namespace(), turn.id(), SUMMARIZE.name, 1);
    let call = Call::new(&SUMMARIZE, turn, key, fingerprint);
    let t = turn.clone();
    let body = async move { Ok::<_, Failed>(step_of(&t, "writer", "summarize").await?) };
    if detached {
        execute_detached(call, Codec::ok_only(), body).await
    } else {
        execute(call, Codec::ok_only(), body).await
    }
}

/// A planner agent: a step, the summarize helper, a lookup its model reads, a step.
async fn planner(turn: Turn, up: bool, detached: bool) -> Result<String, Failed> {
    step_of(&turn, "planner", "plan").await?;
    summarize(&turn, detached).await?;
    let lookup = async {
        if up {
            Ok::<u32, Failed>(1)
        } else {
            Err(Failed("not found".into()))
        }
    };
    let read = turn.model_tool_call("lookup", "ada", lookup).await;
    step_of(&turn, "planner", &format!("after {read:?}")).await?;
    Ok("planned".into())
}

/// The planner run as the top-level agent, or as an agent-as-tool (inside a model's call).
async fn planner_script(inside_call: bool, detached: bool) -> Result<(), Error> {
    let store: Arc<dyn Store> = Arc::new(MemoryStore::new());
    for up in [false, true] {
        let turn = turn(&store, "t/planner");
        if inside_call {
            let chat = turn.conversation("assistant");
            chat.step("go", async { Ok::<_, Error>("plan".to_owned()) })
                .await?;
            let planned = chat
                .model_tool_call("plan", "ada", planner(turn.clone(), up, detached))
                .await;
            planned.map_err(|Failed(e)| Error::Config(format!("up {up}: {e}")))?;
        } else {
            planner(turn.clone(), up, detached)
                .await
                .map_err(|Failed(e)| Error::Config(format!("up {up}: {e}")))?;
        }
    }
    Ok(())
}

#[tokio::test]
async fn an_agent_around_an_attached_helper_with_an_agent_replays() {
    planner_script(false, false).await.unwrap();
}

#[tokio::test]
async fn an_agent_around_a_detached_helper_with_an_agent_replays() {
    planner_script(false, true).await.unwrap();
}

#[tokio::test]
async fn an_agent_as_tool_around_a_detached_helper_with_an_agent_replays() {
    planner_script(true, true).await.unwrap();
}

#[tokio::test]
async fn an_agent_as_tool_around_an_attached_helper_with_an_agent_replays() {
    planner_script(true, false).await.unwrap();
}

/// An agent-as-tool (no key of its own) that hands its sub-agent to a task of its own with
/// `idem_tools::spawn`. The sub-agent has the outer agent's label ("default", as rig's). The
/// call fails the first time (the model reads it) and the restart replays that failure; the
/// outer agent's next steps should keep their indices.
#[tokio::test]
async fn a_sub_agent_spawned_from_a_call_is_the_calls() {
    sub_agent_from_a_call(true).await;
}

#[tokio::test]
async fn a_sub_agent_awaited_in_a_call_is_the_calls() {
    sub_agent_from_a_call(false).await;
}

async fn sub_agent_from_a_call(spawned: bool) {
    let store: Arc<dyn Store> = Arc::new(MemoryStore::new());
    let runs = Arc::new(AtomicU32::new(0));
    for restart in [false, true] {
        let turn = turn(&store, "t/spawned");
        let result: Result<(), Error> = turn
            .clone()
            .scope(async {
                step_of(&turn, "default", "go").await?;
                let runs2 = Arc::clone(&runs);
                let t = turn.clone();
                let agent_tool = async move {
                    let t2 = t.clone();
                    let sub = async move {
                        runs2.fetch_add(1, Ordering::SeqCst);
                        step_of(&t2, "default", "sub-agent: research ada").await
                    };
                    let answer = if spawned {
                        spawn(sub).await.expect("no panic")
                    } else {
                        sub.await
                    };
                    answer.map_err(Failed::from)?;
                    if restart {
                        Ok("found".to_owned())
                    } else {
                        Err(Failed("sub-agent gave up".into()))
                    }
                };
                let read = turn
                    .conversation("default")
                    .model_tool_call("research", "ada", agent_tool)
                    .await;
                step_of(&turn, "default", &format!("after {read:?}")).await?;
                Ok(())
            })
            .await;
        result.unwrap_or_else(|e| panic!("restart {restart}: {e}"));
    }
    assert_eq!(runs.load(Ordering::SeqCst), 1, "the failure replayed");
}

static AGENT: ToolInfo = ToolInfo::idempotent("agent_loop");

/// A whole agent loop wrapped in an `#[idempotent]` tool (e.g. an MCP tool that runs an
/// agent), its conversation made before the call (an agent built per turn, outside the tool).
/// The first run's loop reads a failed lookup, then the body fails (released); the restarted
/// run runs the body again and should read the failure again.
#[tokio::test]
async fn an_agent_loop_in_a_tool_with_a_conversation_made_outside_reads_its_failure_again() {
    let store: Arc<dyn Store> = Arc::new(MemoryStore::new());
    for up in [false, true] {
        let turn = turn(&store, "t/loop");
        let chat = turn.conversation("assistant"); // built outside the tool
        let mut args = ArgsDigest::new(AGENT.name);
        args.arg("q", "ada").unwrap();
        let (key, fingerprint) = args.finish(turn.namespace(), turn.id(), AGENT.name, 1);
        let call = Call::new(&AGENT, &turn, key, fingerprint);
        let t = turn.clone();
        let out = execute(call, Codec::ok_only(), async {
            chat.step("go", async { Ok::<_, Error>("lookup ada".to_owned()) })
                .await?;
            let lookup = async {
                if up {
                    Ok::<u32, Failed>(1)
                } else {
                    Err(Failed("down".into()))
                }
            };
            let read = t.model_tool_call("lookup", "ada", lookup).await;
            chat.step(&format!("after {read:?}"), async {
                Ok::<_, Error>("done".to_owned())
            })
            .await?;
            if up {
                Ok("ok".to_owned())
            } else {
                Err(Failed("the agent crashed later".into()))
            }
        })
        .await;
        if up {
            assert_eq!(out, Ok("ok".to_owned()), "restarted run");
        }
    }
}

/// An agent-as-tool whose sub-agent's conversation was made at setup (outside the call), its
/// tool calls through `Turn::model_tool_call` (rig's `tool`). The sub-agent's lookup fails in
/// the first run; the restart should read the failure again.
#[tokio::test]
async fn a_sub_agent_made_outside_its_call_reads_its_failure_again() {
    let store: Arc<dyn Store> = Arc::new(MemoryStore::new());
    for up in [false, true] {
        let turn = turn(&store, "t/prebuilt");
        let chat = turn.conversation("assistant");
        let researcher = turn.conversation("researcher"); // built at setup
        chat.step("go", async { Ok::<_, Error>("research".to_owned()) })
            .await
            .unwrap();
        let t = turn.clone();
        let agent_tool = async {
            researcher
                .step("research ada", async {
                    Ok::<_, Error>("lookup ada".to_owned())
                })
                .await?;
            let lookup = async {
                if up {
                    Ok::<u32, Failed>(1)
                } else {
                    Err(Failed("down".into()))
                }
            };
            let read = t.model_tool_call("lookup", "ada", lookup).await;
            researcher
                .step(&format!("after {read:?}"), async {
                    Ok::<_, Error>("Ada".to_owned())
                })
                .await?;
            Ok::<_, Failed>("Ada".to_owned())
        };
        let read = chat.model_tool_call("research", "ada", agent_tool).await;
        assert_eq!(read, Ok("Ada".to_owned()), "up {up}");
    }
}

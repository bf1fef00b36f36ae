//! Durable turns through rig's own agent loop: a rig agent's model steps recorded per turn
//! (`idem_tools::rig::RecordedModel`), what a restarted run sends and gets.

use std::future::IntoFuture;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};

use idem_tools::rig::{RecordedModel, tool, with_turn};
use idem_tools::{Error, ToolInfo, Turn, idempotent, tool_impl};
use rig_agent::agent::{PromptResponse, stream_to_stdout};
use rig_agent::{Agent, AgentBuilder};
use rig_core::completion::{AssistantContent, ModelRef, Usage};
use rig_core::effect::{EffectKind, HandlerDescriptor, family};
use rig_core::error::ErrorKind;
use rig_core::message::{ToolCall, ToolFunction, ToolName};
use rig_core::operation::Completion;
use rig_core::serve::adapters::ModelAdapter;
use rig_core::serve::{Dispatch, Reply, Serve};
use rig_core::test_utils::{MockCompletionModel, MockStreamEvent, MockTurn};
use rig_core::tool::{DynamicTool, Tool, ToolContext};
use serde::{Deserialize, Serialize};
use serde_json::json;

#[derive(Debug, Clone, Serialize, Deserialize)]
struct Outgoing {
    to: String,
    text: String,
}

/// Counts the messages it sends.
#[derive(Clone, Default)]
struct Send {
    sent: Arc<AtomicUsize>,
}

#[tool_impl(same_service)]
impl Tool for Send {
    const NAME: &'static str = "send";
    type Args = Outgoing;
    type Output = usize;
    type Error = Error;

    fn description(&self) -> String {
        "Send a text message".into()
    }

    fn parameters(&self) -> serde_json::Value {
        json!({ "type": "object" })
    }

    #[idempotent(name = "send", ignore(context))]
    async fn call(&self, context: &mut ToolContext, message: Outgoing) -> Result<usize, Error> {
        let _ = (context, message);
        Ok(self.sent.fetch_add(1, Ordering::SeqCst) + 1)
    }
}

const TOOLS: &[ToolInfo] = idem_tools::tools![Send::call];

fn send_to(to: &str) -> AssistantContent {
    let name = ToolName::new("send").expect("a tool name");
    AssistantContent::ToolCall(ToolCall::from_wire(
        "call-1",
        ToolFunction::new(name, json!({ "to": to, "text": "hi" })),
    ))
}

/// The agent of one turn: its model's steps recorded in `turn`.
fn agent(model: &MockCompletionModel, turn: &Turn, send: &Send) -> Agent {
    agent_with(
        model,
        turn,
        vec![tool(send.clone(), TOOLS[0]).expect("a named tool")],
    )
}

/// The agent of one turn with `tools`.
fn agent_with(model: &MockCompletionModel, turn: &Turn, tools: Vec<DynamicTool>) -> Agent {
    AgentBuilder::new(model.clone())
        .model_route_handler(
            "default",
            RecordedModel::new("default", model.clone(), turn),
        )
        .default_max_turns(5)
        .dynamic_tools(tools)
        .build()
}

/// One run of turn `id`: an agent with `flaky` and rig's own agent-as-tool `researcher` (its
/// steps the conversation `researcher`; with `flaky` too if `sub_calls`).
async fn run_with_researcher(
    id: &str,
    models: (&MockCompletionModel, &MockCompletionModel),
    flaky: &Flaky,
    sub_calls: bool,
) -> Result<PromptResponse, rig_agent::completion::PromptError> {
    let (model, sub) = models;
    let turn = Turn::new(id);
    let flaky_tool = || tool(flaky.clone(), FLAKY[0]).expect("a named tool");
    let researcher = AgentBuilder::new(sub.clone())
        .name("researcher")
        .model_route_handler(
            "default",
            RecordedModel::new("default", sub.clone(), &turn).with_conversation("researcher"),
        )
        .default_max_turns(3)
        .dynamic_tools(if sub_calls {
            vec![flaky_tool()]
        } else {
            vec![]
        })
        .build()
        .into_tool()
        .expect("an agent tool");
    agent_with(model, &turn, vec![researcher, flaky_tool()])
        .prompt("Research Ada, then tell her hi")
        .tool_context(with_turn(ToolContext::new(), &turn))
        .await
}

/// An agent of `turn` without tools whose steps are the conversation `label` of the turn.
fn labelled_agent(model: &MockCompletionModel, turn: &Turn, label: &str) -> Agent {
    AgentBuilder::new(model.clone())
        .model_route_handler(
            "default",
            RecordedModel::new("default", model.clone(), turn).with_conversation(label),
        )
        .default_max_turns(2)
        .build()
}

/// Two agents of one turn (a planner and a writer), each recording its steps as a
/// conversation of its own: a restarted run that runs them in the other order replays both.
#[tokio::test]
async fn agents_with_conversations_of_their_own_replay_in_any_order() {
    let ask = async |model: &MockCompletionModel, turn: &Turn, label: &str, prompt: &str| {
        labelled_agent(model, turn, label)
            .prompt(prompt)
            .tool_context(with_turn(ToolContext::new(), turn))
            .await
    };
    let turn = Turn::new("durable/two-agents");
    let (planner, writer) = (
        MockCompletionModel::from_turns([MockTurn::text("Plan.")]),
        MockCompletionModel::from_turns([MockTurn::text("Draft.")]),
    );
    let plan = ask(&planner, &turn, "planner", "Plan the trip")
        .await
        .expect("plan");
    let draft = ask(&writer, &turn, "writer", "Write the mail")
        .await
        .expect("draft");

    // Restarted, the writer first.
    let turn = Turn::new("durable/two-agents");
    let silent = MockCompletionModel::from_turns([]);
    let draft_again = ask(&silent, &turn, "writer", "Write the mail")
        .await
        .expect("the writer's step replays");
    let plan_again = ask(&silent, &turn, "planner", "Plan the trip")
        .await
        .expect("the planner's step replays");
    assert_eq!(silent.request_count(), 0, "no request sent");
    assert_eq!(draft_again.output(), draft.output());
    assert_eq!(plan_again.output(), plan.output());
}

/// One run of `turn`, as the application would start it.
async fn run(
    model: &MockCompletionModel,
    turn: &Turn,
    send: &Send,
    prompt: &str,
) -> Result<PromptResponse, rig_agent::completion::PromptError> {
    agent(model, turn, send)
        .prompt(prompt)
        .tool_context(with_turn(ToolContext::new(), turn))
        .await
}

fn tool_then_text() -> MockCompletionModel {
    MockCompletionModel::from_turns([
        MockTurn::from_contents([send_to("ada")]),
        MockTurn::text("Sent."),
    ])
}

/// The whole run again, with a model that has nothing to say: every step is replayed, the
/// model is sent nothing, the message is not sent again, and the run ends as the first did.
#[tokio::test]
async fn a_restarted_run_replays_the_models_steps_and_asks_nothing() {
    let send = Send::default();
    let first = tool_then_text();
    let done = run(&first, &Turn::new("durable/restart"), &send, "Tell Ada hi")
        .await
        .expect("the first run");
    assert_eq!(first.request_count(), 2);

    let silent = MockCompletionModel::from_turns([]);
    let again = run(&silent, &Turn::new("durable/restart"), &send, "Tell Ada hi")
        .await
        .expect("the restarted run");
    assert_eq!(silent.request_count(), 0, "no request sent");
    assert_eq!(send.sent.load(Ordering::SeqCst), 1, "the message sent once");
    assert_eq!(again.output(), "Sent.");
    assert_eq!(again.messages(), done.messages());
}

/// The first run stopped after its first step (the model failed); the restarted run replays
/// that step and its tool call, and asks the model only for the next one.
#[tokio::test]
async fn a_restarted_run_continues_live_from_the_first_step_not_recorded() {
    let send = Send::default();
    let cut = MockCompletionModel::from_turns([
        MockTurn::from_contents([send_to("ada")]),
        MockTurn::error("the provider is down"),
    ]);
    run(&cut, &Turn::new("durable/continue"), &send, "Tell Ada hi")
        .await
        .expect_err("the model failed at its second step");
    assert_eq!(send.sent.load(Ordering::SeqCst), 1);

    let rest = MockCompletionModel::from_turns([MockTurn::text("Sent.")]);
    let done = run(&rest, &Turn::new("durable/continue"), &send, "Tell Ada hi")
        .await
        .expect("the restarted run");
    assert_eq!(
        rest.request_count(),
        1,
        "only the step not recorded is asked for"
    );
    assert_eq!(send.sent.load(Ordering::SeqCst), 1, "the message sent once");
    assert_eq!(done.output(), "Sent.");
}

/// A mail service that is down for its first `down` calls.
#[derive(Clone, Default)]
struct Flaky {
    calls: Arc<AtomicUsize>,
    down: usize,
}

/// What `Flaky` fails with: the server's timeout, or idem's refusal.
#[derive(Debug)]
enum FlakyError {
    TimedOut,
    Idem(Error),
}

impl std::fmt::Display for FlakyError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            FlakyError::TimedOut => f.write_str("the mail server timed out"),
            FlakyError::Idem(error) => error.fmt(f),
        }
    }
}

impl std::error::Error for FlakyError {
    fn source(&self) -> Option<&(dyn std::error::Error + 'static)> {
        match self {
            FlakyError::TimedOut => None,
            FlakyError::Idem(error) => Some(error),
        }
    }
}

impl From<Error> for FlakyError {
    fn from(error: Error) -> Self {
        FlakyError::Idem(error)
    }
}

#[tool_impl(same_service)]
impl Tool for Flaky {
    const NAME: &'static str = "flaky";
    type Args = Outgoing;
    type Output = usize;
    type Error = FlakyError;

    fn description(&self) -> String {
        "Send a text message (the server times out now and then)".into()
    }

    fn parameters(&self) -> serde_json::Value {
        json!({ "type": "object" })
    }

    #[idempotent(name = "flaky", ignore(context))]
    async fn call(
        &self,
        context: &mut ToolContext,
        message: Outgoing,
    ) -> Result<usize, FlakyError> {
        let _ = (context, message);
        let n = self.calls.fetch_add(1, Ordering::SeqCst);
        if n < self.down {
            return Err(FlakyError::TimedOut);
        }
        Ok(n + 1)
    }
}

const FLAKY: &[ToolInfo] = idem_tools::tools![Flaky::call];

fn flaky_to() -> AssistantContent {
    AssistantContent::ToolCall(ToolCall::from_wire(
        "call-1",
        ToolFunction::new(
            ToolName::new("flaky").expect("a tool name"),
            json!({ "to": "ada", "text": "hi" }),
        ),
    ))
}

/// A call that failed, the model read the failure and called again, and the call went
/// through: a restarted run reads the same failure where the first run read it (the server is
/// up now, so the call would succeed), its next request is the recorded one, and the run
/// replays to its end: nothing sent, no call made.
#[tokio::test]
async fn a_restarted_run_reads_the_failure_the_first_run_read() {
    let run = async |model: &MockCompletionModel, flaky: &Flaky| {
        let turn = Turn::new("durable/flaky");
        let flaky = tool(flaky.clone(), FLAKY[0]).expect("a named tool");
        agent_with(model, &turn, vec![flaky])
            .prompt("Tell Ada hi")
            .tool_context(with_turn(ToolContext::new(), &turn))
            .await
    };
    let first_model = MockCompletionModel::from_turns([
        MockTurn::from_contents([flaky_to()]),
        MockTurn::from_contents([flaky_to()]), // "once more": it went through
        MockTurn::text("Sent."),
    ]);
    let down = Flaky {
        down: 1,
        ..Flaky::default()
    };
    let done = run(&first_model, &down).await.expect("the first run");
    assert_eq!(down.calls.load(Ordering::SeqCst), 2, "failed, then sent");

    let silent = MockCompletionModel::from_turns([]);
    let up = Flaky {
        down: 0,
        ..down.clone()
    };
    let again = run(&silent, &up)
        .await
        .expect("the restarted run replays to its end");
    assert_eq!(silent.request_count(), 0, "no request sent");
    assert_eq!(up.calls.load(Ordering::SeqCst), 2, "no call made");
    assert_eq!(again.output(), "Sent.");
    assert_eq!(again.messages(), done.messages());
}

/// A restarted run whose prompt changed: its first request is not the recorded one, so the run
/// stops with a divergence before anything is sent or done.
#[tokio::test]
async fn a_restarted_run_whose_request_differs_stops_before_asking() {
    let send = Send::default();
    run(
        &tool_then_text(),
        &Turn::new("durable/diverge"),
        &send,
        "Tell Ada hi",
    )
    .await
    .expect("the first run");

    let other = tool_then_text();
    let refused = run(&other, &Turn::new("durable/diverge"), &send, "Tell Bob hi")
        .await
        .expect_err("another conversation in the same turn");
    assert_eq!(other.request_count(), 0, "no request sent");
    assert_eq!(send.sent.load(Ordering::SeqCst), 1);
    let rig_agent::completion::PromptError::Report(report) = refused else {
        panic!("a report: {refused:?}");
    };
    assert_eq!(report.kind, ErrorKind::Divergence, "{report:?}");
    assert!(
        report.message.contains("step 0 of conversation `default`"),
        "{}",
        report.message
    );
}

/// A streamed run's step is recorded and replayed too: the restarted streamed run, and a
/// restarted unary one, get the recorded response without a request.
#[tokio::test]
async fn a_streamed_run_is_recorded_and_replayed() {
    let send = Send::default();
    let turn = || Turn::new("durable/stream");
    let streamed = MockCompletionModel::from_stream_turns([[
        MockStreamEvent::text("Hello."),
        MockStreamEvent::final_response(Usage::default()),
    ]]);
    let mut stream = agent(&streamed, &turn(), &send)
        .prompt("Say hello")
        .stream();
    let first = stream_to_stdout(&mut stream).await.expect("the first run");
    assert_eq!(first.output(), "Hello.");
    assert_eq!(streamed.request_count(), 1);

    let silent = MockCompletionModel::from_turns([]);
    let mut stream = agent(&silent, &turn(), &send).prompt("Say hello").stream();
    let again = stream_to_stdout(&mut stream)
        .await
        .expect("the restarted run");
    assert_eq!(again.output(), "Hello.");
    let unary = run(&silent, &turn(), &send, "Say hello")
        .await
        .expect("a restarted unary run");
    assert_eq!(unary.output(), "Hello.");
    assert_eq!(silent.request_count(), 0, "no request sent");
}

/// Sees which turn is current where rig runs a model call, then lets rig's handler answer.
struct TurnSpy {
    inner: ModelAdapter<Completion>,
    seen: Arc<Mutex<Vec<(String, String)>>>,
}

impl Serve for TurnSpy {
    type Family = family::Completion;

    fn descriptor(&self) -> HandlerDescriptor {
        self.inner.descriptor()
    }

    async fn serve(&self, kind: EffectKind, dispatch: Dispatch) -> Reply {
        let prompt = match &kind {
            EffectKind::Completion { request, .. } => format!("{:?}", request.chat_history.last()),
            _ => String::new(),
        };
        // As a model's own await would: the call is polled again later, by whoever polls.
        tokio::task::yield_now().await;
        let turn = Turn::current().map(|t| t.id().to_owned());
        self.seen
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .push((prompt, turn.unwrap_or_default()));
        self.inner.serve(kind, dispatch).await
    }
}

/// Why `RecordedModel` is given its turn rather than reading the task-local one: two runs of one
/// agent, each entered in its turn with `Turn::scope`, and run A's model call is polled inside
/// run B, in B's turn (rig polls its bus from whichever run polls next, as for tools). If this
/// starts failing, rig polls model calls differently: `RecordedModel` could then read the turn.
#[tokio::test]
async fn a_task_local_turn_does_not_follow_model_calls_between_runs_of_one_agent() {
    let model = MockCompletionModel::from_turns([MockTurn::text("a"), MockTurn::text("b")]);
    let seen = Arc::new(Mutex::new(Vec::new()));
    let spy = TurnSpy {
        inner: ModelAdapter::new(ModelRef::new("default"), model.clone()),
        seen: Arc::clone(&seen),
    };
    let agent = AgentBuilder::new(model)
        .model_route_handler("default", spy)
        .build();
    let run = |turn: &'static str, prompt: &'static str| {
        Turn::new(turn).scope(agent.prompt(prompt).into_future())
    };
    let (a, b) = tokio::join!(run("scoped-a", "prompt A"), run("scoped-b", "prompt B"));
    a.expect("run a");
    b.expect("run b");
    let seen = seen.lock().unwrap_or_else(|e| e.into_inner()).clone();
    let turn_of_a = seen
        .iter()
        .find(|(prompt, _)| prompt.contains("prompt A"))
        .map(|(_, turn)| turn.as_str());
    assert_eq!(turn_of_a, Some("scoped-b"), "{seen:?}");
}

/// Two agents of one turn, each with a conversation of its own, make the same call: the
/// planner's fails (then goes through on its retry), the writer's goes through. Restarted in
/// the other order, each replays to its end: a failure is found again by the step that made
/// the call, not by how many times the turn made it.
#[tokio::test]
async fn two_agents_making_the_same_call_replay_in_any_order() {
    let ask = async |model: &MockCompletionModel, turn: &Turn, label: &str, flaky: &Flaky| {
        AgentBuilder::new(model.clone())
            .model_route_handler(
                "default",
                RecordedModel::new("default", model.clone(), turn).with_conversation(label),
            )
            .default_max_turns(5)
            .dynamic_tool(tool(flaky.clone(), FLAKY[0]).expect("a named tool"))
            .build()
            .prompt(format!("{label}: tell Ada hi"))
            .tool_context(with_turn(ToolContext::new(), turn))
            .await
    };
    let down = Flaky {
        down: 1,
        ..Flaky::default()
    };
    let turn = Turn::new("durable/two-agents-one-tool");
    let planner = MockCompletionModel::from_turns([
        MockTurn::from_contents([flaky_to()]),
        MockTurn::from_contents([flaky_to()]),
        MockTurn::text("Planned."),
    ]);
    let writer = MockCompletionModel::from_turns([
        MockTurn::from_contents([flaky_to()]),
        MockTurn::text("Written."),
    ]);
    let plan = ask(&planner, &turn, "planner", &down).await.expect("plan");
    let draft = ask(&writer, &turn, "writer", &down).await.expect("draft");

    let up = Flaky {
        down: 0,
        ..down.clone()
    };
    let turn = Turn::new("durable/two-agents-one-tool");
    let silent = MockCompletionModel::from_turns([]);
    let draft_again = ask(&silent, &turn, "writer", &up).await;
    let plan_again = ask(&silent, &turn, "planner", &up).await;
    assert_eq!(
        draft_again.expect("the writer replays").output(),
        draft.output()
    );
    assert_eq!(
        plan_again.expect("the planner replays").output(),
        plan.output()
    );
    assert_eq!(silent.request_count(), 0, "no request sent");
    assert_eq!(up.calls.load(Ordering::SeqCst), 2, "no call made again");
}

/// rig's own agent-as-tool (`Agent::into_tool`, which idem's `tool` does not wrap) asked for
/// in one response before an idem tool whose call fails: the sub-agent's steps do not take the
/// call, which the response of the outer agent's step asked for, and a restarted run replays
/// to its end.
#[tokio::test]
async fn a_call_after_rigs_agent_tool_in_one_response_reads_its_failure_again() {
    let id = "durable/agent-tool";
    let run = async |model, sub, flaky| run_with_researcher(id, (model, sub), flaky, false).await;
    let research = AssistantContent::ToolCall(ToolCall::from_wire(
        "call-0",
        ToolFunction::new(
            ToolName::new("researcher").expect("a tool name"),
            json!({ "prompt": "who is ada" }),
        ),
    ));
    let first_model = MockCompletionModel::from_turns([
        MockTurn::from_contents([research, flaky_to()]),
        MockTurn::from_contents([flaky_to()]),
        MockTurn::text("Sent."),
    ]);
    let sub = MockCompletionModel::from_turns([MockTurn::text("Ada Lovelace.")]);
    let down = Flaky {
        down: 1,
        ..Flaky::default()
    };
    let done = run(&first_model, &sub, &down).await.expect("the first run");
    assert_eq!(down.calls.load(Ordering::SeqCst), 2, "failed, then sent");

    let silent = MockCompletionModel::from_turns([]);
    let up = Flaky {
        down: 0,
        ..down.clone()
    };
    let again = run(&silent, &silent, &up)
        .await
        .expect("the restarted run replays to its end");
    assert_eq!(again.output(), done.output());
    assert_eq!(silent.request_count(), 0, "no request sent");
    assert_eq!(up.calls.load(Ordering::SeqCst), 2, "no call made again");
}

/// A sub-agent (rig's `into_tool`) whose own response asks for the very call the outer
/// response asks for after it (`flaky` with the same arguments; the sub-agent's fails): both
/// conversations expect the call, and each call is taken for the conversation that answered a
/// step last when that step asked for it, so every restart replays to its end.
#[tokio::test]
async fn a_sub_agent_asking_for_the_outer_agents_call_replays_on_every_restart() {
    let research = || {
        AssistantContent::ToolCall(ToolCall::from_wire(
            "call-0",
            ToolFunction::new(
                ToolName::new("researcher").expect("a tool name"),
                json!({ "prompt": "who is ada" }),
            ),
        ))
    };
    // Each turn builds its maps anew (another iteration order): several turns.
    for i in 0..8 {
        let id = format!("durable/nested/{i}");
        let first_model = MockCompletionModel::from_turns([
            MockTurn::from_contents([research(), flaky_to()]),
            MockTurn::text("Sent."),
        ]);
        let sub = MockCompletionModel::from_turns([
            MockTurn::from_contents([flaky_to()]),
            MockTurn::text("Ada Lovelace."),
        ]);
        let down = Flaky {
            down: 1,
            ..Flaky::default()
        };
        let done = run_with_researcher(&id, (&first_model, &sub), &down, true)
            .await
            .expect("the first run");
        let silent = MockCompletionModel::from_turns([]);
        let up = Flaky {
            down: 0,
            ..down.clone()
        };
        let again = run_with_researcher(&id, (&silent, &silent), &up, true).await;
        assert_eq!(again.expect("replays").output(), done.output(), "turn {i}");
        assert_eq!(silent.request_count(), 0, "turn {i}: no request sent");
    }
}

/// An agent-as-tool of one's own (a rig `Tool` that prompts a sub-agent built at
/// setup, as `run_with_researcher` builds rig's), registered with idem's `tool`.
#[derive(Clone)]
struct AdvResearcher {
    agent: Arc<Agent>,
    turn: Turn,
}

#[derive(Debug)]
struct AdvResearchFailed(String);

impl std::fmt::Display for AdvResearchFailed {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(&self.0)
    }
}

impl std::error::Error for AdvResearchFailed {}

#[derive(Deserialize)]
struct AdvAsk {
    prompt: String,
}

impl Tool for AdvResearcher {
    const NAME: &'static str = "research";
    type Args = AdvAsk;
    type Output = String;
    type Error = AdvResearchFailed;

    fn description(&self) -> String {
        "Research someone".into()
    }

    fn parameters(&self) -> serde_json::Value {
        json!({ "type": "object" })
    }

    async fn call(
        &self,
        _context: &mut ToolContext,
        args: AdvAsk,
    ) -> Result<String, AdvResearchFailed> {
        let response = self
            .agent
            .prompt(args.prompt)
            .tool_context(with_turn(ToolContext::new(), &self.turn))
            .await;
        response
            .map(|r| r.output())
            .map_err(|e| AdvResearchFailed(e.to_string()))
    }
}

const ADV_RESEARCH: ToolInfo = ToolInfo::idempotent("research");

async fn adv_run(
    id: &str,
    models: (&MockCompletionModel, &MockCompletionModel),
    flaky: &Flaky,
) -> Result<PromptResponse, rig_agent::completion::PromptError> {
    let (model, sub) = models;
    let turn = Turn::new(id);
    let researcher = AgentBuilder::new(sub.clone())
        .name("researcher")
        .model_route_handler(
            "default",
            RecordedModel::new("default", sub.clone(), &turn).with_conversation("researcher"),
        )
        .default_max_turns(3)
        .dynamic_tools(vec![tool(flaky.clone(), FLAKY[0]).expect("a named tool")])
        .build();
    let research = AdvResearcher {
        agent: Arc::new(researcher),
        turn: turn.clone(),
    };
    agent_with(
        model,
        &turn,
        vec![tool(research, ADV_RESEARCH).expect("named")],
    )
    .prompt("Research Ada")
    .tool_context(with_turn(ToolContext::new(), &turn))
    .await
}

/// The sub-agent's call of `flaky` fails in the first run (it reads the failure, then
/// answers); a restarted run should read the same failure and replay to its end.
#[tokio::test]
async fn a_sub_agent_built_at_setup_in_an_idem_tool_reads_its_failure_again() {
    let id = "durable/adv-prebuilt";
    let research = AssistantContent::ToolCall(ToolCall::from_wire(
        "call-0",
        ToolFunction::new(
            ToolName::new("research").expect("a tool name"),
            json!({ "prompt": "who is ada" }),
        ),
    ));
    let first_model = MockCompletionModel::from_turns([
        MockTurn::from_contents([research]),
        MockTurn::text("Done."),
    ]);
    let sub = MockCompletionModel::from_turns([
        MockTurn::from_contents([flaky_to()]),
        MockTurn::text("Ada Lovelace."),
    ]);
    let down = Flaky {
        down: 1,
        ..Flaky::default()
    };
    let done = adv_run(id, (&first_model, &sub), &down)
        .await
        .expect("the first run");
    assert_eq!(down.calls.load(Ordering::SeqCst), 1);
    let silent = MockCompletionModel::from_turns([]);
    let up = Flaky {
        down: 0,
        ..down.clone()
    };
    let again = adv_run(id, (&silent, &silent), &up).await;
    assert_eq!(
        again
            .as_ref()
            .map(|r| r.output())
            .map_err(|e| e.to_string()),
        Ok(done.output())
    );
    assert_eq!(silent.request_count(), 0, "no request sent");
    assert_eq!(up.calls.load(Ordering::SeqCst), 1, "no call made again");
}

/// As `AdvResearcher`, its sub-agent built inside the call (label "default", as the outer's).
#[derive(Clone)]
struct AdvResearcherInside {
    sub: MockCompletionModel,
    flaky: Flaky,
    turn: Turn,
}

impl Tool for AdvResearcherInside {
    const NAME: &'static str = "research";
    type Args = AdvAsk;
    type Output = String;
    type Error = AdvResearchFailed;

    fn description(&self) -> String {
        "Research someone".into()
    }

    fn parameters(&self) -> serde_json::Value {
        json!({ "type": "object" })
    }

    async fn call(
        &self,
        _context: &mut ToolContext,
        args: AdvAsk,
    ) -> Result<String, AdvResearchFailed> {
        let agent = AgentBuilder::new(self.sub.clone())
            .model_route_handler(
                "default",
                RecordedModel::new("default", self.sub.clone(), &self.turn),
            )
            .default_max_turns(3)
            .dynamic_tools(vec![
                tool(self.flaky.clone(), FLAKY[0]).expect("a named tool"),
            ])
            .build();
        let response = agent
            .prompt(args.prompt)
            .tool_context(with_turn(ToolContext::new(), &self.turn))
            .await;
        response
            .map(|r| r.output())
            .map_err(|e| AdvResearchFailed(e.to_string()))
    }
}

async fn adv_run_inside(
    id: &str,
    models: (&MockCompletionModel, &MockCompletionModel),
    flaky: &Flaky,
) -> Result<PromptResponse, rig_agent::completion::PromptError> {
    let (model, sub) = models;
    let turn = Turn::new(id);
    let research = AdvResearcherInside {
        sub: sub.clone(),
        flaky: flaky.clone(),
        turn: turn.clone(),
    };
    agent_with(
        model,
        &turn,
        vec![
            tool(research, ADV_RESEARCH).expect("named"),
            tool(flaky.clone(), FLAKY[0]).expect("named"),
        ],
    )
    .prompt("Research Ada")
    .tool_context(with_turn(ToolContext::new(), &turn))
    .await
}

/// The outer model asks for research twice (the sub-agent's flaky call fails the first time,
/// so the research fails... no: it answers) and then flaky itself; a restart replays to its end.
#[tokio::test]
async fn a_sub_agent_built_inside_an_idem_tool_call_replays() {
    let id = "durable/adv-inside";
    let research = |n: &str| {
        AssistantContent::ToolCall(ToolCall::from_wire(
            format!("call-r{n}"),
            ToolFunction::new(
                ToolName::new("research").expect("a tool name"),
                json!({ "prompt": "who is ada" }),
            ),
        ))
    };
    let first_model = MockCompletionModel::from_turns([
        MockTurn::from_contents([research("0")]),
        MockTurn::from_contents([research("1")]),
        MockTurn::from_contents([flaky_to()]),
        MockTurn::text("Done."),
    ]);
    let sub = MockCompletionModel::from_turns([
        MockTurn::from_contents([flaky_to()]),
        MockTurn::text("Ada Lovelace."),
        MockTurn::from_contents([flaky_to()]),
        MockTurn::text("Ada Lovelace, again."),
    ]);
    let down = Flaky {
        down: 1,
        ..Flaky::default()
    };
    let done = adv_run_inside(id, (&first_model, &sub), &down)
        .await
        .expect("the first run");
    let calls = down.calls.load(Ordering::SeqCst);
    for restart in 0..2 {
        let silent = MockCompletionModel::from_turns([]);
        let up = Flaky {
            down: 0,
            ..down.clone()
        };
        let again = adv_run_inside(id, (&silent, &silent), &up).await;
        assert_eq!(
            again
                .as_ref()
                .map(|r| r.output())
                .map_err(|e| e.to_string()),
            Ok(done.output()),
            "restart {restart}"
        );
        assert_eq!(silent.request_count(), 0, "no request sent");
        assert_eq!(up.calls.load(Ordering::SeqCst), calls, "no call made again");
    }
}

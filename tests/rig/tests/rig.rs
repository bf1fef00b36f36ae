//! rig agents (feature `rig`): tool calls made by rig's own agent loop, through its bus, reach
//! an `#[idempotent]` rig tool in the run's turn, and a repeated call replays. Only the model is
//! scripted (rig's `MockCompletionModel`: canned replies, no network); the agent, its loop, its
//! bus and its tool dispatch are rig-agent 0.44's.

use std::future::IntoFuture;
use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};

use idem_tools::rig::{InTurn, with_turn};
use idem_tools::{Error, ToolInfo, ToolKind, Turn, idempotent, tool_impl};
use rig_agent::{Agent, AgentBuilder};
use rig_core::completion::{AssistantContent, Message};
use rig_core::message::{ToolCall, ToolFunction, ToolName, UserContent};
use rig_core::test_utils::{MockCompletionModel, MockTurn};
use rig_core::tool::{Tool, ToolContext};
use serde::{Deserialize, Serialize};
use serde_json::json;

#[derive(Debug, Clone, Serialize, Deserialize)]
struct Outgoing {
    to: String,
    text: String,
}

/// What the tool returns: which send this was, and the turn it ran in.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
struct Receipt {
    send: usize,
    turn: String,
}

/// A rig tool with a side effect: every execution of its body counts one message sent.
#[derive(Clone, Default)]
struct SendMessage {
    sent: Arc<AtomicUsize>,
}

#[tool_impl(same_service)] // every `SendMessage` sends from the same account
impl Tool for SendMessage {
    const NAME: &'static str = "send_message";
    type Args = Outgoing;
    type Output = Receipt;
    type Error = Error;

    fn description(&self) -> String {
        "Send a text message".into()
    }

    fn parameters(&self) -> serde_json::Value {
        json!({
            "type": "object",
            "properties": { "to": { "type": "string" }, "text": { "type": "string" } },
            "required": ["to", "text"]
        })
    }

    #[idempotent(name = "send_message", ignore(context))]
    async fn call(&self, context: &mut ToolContext, message: Outgoing) -> Result<Receipt, Error> {
        let _ = (context, message);
        let send = self.sent.fetch_add(1, Ordering::SeqCst) + 1;
        // Let the other calls of the reply run meanwhile, when rig runs them side by side.
        tokio::task::yield_now().await;
        let turn = Turn::current()
            .map(|t| t.id().to_owned())
            .unwrap_or_default();
        Ok(Receipt { send, turn })
    }
}

const TOOLS: &[ToolInfo] = idem_tools::tools![SendMessage::call];

fn send_to_ada(call_id: &str) -> AssistantContent {
    let name = ToolName::new(SendMessage::NAME).expect("a tool name");
    AssistantContent::ToolCall(ToolCall::from_wire(
        call_id,
        ToolFunction::new(name, json!({ "to": "ada", "text": "hi" })),
    ))
}

/// The tool results the run gave back to the model, in order: `Ok(receipt)` or `Err(text)`.
fn tool_results(messages: &[Message]) -> Vec<Result<Receipt, String>> {
    let mut results = Vec::new();
    for message in messages {
        let Message::User { content } = message else {
            continue;
        };
        for item in content {
            let UserContent::ToolResult(result) = item else {
                continue;
            };
            let body = serde_json::to_value(&result.content).expect("serializable");
            let json = body.to_string();
            let receipt = body
                .as_array()
                .and_then(|items| items.first())
                .and_then(|item| item.get("value").cloned())
                .and_then(|value| serde_json::from_value::<Receipt>(value).ok());
            results.push(match (result.is_error, receipt) {
                (false, Some(receipt)) => Ok(receipt),
                _ => Err(json),
            });
        }
    }
    results
}

fn agent(tool: SendMessage) -> Agent {
    // The agent's default model is never asked: each run brings its own script.
    AgentBuilder::new(MockCompletionModel::from_turns([]))
        .default_max_turns(5)
        .dynamic_tool(idem_tools::rig::tool(tool, TOOLS[0]).expect("a named tool"))
        .build()
}

/// One reply holding the same call twice, run one after the other (rig's default) and side by
/// side (`tool_concurrency`): the message is sent once, and both calls get its receipt.
#[tokio::test]
async fn the_same_call_twice_in_one_reply_sends_once() {
    for concurrency in [1, 4] {
        let tool = SendMessage::default();
        let model = MockCompletionModel::from_turns([
            MockTurn::from_contents([send_to_ada("call-1"), send_to_ada("call-2")]),
            MockTurn::text("Sent."),
        ]);
        let turn = Turn::new(format!("one-reply/concurrency-{concurrency}"));
        let response = agent(tool.clone())
            .prompt("Tell Ada hi")
            .using_model_value(model)
            .tool_context(with_turn(ToolContext::new(), &turn))
            .tool_concurrency(concurrency)
            .await
            .expect("the run");
        assert_eq!(response.output(), "Sent.");
        assert_eq!(
            tool.sent.load(Ordering::SeqCst),
            1,
            "sent twice at tool_concurrency {concurrency}"
        );
        let receipt = Receipt {
            send: 1,
            turn: turn.id().to_owned(),
        };
        assert_eq!(
            tool_results(response.messages()),
            [Ok(receipt.clone()), Ok(receipt)],
            "at tool_concurrency {concurrency}"
        );
    }
}

/// The model asks again in its next reply (it did not trust the first result): replayed.
#[tokio::test]
async fn the_same_call_in_a_later_reply_replays() {
    let tool = SendMessage::default();
    let model = MockCompletionModel::from_turns([
        MockTurn::from_contents([send_to_ada("call-1")]),
        MockTurn::from_contents([send_to_ada("call-2")]),
        MockTurn::text("Sent."),
    ]);
    let turn = Turn::new("later-reply/msg-1");
    let response = agent(tool.clone())
        .prompt("Tell Ada hi")
        .using_model_value(model.clone())
        .tool_context(with_turn(ToolContext::new(), &turn))
        .await
        .expect("the run");
    assert_eq!(model.request_count(), 3, "three replies were asked for");
    assert_eq!(tool.sent.load(Ordering::SeqCst), 1);
    let receipt = Receipt {
        send: 1,
        turn: "later-reply/msg-1".into(),
    };
    assert_eq!(
        tool_results(response.messages()),
        [Ok(receipt.clone()), Ok(receipt)]
    );

    // The next user message is a new turn: the same request sends again.
    let model = MockCompletionModel::from_turns([
        MockTurn::from_contents([send_to_ada("call-3")]),
        MockTurn::text("Sent again."),
    ]);
    let response = agent(tool.clone())
        .prompt("Tell Ada hi again")
        .using_model_value(model)
        .tool_context(with_turn(
            ToolContext::new(),
            &Turn::new("later-reply/msg-2"),
        ))
        .await
        .expect("the run");
    assert_eq!(tool.sent.load(Ordering::SeqCst), 2);
    assert_eq!(
        tool_results(response.messages()),
        [Ok(Receipt {
            send: 2,
            turn: "later-reply/msg-2".into()
        })]
    );
}

/// Two runs of one agent (a server answering two users with one `Agent`), each in its own
/// turn, awaited together. rig polls its bus from whichever run polls next, so one run's tool
/// call is first polled by the other run: a turn entered with `Turn::scope` around `prompt`
/// would be the wrong one there. The turn in the run's tool context is the right one.
#[tokio::test]
async fn runs_sharing_an_agent_each_keep_their_own_turn() {
    let tool = SendMessage::default();
    let agent = agent(tool.clone());
    let run = |turn: &'static str| {
        let model = MockCompletionModel::from_turns([
            MockTurn::from_contents([send_to_ada("call-1")]),
            MockTurn::text("Sent."),
        ]);
        agent
            .prompt("Tell Ada hi")
            .using_model_value(model)
            .tool_context(with_turn(ToolContext::new(), &Turn::new(turn)))
    };
    let (a, b) = tokio::join!(run("user-a/msg-1"), run("user-b/msg-1"));
    let (a, b) = (a.expect("run a"), b.expect("run b"));
    // Each user's message is sent: two actions, not one replayed to the other user.
    assert_eq!(tool.sent.load(Ordering::SeqCst), 2);
    let turns = |response: &rig_agent::agent::PromptResponse| -> Vec<String> {
        tool_results(response.messages())
            .into_iter()
            .map(|result| result.expect("a receipt").turn)
            .collect()
    };
    assert_eq!(turns(&a), ["user-a/msg-1"]);
    assert_eq!(turns(&b), ["user-b/msg-1"]);
}

/// What `InTurn` is for: the same two runs with their turns entered by `Turn::scope` around
/// `prompt` (a task-local value) and the tool registered bare. User A's call is first polled
/// inside user B's run, so it runs in B's turn, gets B's key, and replays B's receipt: A's
/// message is never sent. If this starts failing, rig polls tools differently (see
/// `idem_tools::rig`).
#[tokio::test]
async fn a_task_local_turn_does_not_follow_calls_between_runs_of_one_agent() {
    let tool = SendMessage::default();
    let agent = AgentBuilder::new(MockCompletionModel::from_turns([]))
        .default_max_turns(5)
        .tool(tool.clone())
        .build();
    let run = |turn: &'static str| {
        let model = MockCompletionModel::from_turns([
            MockTurn::from_contents([send_to_ada("call-1")]),
            MockTurn::text("Sent."),
        ]);
        let run = agent.prompt("Tell Ada hi").using_model_value(model);
        Turn::new(turn).scope(run.into_future())
    };
    let (a, b) = tokio::join!(run("scoped-a/msg-1"), run("scoped-b/msg-1"));
    let (a, b) = (a.expect("run a"), b.expect("run b"));
    assert_eq!(
        tool.sent.load(Ordering::SeqCst),
        1,
        "one message for two users"
    );
    let b_receipt = Receipt {
        send: 1,
        turn: "scoped-b/msg-1".into(),
    };
    assert_eq!(tool_results(a.messages()), [Ok(b_receipt.clone())]);
    assert_eq!(tool_results(b.messages()), [Ok(b_receipt)]);
}

/// Without `with_turn`, a run entered in a task-local turn (`Turn::scope` around `prompt`)
/// still works for a run alone on its agent: the bus is polled by that run, in its scope.
#[tokio::test]
async fn a_run_alone_on_its_agent_can_take_the_turn_from_scope() {
    let tool = SendMessage::default();
    let model = MockCompletionModel::from_turns([
        MockTurn::from_contents([send_to_ada("call-1"), send_to_ada("call-2")]),
        MockTurn::text("Sent."),
    ]);
    let response = Turn::new("from-scope/msg-1")
        .scope(
            agent(tool.clone())
                .prompt("Tell Ada hi")
                .using_model_value(model)
                .into_future(),
        )
        .await
        .expect("the run");
    assert_eq!(tool.sent.load(Ordering::SeqCst), 1);
    let receipt = Receipt {
        send: 1,
        turn: "from-scope/msg-1".into(),
    };
    assert_eq!(
        tool_results(response.messages()),
        [Ok(receipt.clone()), Ok(receipt)]
    );
}

/// The typed registration, `.tool(InTurn(tool))`, takes the turn from the run's context too.
#[tokio::test]
async fn the_typed_registration_takes_the_turn_from_the_context() {
    let tool = SendMessage::default();
    let agent = AgentBuilder::new(MockCompletionModel::from_turns([]))
        .default_max_turns(5)
        .tool(InTurn(tool.clone()))
        .build();
    let model = MockCompletionModel::from_turns([
        MockTurn::from_contents([send_to_ada("call-1"), send_to_ada("call-2")]),
        MockTurn::text("Sent."),
    ]);
    let turn = Turn::new("typed/msg-1");
    let response = agent
        .prompt("Tell Ada hi")
        .using_model_value(model)
        .tool_context(with_turn(ToolContext::new(), &turn))
        .await
        .expect("the run");
    assert_eq!(tool.sent.load(Ordering::SeqCst), 1);
    let receipt = Receipt {
        send: 1,
        turn: "typed/msg-1".into(),
    };
    assert_eq!(
        tool_results(response.messages()),
        [Ok(receipt.clone()), Ok(receipt)]
    );
}

/// No turn anywhere: the call is refused and nothing is sent; the model reads why, in idem's
/// words for a model.
#[tokio::test]
async fn without_a_turn_nothing_is_sent() {
    let tool = SendMessage::default();
    let model = MockCompletionModel::from_turns([
        MockTurn::from_contents([send_to_ada("call-1")]),
        MockTurn::text("Could not send."),
    ]);
    let response = agent(tool.clone())
        .prompt("Tell Ada hi")
        .using_model_value(model)
        .await
        .expect("the run");
    assert_eq!(tool.sent.load(Ordering::SeqCst), 0);
    let results = tool_results(response.messages());
    assert_eq!(results.len(), 1);
    let read = results[0].clone().expect_err("a refusal");
    let words = Error::NoTurn {
        tool: "send_message",
    }
    .model_text();
    assert_eq!(read, json!([{ "type": "text", "text": words }]).to_string());
}

#[test]
fn the_rig_tool_is_catalogued_under_its_rig_name() {
    assert_eq!(TOOLS[0].name, SendMessage::NAME);
    assert_eq!(TOOLS[0].kind, ToolKind::Idempotent);
    assert_eq!(
        InTurn(SendMessage::default()).description(),
        "Send a text message"
    );
    assert_eq!(<InTurn<SendMessage> as Tool>::NAME, "send_message");
}

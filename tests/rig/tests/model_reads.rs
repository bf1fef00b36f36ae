//! What the model reads in rig's own agent loop (feature `rig`): the tools under their names in
//! idem's catalog, and idem's words for a model when idem refuses a call, whatever error type
//! the tool has. The scripted model (rig's `MockCompletionModel`) keeps every request the loop
//! sent it; each test reads those, the model's side of the run.

use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};

use idem_tools::rig::{tool, tool_error, with_turn};
use idem_tools::{Error, Key, ToolInfo, Turn, idempotent, tool_impl};
use rig_agent::AgentBuilder;
use rig_core::completion::{AssistantContent, CompletionRequest, Message};
use rig_core::message::{ToolCall, ToolFunction, ToolName, ToolResultContent, UserContent};
use rig_core::test_utils::{MockCompletionModel, MockTurn};
use rig_core::tool::{Tool, ToolContext, ToolExecutionError};
use serde::{Deserialize, Serialize};
use serde_json::json;

#[derive(Debug, Clone, Serialize, Deserialize)]
struct Charge {
    cents: u64,
}

/// A payment tool's own error: a declined card, or idem's error as its source (what
/// thiserror's `#[error("…")] Idem(#[from] idem_tools::Error)` writes).
#[derive(Debug)]
enum PayError {
    Declined,
    Idem(Error),
}

impl std::fmt::Display for PayError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            PayError::Declined => f.write_str("the card was declined"),
            PayError::Idem(_) => f.write_str("the payment was not made"),
        }
    }
}

impl std::error::Error for PayError {
    fn source(&self) -> Option<&(dyn std::error::Error + 'static)> {
        match self {
            PayError::Declined => None,
            PayError::Idem(error) => Some(error),
        }
    }
}

impl From<Error> for PayError {
    fn from(error: Error) -> Self {
        PayError::Idem(error)
    }
}

/// What the model reads when the card is declined: the tool's own words.
const DECLINED: &str = "The card was declined: ask the user for another card.";

/// Charges a card: rig calls it `charge`, idem's catalog `Payments__call`. A zero amount is
/// declined (the body fails, and the attempt counts against the budget of one).
#[derive(Clone, Default)]
struct Payments {
    charged: Arc<AtomicUsize>,
}

#[tool_impl(same_service)]
impl Tool for Payments {
    const NAME: &'static str = "charge";
    type Args = Charge;
    type Output = u64;
    type Error = PayError;

    fn description(&self) -> String {
        "Charge the user's card".into()
    }

    fn parameters(&self) -> serde_json::Value {
        json!({
            "type": "object",
            "properties": { "cents": { "type": "integer" } },
            "required": ["cents"]
        })
    }

    fn map_error(&self, error: PayError) -> ToolExecutionError {
        ToolExecutionError::other(error.to_string()).with_model_feedback(DECLINED)
    }

    #[idempotent(ignore(context), budget = 1)]
    async fn call(&self, context: &mut ToolContext, charge: Charge) -> Result<u64, PayError> {
        let _ = context;
        if charge.cents == 0 {
            return Err(PayError::Declined);
        }
        Ok(self.charged.fetch_add(1, Ordering::SeqCst) as u64 + 1)
    }
}

/// A notifier whose error forwards everything to idem's (what `#[error(transparent)]` writes):
/// idem's error is not in its chain of sources, so its `map_error` words it with `tool_error`.
#[derive(Debug)]
enum NotifyError {
    Idem(Error),
}

impl std::fmt::Display for NotifyError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let NotifyError::Idem(error) = self;
        error.fmt(f)
    }
}

impl std::error::Error for NotifyError {
    fn source(&self) -> Option<&(dyn std::error::Error + 'static)> {
        let NotifyError::Idem(error) = self;
        error.source()
    }
}

impl From<Error> for NotifyError {
    fn from(error: Error) -> Self {
        NotifyError::Idem(error)
    }
}

#[derive(Clone, Default)]
struct Notify {
    sent: Arc<AtomicUsize>,
}

#[tool_impl(same_service)]
impl Tool for Notify {
    const NAME: &'static str = "notify";
    type Args = serde_json::Value;
    type Output = usize;
    type Error = NotifyError;

    fn description(&self) -> String {
        "Notify the user".into()
    }

    fn parameters(&self) -> serde_json::Value {
        json!({ "type": "object" })
    }

    fn map_error(&self, error: NotifyError) -> ToolExecutionError {
        let NotifyError::Idem(error) = error;
        tool_error(&error)
    }

    #[idempotent(name = "notify", ignore(context))]
    async fn call(
        &self,
        context: &mut ToolContext,
        message: serde_json::Value,
    ) -> Result<usize, NotifyError> {
        let _ = (context, message);
        Ok(self.sent.fetch_add(1, Ordering::SeqCst) + 1)
    }
}

const TOOLS: &[ToolInfo] = idem_tools::tools![Payments::call, Notify::call];

/// The model's call of `name` with `args`.
fn call(name: &str, id: &str, args: serde_json::Value) -> AssistantContent {
    let name = ToolName::new(name).expect("a tool name");
    AssistantContent::ToolCall(ToolCall::from_wire(id, ToolFunction::new(name, args)))
}

/// The tool results the model reads in `request`: (tool name, text or JSON, is an error), in
/// order.
fn read(request: &CompletionRequest) -> Vec<(String, String, bool)> {
    let Some(Message::User { content }) = request.chat_history.last() else {
        return Vec::new();
    };
    content
        .iter()
        .filter_map(|item| match item {
            UserContent::ToolResult(result) => Some(result),
            _ => None,
        })
        .map(|result| {
            let text: Vec<String> = result
                .content
                .iter()
                .map(|item| match item {
                    ToolResultContent::Text(text) => text.text().to_owned(),
                    ToolResultContent::Json { value } => value.to_string(),
                    ToolResultContent::Image(_) => "<image>".to_owned(),
                })
                .collect();
            (result.name.to_string(), text.concat(), result.is_error)
        })
        .collect()
}

/// A key for building the error whose words the model should read (the words name no key).
fn any_key() -> idem_tools::key::ShortKey {
    Key::from_bytes([0; 32]).short()
}

fn payments_agent(payments: &Payments) -> rig_agent::Agent {
    AgentBuilder::new(MockCompletionModel::from_turns([]))
        .default_max_turns(5)
        .dynamic_tool(tool(payments.clone(), TOOLS[0]).expect("a named tool"))
        .build()
}

/// The model is shown `Payments__call`, the catalog's name, not rig's `charge`; it calls the
/// tool by that name, and the result comes back under it.
#[tokio::test]
async fn the_model_sees_and_calls_the_catalog_name() {
    assert_eq!(TOOLS[0].name, "Payments__call");
    let payments = Payments::default();
    let model = MockCompletionModel::from_turns([
        MockTurn::from_contents([call("Payments__call", "c1", json!({ "cents": 500 }))]),
        MockTurn::text("Charged."),
    ]);
    payments_agent(&payments)
        .prompt("Charge me $5")
        .using_model_value(model.clone())
        .tool_context(with_turn(ToolContext::new(), &Turn::new("names/msg-1")))
        .await
        .expect("the run");
    let requests = model.requests();
    let shown: Vec<&str> = requests[0].tools.iter().map(|t| t.name.as_str()).collect();
    assert_eq!(shown, ["Payments__call"]);
    assert_eq!(payments.charged.load(Ordering::SeqCst), 1);
    assert_eq!(
        read(&requests[1]),
        [("Payments__call".into(), "1".into(), false)]
    );
}

/// A tool whose body failed once, budget 1, called again: idem refuses the second call, and
/// the model reads idem's words (stop retrying) — found in the tool's own error type, as its
/// source — where rig's default would say only that the tool failed. The tool's own failure
/// still reads as the tool words it.
#[tokio::test]
async fn a_spent_retry_budget_is_read_in_idems_words() {
    let payments = Payments::default();
    let declined = || call("Payments__call", "c", json!({ "cents": 0 }));
    let model = MockCompletionModel::from_turns([
        MockTurn::from_contents([declined()]),
        MockTurn::from_contents([declined()]),
        MockTurn::text("The payment failed."),
    ]);
    payments_agent(&payments)
        .prompt("Charge me nothing")
        .using_model_value(model.clone())
        .tool_context(with_turn(ToolContext::new(), &Turn::new("budget/msg-1")))
        .await
        .expect("the run");
    let requests = model.requests();
    assert_eq!(
        read(&requests[1]),
        [("Payments__call".into(), DECLINED.into(), true)]
    );
    let spent = Error::BudgetExhausted {
        tool: "Payments__call",
        key: any_key(),
        attempts: 1,
        limit: 1,
    };
    assert_eq!(
        read(&requests[2]),
        [("Payments__call".into(), spent.model_text(), true)]
    );
    assert!(spent.model_text().contains("Stop retrying"));
}

/// A turn capped at one action: the model's second, different action is refused, and the model
/// reads idem's words, not the developer's hint (which names `Turn::with_max_calls`).
#[tokio::test]
async fn a_turn_cap_is_read_in_idems_words_without_the_developers_hint() {
    let payments = Payments::default();
    let model = MockCompletionModel::from_turns([
        MockTurn::from_contents([call("Payments__call", "c1", json!({ "cents": 100 }))]),
        MockTurn::from_contents([call("Payments__call", "c2", json!({ "cents": 200 }))]),
        MockTurn::text("Charged once."),
    ]);
    let turn = Turn::new("cap/msg-1").with_max_calls(1);
    payments_agent(&payments)
        .prompt("Charge me twice")
        .using_model_value(model.clone())
        .tool_context(with_turn(ToolContext::new(), &turn))
        .await
        .expect("the run");
    assert_eq!(payments.charged.load(Ordering::SeqCst), 1);
    let capped = Error::TurnBudgetExhausted {
        tool: "Payments__call",
        turn: "cap/msg-1".into(),
        calls: 1,
        limit: 1,
    };
    assert!(capped.to_string().contains("Turn::with_max_calls"));
    let (_, text, is_error) = read(&model.requests()[2]).remove(0);
    assert_eq!(text, capped.model_text());
    assert!(is_error);
    assert!(
        !text.contains("with_max_calls") && !text.contains('`'),
        "{text}"
    );
}

/// An error type that hides idem's error from its chain of sources (`#[error(transparent)]`)
/// words it in its own `map_error` with `tool_error`: the model reads idem's words for a call
/// made outside a turn, not the developer's (which name `Turn::new`).
#[tokio::test]
async fn a_tool_error_type_that_hides_idems_error_words_it_with_tool_error() {
    let notify = Notify::default();
    let agent = AgentBuilder::new(MockCompletionModel::from_turns([]))
        .default_max_turns(5)
        .dynamic_tool(tool(notify.clone(), TOOLS[1]).expect("a named tool"))
        .build();
    let model = MockCompletionModel::from_turns([
        MockTurn::from_contents([call("notify", "n1", json!({ "text": "hi" }))]),
        MockTurn::text("Could not notify."),
    ]);
    agent
        .prompt("Notify me")
        .using_model_value(model.clone())
        .await
        .expect("the run");
    assert_eq!(notify.sent.load(Ordering::SeqCst), 0);
    let outside = Error::NoTurn { tool: "notify" };
    assert_eq!(
        read(&model.requests()[1]),
        [("notify".into(), outside.model_text(), true)]
    );
    assert!(!outside.model_text().contains("Turn::"));
}

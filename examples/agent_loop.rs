//! The dispatch loop most agent codebases have, with idem in it: `cargo run --example
//! agent_loop`.
//!
//! A model answers each user message with tool calls — a tool name and JSON arguments. The
//! loop looks the name up in the `tools![]` catalog, deserialises the arguments, calls the
//! tool, and feeds the result (or the error text) back to the model. The scripted model here
//! behaves like real ones do: its first `send_email` times out on the agent's side, so it
//! calls it again; then it calls it "once more to be safe"; and it keeps going until the
//! error tells it the action is done. The person gets one email per user message.
//!
//! The example checks its own claims and exits non-zero if one fails.

use std::sync::Mutex;
use std::sync::atomic::{AtomicU32, Ordering};
use std::time::Duration;

use idem_tools::{ToolInfo, Turn, idempotent, read_only};
use serde::de::DeserializeOwned;
use serde::{Deserialize, Serialize};
use serde_json::{Value, json};

// ----------------------------------------------------------------------------------- the tools

/// The emails that were actually sent: the side effect that must happen once.
static OUTBOX: Mutex<Vec<String>> = Mutex::new(Vec::new());
/// How many times the address book was read.
static LOOKUPS: AtomicU32 = AtomicU32::new(0);

/// What `send_email` returns (recorded, and replayed to retries).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Sent {
    /// The id the mail service gave the message.
    pub message_id: usize,
}

/// Sends an email. Owned arguments and no receiver: it runs detached, so an agent that times
/// out does not cut it off halfway; the retry joins it or replays its result.
#[idempotent(ttl = "1d")]
pub async fn send_email(to: String, subject: String) -> Result<Sent, idem_tools::Error> {
    tokio::time::sleep(Duration::from_millis(200)).await; // a slow mail service
    let mut outbox = OUTBOX
        .lock()
        .unwrap_or_else(std::sync::PoisonError::into_inner);
    outbox.push(format!("{to}: {subject}"));
    Ok(Sent {
        message_id: outbox.len(),
    })
}

/// Looks a person up in the address book. Reads only: no key, no store, no budget.
#[read_only]
pub async fn find_contact(name: String) -> Result<String, idem_tools::Error> {
    LOOKUPS.fetch_add(1, Ordering::Relaxed);
    Ok(format!("{}@example.com", name.to_lowercase()))
}

/// Every tool the model may call; an unclassified one would not compile.
pub const TOOLS: &[ToolInfo] = idem_tools::tools![send_email, find_contact];

// ------------------------------------------------------------------------------ the dispatch

/// One tool call, as a model emits it.
#[derive(Debug, Clone)]
pub struct ToolCall {
    /// The tool's name in the catalog.
    pub name: String,
    /// Its arguments, a JSON object.
    pub arguments: Value,
}

/// The arguments of `send_email`.
#[derive(Deserialize)]
struct SendEmail {
    to: String,
    subject: String,
}

/// The arguments of `find_contact`.
#[derive(Deserialize)]
struct FindContact {
    name: String,
}

/// `arguments` as `T`, or the text the model reads.
fn args<T: DeserializeOwned>(arguments: &Value) -> Result<T, String> {
    serde_json::from_value(arguments.clone()).map_err(|e| format!("bad arguments: {e}"))
}

/// Calls the tool `call` names. `Err` is the text the model reads: for idem's errors their
/// model text (what happened to the action, what to do next), never the developer's `Display`
/// text, which goes to the log.
pub async fn dispatch(call: &ToolCall) -> Result<Value, String> {
    if !TOOLS.iter().any(|tool| tool.name == call.name) {
        return Err(format!("there is no tool named {:?}", call.name));
    }
    let result = match call.name.as_str() {
        "send_email" => {
            let SendEmail { to, subject } = args(&call.arguments)?;
            send_email(to, subject).await.map(|sent| json!(sent))
        }
        "find_contact" => {
            let FindContact { name } = args(&call.arguments)?;
            find_contact(name).await.map(Value::from)
        }
        other => return Err(format!("tool {other:?} is catalogued but not dispatched")),
    };
    result.map_err(|error| {
        eprintln!("  (log) {} failed: {error}", call.name);
        error.model_text()
    })
}

// --------------------------------------------------------------------------------- the model

/// A scripted model: for each user message, the tool calls it makes, in order.
fn script(user: &str) -> Vec<ToolCall> {
    let call = |name: &str, arguments: Value| ToolCall {
        name: name.to_owned(),
        arguments,
    };
    let send = call(
        "send_email",
        json!({ "to": "ada@example.com", "subject": user }),
    );
    vec![
        call("find_contact", json!({ "name": "Ada" })),
        send.clone(), // times out on the agent's side
        send.clone(), // the retry
        send.clone(), // "once more to be safe"
        send,         // and once more: still the same receipt, and still sent once
    ]
}

/// How long the agent waits for one tool call.
const TOOL_TIMEOUT: Duration = Duration::from_millis(50);

/// One user message: one turn, every tool call of the model inside it.
async fn handle(conversation: &str, n: usize, user: &str) -> Vec<Result<Value, String>> {
    let turn = Turn::new(format!("{conversation}/turn-{n}"));
    turn.scope(async {
        let mut transcript = Vec::new();
        for call in script(user) {
            let result = match tokio::time::timeout(TOOL_TIMEOUT, dispatch(&call)).await {
                Ok(result) => result,
                Err(_) => {
                    // The agent gave up on the call (the tool keeps running, detached); the
                    // model is told, and calls it again with the same arguments.
                    println!(
                        "  {} -> did not answer in time; the model retries",
                        call.name
                    );
                    tokio::time::timeout(Duration::from_secs(5), dispatch(&call))
                        .await
                        .unwrap_or_else(|_| Err("the tool did not answer in time".to_owned()))
                }
            };
            match &result {
                Ok(value) => println!("  {} -> {value}", call.name),
                Err(error) => println!("  {} -> error: {error}", call.name),
            }
            transcript.push(result);
        }
        transcript
    })
    .await
}

#[tokio::main]
pub async fn main() -> Result<(), String> {
    for tool in TOOLS {
        println!("{}: read-only = {}", tool.name, tool.read_only_hint());
    }
    let mut sent = Vec::new();
    for (n, user) in ["Lunch on Friday?", "Lunch moved to 1pm"]
        .iter()
        .enumerate()
    {
        println!("user: {user}");
        let transcript = handle("conv-1", n + 1, user).await;
        // Every retry, however many, replays the first receipt.
        let receipts: Vec<&Value> = transcript[1..].iter().flatten().collect();
        if receipts.len() != 4 || receipts.iter().any(|r| *r != receipts[0]) {
            return Err(format!(
                "the retries did not replay one receipt: {transcript:?}"
            ));
        }
        sent.push(receipts[0].clone());
    }
    let outbox = OUTBOX.lock().map_err(|e| e.to_string())?.clone();
    println!("outbox: {outbox:?}");
    if outbox.len() != 2 {
        return Err(format!(
            "expected one email per user message, sent {}",
            outbox.len()
        ));
    }
    if LOOKUPS.load(Ordering::Relaxed) != 2 {
        return Err("the read-only tool runs every time".to_owned());
    }
    Ok(())
}

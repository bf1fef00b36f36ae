//! idem in one minute: `cargo run -p idem-quickstart`.
//!
//! An agent calls three tools through a transport that loses responses:
//! 1. `send_message` is retried after its response was lost: the retry shares the first call's
//!    key and is replayed, so the recipient gets exactly one message;
//! 2. `sync_calendar` always times out: the agent keeps retrying until the turn's budget stops
//!    it with `BudgetExhausted`, and the agent reports that it is stuck;
//! 3. `search_docs` is `#[read_only]`: ten calls, no store or counter touched;
//! 4. the `tools![]` catalog, with each tool's classification and MCP hints.
//!
//! The example checks its own claims and exits non-zero if one fails.

use std::fmt;
use std::future::Future;
use std::sync::atomic::{AtomicU32, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use idem_tools::{MemoryStore, ToolInfo, Turn, current_key, idempotent, read_only};
use serde::{Deserialize, Serialize};

// ----------------------------------------------------------------------------------- the tools

/// What the recipient received: the side effect that must happen once.
static INBOX: Mutex<Vec<String>> = Mutex::new(Vec::new());
/// How many times the calendar upstream was actually called.
static CALENDAR_CALLS: AtomicU32 = AtomicU32::new(0);

/// A tool's error: its own failures, and idem's (budget, store, no turn).
#[derive(Debug)]
pub enum ToolError {
    /// The upstream did not answer in time.
    Timeout,
    /// idem refused or failed the call.
    Idem(idem_tools::Error),
}

impl From<idem_tools::Error> for ToolError {
    fn from(error: idem_tools::Error) -> Self {
        ToolError::Idem(error)
    }
}

impl fmt::Display for ToolError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            ToolError::Timeout => f.write_str("upstream timed out"),
            ToolError::Idem(error) => error.fmt(f),
        }
    }
}

/// What `send_message` returns.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Receipt {
    /// The message id the chat service assigned.
    pub message_id: u64,
}

/// Sends a chat message. Runs once per turn and arguments; a retry replays the receipt.
#[idempotent(ttl = "1h")]
pub async fn send_message(to: String, text: String) -> Result<Receipt, ToolError> {
    let key = current_key().expect("inside a tool").short();
    let mut inbox = INBOX.lock().unwrap();
    inbox.push(format!("to {to}: {text}"));
    tracing::info!(%key, %to, "  -> chat service: message delivered");
    Ok(Receipt {
        message_id: 1000 + inbox.len() as u64,
    })
}

/// Syncs a calendar through an upstream that always times out.
#[idempotent(budget = 3)]
pub async fn sync_calendar(account: String) -> Result<u32, ToolError> {
    let n = CALENDAR_CALLS.fetch_add(1, Ordering::SeqCst) + 1;
    tokio::time::sleep(Duration::from_millis(5)).await;
    tracing::warn!(%account, call = n, "  -> calendar upstream: timed out");
    Err(ToolError::Timeout)
}

/// Searches the docs. Read-only: no key, no store, no budget, no cost.
#[read_only]
pub async fn search_docs(query: &str) -> Vec<String> {
    vec![format!("docs matching {query:?}")]
}

/// The catalog: fails to compile if one of these is not classified.
pub const TOOLS: &[ToolInfo] = idem_tools::tools![send_message, sync_calendar, search_docs];

// ------------------------------------------------------------------------------- the transport

/// The tool ran, but its response never reached the agent.
#[derive(Debug)]
pub struct ResponseLost;

/// Runs `call` to completion, then loses its response when `drop_response` is set, like a
/// connection reset after the server did the work.
async fn transport<T>(
    drop_response: bool,
    call: impl Future<Output = T>,
) -> Result<T, ResponseLost> {
    let response = call.await;
    if drop_response {
        drop(response);
        return Err(ResponseLost);
    }
    Ok(response)
}

// ------------------------------------------------------------------------------- the agent

/// What happened, checked by `main` and by `tests/quickstart.rs`.
#[derive(Debug)]
pub struct Summary {
    /// Attempts the agent made to send the message.
    pub send_attempts: u32,
    /// Messages the recipient got.
    pub messages_received: usize,
    /// Attempts the agent made at the calendar sync.
    pub sync_attempts: u32,
    /// Times the calendar upstream really ran.
    pub calendar_calls: u32,
    /// What the model read when the budget stopped it.
    pub stuck_report: String,
    /// Store records and engine calls made by ten read-only searches.
    pub search_side_effects: (usize, u64),
}

/// Runs the whole story.
pub async fn run() -> Summary {
    let store = Arc::new(MemoryStore::new());
    let turn = Turn::new("conv-42/turn-1").with_store(store.clone());

    turn.clone()
        .scope(async {
            println!("\n== 1. a lost response, retried: one key, one message ==");
            let mut send_attempts = 0;
            let receipt = loop {
                send_attempts += 1;
                let lose_it = send_attempts == 1;
                let call = send_message("ada".into(), "the deploy is done".into());
                match transport(lose_it, call).await {
                    Ok(result) => break result.expect("send_message failed"),
                    Err(ResponseLost) => {
                        tracing::warn!(attempt = send_attempts, "agent: no response, retrying")
                    }
                }
            };
            println!("agent: sent, message id {}", receipt.message_id);

            println!("\n== 2. a tool that always times out: the budget stops the loop ==");
            let mut sync_attempts = 0;
            let stuck_report = loop {
                sync_attempts += 1;
                match sync_calendar("ada@example.com".into()).await {
                    Ok(_) => unreachable!("the upstream always times out"),
                    Err(ToolError::Timeout) => {
                        tracing::warn!(attempt = sync_attempts, "agent: timeout, retrying")
                    }
                    Err(ToolError::Idem(error @ idem_tools::Error::BudgetExhausted { .. })) => {
                        // What the model reads: its words, no Rust (`{error}` is the log's).
                        break error.model_text();
                    }
                    Err(other) => panic!("unexpected error: {other}"),
                }
            };
            tracing::error!("the model reads: {stuck_report}");

            println!("\n== 3. a read-only tool, ten calls: nothing recorded ==");
            let (records, calls) = (store.len(), turn.stats().total());
            for _ in 0..10 {
                search_docs("retry budget").await;
            }
            let search_side_effects = (store.len() - records, turn.stats().total() - calls);
            println!(
                "store records: {records} before, {} after; engine calls: {calls} before, {} after",
                store.len(),
                turn.stats().total()
            );

            println!("\n== 4. the tool catalog ==");
            println!(
                "{:<15} {:<11} {:>12} {:>15} {:>16}",
                "tool", "kind", "readOnlyHint", "idempotentHint", "destructiveHint"
            );
            for tool in TOOLS {
                println!(
                    "{:<15} {:<11} {:>12} {:>15} {:>16}",
                    tool.name,
                    format!("{:?}", tool.kind),
                    tool.read_only_hint(),
                    tool.idempotent_hint(),
                    tool.destructive_hint()
                );
            }

            Summary {
                send_attempts,
                messages_received: INBOX.lock().unwrap().len(),
                sync_attempts,
                calendar_calls: CALENDAR_CALLS.load(Ordering::SeqCst),
                stuck_report,
                search_side_effects,
            }
        })
        .await
}

/// The claims of the story; panics (exit code 101) if one does not hold.
pub fn check(summary: &Summary) {
    assert_eq!(
        summary.send_attempts, 2,
        "the agent should have retried once"
    );
    assert_eq!(
        summary.messages_received, 1,
        "the recipient must get exactly one message"
    );
    assert_eq!(
        summary.calendar_calls, 3,
        "the budget allows 3 attempts per key"
    );
    assert_eq!(summary.sync_attempts, 4, "the 4th attempt is refused");
    assert!(
        summary.stuck_report.contains("Stop retrying"),
        "{}",
        summary.stuck_report
    );
    assert_eq!(
        summary.search_side_effects,
        (0, 0),
        "read-only tools touch nothing"
    );
}

#[allow(dead_code)] // `tests/quickstart.rs` includes this file and calls `run` instead.
#[tokio::main(flavor = "current_thread")]
async fn main() {
    tracing_subscriber::fmt()
        .with_env_filter(
            tracing_subscriber::EnvFilter::try_from_default_env().unwrap_or_else(|_| "info".into()),
        )
        .without_time()
        .with_target(false)
        .with_ansi(std::io::IsTerminal::is_terminal(&std::io::stdout()))
        .init();
    let summary = run().await;
    check(&summary);
    println!("\n== summary ==");
    println!(
        "- send_message: {} attempts, 1 execution, {} message received (the retry was replayed)",
        summary.send_attempts, summary.messages_received
    );
    println!(
        "- sync_calendar: {} attempts, {} upstream calls, then BudgetExhausted: the agent stopped",
        summary.sync_attempts, summary.calendar_calls
    );
    println!("- search_docs: 10 calls, 0 store records, 0 engine calls");
    println!("- {} tools classified at compile time", TOOLS.len());
}

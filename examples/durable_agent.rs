//! A rig agent crashed mid-run and restarted from the top: with `RecordedModel`, the restarted
//! run gets the model's recorded steps back, so its charge carries the same memo and replays;
//! without it, the model is asked again, rewords the memo, and the card is charged twice.
//!
//! ```console
//! $ cargo run --manifest-path tests/rig/Cargo.toml --example durable_agent
//! ```
//!
//! (Built by the `tests/rig` workspace, which has rig-agent and Rust 1.95; idem's features `rig`
//! and `sqlite`.) The example runs itself as child processes on an SQLite file in a fresh
//! temporary directory, its ledger beside it: the first crashes right after the charge, before
//! the model's next step; the second is the orchestrator's restart, from the top, with the same
//! turn id. The model is rig's scripted `MockCompletionModel`, reading the conversation as a
//! real model does (a charge to make, or a receipt to report) and wording the memo differently
//! in every process. It prints what each run sent the model and charged, then does it all again
//! without `RecordedModel`, and exits non-zero if a claim does not hold.

use std::error::Error as StdError;
use std::hash::{BuildHasher, RandomState};
use std::path::{Path, PathBuf};
use std::process::{Command, ExitCode};
use std::sync::Arc;

use idem_tools::SqliteStore;
use idem_tools::rig::{RecordedModel, tool, with_turn};
use idem_tools::{Error, ToolInfo, Turn, idempotent, tool_impl};
use rig_agent::AgentBuilder;
use rig_core::Model;
use rig_core::completion::{CompletionRequest, Message};
use rig_core::driver::{Exchange, Opening, Transport};
use rig_core::message::UserContent;
use rig_core::test_utils::{MockCompletionModel, MockFrame, MockScript, MockTurn};
use rig_core::tool::{Tool, ToolContext};
use serde::{Deserialize, Serialize};
use serde_json::json;

const TURN: &str = "order-1001/turn-1";
const PROMPT: &str = "Charge Ada 500 cents for her coffee.";
/// How a model words the memo; each process draws one.
const WORDINGS: [&str; 6] = [
    "Coffee for Ada",
    "coffee for Ada.",
    "Ada's coffee",
    "Ada: coffee",
    "COFFEE FOR ADA",
    "coffee, billed to Ada",
];
/// The exit status of the run that crashes.
const CRASHED: i32 = 42;

/// What the model asks `charge` for.
#[derive(Debug, Clone, Serialize, Deserialize)]
struct Charge {
    cents: u64,
    memo: String,
}

/// What `charge` returns: recorded on the first call, replayed to a retry.
#[derive(Debug, Clone, Serialize, Deserialize)]
struct Receipt {
    charge_id: String,
    cents: u64,
}

/// The payment provider: each charge is a line of `charges.log`, beside the SQLite file.
#[derive(Clone)]
struct Billing {
    ledger: PathBuf,
}

#[tool_impl(same_service)]
impl Billing {
    /// Every argument is in the key, the memo the model writes too: a reworded memo is a new
    /// charge.
    #[idempotent(name = "charge")]
    async fn charge(&self, cents: u64, memo: String) -> Result<Receipt, Error> {
        let charge_id = format!("ch_{}", charges(&self.ledger).len() + 1);
        let line = format!("{charge_id} {cents} {memo}\n");
        std::fs::OpenOptions::new()
            .create(true)
            .append(true)
            .open(&self.ledger)
            .and_then(|mut file| std::io::Write::write_all(&mut file, line.as_bytes()))
            .map_err(|e| Error::Config(format!("the ledger: {e}")))?;
        Ok(Receipt { charge_id, cents })
    }
}

const TOOLS: &[ToolInfo] = idem_tools::tools![Billing::charge];

/// The memos charged so far.
fn charges(ledger: &Path) -> Vec<String> {
    std::fs::read_to_string(ledger)
        .unwrap_or_default()
        .lines()
        .filter_map(|line| line.splitn(3, ' ').nth(2).map(str::to_owned))
        .collect()
}

/// The rig tool: charges, and in the run that crashes, crashes right after.
#[derive(Clone)]
struct ChargeTool {
    billing: Billing,
    crash: Option<Run>,
}

impl Tool for ChargeTool {
    const NAME: &'static str = "charge";
    type Args = Charge;
    type Output = Receipt;
    type Error = Error;

    fn description(&self) -> String {
        "Charge the customer's card".into()
    }

    fn parameters(&self) -> serde_json::Value {
        json!({
            "type": "object",
            "properties": { "cents": { "type": "integer" }, "memo": { "type": "string" } },
            "required": ["cents", "memo"]
        })
    }

    async fn call(&self, _: &mut ToolContext, charge: Charge) -> Result<Receipt, Error> {
        let receipt = self.billing.charge(charge.cents, charge.memo).await?;
        if let Some(run) = &self.crash {
            // The process dies here: the charge is made and recorded, the model not yet told.
            println!("{} crashed", run.report().await);
            std::process::exit(CRASHED);
        }
        Ok(receipt)
    }
}

/// rig's scripted model, reading the conversation as a real model does: asked with the charge
/// still to make, it calls `charge` with the memo as this process words it; asked after the
/// receipt, it reports it. (A transport over two scripts of `MockCompletionModel`.)
#[derive(Clone)]
struct Scripted {
    charge: MockCompletionModel,
    answer: MockCompletionModel,
}

impl Scripted {
    fn new(memo: &str) -> Scripted {
        Scripted {
            charge: MockCompletionModel::from_turns([MockTurn::tool_call(
                "call-1",
                "charge",
                json!({ "cents": 500, "memo": memo }),
            )]),
            answer: MockCompletionModel::text("Charged Ada 500 cents for her coffee."),
        }
    }

    /// The requests the model was sent.
    fn requests(&self) -> usize {
        self.charge.request_count() + self.answer.request_count()
    }

    fn model(&self) -> Model<MockScript, Scripted> {
        Model::new(MockScript::default(), self.clone())
    }
}

impl Transport<MockScript> for Scripted {
    fn send(&self, request: CompletionRequest, exchange: Exchange) -> Opening<MockFrame> {
        let charged = matches!(request.chat_history.last(), Some(Message::User { content })
            if content.iter().any(|c| matches!(c, UserContent::ToolResult(_))));
        let script = if charged { &self.answer } else { &self.charge };
        script.transport.send(request, exchange)
    }
}

/// One run of the turn in this process: what it sent and charged.
#[derive(Clone)]
struct Run {
    model: Scripted,
    turn: Turn,
    ledger: PathBuf,
    charged_before: usize,
}

impl Run {
    /// `requests=N replayed=M charges=K`: the model's steps this run answered without a request
    /// were replayed.
    async fn report(&self) -> String {
        let requests = self.model.requests();
        let answered = self.turn.conversation("default").steps().await as usize;
        let charges = charges(&self.ledger).len() - self.charged_before;
        let replayed = answered.saturating_sub(requests);
        format!("requests={requests} replayed={replayed} charges={charges}")
    }
}

/// A child: one run of the turn, from the top, as the orchestrator starts it.
async fn child(
    dir: &Path,
    recorded: bool,
    memo: &str,
    crash: bool,
) -> Result<(), Box<dyn StdError>> {
    let store = Arc::new(SqliteStore::open(dir.join("idem.db"))?);
    let turn = Turn::new(TURN).with_store(store);
    let model = Scripted::new(memo);
    let ledger = dir.join("charges.log");
    let run = Run {
        model: model.clone(),
        turn: turn.clone(),
        charged_before: charges(&ledger).len(),
        ledger: ledger.clone(),
    };
    let charge = ChargeTool {
        billing: Billing { ledger },
        crash: crash.then(|| run.clone()),
    };
    let mut agent = AgentBuilder::new(model.model());
    if recorded {
        // The one line: the agent's model steps recorded in the turn.
        agent = agent.model_route_handler(
            "default",
            RecordedModel::new("default", model.model(), &turn),
        );
    }
    let agent = agent
        .default_max_turns(5)
        .dynamic_tool(tool(charge, TOOLS[0])?)
        .build();
    let reply = agent
        .prompt(PROMPT)
        .tool_context(with_turn(ToolContext::new(), &turn))
        .await?;
    println!("{} answer={}", run.report().await, reply.output());
    Ok(())
}

/// What a child said: `requests=N replayed=M charges=K …`.
struct Said {
    line: String,
}

impl Said {
    fn get(&self, name: &str) -> usize {
        self.line
            .split(' ')
            .find_map(|word| word.strip_prefix(&format!("{name}=")))
            .and_then(|n| n.parse().ok())
            .unwrap_or(usize::MAX)
    }
}

/// Runs the turn in a child process that crashes after the charge, then restarts it; returns
/// what the two runs said.
fn crash_and_restart(
    dir: &Path,
    recorded: bool,
    memos: [&str; 2],
) -> Result<[Said; 2], Box<dyn StdError>> {
    std::fs::create_dir_all(dir)?;
    let mut said = Vec::new();
    for (run, memo) in memos.iter().enumerate() {
        let crash = run == 0;
        let mut command = Command::new(std::env::current_exe()?);
        command
            .env("IDEM_DURABLE_AGENT_DIR", dir)
            .env("IDEM_DURABLE_AGENT_MEMO", memo)
            .env(
                "IDEM_DURABLE_AGENT_RECORDED",
                if recorded { "1" } else { "0" },
            )
            .env("IDEM_DURABLE_AGENT_CRASH", if crash { "1" } else { "0" });
        let out = command.output()?;
        let line = String::from_utf8_lossy(&out.stdout)
            .lines()
            .last()
            .unwrap_or_default()
            .to_owned();
        let expected = if crash { Some(CRASHED) } else { Some(0) };
        if out.status.code() != expected {
            return Err(format!(
                "run {} ended with {} ({line:?}): {}",
                run + 1,
                out.status,
                String::from_utf8_lossy(&out.stderr)
            )
            .into());
        }
        said.push(Said { line });
    }
    let [first, second] = <[Said; 2]>::try_from(said).map_err(|_| "two runs")?;
    Ok([first, second])
}

/// `"a" and "b"`.
fn quoted(memos: &[String]) -> String {
    let quoted: Vec<String> = memos.iter().map(|memo| format!("{memo:?}")).collect();
    quoted.join(" and ")
}

fn parent() -> Result<(), Box<dyn StdError>> {
    let dir = std::env::temp_dir().join(format!("idem-durable-agent-{}", std::process::id()));
    // A wording for each process, dealt at random.
    let state = RandomState::new();
    let mut memos = WORDINGS;
    memos.sort_by_key(|memo| state.hash_one(memo));

    let [crashed, restarted] =
        crash_and_restart(&dir.join("recorded"), true, [memos[0], memos[1]])?;
    println!("with RecordedModel (state in {}):", dir.display());
    let describe = |said: &Said| {
        format!(
            "model requests sent {}, steps replayed {}, charges made {}",
            said.get("requests"),
            said.get("replayed"),
            said.get("charges")
        )
    };
    println!(
        "  run 1: {}, then crashed right after the charge",
        describe(&crashed)
    );
    let answer = restarted.line.split_once("answer=").map_or("", |(_, a)| a);
    println!(
        "  run 2, restarted from the top: {}; answer {answer:?}",
        describe(&restarted)
    );
    let recorded = charges(&dir.join("recorded/charges.log"));
    println!(
        "  charges made in all: {} ({})",
        recorded.len(),
        quoted(&recorded)
    );

    let [first, second] = crash_and_restart(&dir.join("plain"), false, [memos[2], memos[3]])?;
    let plain = charges(&dir.join("plain/charges.log"));
    println!(
        "without it, the same crash and restart: {} model requests, {} charges ({})",
        first.get("requests") + second.get("requests"),
        plain.len(),
        plain
            .iter()
            .map(|m| format!("{m:?}"))
            .collect::<Vec<_>>()
            .join(" and ")
    );
    std::fs::remove_dir_all(&dir)?;

    let checks = [
        (recorded.len() == 1, "one charge with RecordedModel"),
        (
            restarted.get("charges") == 0,
            "the restarted run charged nothing",
        ),
        (
            restarted.get("replayed") == 1,
            "the restarted run replayed the model's first step",
        ),
        (
            restarted.get("requests") == 1,
            "the restarted run asked only for the step after the charge",
        ),
        (plain.len() == 2, "two charges without RecordedModel"),
    ];
    for (holds, claim) in checks {
        if !holds {
            return Err(format!("this claim does not hold: {claim}").into());
        }
    }
    Ok(())
}

#[tokio::main]
async fn main() -> ExitCode {
    let result = match std::env::var_os("IDEM_DURABLE_AGENT_DIR") {
        Some(dir) => {
            let var = |name: &str| std::env::var(name).unwrap_or_default();
            child(
                Path::new(&dir),
                var("IDEM_DURABLE_AGENT_RECORDED") == "1",
                &var("IDEM_DURABLE_AGENT_MEMO"),
                var("IDEM_DURABLE_AGENT_CRASH") == "1",
            )
            .await
        }
        None => parent(),
    };
    match result {
        Ok(()) => ExitCode::SUCCESS,
        Err(error) => {
            eprintln!("durable_agent: {error}");
            ExitCode::FAILURE
        }
    }
}

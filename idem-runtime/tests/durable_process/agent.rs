//! The agent the processes run: a generic agent loop on [`Conversation`] (as any LLM client
//! would use it), a scripted model whose wording depends on a per-process seed, and a `charge`
//! tool whose side effect is a line in the ledger carrying the call's key.

use std::io::Write;
use std::path::{Path, PathBuf};
use std::time::Duration;

use idem_tools_runtime::key::ArgsDigest;
use idem_tools_runtime::{Call, Codec, Error, ToolInfo, Turn, current_key, execute};
use rand::rngs::StdRng;
use rand::{Rng, SeedableRng};
use serde::{Deserialize, Serialize};

/// How long a claim lasts without renewal, for the tool and the model's steps: shorter than
/// the restarted run's in-flight wait ([`IN_FLIGHT_WAIT`]), so that a restarted run waits out
/// the claims of the run it replaces instead of failing with `InFlight`.
pub const LEASE: Duration = Duration::from_millis(300);
/// How long a restarted run waits for a key another run holds.
pub const IN_FLIGHT_WAIT: Duration = Duration::from_secs(3);
/// The conversation's label.
pub const LABEL: &str = "agent";

/// The tool: every argument in the key, the memo the model writes included (as in issue #28:
/// a reworded memo is a new key).
pub static CHARGE: ToolInfo = ToolInfo::idempotent("charge").with_lease(LEASE);

/// The accounts and what they are charged for; a turn charges one to three of them.
const ACCOUNTS: [(&str, &str); 5] = [
    ("ada", "coffee"),
    ("bob", "lunch"),
    ("cyd", "books"),
    ("dee", "a taxi"),
    ("eve", "tickets"),
];

/// One message of the conversation, as the model is sent it.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub enum Message {
    User(String),
    Assistant(Response),
    ToolResult { call: String, receipt: Receipt },
}

/// What the model answers: tool calls, or the final answer.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub enum Response {
    ToolCalls(Vec<ToolCall>),
    Final(String),
}

/// A call of `charge` the model writes.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct ToolCall {
    pub id: String,
    pub account: String,
    pub cents: u64,
    pub memo: String,
}

/// What `charge` returns: the account, the amount, and the charge's id (its key, short).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Receipt {
    pub account: String,
    pub cents: u64,
    pub charge: String,
}

/// A request to the model: the tools and the conversation so far (what is fingerprinted).
#[derive(Serialize)]
struct Request<'a> {
    tools: &'a [&'a str],
    history: &'a [Message],
}

/// Turn `n`'s id.
pub fn turn_id(n: u32) -> String {
    format!("durable/turn-{n}")
}

/// What the user asks in turn `n`: `charge ada 500 coffee; bob 1200 lunch`.
pub fn prompt(n: u32) -> String {
    let count = 1 + n % 3;
    (0..count)
        .map(|i| {
            let (account, item) = ACCOUNTS[((n + i) % 5) as usize];
            let cents = 100 * u64::from(1 + (n * 7 + i * 3) % 20);
            format!("charge {account} {cents} {item}")
        })
        .collect::<Vec<_>>()
        .join("; ")
}

/// The accounts turn `n` charges: its logical actions.
pub fn accounts(n: u32) -> Vec<String> {
    prompt(n)
        .split("; ")
        .filter_map(|item| item.split(' ').nth(1).map(str::to_owned))
        .collect()
}

/// Where the processes write: the model's requests and the loop's answered steps, the ledger
/// (the payment provider's side effects), and the turns' final answers. Each line is one
/// `write` on an `O_APPEND` file: whole, and in the order it happened.
#[derive(Clone)]
pub struct Logs {
    pub requests: PathBuf,
    pub ledger: PathBuf,
    pub finals: PathBuf,
}

impl Logs {
    pub fn in_dir(dir: &Path) -> Logs {
        Logs {
            requests: dir.join("requests.log"),
            ledger: dir.join("ledger.log"),
            finals: dir.join("finals.log"),
        }
    }
}

/// Appends `line` to `file`.
pub fn append(file: &Path, line: &str) {
    let mut out = std::fs::OpenOptions::new()
        .create(true)
        .append(true)
        .open(file)
        .expect("the log is writable");
    out.write_all(format!("{line}\n").as_bytes())
        .expect("the log is writable");
}

/// The scripted model: what it says follows from the conversation, how it words it from its
/// seed (one per process), as a real model rewords when it is asked again.
pub struct Model {
    pub seed: u64,
    pub requests: PathBuf,
}

impl Model {
    /// Answers `history` (the conversation of turn `n`), logging the request first.
    async fn complete(&self, n: u32, history: &[Message]) -> Result<Response, Error> {
        let step = steps(history);
        append(
            &self.requests,
            &format!("request {n} {LABEL} {step} {}", std::process::id()),
        );
        let mut rng = StdRng::seed_from_u64(self.seed ^ (u64::from(n) << 20) ^ u64::from(step));
        tokio::time::sleep(Duration::from_micros(rng.random_range(0..3_000))).await;
        Ok(script(&mut rng, history))
    }
}

/// The model's steps answered in `history`: the index of the next.
fn steps(history: &[Message]) -> u32 {
    let answered = history
        .iter()
        .filter(|m| matches!(m, Message::Assistant(_)))
        .count();
    u32::try_from(answered).expect("a short conversation")
}

/// The script: charge the next one or two accounts of the prompt that have no receipt yet,
/// with a memo worded at random; when every account has one, the final answer, made from the
/// receipts in the conversation (so that it is the same in every run that charged the same).
fn script(rng: &mut StdRng, history: &[Message]) -> Response {
    let Some(Message::User(prompt)) = history.first() else {
        return Response::Final("no prompt".to_owned());
    };
    let receipts: Vec<&Receipt> = history
        .iter()
        .filter_map(|m| match m {
            Message::ToolResult { receipt, .. } => Some(receipt),
            _ => None,
        })
        .collect();
    let pending: Vec<(&str, u64, &str)> = prompt
        .split("; ")
        .filter_map(|item| {
            let mut words = item.splitn(4, ' ');
            let (_, account, cents, what) =
                (words.next()?, words.next()?, words.next()?, words.next()?);
            Some((account, cents.parse().ok()?, what))
        })
        .filter(|(account, _, _)| !receipts.iter().any(|r| r.account == *account))
        .collect();
    if pending.is_empty() {
        let list: Vec<String> = receipts
            .iter()
            .map(|r| format!("{} {}", r.account, r.cents))
            .collect();
        let total: u64 = receipts.iter().map(|r| r.cents).sum();
        return Response::Final(format!(
            "Charged {}: {} charges, {total} cents.",
            list.join(", "),
            receipts.len()
        ));
    }
    let step = steps(history);
    let batch = rng.random_range(1..=2).min(pending.len());
    let calls = pending[..batch]
        .iter()
        .enumerate()
        .map(|(i, (account, cents, what))| ToolCall {
            id: format!("call-{step}-{i}"),
            account: (*account).to_owned(),
            cents: *cents,
            memo: reword(rng, account, what),
        })
        .collect();
    Response::ToolCalls(calls)
}

/// One of the ways a model words the memo.
fn reword(rng: &mut StdRng, account: &str, what: &str) -> String {
    let name = format!("{}{}", account[..1].to_uppercase(), &account[1..]);
    match rng.random_range(0..6) {
        0 => format!("{what} for {name}"),
        1 => format!("{what} for {name}."),
        2 => format!("{name}: {what}"),
        3 => format!("{name}'s {what}"),
        4 => format!("{} FOR {}", what.to_uppercase(), name.to_uppercase()),
        _ => format!("{what}, billed to {account}"),
    }
}

/// `charge(account, cents, memo)`: the payment provider's latency, then the charge (a ledger
/// line carrying the call's key, which the provider deduplicates by), then the way back.
async fn charge(turn: &Turn, n: u32, call: &ToolCall, ledger: &Path) -> Result<Receipt, Error> {
    let mut args = ArgsDigest::new(CHARGE.name);
    args.arg("account", &call.account)?;
    args.arg("cents", &call.cents)?;
    args.arg("memo", &call.memo)?;
    let (key, fingerprint) = args.finish(turn.namespace(), turn.id(), CHARGE.name, CHARGE.version);
    let body = async {
        let pause = || Duration::from_micros(rand::rng().random_range(0..2_000));
        tokio::time::sleep(pause()).await;
        let key = current_key().ok_or(Error::Config("no key in the tool".to_owned()))?;
        append(
            ledger,
            &format!(
                "charge {} {n} {} {} {} {}",
                key.to_hex(),
                call.account,
                call.cents,
                std::process::id(),
                call.memo
            ),
        );
        tokio::time::sleep(pause()).await;
        Ok(Receipt {
            account: call.account.clone(),
            cents: call.cents,
            charge: key.short().to_string(),
        })
    };
    execute(
        Call::new(&CHARGE, turn, key, fingerprint),
        Codec::ok_only(),
        body,
    )
    .await
}

/// One run of turn `n`, from the top: ask the model (through the conversation when `recorded`,
/// else directly), run the tool calls it answers, until it answers in words. `at` is told
/// where the run is.
pub async fn run_turn(
    turn: &Turn,
    n: u32,
    model: &Model,
    logs: &Logs,
    recorded: bool,
    at: &(dyn Fn(&str) + Sync),
) -> Result<String, Error> {
    let chat = turn.conversation(LABEL).with_lease(LEASE);
    let mut history = vec![Message::User(prompt(n))];
    loop {
        let step = steps(&history);
        at(&format!("model {n} {step}"));
        let request = Request {
            tools: &[CHARGE.name],
            history: &history,
        };
        let ask = model.complete(n, &history);
        let response = if recorded {
            chat.step(&request, ask).await?
        } else {
            ask.await?
        };
        append(
            &logs.requests,
            &format!("answered {n} {LABEL} {step} {}", std::process::id()),
        );
        history.push(Message::Assistant(response.clone()));
        match response {
            Response::Final(answer) => return Ok(answer),
            Response::ToolCalls(calls) => {
                for call in calls {
                    at(&format!("charge {n}"));
                    let receipt = charge(turn, n, &call, &logs.ledger).await?;
                    history.push(Message::ToolResult {
                        call: call.id,
                        receipt,
                    });
                }
            }
        }
    }
}

//! Two processes sharing a store, each with a tool of the same name: the second never replays
//! the first one's result. In one process two such tools are refused by name
//! (`Error::DuplicateTool`, `Error::SharedAcrossTypes`); across processes the record's
//! fingerprint carries the tool that made it (`ToolSlot::own`), so the other tool's call is
//! refused with `Error::NameClash` — and the same tool in another process still replays.
//!
//! Each case runs this test binary again as a child process (`child_calls_one_tool`) on one
//! SQLite file.

use std::process::Command;
use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};

use idem_test_support::TempDir;
use idem_tools::{Error, SqliteStore, Turn, idempotent, tool_impl};

static RUNS: AtomicUsize = AtomicUsize::new(0);

mod slack {
    use super::*;

    #[idempotent]
    pub async fn send(to: String) -> Result<String, Error> {
        RUNS.fetch_add(1, Ordering::SeqCst);
        Ok(format!("slack message to {to}"))
    }
}

mod email {
    use super::*;

    #[idempotent]
    pub async fn send(to: String) -> Result<String, Error> {
        RUNS.fetch_add(1, Ordering::SeqCst);
        Ok(format!("email to {to}"))
    }

    /// Keyed by the caller: a clash is told from a reused key too.
    #[idempotent(name = "send_keyed")]
    pub async fn send_keyed(#[key] request: String, to: String) -> Result<String, Error> {
        let _ = request;
        RUNS.fetch_add(1, Ordering::SeqCst);
        Ok(format!("email to {to}"))
    }
}

/// One tool as two releases wrote it: the function renamed, its body's form changed (another
/// attribute, an alias for the result type). Its mark is where it is defined, not its form.
mod notify {
    use super::*;

    type Out = Result<String, Error>;

    #[idempotent(name = "notify")]
    pub async fn notify(to: String) -> Result<String, Error> {
        RUNS.fetch_add(1, Ordering::SeqCst);
        Ok(format!("notified {to}"))
    }

    #[idempotent(name = "notify")]
    #[rustfmt::skip]
    pub async fn notify_user(to: String) -> Out {
        RUNS.fetch_add(1, Ordering::SeqCst);
        Ok(format!("notified {to} again"))
    }

    #[idempotent(name = "send_keyed")]
    pub async fn send_keyed(#[key] request: String, to: String) -> Result<String, Error> {
        let _ = request;
        RUNS.fetch_add(1, Ordering::SeqCst);
        Ok(format!("notified {to}"))
    }
}

trait Billing {
    const PROVIDER: &'static str;

    #[idempotent]
    async fn charge(cents: u64) -> Result<String, Error> {
        RUNS.fetch_add(1, Ordering::SeqCst);
        Ok(format!("{} charged {cents}", Self::PROVIDER))
    }
}

struct Stripe;
struct Paypal;

impl Billing for Stripe {
    const PROVIDER: &'static str = "stripe";
}

impl Billing for Paypal {
    const PROVIDER: &'static str = "paypal";
}

/// Two types of one module, each with an associated function of the same name: rustc names
/// their bodies `origins::Invoice::create::{{closure}}` and `origins::Ticket::create::{{closure}}`.
struct Invoice;
struct Ticket;

impl Invoice {
    #[idempotent]
    async fn create(customer: u64) -> Result<String, Error> {
        RUNS.fetch_add(1, Ordering::SeqCst);
        Ok(format!("invoice for customer {customer}"))
    }
}

impl Ticket {
    #[idempotent]
    async fn create(customer: u64) -> Result<String, Error> {
        RUNS.fetch_add(1, Ordering::SeqCst);
        Ok(format!("ticket for customer {customer}"))
    }
}

/// Generic over a function pointer's return type (`fn(u64) -> Charged`, `fn(u64) -> Refunded`).
#[derive(Clone)]
struct PtrTool<F> {
    account: String,
    run: F,
}

#[tool_impl(self_key = self.account)]
impl<R: std::fmt::Display + Send + Sync + 'static> PtrTool<fn(u64) -> R> {
    #[idempotent(attached)]
    async fn act(&self, cents: u64) -> Result<String, Error> {
        RUNS.fetch_add(1, Ordering::SeqCst);
        Ok((self.run)(cents).to_string())
    }
}

struct Charged(u64);
struct Refunded(u64);

impl std::fmt::Display for Charged {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "charged {}", self.0)
    }
}

impl std::fmt::Display for Refunded {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "refunded {}", self.0)
    }
}

const DB: &str = "IDEM_ORIGINS_DB";
const TOOL: &str = "IDEM_ORIGINS_TOOL";

/// The child's side (does nothing when run as a test): calls one tool in the turn `t` on the
/// shared SQLite file and prints what it answered and how often a body ran.
#[tokio::test]
async fn child_calls_one_tool() {
    let (Ok(db), Ok(tool)) = (std::env::var(DB), std::env::var(TOOL)) else {
        return;
    };
    let ptr_charge = PtrTool::<fn(u64) -> Charged> {
        account: "acme".to_owned(),
        run: Charged,
    };
    let ptr_refund = PtrTool::<fn(u64) -> Refunded> {
        account: "acme".to_owned(),
        run: Refunded,
    };
    let store = Arc::new(SqliteStore::open(&db).unwrap());
    let turn = Turn::new("t").with_store(store);
    let answer = turn
        .clone()
        .scope(async {
            match tool.as_str() {
                "slack" => slack::send("ann".to_owned()).await,
                "email" => email::send("ann".to_owned()).await,
                "email-keyed" => email::send_keyed("r-1".to_owned(), "ann".to_owned()).await,
                "notify-keyed" => notify::send_keyed("r-1".to_owned(), "ann".to_owned()).await,
                "release-1" => notify::notify("ann".to_owned()).await,
                "release-2" => notify::notify_user("ann".to_owned()).await,
                "stripe" => Stripe::charge(500).await,
                "invoice" => Invoice::create(7).await,
                "ticket" => Ticket::create(7).await,
                "ptr-charge" => ptr_charge.act(500).await,
                "ptr-refund" => ptr_refund.act(500).await,
                _ => Paypal::charge(500).await,
            }
        })
        .await;
    let answer = match answer {
        Ok(text) => text,
        // Counted as a configuration error, not a reused key.
        Err(Error::NameClash { .. }) if turn.stats().config_error == 1 => {
            "refused: name clash".to_owned()
        }
        Err(other) => format!("error: {other}"),
    };
    println!("ANSWER {answer} | runs {}", RUNS.load(Ordering::SeqCst));
}

/// Runs `tool` in a child process on `db`: its answer line.
fn child(db: &std::path::Path, tool: &str) -> String {
    let out = Command::new(std::env::current_exe().unwrap())
        .args(["--exact", "child_calls_one_tool", "--nocapture"])
        .env(DB, db)
        .env(TOOL, tool)
        .output()
        .unwrap();
    let stdout = String::from_utf8_lossy(&out.stdout);
    match stdout.lines().find_map(|l| l.split_once("ANSWER ")) {
        Some((_, answer)) => answer.to_owned(),
        None => panic!("no answer from the child: {stdout}"),
    }
}

fn database(label: &str) -> (TempDir, std::path::PathBuf) {
    let dir = TempDir::new(label);
    let db = dir.path("idem.db");
    (dir, db)
}

#[test]
fn two_tools_of_one_name_in_two_processes_do_not_replay_each_other() {
    // The same tool in another process (a restarted one) replays.
    refused_after("names", "slack", "slack message to ann", "email");
}

#[test]
fn one_generic_tool_for_two_types_in_two_processes_does_not_replay_across_types() {
    refused_after("types", "stripe", "stripe charged 500", "paypal");
}

#[test]
fn a_clash_of_caller_keyed_tools_is_a_clash_not_a_reused_key() {
    let (_dir, db) = database("keyed");
    assert_eq!(child(&db, "email-keyed"), "email to ann | runs 1");
    // Not "the key belongs to other arguments, use a new key": a client that did would run
    // the other tool's action under a new key.
    assert_eq!(child(&db, "notify-keyed"), "refused: name clash | runs 0");
}

#[test]
fn a_tool_renamed_or_rewritten_in_its_module_still_replays_in_the_next_release() {
    let (_dir, db) = database("releases");
    assert_eq!(child(&db, "release-1"), "notified ann | runs 1");
    assert_eq!(child(&db, "release-2"), "notified ann | runs 0");
}

/// `first` runs and answers `answer`; `second`, another tool of the same name and arguments,
/// is refused; `first` again, in a third process, replays.
fn refused_after(label: &str, first: &str, answer: &str, second: &str) {
    let (_dir, db) = database(label);
    assert_eq!(child(&db, first), format!("{answer} | runs 1"));
    assert_eq!(child(&db, second), "refused: name clash | runs 0");
    assert_eq!(child(&db, first), format!("{answer} | runs 0"));
}

#[test]
fn associated_functions_of_two_types_of_one_module_do_not_replay_each_other() {
    refused_after("associated", "invoice", "invoice for customer 7", "ticket");
}

#[test]
fn tools_generic_over_function_pointers_do_not_replay_each_other() {
    refused_after("pointers", "ptr-charge", "charged 500", "ptr-refund");
}

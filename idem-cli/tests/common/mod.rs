//! Helpers shared by the CLI tests: running the built `idem` binary, and preparing records
//! through the real engine and stores.
#![allow(dead_code)]

mod turn;
#[allow(unused_imports)] // used by the tests of `idem turn`, not by every test crate
pub use turn::check_turn_view;

use idem_tools_runtime::Codec;
use idem_tools_runtime::store::Charge;
use std::process::{Command, Output, Stdio};
use std::sync::Arc;
use std::sync::atomic::{AtomicU32, Ordering};
use std::time::Duration;

use idem_tools_runtime::key::ArgsDigest;
use idem_tools_runtime::store::{Begin, BeginRequest, LeaseToken, Record, RecordState, Store};
use idem_tools_runtime::{Call, Error, Fingerprint, Key, ToolInfo, Turn, execute};
use serde::{Deserialize, Serialize};
use serde_json::{Value, json};

/// The tool the tests call: "sends" an email and counts how often it really ran.
pub static SEND: ToolInfo = ToolInfo::idempotent("send_email");
/// A second tool, for filters and stats.
pub static REFUND: ToolInfo = ToolInfo::idempotent("refund");
/// A tool whose results are kept one hour only.
pub static SHORT_LIVED: ToolInfo = ToolInfo::idempotent("ping").with_ttl(Duration::from_secs(3600));

/// What a run of the binary printed and returned.
#[derive(Debug)]
pub struct Run {
    /// The exit code (`None` if killed by a signal).
    pub code: Option<i32>,
    /// Standard output.
    pub stdout: String,
    /// Standard error.
    pub stderr: String,
}

impl Run {
    fn from_output(output: Output) -> Run {
        Run {
            code: output.status.code(),
            stdout: String::from_utf8_lossy(&output.stdout).into_owned(),
            stderr: String::from_utf8_lossy(&output.stderr).into_owned(),
        }
    }

    /// Stdout parsed as JSON.
    pub fn json(&self) -> Value {
        serde_json::from_str(&self.stdout)
            .unwrap_or_else(|e| panic!("stdout is not JSON ({e}):\n{}", self.stdout))
    }

    /// Panics with both streams unless the exit code is `code`.
    pub fn expect_code(self, code: i32) -> Run {
        assert_eq!(self.code, Some(code), "unexpected exit code: {self:#?}");
        self
    }
}

/// The `idem` command, stdin closed (not a terminal).
pub fn idem_command(args: &[&str]) -> Command {
    let mut command = Command::new(env!("CARGO_BIN_EXE_idem"));
    command
        .args(args)
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped());
    command
}

/// Runs `idem` with `args`, stdin closed, and waits for it.
pub fn idem(args: &[&str]) -> Run {
    let output = idem_command(args).output().expect("the idem binary runs");
    Run::from_output(output)
}

/// Runs `line`, an `idem` command that `idem` printed, through `sh` as a person would paste it
/// (the built binary standing for `idem`), stdin closed, and waits for it.
pub fn run_as_printed(line: &str) -> Run {
    let rest = line
        .trim()
        .strip_prefix("idem ")
        .unwrap_or_else(|| panic!("not an idem command: {line:?}"));
    let output = Command::new("sh")
        .arg("-c")
        .arg(format!("exec \"$IDEM\" {rest}"))
        .env("IDEM", env!("CARGO_BIN_EXE_idem"))
        .stdin(Stdio::null())
        .output()
        .expect("sh runs");
    Run::from_output(output)
}

/// Runs a short `idem bench` (40 calls, 0.2 s slots, 4 tasks, 2 processes, JSON) on the store
/// `store_args` open, and checks its report: idem and the floor, for replays and first
/// executions, each with latencies and a throughput. Returns the report.
pub fn short_bench(store_args: &[&str]) -> Value {
    let mut args = store_args.to_vec();
    args.extend([
        "--json",
        "bench",
        "--calls",
        "40",
        "--seconds",
        "0.2",
        "--concurrency",
        "4",
        "--processes",
        "2",
    ]);
    let report = idem(&args).expect_code(0).json();
    assert_eq!(report["processes"], 2);
    assert_eq!(report["concurrency"], 4);
    for kind in ["replay", "first"] {
        for side in ["idem", "floor"] {
            let p50 = report["latency_ns"][kind][side]["p50"].as_u64().unwrap();
            let max = report["latency_ns"][kind][side]["max"].as_u64().unwrap();
            assert!(p50 > 0 && p50 <= max, "{kind} {side}: {report}");
            let rate = report["throughput_per_s"][kind][side].as_f64().unwrap();
            assert!(rate > 0.0, "{kind} {side}: no calls completed: {report}");
        }
    }
    report
}

/// Runs `idem` with `args` on a new pseudo-terminal as stdin, typing `typed` into it.
pub fn idem_on_terminal(args: &[&str], typed: &str) -> Run {
    use std::io::Write;

    let (mut master, slave) = terminal();
    master.write_all(typed.as_bytes()).expect("typing");
    let output = idem_command(args)
        .stdin(Stdio::from(slave))
        .output()
        .expect("the idem binary runs");
    Run::from_output(output)
}

/// A pseudo-terminal: its master side (what is typed) and its slave side (a process's stdin).
fn terminal() -> (std::fs::File, std::fs::File) {
    use rustix::pty::{OpenptFlags, grantpt, openpt, ptsname, unlockpt};

    let master = openpt(OpenptFlags::RDWR | OpenptFlags::NOCTTY).expect("a pseudo-terminal");
    grantpt(&master).expect("grantpt");
    unlockpt(&master).expect("unlockpt");
    let name = ptsname(&master, Vec::new()).expect("ptsname");
    let slave = std::fs::OpenOptions::new()
        .read(true)
        .write(true)
        .open(name.to_str().expect("a UTF-8 device path"))
        .expect("the terminal's slave side");
    (std::fs::File::from(master), slave)
}

/// Runs `idem` with `args` on a terminal and waits until its standard error ends with
/// `prompt` (it waits for an answer); [`Prompted::answer`] types the answer.
pub fn idem_prompted(args: &[&str], prompt: &str) -> Prompted {
    use std::io::Read;

    let (master, slave) = terminal();
    let mut child = idem_command(args)
        .stdin(Stdio::from(slave))
        .spawn()
        .expect("the idem binary runs");
    let mut stderr = child.stderr.take().expect("piped");
    let mut seen = Vec::new();
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(60);
    while !String::from_utf8_lossy(&seen)
        .trim_end()
        .ends_with(prompt.trim_end())
    {
        assert!(std::time::Instant::now() < deadline, "no prompt: {seen:?}");
        let mut byte = [0; 1];
        match stderr.read(&mut byte).expect("reading stderr") {
            0 => panic!(
                "idem exited before prompting: {}",
                String::from_utf8_lossy(&seen)
            ),
            _ => seen.push(byte[0]),
        }
    }
    Prompted {
        child,
        master,
        stderr,
        seen,
    }
}

/// An `idem` waiting for an answer on its terminal.
pub struct Prompted {
    child: std::process::Child,
    master: std::fs::File,
    stderr: std::process::ChildStderr,
    seen: Vec<u8>,
}

impl Prompted {
    /// What it wrote to standard error so far: what it asks.
    pub fn shown(&self) -> String {
        String::from_utf8_lossy(&self.seen).into_owned()
    }

    /// Types `typed` and waits for the process to end.
    pub fn answer(mut self, typed: &str) -> Run {
        use std::io::{Read, Write};

        self.master.write_all(typed.as_bytes()).expect("typing");
        self.stderr
            .read_to_end(&mut self.seen)
            .expect("reading stderr");
        let mut output = self.child.wait_with_output().expect("idem ends");
        output.stderr = self.seen;
        Run::from_output(output)
    }
}

#[allow(unused_imports)] // not every test binary sharing this module makes files
pub use idem_test_support::TempDir;

/// The key and fingerprint the engine derives for `tool` called with `to` in `turn`.
pub fn key_of(tool: &'static ToolInfo, turn: &Turn, to: &str) -> (Key, Fingerprint) {
    let mut args = ArgsDigest::new(tool.name);
    args.arg("to", to).expect("a string encodes");
    args.finish(turn.namespace(), turn.id(), tool.name, tool.version)
}

/// The engine's call of `tool` with `to` in `turn` on `store`, and its key.
pub fn call_of(
    store: &Arc<dyn Store>,
    tool: &'static ToolInfo,
    turn: &Turn,
    to: &str,
) -> (Key, Call) {
    let (key, fingerprint) = key_of(tool, turn, to);
    (
        key,
        Call::new(tool, turn, key, fingerprint).with_store(store),
    )
}

/// The header of the `stats` table.
pub const STATS_HEADER: [&str; 8] = [
    "TOOL",
    "IN-PROGRESS",
    "COMPLETED",
    "FAILED",
    "INTERRUPTED",
    "NOT-REPLAYABLE",
    "UNREADABLE",
    "TOTAL",
];

/// The `stats` table's rows (its header first), split into cells.
pub fn table_rows(stdout: &str) -> Vec<Vec<&str>> {
    stdout
        .lines()
        .map(|l| l.split_whitespace().collect())
        .collect()
}

/// Calls `tool` with `to` through the engine on `store`; the body counts its runs in `runs`
/// and returns `{"sent_to": to, "run": n}`.
pub async fn call(
    store: &Arc<dyn Store>,
    tool: &'static ToolInfo,
    turn: &Turn,
    to: &str,
    runs: &AtomicU32,
) -> Result<Value, Error> {
    let (_, call) = call_of(store, tool, turn, to);
    execute(call, Codec::ok_only(), async {
        let run = runs.fetch_add(1, Ordering::SeqCst) + 1;
        Ok::<_, Error>(json!({ "sent_to": to, "run": run }))
    })
    .await
}

/// The error [`call_failing`] returns and records.
#[derive(Debug, Serialize, Deserialize)]
pub enum Bounce {
    /// The mail server refused the message.
    Rejected {
        /// What the server said.
        reason: String,
    },
    /// The engine refused the call.
    Idem(String),
}

impl From<Error> for Bounce {
    fn from(error: Error) -> Self {
        Bounce::Idem(error.to_string())
    }
}

/// Calls `tool` with `to` through the engine recording errors too (`cache_errors`); the body
/// counts its runs and fails with [`Bounce::Rejected`], which is recorded.
pub async fn call_failing(
    store: &Arc<dyn Store>,
    tool: &'static ToolInfo,
    turn: &Turn,
    to: &str,
    runs: &AtomicU32,
) -> Result<Value, Bounce> {
    let (_, call) = call_of(store, tool, turn, to);
    execute(call, Codec::ok_and_err(), async {
        runs.fetch_add(1, Ordering::SeqCst);
        Err::<Value, _>(Bounce::Rejected {
            reason: "mailbox full".to_owned(),
        })
    })
    .await
}

/// Calls `tool` with `to` through the engine and drops the call while the tool runs, as a
/// caller that timed out does: the engine marks the key interrupted. Returns once the marker
/// is recorded.
pub async fn call_interrupted(
    store: &Arc<dyn Store>,
    tool: &'static ToolInfo,
    turn: &Turn,
    to: &str,
    runs: &AtomicU32,
) -> Key {
    let (key, call) = call_of(store, tool, turn, to);
    let running = execute(call, Codec::ok_only(), async {
        runs.fetch_add(1, Ordering::SeqCst);
        tokio::time::sleep(Duration::from_secs(600)).await;
        Ok::<_, Error>(json!({ "sent_to": to }))
    });
    let dropped = tokio::time::timeout(Duration::from_millis(50), running).await;
    assert!(dropped.is_err(), "the call was still running: {dropped:?}");
    completed(&**store, turn.namespace(), &key).await;
    key
}

/// A result that cannot be serialized: the engine records a not-replayable marker instead.
#[derive(Debug, Deserialize)]
pub struct Unrecordable;

impl Serialize for Unrecordable {
    fn serialize<S: serde::Serializer>(&self, _: S) -> Result<S::Ok, S::Error> {
        Err(serde::ser::Error::custom(
            "the receipt refuses to be serialized",
        ))
    }
}

/// Calls `tool` with `to` through the engine; the tool runs and returns a result that cannot
/// be recorded, so the key is recorded as not replayable. Returns once it is.
pub async fn call_unrecordable(
    store: &Arc<dyn Store>,
    tool: &'static ToolInfo,
    turn: &Turn,
    to: &str,
    runs: &AtomicU32,
) -> Key {
    let (key, call) = call_of(store, tool, turn, to);
    execute(call, Codec::ok_only(), async {
        runs.fetch_add(1, Ordering::SeqCst);
        Ok::<_, Error>(Unrecordable)
    })
    .await
    .expect("the caller gets its own result");
    completed(&**store, turn.namespace(), &key).await;
    key
}

/// Waits (up to 5 s) until `key` has a completed record, and returns it.
pub async fn completed(store: &dyn Store, namespace: &str, key: &Key) -> Record {
    for _ in 0..500 {
        if let Some(record) = store.get(namespace, key).await.expect("get")
            && record.state == RecordState::Completed
        {
            return record;
        }
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
    panic!("{key} was not completed within 5 s");
}

/// Claims the key of `tool(to)` directly, as a caller that is still running (or crashed):
/// the record stays in progress for `lease`.
pub async fn claim(
    store: &dyn Store,
    tool: &'static ToolInfo,
    turn: &Turn,
    to: &str,
    lease: Duration,
) -> (Key, LeaseToken) {
    let (key, fingerprint) = key_of(tool, turn, to);
    let token = claim_in_turn(
        store,
        turn.namespace(),
        turn.id(),
        tool.name,
        &key,
        &fingerprint,
        lease,
    )
    .await;
    (key, token)
}

/// Claims `key` directly with `Store::begin`, in turn `""`.
pub async fn claim_key(
    store: &dyn Store,
    namespace: &str,
    tool: &'static str,
    key: &Key,
    fingerprint: &Fingerprint,
    lease: Duration,
) -> LeaseToken {
    claim_in_turn(store, namespace, "", tool, key, fingerprint, lease).await
}

/// Claims `key` directly with `Store::begin`, in turn `turn`.
pub async fn claim_in_turn(
    store: &dyn Store,
    namespace: &str,
    turn: &str,
    tool: &'static str,
    key: &Key,
    fingerprint: &Fingerprint,
    lease: Duration,
) -> LeaseToken {
    let token = LeaseToken::generate();
    match store
        .begin(BeginRequest {
            namespace,
            key,
            tool,
            turn,
            fingerprint,
            lease,
            ttl: Duration::from_secs(60),
            token,
            charge: Charge {
                turn: idem_tools_runtime::store::budget::TurnIdentity::new(namespace, turn),
                ..Charge::unlimited()
            },
        })
        .await
    {
        Ok(Begin::Claimed) => token,
        other => panic!("expected a claim, got {other:?}"),
    }
}

/// A turn whose calls give up quickly on a key in flight elsewhere. Its budgets are raised:
/// these tests call one key, and one tool, more often than the defaults allow, and budgets
/// follow the turn id.
pub fn turn(id: &str, namespace: &str) -> Turn {
    Turn::new(id)
        .with_namespace(namespace)
        .with_in_flight_wait(Duration::from_millis(200))
        .with_max_attempts_per_key(100)
        .with_actions_per_tool(1000)
}

/// A `SqliteStore` on `db`, created if needed.
#[cfg(feature = "sqlite")]
pub fn open_sqlite(db: &str) -> Arc<dyn Store> {
    Arc::new(idem_tools_runtime::store::SqliteStore::open(db).expect("a new SQLite store"))
}

/// The short keys of a `list` table, top to bottom.
pub fn listed_keys(stdout: &str) -> Vec<String> {
    stdout
        .lines()
        .skip(1)
        .filter_map(|line| line.split_whitespace().next().map(str::to_owned))
        .collect()
}

/// The 12 hex digits the logs print for `key`.
pub fn short(key: &Key) -> String {
    key.short().to_hex()
}

/// One key in each state, prepared by the engine in namespace "" (turn `turn-1`).
pub struct Prepared {
    /// `send_email(done@x)`: `Ok` recorded.
    pub completed: Key,
    /// `refund(bounced@x)`: `Err` recorded (`cache_errors`).
    pub failed: Key,
    /// `send_email(cut@x)`: dropped mid-run, marked interrupted.
    pub interrupted: Key,
    /// `send_email(odd@x)`: ran, its result not recordable.
    pub unrecorded: Key,
    /// `send_email(stuck@x)`: claimed for ten minutes by a caller that never finishes.
    pub in_progress: Key,
    /// Runs of the tool bodies so far.
    pub runs: AtomicU32,
}

/// Prepares one key in each state on `store`.
pub async fn every_state(store: &Arc<dyn Store>) -> Prepared {
    let runs = AtomicU32::new(0);
    let t = turn("turn-1", "");
    // A few ms apart, so that the turn's records are claimed in this order on every clock.
    let apart = || tokio::time::sleep(Duration::from_millis(3));
    call(store, &SEND, &t, "done@x", &runs).await.unwrap();
    apart().await;
    let failed = call_failing(store, &REFUND, &t, "bounced@x", &runs).await;
    assert!(failed.is_err(), "{failed:?}");
    apart().await;
    let interrupted = call_interrupted(store, &SEND, &t, "cut@x", &runs).await;
    apart().await;
    let unrecorded = call_unrecordable(store, &SEND, &t, "odd@x", &runs).await;
    apart().await;
    let (in_progress, _) = claim(&**store, &SEND, &t, "stuck@x", Duration::from_secs(600)).await;
    Prepared {
        completed: key_of(&SEND, &t, "done@x").0,
        failed: key_of(&REFUND, &t, "bounced@x").0,
        interrupted,
        unrecorded,
        in_progress,
        runs,
    }
}

/// Rust's `Debug` text of a marker, which the output must never show.
pub fn assert_no_debug_text(run: &Run) {
    for text in [&run.stdout, &run.stderr] {
        for debug in [
            "Interrupted {",
            "NotReplayable {",
            "RecordKind",
            "InProgress",
        ] {
            assert!(!text.contains(debug), "{debug} in:\n{text}");
        }
    }
}

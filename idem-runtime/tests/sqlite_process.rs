//! SqliteStore across real processes: killed with SIGKILL, restarted, and racing on one file.
//!
//! Each test re-executes this test binary as a child running only the [`child`] test, with
//! `IDEM_SQLITE_CHILD` telling it what to do; without that variable [`child`] does nothing.
//! Every execution of a tool appends one line to a side-effect log, so the parent counts
//! executions across processes.
#![cfg(all(feature = "sqlite", unix))]

mod sqlite_common;
use idem_test_support::Kid;
use idem_tools_runtime::Codec;
use sqlite_common::TempDir;

use std::collections::BTreeMap;
use std::io::Write;
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::{Duration, Instant};

use idem_tools_runtime::clock::{Clock, SystemClock};
use idem_tools_runtime::key::ArgsDigest;
use idem_tools_runtime::store::{RecordState, SqliteStore, Store};
use idem_tools_runtime::{Call, Error, ToolInfo, Turn, execute};

const CHILD_ENV: &str = "IDEM_SQLITE_CHILD";
const DB_ENV: &str = "IDEM_SQLITE_DB";
const LOG_ENV: &str = "IDEM_SQLITE_LOG";
const GO_ENV: &str = "IDEM_SQLITE_GO";

/// A tool that completes normally.
const SEND: ToolInfo = ToolInfo::idempotent("send_email");
/// A tool that never finishes in the child, with a lease (30 s) that the tests never wait out.
const HELD: ToolInfo = ToolInfo::idempotent("send_held").with_lease(Duration::from_secs(30));
/// A tool that always fails (the budget test).
const FLAKY: ToolInfo = ToolInfo::idempotent("charge");
/// The tool both racing processes call.
const RACE: ToolInfo = ToolInfo::idempotent("race");
const RACE_KEYS: u32 = 50;
const RACE_STORES: usize = 4;

/// The turn every process uses, so that they all derive the same keys.
const TURN_ID: &str = "conversation-7/turn-3";

/// How long the parent waits for a child to say something.
const CHILD_TIMEOUT: Duration = Duration::from_secs(60);

/// Appends one line to the side-effect log (one `write` of a short line on an `O_APPEND` file:
/// atomic with respect to the other processes' lines).
fn side_effect(log: &Path, line: &str) {
    let mut file = std::fs::OpenOptions::new()
        .create(true)
        .append(true)
        .open(log)
        .unwrap();
    file.write_all(format!("{line}\n").as_bytes()).unwrap();
}

fn log_lines(log: &Path) -> Vec<String> {
    match std::fs::read_to_string(log) {
        Ok(text) => text.lines().map(str::to_owned).collect(),
        Err(_) => Vec::new(),
    }
}

/// The engine call of `tool` with argument `to`, in a turn on `store`.
async fn call<F>(
    tool: &'static ToolInfo,
    store: &Arc<dyn Store>,
    in_flight_wait: Duration,
    to: &str,
    body: F,
) -> Result<String, Error>
where
    F: Future<Output = Result<String, Error>> + Send,
{
    let turn = Turn::new(TURN_ID)
        .with_store(Arc::clone(store))
        .with_in_flight_wait(in_flight_wait)
        // Budgets are counted in the file, across processes: these tests retry one key on
        // purpose, many times, and make many actions of one tool, from several processes and
        // stores.
        .with_max_attempts_per_key(1_000)
        .with_actions_per_tool(100_000);
    let mut args = ArgsDigest::new(tool.name);
    args.arg("to", to)?;
    let (key, fingerprint) = args.finish(turn.namespace(), turn.id(), tool.name, tool.version);
    execute(
        Call::new(tool, &turn, key, fingerprint),
        Codec::ok_only(),
        body,
    )
    .await
}

fn open(db: &Path) -> Arc<dyn Store> {
    Arc::new(SqliteStore::open(db).unwrap())
}

fn env_path(name: &str) -> PathBuf {
    PathBuf::from(std::env::var_os(name).unwrap())
}

/// The child's side of every test: a no-op unless run by a parent below.
#[test]
fn child() {
    let Ok(mode) = std::env::var(CHILD_ENV) else {
        return;
    };
    let db = env_path(DB_ENV);
    let log = env_path(LOG_ENV);
    let pid = std::process::id();
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(4)
        .enable_all()
        .build()
        .unwrap();
    match mode.as_str() {
        "complete_then_hang" => {
            let store = open(&db);
            let result = runtime
                .block_on(call(&SEND, &store, Duration::ZERO, "ada", async {
                    side_effect(&log, &format!("send_email ada {pid}"));
                    Ok(format!("receipt from {pid}"))
                }))
                .unwrap();
            println!("DONE {result}");
            // Recorded; now wait to be killed.
            loop {
                std::thread::sleep(Duration::from_secs(1));
            }
        }
        "hang_mid_execution" => {
            let store = open(&db);
            runtime.block_on(async {
                let _ = call(&HELD, &store, Duration::ZERO, "grace", async {
                    side_effect(&log, &format!("send_held grace {pid}"));
                    println!("RUNNING");
                    // The side effect happened; the process dies before recording it.
                    std::future::pending::<()>().await;
                    Ok(String::new())
                })
                .await;
            });
        }
        "race" => {
            let go = env_path(GO_ENV);
            // Several stores, so that several connections of this process race too (calls on
            // one store in one process would mostly be joined in memory before the store).
            let stores: Vec<Arc<dyn Store>> = (0..RACE_STORES).map(|_| open(&db)).collect();
            println!("READY");
            let deadline = Instant::now() + CHILD_TIMEOUT;
            while !go.exists() {
                assert!(Instant::now() < deadline, "the parent never said go");
                std::thread::sleep(Duration::from_millis(2));
            }
            let results = runtime.block_on(async {
                let mut tasks = Vec::new();
                for k in 0..RACE_KEYS {
                    for store in &stores {
                        let (store, log) = (Arc::clone(store), log.clone());
                        tasks.push(tokio::spawn(async move {
                            let to = format!("k{k}");
                            let body = async {
                                side_effect(&log, &format!("{to} {pid}"));
                                tokio::time::sleep(Duration::from_millis(2)).await;
                                Ok(format!("{to} by {pid}"))
                            };
                            let result = call(&RACE, &store, Duration::from_secs(30), &to, body);
                            (k, result.await)
                        }));
                    }
                }
                let mut results = BTreeMap::<u32, Vec<String>>::new();
                for task in tasks {
                    let (k, result) = task.await.unwrap();
                    results.entry(k).or_default().push(result.unwrap());
                }
                results
            });
            for (k, values) in results {
                assert!(
                    values.iter().all(|v| *v == values[0]),
                    "key {k}: {values:?}"
                );
                println!("RESULT k{k} {}", values[0]);
            }
        }
        "fail_once" => {
            // One run of an orchestrator that restarts from the top: a new process, a new
            // `Turn` value with the same id, the default budget.
            let store = open(&db);
            let turn = Turn::new(TURN_ID).with_store(Arc::clone(&store));
            let mut args = ArgsDigest::new(FLAKY.name);
            args.arg("to", "ada").unwrap();
            let (key, fingerprint) =
                args.finish(turn.namespace(), turn.id(), FLAKY.name, FLAKY.version);
            let answer = runtime.block_on(execute(
                Call::new(&FLAKY, &turn, key, fingerprint),
                Codec::ok_only(),
                async {
                    side_effect(&log, &format!("charge ada {pid}"));
                    Err::<String, _>(Error::Config("the payment provider timed out".to_owned()))
                },
            ));
            let kind = match answer {
                Err(Error::BudgetExhausted { .. }) => "budget_exhausted",
                Err(Error::Config(_)) => "tool_failed",
                other => panic!("unexpected answer {other:?}"),
            };
            println!("ANSWER {kind}");
        }
        "step_asked_then_hang" => {
            // A durable turn: step 0, the model's `send_email` fails, and step 1 is being
            // asked (claimed) when the parent kills the process.
            let store = open(&db);
            runtime.block_on(async {
                let turn = Turn::new(TURN_ID).with_store(store);
                let chat = turn.conversation("assistant");
                chat.step("mail Ada", async {
                    Ok::<_, Error>("send_email".to_owned())
                })
                .await
                .unwrap();
                let read = chat
                    .model_tool_call("send_email", "ada", mail(&turn, false))
                    .await;
                let _ = chat
                    .step(&format!("after {read:?}"), async {
                        println!("ASKING");
                        std::future::pending::<Result<String, Error>>().await
                    })
                    .await;
            });
        }
        "complete_then_exit" => {
            // Holds a claim until the parent says go, records its result and
            // exits at once (no reaping by anyone but the parent, later).
            let go = env_path(GO_ENV);
            let store = open(&db);
            let result = runtime.block_on(call(&SEND, &store, Duration::ZERO, "ada", async {
                println!("CLAIMED");
                let deadline = Instant::now() + CHILD_TIMEOUT;
                while !go.exists() {
                    assert!(Instant::now() < deadline, "the parent never said go");
                    std::thread::sleep(Duration::from_micros(200));
                }
                Ok(format!("receipt from {pid}"))
            }));
            assert!(result.is_ok(), "{result:?}");
            // Recorded: the process ends right away.
            std::process::exit(0);
        }
        other => panic!("unknown child mode {other}"),
    }
}

/// A failure as the model reads it (a durable turn records it).
#[derive(Debug, Clone, PartialEq, serde::Serialize, serde::Deserialize)]
struct Failed(String);

impl From<Error> for Failed {
    fn from(error: Error) -> Self {
        Failed(error.model_text())
    }
}

/// The `send_email` a durable turn's model calls: fails while the mail server is down.
async fn mail(turn: &Turn, up: bool) -> Result<String, Failed> {
    let mut args = ArgsDigest::new(SEND.name);
    args.arg("to", "ada")?;
    let (key, fingerprint) = args.finish(turn.namespace(), turn.id(), SEND.name, SEND.version);
    let body = async move {
        if up {
            Ok("sent".to_owned())
        } else {
            Err(Failed("the mail server timed out".to_owned()))
        }
    };
    execute(
        Call::new(&SEND, turn, key, fingerprint),
        Codec::ok_only(),
        body,
    )
    .await
}

/// A child running `mode` on `dir`'s database, side-effect log and go-file.
fn kid(mode: &str, dir: &TempDir) -> Kid {
    Kid::spawn(
        "child",
        [
            (CHILD_ENV, PathBuf::from(mode)),
            (DB_ENV, dir.db()),
            (LOG_ENV, dir.path("side-effects.log")),
            (GO_ENV, dir.path("go")),
        ],
        CHILD_TIMEOUT,
    )
}

#[tokio::test]
async fn a_completed_call_is_replayed_after_its_process_is_killed() {
    let dir = TempDir::new("replay");
    let log = dir.path("side-effects.log");
    let mut kid = kid("complete_then_hang", &dir);
    let first = kid.expect("DONE");
    kid.kill();
    assert_eq!(log_lines(&log).len(), 1);

    // The "restarted" process: same database file, same turn, same arguments.
    let store = open(&dir.db());
    let replayed = call(&SEND, &store, Duration::ZERO, "ada", async {
        side_effect(&log, "send_email ada parent");
        Ok("receipt from the parent".to_owned())
    })
    .await
    .unwrap();
    assert_eq!(
        replayed, first,
        "the retry should replay the killed process's result"
    );
    assert!(first.starts_with("receipt from "));
    assert_eq!(log_lines(&log).len(), 1, "the email went out twice");
}

/// The documented crash window: a process killed after its side effect but before recording
/// the result leaves an in-flight claim. On one host the store proves its holder gone (no
/// process with its pid and start time runs), so the restarted run claims the key at once —
/// long before the 30 s lease ends — and runs the tool again. Forwarding
/// `idem_tools::current_key()` to the downstream API is what deduplicates that second run.
#[tokio::test]
async fn a_call_killed_mid_execution_frees_its_key_at_once() {
    let dir = TempDir::new("mid-execution");
    let log = dir.path("side-effects.log");
    let store = open(&dir.db());
    let retry = || {
        call(&HELD, &store, Duration::from_millis(50), "grace", async {
            side_effect(&log, "send_held grace parent");
            Ok("sent by the parent".to_owned())
        })
    };

    let mut kid = kid("hang_mid_execution", &dir);
    kid.expect("RUNNING");
    // While the child lives, it holds the key: a retry waits, then gives up.
    let error = retry().await.unwrap_err();
    assert!(matches!(error, Error::InFlight { .. }), "{error:?}");

    kid.kill();
    let restarted = Instant::now();
    assert_eq!(retry().await.unwrap(), "sent by the parent");
    assert!(
        restarted.elapsed() < Duration::from_secs(10),
        "the restarted run waited {:?} (the lease is 30 s)",
        restarted.elapsed()
    );
    let lines = log_lines(&log);
    assert_eq!(lines.len(), 2, "{lines:?}");
    assert!(lines[1].ends_with("parent"));
    // And from now on it is replayed.
    assert_eq!(retry().await.unwrap(), "sent by the parent");
    assert_eq!(log_lines(&log).len(), 2);
}

/// A holder that is stopped (SIGSTOP, a paused VM) still exists and may resume its body: its
/// claim is never freed early. Its lease alone frees it — and a holder that cannot renew in
/// time stops trusting its claim before that.
#[tokio::test]
async fn a_stopped_holder_keeps_its_key_until_its_lease_ends() {
    let dir = TempDir::new("stopped-holder");
    let log = dir.path("side-effects.log");
    let store = open(&dir.db());
    let retry = |wait| {
        call(&HELD, &store, wait, "grace", async {
            side_effect(&log, "send_held grace parent");
            Ok("sent by the parent".to_owned())
        })
    };

    let mut kid = kid("hang_mid_execution", &dir);
    kid.expect("RUNNING");
    kid.signal("STOP");
    for _ in 0..3 {
        let error = retry(Duration::from_millis(300)).await.unwrap_err();
        assert!(matches!(error, Error::InFlight { .. }), "{error:?}");
    }
    assert_eq!(
        log_lines(&log).len(),
        1,
        "the stopped holder's key was taken"
    );
    let records = store.list(None, 10).await.unwrap();
    assert_eq!(records[0].state, RecordState::InProgress);
    // Its lease still has most of its 30 s: nothing freed it early.
    assert!(records[0].expires_at_ms > SystemClock.now_ms() + 20_000);
    kid.signal("CONT");
    kid.kill();
    assert_eq!(
        retry(Duration::from_millis(50)).await.unwrap(),
        "sent by the parent"
    );
}

#[test]
fn two_processes_racing_on_one_file_execute_each_key_once() {
    let dir = TempDir::new("race");
    let log = dir.path("side-effects.log");
    let mut kids = [kid("race", &dir), kid("race", &dir)];
    for kid in &mut kids {
        kid.expect("READY");
    }
    std::fs::write(dir.path("go"), b"").unwrap();
    let (a, b) = (kids[0].finish(), kids[1].finish());

    let lines = log_lines(&log);
    let mut executions = BTreeMap::<String, Vec<String>>::new();
    for line in &lines {
        let (key, pid) = line.split_once(' ').unwrap();
        executions
            .entry(key.to_owned())
            .or_default()
            .push(pid.to_owned());
    }
    assert_eq!(executions.len(), RACE_KEYS as usize, "{executions:?}");
    for (key, pids) in &executions {
        assert_eq!(pids.len(), 1, "{key} ran {} times: {pids:?}", pids.len());
    }
    // Both processes were told the same result for every key: the one execution's.
    let results = |lines: Vec<String>| -> Vec<String> {
        lines
            .into_iter()
            .filter_map(|l| l.find("RESULT ").map(|at| l[at..].to_owned()))
            .collect()
    };
    let (a, b) = (results(a), results(b));
    assert_eq!(a.len(), RACE_KEYS as usize);
    assert_eq!(a, b);
}

/// An orchestrator that restarts the run from the top in a new process each time: the budget
/// follows the turn id in the file, so the fourth process is told the action is stuck instead
/// of trying it again.
#[test]
fn the_budget_holds_across_restarted_processes() {
    let dir = TempDir::new("budget");
    let log = dir.path("side-effects.log");
    let mut answers = Vec::new();
    for _ in 0..5 {
        let mut kid = kid("fail_once", &dir);
        answers.push(kid.expect("ANSWER"));
        kid.finish();
    }
    assert_eq!(
        answers,
        [
            "tool_failed",
            "tool_failed",
            "tool_failed",
            "budget_exhausted",
            "budget_exhausted"
        ]
    );
    let runs = log_lines(&log);
    assert_eq!(runs.len(), 3, "attempts across processes: {runs:?}");
    let pids: std::collections::HashSet<&str> =
        runs.iter().filter_map(|l| l.rsplit(' ').next()).collect();
    assert_eq!(
        pids.len(),
        3,
        "each attempt ran in its own process: {runs:?}"
    );
}

/// A durable turn killed (SIGKILL) while it asks its model the next step, and restarted: the
/// restarted run replays the recorded step and makes its tool call at once — it neither waits
/// out the dead run's claim of the next step (5 s, the step's lease) nor, with an in-flight
/// wait shorter than that lease, is told another run handles its call (`RunOverlap`): SQLite
/// knows the process is gone. (Found by a review: the call read the next step with `get`,
/// which showed the dead run's claim as live.)
#[tokio::test]
async fn a_durable_turn_restarted_after_a_kill_does_not_wait_for_the_dead_runs_step() {
    for in_flight_wait in [None, Some(Duration::from_secs(3))] {
        let dir = TempDir::new("durable-kill");
        let mut child = kid("step_asked_then_hang", &dir);
        child.expect("ASKING");
        child.kill();

        let mut turn = Turn::new(TURN_ID).with_store(open(&dir.db()));
        if let Some(wait) = in_flight_wait {
            turn = turn.with_in_flight_wait(wait);
        }
        let chat = turn.conversation("assistant");
        let replayed = chat
            .step("mail Ada", async { Ok::<_, Error>("not asked".to_owned()) })
            .await
            .unwrap();
        assert_eq!(replayed, "send_email");
        let started = Instant::now();
        // The mail server is up now; the killed run's model never read the failure (step 1
        // was not recorded), so the call runs.
        let read = chat
            .model_tool_call("send_email", "ada", mail(&turn, true))
            .await;
        assert_eq!(read.unwrap(), "sent", "{in_flight_wait:?}");
        assert!(
            started.elapsed() < Duration::from_secs(2),
            "{in_flight_wait:?}: the call waited {:?} for a step held by a dead process",
            started.elapsed()
        );
        let next = chat
            .step("after the mail", async {
                Ok::<_, Error>("done".to_owned())
            })
            .await;
        assert_eq!(
            next.unwrap(),
            "done",
            "the restarted run asks step 1 itself"
        );
    }
}

/// `Record::holder_gone` is found after the row is read (SQLite `get` reads the row, then
/// looks the holder up in `/proc`), outside any lock the holder needs to record, so the claim
/// is read again before it is said to be gone (found by a review, which saw false "gone"
/// within 36 to 207 runs of this loop before that). A holder that records its result and exits between the two is reported
/// as a claim still in progress whose process is gone: `read_failures` then takes the step as
/// never recorded (and caches that as settled), though it was — the restarted run acts
/// without the failures the dead run's model read, and its next step replays that model's
/// answer. Here a child holds a key, records it and exits, while the parent reads the key in
/// a loop (with other threads keeping the CPUs busy, as on a loaded host): any read that says
/// "in progress, holder gone" of a record its holder went on to complete is false.
#[test]
fn a_holder_that_records_then_exits_is_never_read_as_gone() {
    use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
    let spin = Arc::new(AtomicBool::new(true));
    let spinners: Vec<_> = (0..3)
        .map(|_| {
            let spin = Arc::clone(&spin);
            std::thread::spawn(move || {
                let mut x = 0u64;
                while spin.load(Ordering::Relaxed) {
                    x = x.wrapping_mul(6364136223846793005).wrapping_add(1);
                    std::hint::black_box(x);
                }
            })
        })
        .collect();
    let turn = Turn::new(TURN_ID);
    let mut args = ArgsDigest::new(SEND.name);
    args.arg("to", "ada").unwrap();
    let (key, _) = args.finish(turn.namespace(), turn.id(), SEND.name, SEND.version);
    let namespace = turn.namespace().to_owned();
    let (mut false_gone, mut iterations) = (0usize, 0usize);
    let started = Instant::now();
    while started.elapsed() < Duration::from_secs(6) && false_gone == 0 {
        iterations += 1;
        let dir = TempDir::new("holder-toctou");
        let mut child = kid("complete_then_exit", &dir);
        child.expect("CLAIMED");
        let store = open(&dir.db());
        let stop = Arc::new(AtomicBool::new(false));
        let seen = Arc::new(AtomicUsize::new(0));
        let reader = {
            let (store, stop, seen, namespace) = (
                Arc::clone(&store),
                Arc::clone(&stop),
                Arc::clone(&seen),
                namespace.clone(),
            );
            std::thread::spawn(move || {
                let runtime = tokio::runtime::Builder::new_current_thread()
                    .enable_all()
                    .build()
                    .unwrap();
                runtime.block_on(async {
                    while !stop.load(Ordering::SeqCst) {
                        if let Ok(Some(record)) = store.get(&namespace, &key).await
                            && record.state == RecordState::InProgress
                            && record.holder_gone
                        {
                            seen.fetch_add(1, Ordering::SeqCst);
                        }
                    }
                });
            })
        };
        std::thread::sleep(Duration::from_millis(2));
        std::fs::write(dir.path("go"), b"go").unwrap();
        child.finish(); // recorded, exited (and reaped only now)
        stop.store(true, Ordering::SeqCst);
        reader.join().unwrap();
        let record = block_on(store.get(&namespace, &key)).unwrap();
        assert_eq!(
            record.map(|r| r.state),
            Some(RecordState::Completed),
            "the child recorded its result"
        );
        false_gone += seen.load(Ordering::SeqCst);
    }
    spin.store(false, Ordering::Relaxed);
    for spinner in spinners {
        spinner.join().unwrap();
    }
    assert_eq!(
        false_gone, 0,
        "in {iterations} runs, {false_gone} reads said the claim was in progress and its holder \
         gone, though the holder was alive when the row was read and went on to record it"
    );
}

/// `future`'s output, on a runtime of its own.
fn block_on<F: Future>(future: F) -> F::Output {
    tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .unwrap()
        .block_on(future)
}

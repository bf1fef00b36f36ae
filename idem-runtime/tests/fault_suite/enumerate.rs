//! The cancellation-point enumerator: a call is polled step by step against a store whose
//! every operation is pending once, and dropped after k polls, for every k until it completes
//! on its own. After each drop: no orphaned claim, no single-flight entry or task left, at most
//! one execution, one outcome event, and a retry answered correctly. Each store operation is
//! either eager (it took effect when called, only its reply pends: an in-process store) or lazy
//! (it takes effect when polled after the `Pending`: a network store).

use idem_tools_runtime::Codec;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::task::Poll;
use std::time::Duration;

use idem_tools_runtime::engine::flights_registered;
use idem_tools_runtime::store::{MemoryStore, RecordState, Store};
use idem_tools_runtime::{Call, Turn, execute, execute_detached};

use crate::calls::{ToolError, key_of};
use crate::ledger::{Ledger, Val};
use crate::schedule::Tool;
use crate::stores::{Lazy, Observed, TokioClock, YieldOnce};

/// The body: starts, yields, performs its side effect, yields, returns its execution id (or
/// fails with it), noting in `returned` that it returned.
async fn body(
    ledger: Arc<Ledger>,
    key: idem_tools_runtime::Key,
    fail: bool,
    returned: Arc<AtomicBool>,
) -> Result<u64, ToolError> {
    let (exec, _alive) = ledger.start(key);
    tokio::task::yield_now().await;
    ledger.effect(key, exec);
    tokio::task::yield_now().await;
    returned.store(true, Ordering::SeqCst);
    if fail {
        return Err(ToolError::Tool(exec));
    }
    ledger.finish(key, Val { exec, ok: true }, Duration::from_secs(86_400));
    Ok(exec)
}

fn run(
    tool: Tool,
    turn: &Turn,
    ledger: &Arc<Ledger>,
    fail: bool,
    returned: &Arc<AtomicBool>,
) -> impl Future<Output = Result<u64, ToolError>> + Send + 'static {
    let (key, fingerprint) = key_of(turn, tool, 0);
    let call = Call::new(tool.info(), turn, key, fingerprint);
    let body = body(Arc::clone(ledger), key, fail, Arc::clone(returned));
    async move {
        match tool {
            Tool::Detached => execute_detached(call, Codec::ok_only(), body).await,
            _ => execute(call, Codec::ok_only(), body).await,
        }
    }
}

/// What dropping the call after `polls` polls led to; `None` once the call completes by
/// itself within that many polls.
async fn drop_after(tool: Tool, lazy: bool, fail: bool, polls: usize) -> Option<Vec<String>> {
    let clock = Arc::new(TokioClock::new());
    let ledger = Ledger::new(clock.clone());
    let memory: Arc<dyn Store> = Arc::new(MemoryStore::with_clock(clock));
    let observed: Arc<dyn Store> =
        Arc::new(Observed::new(Arc::clone(&memory), Arc::clone(&ledger)));
    // Lazy: an operation dropped at its `Pending` never reaches the store (a network store);
    // eager: it took effect when called, only its reply is pending (an in-process store).
    let below: Arc<dyn Store> = if lazy {
        Arc::new(Lazy::new(observed))
    } else {
        observed
    };
    let store: Arc<dyn Store> = Arc::new(YieldOnce::new(below));
    let turn = || Turn::new("enum").with_store(Arc::clone(&store));
    let first = turn();
    let (key, _) = key_of(&first, tool, 0);
    let mut problems = Vec::new();

    let returned = Arc::new(AtomicBool::new(false));
    let mut call = Box::pin(run(tool, &first, &ledger, fail, &returned));
    for _ in 0..polls {
        let step = std::future::poll_fn(|cx| Poll::Ready(call.as_mut().poll(cx))).await;
        if step.is_ready() {
            return None;
        }
        tokio::task::yield_now().await;
    }
    drop(call);
    tokio::time::sleep(Duration::from_secs(1)).await;

    let claims = memory.list(None, 100).await.unwrap_or_default();
    if claims.iter().any(|r| r.state == RecordState::InProgress) {
        problems.push("an in-progress claim nobody runs".to_owned());
    }
    if flights_registered() != 0 {
        problems.push(format!(
            "{} single-flight entries left",
            flights_registered()
        ));
    }
    let tasks = tokio::runtime::Handle::current()
        .metrics()
        .num_alive_tasks();
    if tasks != 0 {
        problems.push(format!("{tasks} tasks left"));
    }
    let events = first.stats().total();
    if events != u64::from(polls > 0) {
        problems.push(format!(
            "{events} outcome events for one dropped call: {:?}",
            first.stats()
        ));
    }
    let started = ledger.starts(&key);
    let finished_first = ledger.finished_any();

    let failed = fail && returned.load(Ordering::SeqCst);
    let retry = run(tool, &turn(), &ledger, false, &Arc::default()).await;
    let expected = match (started, tool) {
        // Nothing ran: the retry runs the tool.
        (0, _) => matches!(retry, Ok(1)) && ledger.starts(&key) == 1,
        // It failed: the key was given back, the retry runs.
        _ if failed => matches!(retry, Ok(2)) && ledger.starts(&key) == 2,
        // It ran to the end (a detached body always does): the retry replays it.
        _ if finished_first => matches!(retry, Ok(1)),
        // Dropped mid-run with `release_on_cancel`: the key was given back, the retry runs.
        (_, Tool::Release) => matches!(retry, Ok(2)) && ledger.starts(&key) == 2,
        // Dropped mid-run: the outcome is unknown, the retry is told so.
        (_, Tool::Detached) => false,
        _ => matches!(&retry, Err(ToolError::Idem(e)) if e == "Interrupted"),
    };
    if std::env::var_os("IDEM_FAULT_TRACE").is_some() {
        eprintln!(
            "{tool:?} lazy={lazy} k={polls}: started {started}, finished {finished_first}, retry {retry:?}"
        );
    }
    if !expected {
        problems.push(format!(
            "after {started} execution(s) (finished: {finished_first}) the retry got {retry:?}"
        ));
    }
    let (counts, found) = ledger.verdict();
    let allowed = if failed || tool == Tool::Release && !finished_first {
        2
    } else {
        1
    };
    if counts.executions > allowed || counts.duplicates + counts.overlaps > 0 {
        problems.push(format!("{} executions: {found:?}", counts.executions));
    }
    Some(problems)
}

/// Every drop point of one tool, on an eager and on a lazy store: a list of "k: problem" lines,
/// and how many points there were.
fn enumerate(tool: Tool, fail: bool) -> (usize, Vec<String>) {
    let (eager, mut problems) = enumerate_on(tool, false, fail);
    let (lazy, more) = enumerate_on(tool, true, fail);
    problems.extend(more.into_iter().map(|p| format!("lazy store, {p}")));
    (eager.min(lazy), problems)
}

fn enumerate_on(tool: Tool, lazy: bool, fail: bool) -> (usize, Vec<String>) {
    let mut problems = Vec::new();
    for polls in 0..500 {
        let runtime = tokio::runtime::Builder::new_current_thread()
            .enable_time()
            .start_paused(true)
            .build()
            .expect("a current-thread runtime builds");
        match runtime.block_on(drop_after(tool, lazy, fail, polls)) {
            None => return (polls, problems),
            Some(found) => problems.extend(found.into_iter().map(|p| format!("k={polls}: {p}"))),
        }
    }
    problems.push("the call did not complete within 500 polls".to_owned());
    (500, problems)
}

#[test]
fn every_drop_point_of_an_attached_call_is_clean() {
    let _serial = crate::serial();
    let (points, problems) = enumerate(Tool::Plain, false);
    eprintln!(
        "fault-suite enumerate-attached: drop points={points} problems={}",
        problems.len()
    );
    assert!(
        points >= 5,
        "the call should pend at several store operations"
    );
    assert!(problems.is_empty(), "{problems:#?}");
}

#[test]
fn every_drop_point_of_a_detached_call_is_clean() {
    let _serial = crate::serial();
    let (points, problems) = enumerate(Tool::Detached, false);
    eprintln!(
        "fault-suite enumerate-detached: drop points={points} problems={}",
        problems.len()
    );
    // The caller pends at its `begin`, then in the task the body went on in (its first poll
    // runs in the caller's poll, and the rest of its store operations in its task).
    assert!(
        points >= 4,
        "the call should pend at its begin and at its task"
    );
    assert!(problems.is_empty(), "{problems:#?}");
}

#[test]
fn every_drop_point_of_a_release_on_cancel_call_is_clean() {
    let _serial = crate::serial();
    let (points, problems) = enumerate(Tool::Release, false);
    eprintln!(
        "fault-suite enumerate-release-on-cancel: drop points={points} problems={}",
        problems.len()
    );
    assert!(
        points >= 5,
        "the call should pend at several store operations"
    );
    assert!(problems.is_empty(), "{problems:#?}");
}

/// Found by this enumerator on a lazy store: dropped while it releases its key after the
/// tool's `Err`, the call leaves the key claimed by nobody (defect 2 of `regressions.rs`).
#[test]
// Was a defect: a call cancelled while it releases its key after an `Err` orphans the claim.
fn every_drop_point_of_a_failing_call_is_clean() {
    let _serial = crate::serial();
    let (points, problems) = enumerate(Tool::Plain, true);
    eprintln!(
        "fault-suite enumerate-failing: drop points={points} problems={}",
        problems.len()
    );
    assert!(
        points >= 5,
        "the call should pend at several store operations"
    );
    assert!(problems.is_empty(), "{problems:#?}");
}

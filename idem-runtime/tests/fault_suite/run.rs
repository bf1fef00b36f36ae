//! Runs one schedule against the engine and checks every invariant.

use std::collections::HashMap;
use std::future::Future;
use std::pin::Pin;
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use idem_runtime::clock::Clock;
use idem_runtime::engine::flights_registered;
use idem_runtime::key::{ArgsDigest, Fingerprint};
use idem_runtime::store::fault::{Fault, FaultStore, Op};
use idem_runtime::store::{DEFAULT_TTL, MemoryStore, RecordState, Store};
use idem_runtime::{Call, Error, Key, Turn, execute, execute_caching_errors, execute_detached};
use serde::{Deserialize, Serialize};

use crate::ledger::{Counts, Ledger, Val};
use crate::schedule::{Attempt, Cancel, End, FaultSpec, Schedule, Tool};
use crate::stores::{Forgetful, Lazy, Observed, TokioClock};

/// A call bound: a call still running this long after it started hangs.
const HANG_BOUND: Duration = Duration::from_secs(120);
/// How long a caller waits for the same key elsewhere.
const IN_FLIGHT_WAIT: Duration = Duration::from_millis(300);
/// How long the checks wait after the last call.
#[derive(Debug, Clone, Copy)]
struct Settle {
    /// Time for background work (releases, recording retries, detached bodies) to end: longer
    /// than any body and any short lease.
    work: Duration,
    /// Then, if set, a wait longer than every lease, after which no claim may be left at all.
    leases: Option<Duration>,
}

/// Virtual time costs nothing: wait past every lease.
const PAUSED: Settle = Settle {
    work: Duration::from_secs(1),
    leases: Some(Duration::from_secs(61)),
};

/// Real time: wait for the background work only.
const REAL: Settle = Settle {
    work: Duration::from_millis(150),
    leases: None,
};

/// What an [`Opener`] returns: the handles, or why they could not be opened.
pub type Opened = Pin<Box<dyn Future<Output = Result<Vec<Arc<dyn Store>>, String>> + Send>>;

/// Opens the store handles of one schedule, all on one database, reading `clock` where the
/// store takes a clock (chain i calls through handle i mod n, like separate processes).
pub type Opener = Arc<dyn Fn(Arc<dyn Clock>) -> Opened + Send + Sync>;

/// Which store the schedule runs against (always under the fault wrapper).
#[derive(Clone)]
pub enum Backend {
    /// A `MemoryStore` on Tokio's clock.
    Memory,
    /// The same, broken: it forgets completions (the self-test).
    Forgetful,
    /// Handles opened by a function (SQLite, Redis).
    Handles(Opener),
}

/// The tool's error type: its own error (carrying the execution id) or the engine's.
#[derive(Debug, Serialize, Deserialize)]
pub enum ToolError {
    /// The tool failed.
    Tool(u64),
    /// The engine answered with an error (its variant name).
    Idem(String),
}

impl From<Error> for ToolError {
    fn from(error: Error) -> Self {
        let debug = format!("{error:?}");
        let name = debug.split([' ', '(', '{']).next().unwrap_or_default();
        ToolError::Idem(name.to_owned())
    }
}

/// The payload of a tool's own panic.
#[derive(Debug)]
pub struct ToolPanic;

/// Silences the tool's own panics (expected by the hundred); others print as usual.
pub fn quiet_tool_panics() {
    static ONCE: std::sync::Once = std::sync::Once::new();
    ONCE.call_once(|| {
        let default = std::panic::take_hook();
        std::panic::set_hook(Box::new(move |info| {
            if info.payload().downcast_ref::<ToolPanic>().is_none() {
                default(info);
            }
        }));
    });
}

/// What the result of one schedule is: counts and the violations found.
#[derive(Debug, Clone)]
pub struct Verdict {
    /// The counts.
    pub counts: Counts,
    /// One line per violation.
    pub problems: Vec<String>,
}

impl Verdict {
    /// Whether an invariant was broken.
    pub fn failed(&self) -> bool {
        self.counts.violations() > 0
    }
}

/// Runs `schedule` on a current-thread runtime with a paused clock: deterministic.
pub fn paused(schedule: &Schedule, backend: Backend) -> Verdict {
    let runtime = tokio::runtime::Builder::new_current_thread()
        .enable_time()
        .start_paused(true)
        .build();
    run_on(runtime, schedule, backend, PAUSED)
}

/// Runs `schedule` in real time on two worker threads.
pub fn realtime(schedule: &Schedule, backend: Backend) -> Verdict {
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build();
    run_on(runtime, schedule, backend, REAL)
}

fn run_on(
    runtime: std::io::Result<tokio::runtime::Runtime>,
    schedule: &Schedule,
    backend: Backend,
    settle: Settle,
) -> Verdict {
    quiet_tool_panics();
    match runtime {
        Ok(runtime) => runtime.block_on(run(schedule, backend, settle)),
        Err(error) => Verdict {
            counts: Counts {
                leaks: 1,
                ..Counts::default()
            },
            problems: vec![format!("could not build a runtime: {error}")],
        },
    }
}

/// One call as the harness remembers it.
struct CallRecord {
    turn: Turn,
    key: Key,
    polled: Arc<AtomicBool>,
}

/// Everything the calls of one schedule share.
struct Ctx {
    /// The store handles, under the fault wrapper; chain i calls through handle i mod n.
    stores: Vec<Arc<dyn Store>>,
    ledger: Arc<Ledger>,
    namespace: String,
    limit: u32,
    calls: Mutex<Vec<CallRecord>>,
}

/// Runs `schedule` on the current runtime and checks it.
async fn run(schedule: &Schedule, backend: Backend, settle: Settle) -> Verdict {
    let clock = Arc::new(TokioClock::new());
    let ledger = Ledger::new(clock.clone());
    let handles: Vec<Arc<dyn Store>> = match &backend {
        Backend::Memory | Backend::Forgetful => vec![Arc::new(MemoryStore::with_clock(clock))],
        Backend::Handles(open) => match open(clock).await {
            Ok(handles) if !handles.is_empty() => handles,
            opened => {
                let why = opened.err().unwrap_or_else(|| "no handles".to_owned());
                ledger.problem(|c| c.leaks += 1, format!("could not open the store: {why}"));
                let (counts, problems) = ledger.verdict();
                return Verdict { counts, problems };
            }
        },
    };
    let memory = Arc::clone(&handles[0]);
    let handles: Vec<Arc<dyn Store>> = if schedule.lazy {
        let lazy = |h: Arc<dyn Store>| Arc::new(Lazy::new(h)) as Arc<dyn Store>;
        handles.into_iter().map(lazy).collect()
    } else {
        handles
    };
    // The store's own tasks (a Redis connection's driver) are not the engine's: count them once
    // each handle has been used.
    for handle in &handles {
        let _ = handle.get("", &Key::from_bytes([0; 32])).await;
    }
    let store_tasks = tokio::runtime::Handle::current()
        .metrics()
        .num_alive_tasks();
    let plan = Plan::new(&schedule.faults);
    let stores = handles
        .iter()
        .map(|handle| {
            let observed: Arc<dyn Store> =
                Arc::new(Observed::new(Arc::clone(handle), Arc::clone(&ledger)));
            let below: Arc<dyn Store> = match backend {
                Backend::Forgetful => Arc::new(Forgetful::new(observed)),
                Backend::Memory | Backend::Handles(_) => observed,
            };
            let plan = Arc::clone(&plan);
            Arc::new(FaultStore::new(below, move |op| plan.fault(op))) as Arc<dyn Store>
        })
        .collect();
    let injected = Arc::clone(&plan.injected);
    let ctx = Arc::new(Ctx {
        stores,
        ledger: Arc::clone(&ledger),
        namespace: format!("fs-{:x}", schedule.seed),
        limit: schedule.limit,
        calls: Mutex::default(),
    });
    ledger.count(|c| c.schedules = 1);

    let chains: Vec<_> = schedule
        .chains
        .iter()
        .enumerate()
        .map(|(index, chain)| {
            let ctx = Arc::clone(&ctx);
            let chain = chain.clone();
            tokio::spawn(async move {
                let store = Arc::clone(&ctx.stores[index % ctx.stores.len()]);
                tokio::time::sleep(ms(chain.start_ms)).await;
                for attempt in chain.attempts {
                    tokio::time::sleep(ms(attempt.gap_ms)).await;
                    attempt_once(&ctx, &store, attempt).await;
                }
            })
        })
        .collect();
    for chain in chains {
        if let Err(error) = chain.await {
            ledger.problem(
                |c| c.panics += 1,
                format!("a chain of the harness failed: {error}"),
            );
        }
    }

    tokio::time::sleep(settle.work).await;
    let faults: Vec<FaultSpec> = lock(&injected).clone();
    let documented = faults.iter().any(|f| {
        matches!(f.op, Op::Release | Op::Complete) && f.fault == Fault::FailBefore
            || f.op == Op::Begin && f.fault == Fault::FailAfter
    });
    let claims = in_progress(&memory, &ctx.namespace).await;
    if claims > 0 && documented {
        ledger.count(|c| c.excused_claims += claims);
    } else if claims > 0 {
        ledger.problem(
            |c| c.orphans += claims,
            format!("orphans: {claims} in-progress record(s) nobody runs after the settle"),
        );
    }
    check_calls(&ctx);

    if let Some(leases) = settle.leases {
        tokio::time::sleep(leases).await;
        let left = in_progress(&memory, &ctx.namespace).await;
        if left > 0 {
            ledger.problem(
                |c| c.orphans += left,
                format!("orphans: {left} in-progress record(s) outlived every lease"),
            );
        }
    }
    let flights = flights_registered() as u64;
    let tasks = tokio::runtime::Handle::current()
        .metrics()
        .num_alive_tasks()
        .saturating_sub(store_tasks) as u64;
    if flights + tasks > 0 {
        ledger.problem(
            |c| c.leaks += flights + tasks,
            format!("leaks: {flights} single-flight entries and {tasks} tasks left"),
        );
    }
    let (counts, problems) = ledger.verdict();
    Verdict { counts, problems }
}

/// Exactly one outcome per call, and executions + replays within the budget per key.
fn check_calls(ctx: &Ctx) {
    let calls = lock(&ctx.calls);
    let mut replays: HashMap<Key, u64> = HashMap::new();
    for call in calls.iter() {
        let stats = call.turn.stats();
        let polled = call.polled.load(Ordering::SeqCst);
        let expected = u64::from(polled);
        ctx.ledger.count(|c| c.calls += expected);
        if stats.total() != expected {
            ctx.ledger.problem(
                |c| c.outcome_errors += 1,
                format!(
                    "outcomes: a call of key {} (polled: {polled}) has {} outcome events: \
                     {stats:?}",
                    call.key.short(),
                    stats.total()
                ),
            );
        }
        *replays.entry(call.key).or_default() += stats.replayed;
    }
    for (key, replayed) in replays {
        let executed = u64::from(ctx.ledger.starts(&key));
        if executed + replayed > u64::from(ctx.limit) {
            ctx.ledger.problem(
                |c| c.budget_overruns += 1,
                format!(
                    "budget: key {} executed {executed} and replayed {replayed} times, over the \
                     limit of {}",
                    key.short(),
                    ctx.limit
                ),
            );
        }
    }
}

async fn in_progress(store: &Arc<dyn Store>, namespace: &str) -> u64 {
    match store.list(Some(namespace), 10_000).await {
        Ok(records) => records
            .iter()
            .filter(|r| r.state == RecordState::InProgress)
            .count() as u64,
        Err(_) => 0,
    }
}

/// The schedule's faults, shared by the fault wrappers of all handles: the nth operation of a
/// kind, counted over all handles, gets its planned fault.
struct Plan {
    faults: Vec<FaultSpec>,
    seen: [AtomicUsize; 6],
    /// The faults injected so far.
    injected: Arc<Mutex<Vec<FaultSpec>>>,
}

impl Plan {
    fn new(faults: &[FaultSpec]) -> Arc<Plan> {
        Arc::new(Plan {
            faults: faults.to_vec(),
            seen: Default::default(),
            injected: Arc::default(),
        })
    }

    fn fault(&self, op: Op) -> Fault {
        let index = match op {
            Op::Begin => 0,
            Op::Renew => 1,
            Op::Complete => 2,
            Op::Release => 3,
            Op::Get => 4,
            Op::Admin => 5,
        };
        let nth = self.seen[index].fetch_add(1, Ordering::SeqCst);
        match self.faults.iter().find(|f| f.op == op && f.nth == nth) {
            Some(spec) => {
                lock(&self.injected).push(*spec);
                spec.fault
            }
            None => Fault::None,
        }
    }
}

/// The key and fingerprint of an attempt.
pub fn key_of(turn: &Turn, tool: Tool, arg: u8) -> (Key, Fingerprint) {
    let info = tool.info();
    let mut args = ArgsDigest::new(info.name);
    // A u8 always encodes.
    let _ = args.arg("arg", &arg);
    args.finish(turn.namespace(), turn.id(), info.name, info.version)
}

/// Makes one attempt: the call in its own task, given up on as the attempt says.
async fn attempt_once(ctx: &Arc<Ctx>, store: &Arc<dyn Store>, attempt: Attempt) {
    let turn = Turn::new(format!("t{}", attempt.turn))
        .with_namespace(ctx.namespace.clone())
        .with_store(Arc::clone(store))
        .with_max_attempts_per_key(ctx.limit)
        .with_in_flight_wait(IN_FLIGHT_WAIT);
    let (key, fingerprint) = key_of(&turn, attempt.tool, attempt.arg);
    let polled = Arc::new(AtomicBool::new(false));
    lock(&ctx.calls).push(CallRecord {
        turn: turn.clone(),
        key,
        polled: Arc::clone(&polled),
    });
    let call = Call::new(attempt.tool.info(), &turn, key, fingerprint);
    let engine = marking_polled(polled, engine_call(Arc::clone(&ctx.ledger), attempt, call));
    let task = tokio::spawn(async move {
        match attempt.cancel {
            Cancel::Timeout(after) => {
                let _ = tokio::time::timeout(ms(after), engine).await;
            }
            Cancel::Select(after) => {
                tokio::select! {
                    biased;
                    () = engine => {}
                    () = tokio::time::sleep(ms(after)) => {}
                }
            }
            Cancel::None | Cancel::Abort(_) => engine.await,
        }
    });
    let abort = task.abort_handle();
    let waited = tokio::time::timeout(HANG_BOUND, async move {
        let mut task = task;
        if let Cancel::Abort(after) = attempt.cancel {
            tokio::select! {
                biased;
                joined = &mut task => return joined,
                () = tokio::time::sleep(ms(after)) => task.abort(),
            }
        }
        task.await
    })
    .await;
    match waited {
        Err(_) => {
            abort.abort();
            ctx.ledger.problem(
                |c| c.hangs += 1,
                format!(
                    "hang: a call of key {} did not end within {HANG_BOUND:?}",
                    key.short()
                ),
            );
        }
        Ok(Err(error)) if error.is_panic() => {
            let panic = error.into_panic();
            if panic.downcast_ref::<ToolPanic>().is_none() {
                let text = panic
                    .downcast_ref::<String>()
                    .cloned()
                    .or_else(|| panic.downcast_ref::<&str>().map(|s| (*s).to_owned()))
                    .unwrap_or_default();
                ctx.ledger.problem(
                    |c| c.panics += 1,
                    format!("panic: a call of key {} panicked: {text}", key.short()),
                );
            }
        }
        Ok(_) => {}
    }
}

/// Sets `polled` when the engine future is first polled (a call never polled has no outcome).
async fn marking_polled<F: Future>(polled: Arc<AtomicBool>, future: F) -> F::Output {
    let mut future = std::pin::pin!(future);
    std::future::poll_fn(|cx| {
        polled.store(true, Ordering::SeqCst);
        future.as_mut().poll(cx)
    })
    .await
}

/// The call through the engine entry point of its tool; reports the answer to the ledger.
async fn engine_call(ledger: Arc<Ledger>, attempt: Attempt, call: Call) {
    let key = call.key();
    let tool = attempt.tool;
    let body = tool_body(Arc::clone(&ledger), attempt, key);
    let result = match tool {
        Tool::Plain | Tool::Short | Tool::Release => execute(call, body).await,
        Tool::Caching => execute_caching_errors(call, body).await,
        Tool::Detached => execute_detached(call, body).await,
    };
    match result {
        Ok(exec) => ledger.answered(key, Val { exec, ok: true }),
        Err(ToolError::Tool(exec)) if tool.records_errors() => {
            ledger.answered(key, Val { exec, ok: false });
        }
        Err(_) => {}
    }
}

/// The tool body: waits, maybe performs its side effect, waits, ends as planned.
fn tool_body(
    ledger: Arc<Ledger>,
    attempt: Attempt,
    key: Key,
) -> impl Future<Output = Result<u64, ToolError>> + Send + 'static {
    let plan = attempt.body;
    let tool = attempt.tool;
    let ttl = tool.info().ttl.unwrap_or(DEFAULT_TTL);
    async move {
        let (exec, alive) = ledger.start(key);
        tokio::time::sleep(ms(plan.before_ms)).await;
        if plan.effect {
            ledger.effect(key, exec);
        }
        tokio::time::sleep(ms(plan.after_ms)).await;
        let result = match plan.end {
            End::Ok => {
                ledger.finish(key, Val { exec, ok: true }, ttl);
                Ok(exec)
            }
            End::Err => {
                if tool.records_errors() {
                    ledger.finish(key, Val { exec, ok: false }, ttl);
                }
                Err(ToolError::Tool(exec))
            }
            End::Panic => std::panic::panic_any(ToolPanic),
        };
        drop(alive);
        result
    }
}

fn ms(n: u64) -> Duration {
    Duration::from_millis(n)
}

fn lock<T>(mutex: &Mutex<T>) -> std::sync::MutexGuard<'_, T> {
    mutex
        .lock()
        .unwrap_or_else(std::sync::PoisonError::into_inner)
}

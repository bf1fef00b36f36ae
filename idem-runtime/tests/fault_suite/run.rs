//! Runs one schedule against the engine and checks every invariant.

use std::future::Future;
use std::pin::Pin;
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use crate::fault_store::{Fault, FaultStore, Op};
use idem_tools_runtime::clock::Clock;
use idem_tools_runtime::engine::flights_registered;
use idem_tools_runtime::store::{MemoryStore, RecordState, Store};
use idem_tools_runtime::{Key, Turn};

use crate::calls::{attempt_once, quiet_tool_panics};
use crate::ledger::{Counts, Ledger};
use crate::schedule::{FaultSpec, Schedule};
use crate::stores::{
    Forgetful, Lazy, Observed, Renewals, SlowReplies, TokioClock, plan_slow_reply,
};

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

/// The longest lease of the schedules' tools (the default one): how long a key may be given
/// back in the background while the store fails.
const LONGEST_LEASE: Duration = idem_tools_runtime::store::DEFAULT_LEASE;

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
pub(crate) struct CallRecord {
    pub(crate) turn: Turn,
    pub(crate) key: Key,
    pub(crate) polled: Arc<AtomicBool>,
}

/// Everything the calls of one schedule share.
pub(crate) struct Ctx {
    /// The store handles, under the fault wrapper; chain i calls through handle i mod n.
    pub(crate) stores: Vec<Arc<dyn Store>>,
    pub(crate) ledger: Arc<Ledger>,
    pub(crate) namespace: String,
    pub(crate) limit: u32,
    pub(crate) calls: Mutex<Vec<CallRecord>>,
}

/// Runs `schedule` on the current runtime and checks it.
async fn run(schedule: &Schedule, backend: Backend, settle: Settle) -> Verdict {
    let clock = Arc::new(TokioClock::new());
    let ledger = Ledger::new(clock.clone())
        .with_budget(schedule.limit)
        .with_actions_per_tool(crate::calls::actions_per_tool(schedule.limit));
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
    // An eager (in-process) store's delays are slow replies: the operation takes effect, its
    // reply comes late. A lazy (network) store's delay the operation itself.
    let plan = Plan::new(&schedule.faults, !schedule.lazy);
    let stores = handles
        .iter()
        .map(|handle| {
            let observed: Arc<dyn Store> =
                Arc::new(Observed::new(Arc::clone(handle), Arc::clone(&ledger)));
            let below: Arc<dyn Store> = match backend {
                Backend::Forgetful => Arc::new(Forgetful::new(observed)),
                Backend::Memory | Backend::Handles(_) => observed,
            };
            // Without faults to inject, an eager memory store is met as the engine meets it in
            // production: answering `begin` at once, so the call's first poll runs it.
            if schedule.faults.is_empty() && !schedule.lazy {
                return below;
            }
            let plan = Arc::clone(&plan);
            let faulty: Arc<dyn Store> = Arc::new(FaultStore::new(below, move |op| plan.fault(op)));
            let slow: Arc<dyn Store> = Arc::new(SlowReplies::new(faulty));
            Arc::new(Renewals::new(slow, Arc::clone(&ledger))) as Arc<dyn Store>
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
    // In real time, a claim given back in the background may take longer than the settle on a
    // loaded machine (a release queued behind a pool's other work): an orphan is a claim
    // nobody gives back, so it is waited for as the leak check below waits for tasks.
    let wait = if documented || settle.leases.is_some() {
        Duration::ZERO
    } else {
        Duration::from_secs(2)
    };
    let read = async || in_progress(&memory, &ctx.namespace).await;
    let claims = patiently(wait, read, |&claims| claims == 0).await;
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
    let alive = || {
        tokio::runtime::Handle::current()
            .metrics()
            .num_alive_tasks()
            .saturating_sub(store_tasks) as u64
    };
    // In real time, background work may outlast the settle on a loaded machine (a recording
    // retried with backoff after a store fault, a sqlx pool's ping of each connection it takes
    // back): a leak is a single-flight entry or a task that does not end. The entry and the
    // task that holds it end together, so both are read after the wait. (Paused time would
    // fire every timer of a leaked task instead: no patience.) A key given back while the
    // store keeps failing releases is retried until the lease of the claim it may hold would
    // end, and one lease more after an attempt the store did not answer (a hang), as
    // documented: with a lasting release fault, the patience is two of the longest leases.
    let lasting_release = faults.iter().any(|f| f.op == Op::Release && f.repeat > 0);
    let wait = if settle.leases.is_some() {
        Duration::ZERO
    } else if lasting_release {
        LONGEST_LEASE * 2 + Duration::from_secs(1)
    } else {
        Duration::from_secs(2)
    };
    let read = async || (flights_registered() as u64, alive());
    let (flights, tasks) = patiently(wait, read, |&(flights, tasks)| flights + tasks == 0).await;
    if flights + tasks > 0 {
        ledger.problem(
            |c| c.leaks += flights + tasks,
            format!("leaks: {flights} single-flight entries and {tasks} tasks left"),
        );
    }
    let (counts, problems) = ledger.verdict();
    Verdict { counts, problems }
}

/// `read`, read again every 20 ms until `done` says so or `wait` has passed: its last value.
async fn patiently<T>(
    wait: Duration,
    mut read: impl AsyncFnMut() -> T,
    done: impl Fn(&T) -> bool,
) -> T {
    let deadline = tokio::time::Instant::now() + wait;
    let mut value = read().await;
    while !done(&value) && tokio::time::Instant::now() < deadline {
        tokio::time::sleep(Duration::from_millis(20)).await;
        value = read().await;
    }
    value
}

/// Exactly one outcome per call (the budget is checked by the ledger as bodies start).
fn check_calls(ctx: &Ctx) {
    let calls = lock(&ctx.calls);
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
    /// Whether a `Delay` is a slow reply (see [`SlowReplies`]) instead of a slow operation.
    slow_replies: bool,
}

impl Plan {
    fn new(faults: &[FaultSpec], slow_replies: bool) -> Arc<Plan> {
        Arc::new(Plan {
            faults: faults.to_vec(),
            seen: Default::default(),
            injected: Arc::default(),
            slow_replies,
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
        match self.faults.iter().find(|f| f.covers(op, nth)) {
            Some(spec) => {
                lock(&self.injected).push(*spec);
                match spec.fault {
                    Fault::Delay(by) if self.slow_replies => {
                        plan_slow_reply(by);
                        Fault::None
                    }
                    fault => fault,
                }
            }
            None => Fault::None,
        }
    }
}

pub(crate) fn ms(n: u64) -> Duration {
    Duration::from_millis(n)
}

pub(crate) fn lock<T>(mutex: &Mutex<T>) -> std::sync::MutexGuard<'_, T> {
    mutex
        .lock()
        .unwrap_or_else(std::sync::PoisonError::into_inner)
}

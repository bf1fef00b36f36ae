//! Schedules: what each chain of callers does, what each tool body does, and which store
//! operations fail. A schedule is a proptest value generated from a seed (proptest's ChaCha
//! generator, seeded from it), so proptest's shrinking makes a failing one smaller: fewer
//! chains, attempts and faults, no cancellation, shorter delays.

use std::time::Duration;

use crate::fault_store::{Fault, Op};
use idem_tools_runtime::ToolInfo;
use proptest::collection::vec;
use proptest::prelude::*;
use proptest::sample::select;
use proptest::strategy::ValueTree;
use proptest::test_runner::{Config, RngAlgorithm, TestRng, TestRunner};

/// The tools schedules call, by [`Tool`] index.
pub static TOOLS: [ToolInfo; 6] = [
    ToolInfo::idempotent("fs_plain"),
    ToolInfo::idempotent("fs_caching").with_cache_errors(),
    ToolInfo::idempotent("fs_short")
        .with_lease(Duration::from_millis(15))
        .with_ttl(Duration::from_millis(40)),
    ToolInfo::idempotent("fs_detached").with_lease(Duration::from_millis(100)),
    ToolInfo::idempotent("fs_release").with_release_on_cancel(),
    ToolInfo::idempotent("fs_renewing")
        .with_lease(Duration::from_millis(60))
        .with_ttl(Duration::from_millis(80)),
];

/// Which tool an attempt calls, and how the engine runs it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Tool {
    /// `execute`, default lease and TTL.
    Plain,
    /// `execute_caching_errors`: an `Err` is recorded and replayed.
    Caching,
    /// `execute` with a 15 ms lease and a 40 ms TTL: renewals, lease loss and expiry.
    Short,
    /// `execute_detached` with a 100 ms lease: the body survives its caller.
    Detached,
    /// `execute` with `release_on_cancel`.
    Release,
    /// `execute` with a 60 ms lease and an 80 ms TTL: [`Tool::Short`] in real time, where a
    /// body may see a renewal and a record expire within a schedule, but the process would have
    /// to stall for most of a lease (45 ms) to lose one without a fault.
    Renewing,
}

impl Tool {
    const ALL: [Tool; 5] = [
        Tool::Plain,
        Tool::Caching,
        Tool::Short,
        Tool::Detached,
        Tool::Release,
    ];

    /// The tool's descriptor.
    pub fn info(self) -> &'static ToolInfo {
        &TOOLS[self as usize]
    }

    /// Whether an `Err` result is recorded.
    pub fn records_errors(self) -> bool {
        self.info().cache_errors
    }
}

/// How an attempt's caller stops waiting early.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Cancel {
    /// It waits for the answer.
    None,
    /// `tokio::time::timeout` after this many ms.
    Timeout(u64),
    /// A `select!` against a sleep of this many ms.
    Select(u64),
    /// The call's task is aborted (`JoinHandle::abort`) after this many ms.
    Abort(u64),
}

/// How a tool body ends.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum End {
    /// `Ok(execution id)`.
    Ok,
    /// `Err(execution id)`.
    Err,
    /// A panic of the tool's own.
    Panic,
}

/// What the tool body does if it runs: wait, maybe perform the side effect, wait, end.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Body {
    /// Virtual ms before the side effect.
    pub before_ms: u64,
    /// Whether the side effect is performed.
    pub effect: bool,
    /// Virtual ms after it.
    pub after_ms: u64,
    /// How the body ends.
    pub end: End,
}

/// One call of a tool.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Attempt {
    /// Virtual ms after the previous attempt of the chain ended.
    pub gap_ms: u64,
    /// The turn id index.
    pub turn: u8,
    /// The tool.
    pub tool: Tool,
    /// The argument (one key per turn, tool and argument).
    pub arg: u8,
    /// How the caller gives up early.
    pub cancel: Cancel,
    /// What the body does if it runs.
    pub body: Body,
}

/// Attempts made one after the other by one caller.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Chain {
    /// Virtual ms before the first attempt.
    pub start_ms: u64,
    /// The attempts, in order.
    pub attempts: Vec<Attempt>,
}

/// The `nth` call (from 0) of `op` gets `fault`, and so do the `repeat` calls after it: a
/// store down for a while, or (a large `repeat`) renewals that never reach it again.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct FaultSpec {
    /// The store operation.
    pub op: Op,
    /// Which call of it, counted from 0.
    pub nth: usize,
    /// What happens to it.
    pub fault: Fault,
    /// How many calls after the `nth` get it too.
    pub repeat: usize,
}

impl FaultSpec {
    /// Whether the `n`th call of `op` gets this fault.
    pub fn covers(&self, op: Op, n: usize) -> bool {
        self.op == op && self.nth <= n && n <= self.nth + self.repeat
    }
}

/// A whole schedule.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Schedule {
    /// The seed it was generated from.
    pub seed: u64,
    /// Attempts allowed per key per turn.
    pub limit: u32,
    /// The concurrent chains.
    pub chains: Vec<Chain>,
    /// The store faults.
    pub faults: Vec<FaultSpec>,
    /// Whether the memory store's operations take effect when first polled, as a network
    /// store's do (else when called: a `Delay` then delays only the reply).
    pub lazy: bool,
}

/// What the generator may produce.
#[derive(Debug, Clone, Copy)]
pub struct Shape {
    /// Whether `HangAfter` faults are planned for operations the engine awaits without a
    /// bound of its own (`begin`, `complete`, `release`); `renew` may always hang.
    pub unbounded_hangs: bool,
    /// Whether the fault patterns of the known, not yet fixed defects are planned (see
    /// `regressions.rs`): a `complete` slower than the rest of the lease, a slow `release`, a
    /// `renew` that hangs in a schedule where `complete` fails, two failing `complete`s, a
    /// `begin` reply slower than the lease, a failing body given up by its caller (on a store
    /// with latency of its own this is defect 2). Without them the suite checks everything
    /// else.
    pub known_defects: bool,
    /// Whether the schedule runs in real time: the 15 ms lease tool is then replaced by the
    /// 60 ms one ([`Tool::Renewing`]), since scheduling jitter on a loaded machine alone can
    /// outlast a 15 ms lease (a process that does not run for most of a lease cannot keep it:
    /// the documented limit), which the ledger cannot tell from a lease the engine let lapse.
    /// The paused modes, where no jitter happens, keep it.
    pub realtime: bool,
}

impl Schedule {
    /// The schedule of `seed`: 1–4 chains of 1–4 attempts over 2 turns, 5 tools and 2
    /// arguments, and 0–3 store faults.
    pub fn generate(seed: u64, shape: Shape) -> Schedule {
        Schedule::tree(seed, shape).current()
    }

    /// The schedule of `seed` as a proptest value tree: `current()` is the schedule,
    /// `simplify()` and `complicate()` walk towards a smaller one (see `minimize.rs`).
    pub fn tree(seed: u64, shape: Shape) -> impl ValueTree<Value = Schedule> {
        let mut bytes = [0u8; 32];
        for chunk in bytes.chunks_mut(8) {
            chunk.copy_from_slice(&seed.to_le_bytes());
        }
        let rng = TestRng::from_seed(RngAlgorithm::ChaCha, &bytes);
        let mut runner = TestRunner::new_with_rng(Config::default(), rng);
        schedules(shape)
            .prop_map(move |schedule| Schedule { seed, ..schedule })
            .new_tree(&mut runner)
            .expect("the schedule strategy has no filter, so it always generates")
    }

    /// Every attempt of every chain.
    pub fn attempts(&self) -> impl Iterator<Item = &Attempt> {
        self.chains.iter().flat_map(|c| c.attempts.iter())
    }

    /// How many parts it has (chains + attempts + faults): what shrinking reduces.
    pub fn size(&self) -> usize {
        self.chains.len() + self.attempts().count() + self.faults.len()
    }
}

/// Every schedule `shape` allows. Each choice's simplest value comes first, where shrinking
/// goes: no cancellation, an `Ok` end, the plain tool, a fault that happens once.
fn schedules(shape: Shape) -> impl Strategy<Value = Schedule> {
    let chain = (0u64..6, vec(attempt(), 1..=4))
        .prop_map(|(start_ms, attempts)| Chain { start_ms, attempts });
    (
        2u32..=4,
        vec(chain, 1..=4),
        vec(fault(shape), 0..=3),
        any::<bool>(),
    )
        .prop_map(move |(limit, mut chains, mut faults, lazy)| {
            avoid_unkeepable_leases(&mut chains, &faults);
            if !shape.known_defects {
                avoid_known_defects(&mut chains, &mut faults);
            }
            if shape.realtime {
                replace_tool(&mut chains, Tool::Short, Tool::Renewing);
            }
            Schedule {
                seed: 0,
                limit,
                chains,
                faults,
                lazy,
            }
        })
}

fn attempt() -> impl Strategy<Value = Attempt> {
    let cancel = prop_oneof![
        7 => Just(Cancel::None),
        1 => (0u64..=25).prop_map(Cancel::Timeout),
        1 => (0u64..=25).prop_map(Cancel::Select),
        1 => (0u64..=25).prop_map(Cancel::Abort),
    ];
    let end = prop_oneof![7 => Just(End::Ok), 2 => Just(End::Err), 1 => Just(End::Panic)];
    let body = (0u64..12, prop::bool::weighted(0.9), 0u64..12, end).prop_map(
        |(before_ms, effect, after_ms, end)| Body {
            before_ms,
            effect,
            after_ms,
            end,
        },
    );
    (
        0u64..8,
        0u8..2,
        select(Tool::ALL.to_vec()),
        0u8..2,
        cancel,
        body,
    )
        .prop_map(|(gap_ms, turn, tool, arg, cancel, body)| Attempt {
            gap_ms,
            turn,
            tool,
            arg,
            cancel,
            body,
        })
}

fn fault(shape: Shape) -> impl Strategy<Value = FaultSpec> {
    const OPS: [Op; 4] = [Op::Begin, Op::Renew, Op::Complete, Op::Release];
    (
        select(OPS.to_vec()),
        0u8..4,
        1u64..=20,
        0u8..10,
        1usize..=8,
        0usize..4,
    )
        .prop_map(move |(op, kind, delay_ms, lasting, calls, nth)| {
            let delay = Fault::Delay(Duration::from_millis(delay_ms));
            let fault = match kind {
                0 => delay,
                1 => Fault::FailBefore,
                2 => Fault::FailAfter,
                _ if op == Op::Renew || shape.unbounded_hangs => Fault::HangAfter,
                _ => delay,
            };
            // One fault in five lasts: the store is down for several calls, or renewals never
            // reach it again, so a holder loses its lease while another process calls. (A
            // `complete` that fails forever is not planned: the result is then retried in the
            // background, holding the key, until its TTL — a day — ends, which a schedule's
            // settle cannot wait out.)
            let repeat = match lasting {
                9 if op == Op::Renew => usize::MAX / 2,
                8 | 9 => calls,
                _ => 0,
            };
            FaultSpec {
                op,
                nth,
                fault,
                repeat,
            }
        })
}

/// The documented limit, not a defect: a store whose `renew` answers later than half a lease
/// cannot keep that lease (the engine renews every quarter and trusts a lease for three
/// quarters), so the holder is stopped and another caller may run the key again once it lapses
/// (README, "What is not guaranteed": a tool stopped because its lease ran out). Such a slow
/// `renew` is kept, but the 15 ms lease tool is replaced by the plain one (30 s lease).
fn avoid_unkeepable_leases(chains: &mut [Chain], faults: &[FaultSpec]) {
    let slow_renew = faults.iter().any(|f| {
        f.op == Op::Renew && matches!(f.fault, Fault::Delay(by) if by >= Duration::from_millis(7))
    });
    if slow_renew {
        replace_tool(chains, Tool::Short, Tool::Plain);
    }
}

/// Every attempt that calls `from` calls `to` instead.
fn replace_tool(chains: &mut [Chain], from: Tool, to: Tool) {
    for attempt in chains.iter_mut().flat_map(|c| c.attempts.iter_mut()) {
        if attempt.tool == from {
            attempt.tool = to;
        }
    }
}

/// Rewrites the patterns of the known defects into their nearest harmless form.
fn avoid_known_defects(chains: &mut [Chain], faults: &mut Vec<FaultSpec>) {
    // Defect 2 (below) needs no injected fault on a store with real latency (Redis): a caller
    // giving up just as its failed body's key is released. Failing attempts that are given up
    // use a tool that records errors, which releases nothing.
    for attempt in chains.iter_mut().flat_map(|c| c.attempts.iter_mut()) {
        if attempt.cancel != Cancel::None
            && attempt.body.end == End::Err
            && !attempt.tool.records_errors()
        {
            attempt.tool = Tool::Caching;
        }
    }
    for spec in faults.iter_mut() {
        match (spec.op, spec.fault) {
            // Defect 6: a `begin` reply slower than a 15 ms lease (at least 10 ms).
            (Op::Begin, Fault::Delay(by)) if by >= Duration::from_millis(10) => {
                spec.fault = Fault::Delay(Duration::from_millis(9));
            }
            // Defect 2: a caller cancelled while the key is released after an `Err`.
            (Op::Release, Fault::Delay(_)) => spec.fault = Fault::FailAfter,
            _ => {}
        }
    }
    let fails = |f: &FaultSpec| {
        f.op == Op::Complete && matches!(f.fault, Fault::FailBefore | Fault::FailAfter)
    };
    // Defect 1: a `complete` slower than what is left of a 15 ms lease (renewal faults shorten
    // it further). Defect 4: background recording (after a failed `complete`, or a caller that
    // left while the result was being recorded) waits 20 ms before its first `renew`. Where a
    // `complete` may be slow or fail, the short-lease tool is replaced by the plain one.
    if faults
        .iter()
        .any(|f| f.op == Op::Complete && f.fault != Fault::None)
    {
        replace_tool(chains, Tool::Short, Tool::Plain);
    }
    // Defect 3: background recording (after a failed `complete`) awaits `renew` unbounded.
    if faults.iter().any(fails) {
        faults.retain(|f| !(f.op == Op::Renew && f.fault == Fault::HangAfter));
    }
}

#[test]
fn real_time_schedules_never_use_the_15_ms_lease_tool() {
    let uses = |shape: Shape, tool: Tool| {
        (0..300u64).any(|seed| {
            Schedule::generate(seed, shape)
                .attempts()
                .any(|a| a.tool == tool)
        })
    };
    let paused = crate::modes::shape();
    assert!(
        uses(paused, Tool::Short),
        "paused schedules exercise the 15 ms lease"
    );
    let realtime = crate::modes::realtime_shape();
    assert!(!uses(realtime, Tool::Short));
    assert!(
        uses(realtime, Tool::Renewing),
        "real-time schedules renew and expire leases too"
    );
}

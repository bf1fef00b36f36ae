//! The ledger: what tool bodies, callers and the store did, checked as it happens against the
//! invariants that hold at a single moment (no overlap, no duplicate side effect, every `Ok` is
//! the first result).

use std::collections::HashMap;
use std::sync::{Arc, Mutex, MutexGuard};
use std::time::Duration;

use idem_tools_runtime::Key;
use idem_tools_runtime::clock::Clock;
use idem_tools_runtime::store::LeaseToken;

/// A result a caller can see: the id of the execution that produced it, and whether it was
/// `Ok`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Val {
    /// The execution that produced it.
    pub exec: u64,
    /// `Ok` (else a tool `Err`).
    pub ok: bool,
}

/// An execution whose body finished with a result the engine records.
#[derive(Debug, Clone, Copy)]
struct Finish {
    val: Val,
    at: u64,
    ttl: u64,
}

/// A completion the store accepted.
#[derive(Debug, Clone)]
struct Completion {
    token: LeaseToken,
    /// What the record holds, as far as the harness can read it.
    content: Content,
    at: u64,
    expires: u64,
}

/// What a recorded result holds. The record format belongs to the engine; the harness reads
/// the JSON envelope it knows and otherwise learns the value from the first caller answered
/// while the record lives.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Content {
    /// A result of this value.
    Value(Val),
    /// A marker (interrupted, not replayable): no caller may see an `Ok` from it.
    Marker,
    /// A format the harness does not read; the first value a caller saw from it, if any.
    Opaque(Option<Val>),
}

/// Counters of one run (or of many, summed).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Counts {
    /// Schedules run.
    pub schedules: u64,
    /// Calls made (engine futures polled at least once).
    pub calls: u64,
    /// Tool bodies started.
    pub executions: u64,
    /// Side effects performed.
    pub effects: u64,
    /// Side effects while a recorded result of the same key lived.
    pub duplicates: u64,
    /// Bodies of one key started while another was alive.
    pub overlaps: u64,
    /// `Ok`/recorded `Err` results seen that were not the first result.
    pub wrong_results: u64,
    /// In-progress records nobody runs, after the settle.
    pub orphans: u64,
    /// In-progress records left after a store fault that documents them (freed at lease
    /// expiry).
    pub excused_claims: u64,
    /// Calls that did not end within the hang bound.
    pub hangs: u64,
    /// Panics other than the tool's own.
    pub panics: u64,
    /// Calls without exactly one outcome event.
    pub outcome_errors: u64,
    /// Keys run more often than their budget allows between two recorded results.
    pub budget_overruns: u64,
    /// Refusals that said something untrue at that moment: "stuck" (budget exhausted) while
    /// the key held a recorded result or its body ran; "interrupted" without such a marker.
    pub false_refusals: u64,
    /// Single-flight entries or runtime tasks left after the settle.
    pub leaks: u64,
}

impl Counts {
    /// Adds `other` to these counts.
    pub fn add(&mut self, other: &Counts) {
        self.schedules += other.schedules;
        self.calls += other.calls;
        self.executions += other.executions;
        self.effects += other.effects;
        self.duplicates += other.duplicates;
        self.overlaps += other.overlaps;
        self.wrong_results += other.wrong_results;
        self.orphans += other.orphans;
        self.excused_claims += other.excused_claims;
        self.hangs += other.hangs;
        self.panics += other.panics;
        self.outcome_errors += other.outcome_errors;
        self.budget_overruns += other.budget_overruns;
        self.false_refusals += other.false_refusals;
        self.leaks += other.leaks;
    }

    /// Invariant violations counted.
    pub fn violations(&self) -> u64 {
        self.duplicates
            + self.overlaps
            + self.wrong_results
            + self.orphans
            + self.hangs
            + self.panics
            + self.outcome_errors
            + self.budget_overruns
            + self.false_refusals
            + self.leaks
    }

    /// The quotable summary line of a mode.
    pub fn summary(&self, mode: &str) -> String {
        format!(
            "fault-suite {mode}: schedules={} calls={} executions={} effects={} duplicates={} \
             overlaps={} wrong_results={} orphans={} hangs={} panics={} outcome_errors={} \
             budget_overruns={} false_refusals={} leaks={} (claims left by documented store \
             faults: {})",
            self.schedules,
            self.calls,
            self.executions,
            self.effects,
            self.duplicates,
            self.overlaps,
            self.wrong_results,
            self.orphans,
            self.hangs,
            self.panics,
            self.outcome_errors,
            self.budget_overruns,
            self.false_refusals,
            self.leaks,
            self.excused_claims,
        )
    }
}

#[derive(Default)]
struct State {
    next_exec: u64,
    alive: HashMap<Key, usize>,
    starts: HashMap<Key, u32>,
    /// Bodies of a key started since its last recorded result (the store's attempt count is
    /// at least this, and at most the budget).
    since_record: HashMap<Key, u32>,
    /// The per-key budget, if checked.
    limit: Option<u32>,
    finishes: HashMap<Key, Vec<Finish>>,
    completions: HashMap<Key, Vec<Completion>>,
    counts: Counts,
    problems: Vec<String>,
}

/// Shared by the bodies, the callers and the observing store of one schedule.
pub struct Ledger {
    state: Mutex<State>,
    clock: Arc<dyn Clock>,
}

/// Keeps a body counted as alive until it is dropped (finished, stopped or cancelled).
pub struct Alive {
    ledger: Arc<Ledger>,
    key: Key,
}

impl Drop for Alive {
    fn drop(&mut self) {
        if let Some(n) = self.ledger.lock().alive.get_mut(&self.key) {
            *n = n.saturating_sub(1);
        }
    }
}

impl Ledger {
    /// An empty ledger reading time from the store's clock.
    pub fn new(clock: Arc<dyn Clock>) -> Arc<Self> {
        Arc::new(Ledger {
            state: Mutex::default(),
            clock,
        })
    }

    /// Checks that no key's body starts more than `limit` times between two recorded results.
    pub fn with_budget(self: Arc<Self>, limit: u32) -> Arc<Self> {
        self.lock().limit = Some(limit);
        self
    }

    fn lock(&self) -> MutexGuard<'_, State> {
        self.state
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
    }

    /// The store clock's reading.
    pub fn now(&self) -> u64 {
        self.clock.now_ms()
    }

    /// A body of `key` starts: its execution id, and its liveness guard.
    pub fn start(self: &Arc<Self>, key: Key) -> (u64, Alive) {
        let mut s = self.lock();
        s.next_exec += 1;
        let exec = s.next_exec;
        s.counts.executions += 1;
        *s.starts.entry(key).or_default() += 1;
        let since = s.since_record.entry(key).or_default();
        *since += 1;
        let since = *since;
        if let Some(limit) = s.limit
            && since > limit
        {
            s.counts.budget_overruns += 1;
            s.problems.push(format!(
                "budget: execution {exec} of key {} is its run {since} since its last recorded \
                 result, over the limit of {limit}",
                key.short()
            ));
        }
        let alive = s.alive.entry(key).or_default();
        *alive += 1;
        if *alive > 1 {
            s.counts.overlaps += 1;
            let n = s.alive[&key];
            s.problems.push(format!(
                "overlap: execution {exec} of key {} started while {} other(s) ran",
                key.short(),
                n - 1
            ));
        }
        let alive = Alive {
            ledger: Arc::clone(self),
            key,
        };
        (exec, alive)
    }

    /// Execution `exec` performs its side effect.
    pub fn effect(&self, key: Key, exec: u64) {
        let now = self.now();
        let mut s = self.lock();
        s.counts.effects += 1;
        let finished = s.finishes.get(&key).and_then(|f| {
            f.iter()
                .find(|f| f.val.exec != exec && f.at <= now && now < f.at + f.ttl)
                .copied()
        });
        let recorded = s
            .completions
            .get(&key)
            .and_then(|c| c.iter().find(|c| c.at <= now && now < c.expires).cloned());
        if finished.is_some() || recorded.is_some() {
            s.counts.duplicates += 1;
            s.problems.push(format!(
                "duplicate: execution {exec} of key {} performed its side effect at {now} ms \
                 after {finished:?} finished / while {recorded:?} was recorded",
                key.short(),
            ));
        }
    }

    /// Execution `exec` returned a result the engine records (`Ok`, or `Err` of a tool that
    /// caches errors), to be kept `ttl`.
    pub fn finish(&self, key: Key, val: Val, ttl: Duration) {
        let at = self.now();
        let ttl = ms(ttl);
        self.lock()
            .finishes
            .entry(key)
            .or_default()
            .push(Finish { val, at, ttl });
    }

    /// The store accepted `complete` under `token` with `bytes` for `ttl`.
    pub fn completed(&self, key: Key, token: LeaseToken, bytes: &[u8], ttl: Duration) {
        let at = self.now();
        let mut s = self.lock();
        let list = s.completions.entry(key).or_default();
        if list.iter().any(|c| c.token == token) {
            return; // a repeated complete of the same claim changes nothing
        }
        s.since_record.insert(key, 0);
        let list = s.completions.entry(key).or_default();
        list.push(Completion {
            token,
            content: decode(bytes),
            at,
            expires: at + ms(ttl),
        });
    }

    /// A caller of `key` was answered with `val` (an `Ok`, or a recorded tool `Err`).
    pub fn answered(&self, key: Key, val: Val) {
        let now = self.now();
        let mut s = self.lock();
        let first_finish = s.finishes.get(&key).and_then(|f| {
            f.iter()
                .find(|f| f.at <= now && now < f.at + f.ttl)
                .map(|f| f.val)
        });
        let recorded = s.completions.get_mut(&key).and_then(|c| {
            c.iter_mut()
                .find(|c| c.at <= now && now < c.expires)
                .map(|c| {
                    if let Content::Opaque(first @ None) = &mut c.content {
                        *first = Some(val);
                    }
                    c.content
                })
        });
        let wrong = first_finish.is_some_and(|f| f != val)
            || match recorded {
                Some(Content::Value(v) | Content::Opaque(Some(v))) => v != val,
                Some(Content::Marker) => true,
                Some(Content::Opaque(None)) | None => false,
            };
        if wrong {
            s.counts.wrong_results += 1;
            s.problems.push(format!(
                "wrong result: a caller of key {} got {val:?} at {now} ms; first finished \
                 {first_finish:?}, recorded {recorded:?}",
                key.short()
            ));
        }
    }

    /// A caller of `key` was refused with the idem error `name` (its variant): the refusal must
    /// be true at this moment.
    pub fn refused(&self, key: Key, name: &str) {
        let now = self.now();
        let mut s = self.lock();
        let live = |s: &State| -> Vec<Content> {
            s.completions
                .get(&key)
                .map(|c| {
                    c.iter()
                        .filter(|c| c.at <= now && now < c.expires)
                        .map(|c| c.content)
                        .collect()
                })
                .unwrap_or_default()
        };
        let untrue = match name {
            "BudgetExhausted" => {
                let recorded = !live(&s).is_empty();
                let running = s.alive.get(&key).copied().unwrap_or(0) > 0;
                (recorded || running)
                    .then(|| format!("\"stuck\" while recorded: {recorded}, running: {running}"))
            }
            "Interrupted" | "NotReplayable" => {
                let marked = live(&s).contains(&Content::Marker);
                (!marked).then(|| format!("{name} without a live marker"))
            }
            _ => None,
        };
        if let Some(why) = untrue {
            s.counts.false_refusals += 1;
            s.problems.push(format!(
                "false refusal: a caller of key {} was told {why} at {now} ms",
                key.short()
            ));
        }
    }

    /// Whether any execution finished with a recorded result.
    pub fn finished_any(&self) -> bool {
        self.lock().finishes.values().any(|f| !f.is_empty())
    }

    /// How many bodies of `key` started.
    pub fn starts(&self, key: &Key) -> u32 {
        self.lock().starts.get(key).copied().unwrap_or(0)
    }

    /// Records a violation found after the schedule ran.
    pub fn problem(&self, bump: impl FnOnce(&mut Counts), message: String) {
        let mut s = self.lock();
        bump(&mut s.counts);
        s.problems.push(message);
    }

    /// Changes the counts without a violation.
    pub fn count(&self, bump: impl FnOnce(&mut Counts)) {
        bump(&mut self.lock().counts);
    }

    /// The counts and the violations found.
    pub fn verdict(&self) -> (Counts, Vec<String>) {
        let s = self.lock();
        (s.counts, s.problems.clone())
    }
}

/// What a record holds: a marker (as `replay::kind` tells), a value read from a JSON
/// envelope (`{"ok":N}`, `{"err":{"Tool":N}}`) if it is one, else a value learnt later.
fn decode(bytes: &[u8]) -> Content {
    use idem_tools_runtime::replay::{RecordKind, kind};
    if let Ok(RecordKind::Interrupted | RecordKind::NotReplayable { .. }) = kind(bytes) {
        return Content::Marker;
    }
    let Ok(json) = serde_json::from_slice::<serde_json::Value>(bytes) else {
        return Content::Opaque(None);
    };
    if let Some(exec) = json.get("ok").and_then(serde_json::Value::as_u64) {
        return Content::Value(Val { exec, ok: true });
    }
    if let Some(exec) = json
        .get("err")
        .and_then(|e| e.get("Tool"))
        .and_then(serde_json::Value::as_u64)
    {
        return Content::Value(Val { exec, ok: false });
    }
    if json.get("interrupted").is_some() || json.get("unreplayable").is_some() {
        return Content::Marker;
    }
    Content::Opaque(None)
}

fn ms(d: Duration) -> u64 {
    u64::try_from(d.as_millis()).unwrap_or(u64::MAX)
}

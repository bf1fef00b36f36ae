//! The ledger: what tool bodies, callers and the store did, checked against the
//! invariants that hold at a single moment (no overlap, no duplicate side effect, every `Ok` is
//! the first result).

use std::collections::{HashMap, HashSet};
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
    /// Its place in the order of the ledger's events (times may tie in virtual time).
    seq: u64,
}

/// A completion the store accepted.
#[derive(Debug, Clone)]
struct Completion {
    /// Its place in the order of the ledger's events.
    seq: u64,
    token: LeaseToken,
    /// What the record holds, as far as the harness can read it.
    content: Content,
    /// When the `complete` was sent: a network store may apply it (and other callers read it)
    /// before its answer comes back.
    sent: u64,
    /// When its answer came back.
    at: u64,
    expires: u64,
}

/// What a recorded result holds: read from the record (see [`decode`]), or, for bytes the
/// harness cannot read, learnt from the first caller answered while the record lives.
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
    /// Results that could not be recorded because the store's injected faults took their
    /// claim's lease (renewals that failed, hung or came late): the documented limit "a lost
    /// lease between the side effect and recording it", so a later execution of the key is
    /// not a duplicate.
    pub excused_records: u64,
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
        self.excused_records += other.excused_records;
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
             faults: {}; results a lease lost to store faults left unrecorded: {})",
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
            self.excused_records,
        )
    }
}

#[derive(Default)]
struct State {
    next_exec: u64,
    alive: HashMap<Key, usize>,
    /// Since when a body of the key has been alive without a pause (while `alive` is above 0).
    alive_since: HashMap<Key, u64>,
    starts: HashMap<Key, u32>,
    /// Bodies of a key started since its last recorded result (the store's attempt count is
    /// at least this, and at most the budget).
    since_record: HashMap<Key, u32>,
    /// The per-key budget, if checked.
    limit: Option<u32>,
    /// The cap of new actions per tool and turn, if checked.
    actions: Option<u32>,
    /// The keys whose bodies started, by turn and tool: each was a new action of its tool in
    /// its turn at least once, so there are never more than the cap.
    started_keys: HashMap<String, HashSet<Key>>,
    finishes: HashMap<Key, Vec<Finish>>,
    /// Side effects (key, execution, when) and answers (key, value, when), checked by
    /// [`settle`].
    effects: Vec<(Key, u64, u64, u64)>,
    answers: Vec<(Key, Val, u64, u64)>,
    /// Callers told "interrupted" or "not replayable" (key, the error's name, called, when),
    /// checked by [`settle`]: the marker they read may be one whose `complete` has not
    /// answered yet.
    marked_refusals: Vec<(Key, String, u64, u64)>,
    /// The last event's place in their order.
    seq: u64,
    /// Claims whose renewals met a store fault (failed, hung, or answered late).
    troubled_leases: HashSet<LeaseToken>,
    /// Renewals sent and not answered yet: their claim, and when they were sent.
    pending_renewals: HashMap<u64, (LeaseToken, u64)>,
    next_renewal: u64,
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
        let mut s = self.ledger.lock();
        if let Some(n) = s.alive.get_mut(&self.key) {
            *n = n.saturating_sub(1);
            if *n == 0 {
                s.alive_since.remove(&self.key);
            }
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

    /// Checks that no tool's bodies start for more keys in a turn than `cap` new actions allow.
    pub fn with_actions_per_tool(self: Arc<Self>, cap: u32) -> Arc<Self> {
        self.lock().actions = Some(cap);
        self
    }

    /// A body of `key` started, of the tool and turn `group` names: its key is one of the
    /// group's actions (the store counted it as a new action when it was first claimed).
    pub fn started_in(&self, key: Key, group: String) {
        let mut s = self.lock();
        let Some(cap) = s.actions else {
            return;
        };
        let keys = s.started_keys.entry(group.clone()).or_default();
        keys.insert(key);
        let n = keys.len();
        if n > cap as usize {
            s.counts.budget_overruns += 1;
            s.problems.push(format!(
                "budget: {group} started bodies for {n} keys, more new actions than its cap \
                 of {cap}"
            ));
        }
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
        let now = self.now();
        let mut s = self.lock();
        s.alive_since.entry(key).or_insert(now);
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

    /// Execution `exec` performs its side effect (checked when the run is over, see
    /// [`settle`]).
    pub fn effect(&self, key: Key, exec: u64) {
        let now = self.now();
        let mut s = self.lock();
        s.counts.effects += 1;
        s.seq += 1;
        let seq = s.seq;
        s.effects.push((key, exec, now, seq));
    }

    /// Execution `exec` returned a result the engine records (`Ok`, or `Err` of a tool that
    /// caches errors), to be kept `ttl`.
    pub fn finish(&self, key: Key, val: Val, ttl: Duration) {
        let at = self.now();
        let ttl = ms(ttl);
        let mut s = self.lock();
        s.seq += 1;
        let seq = s.seq;
        s.finishes
            .entry(key)
            .or_default()
            .push(Finish { val, at, ttl, seq });
    }

    /// The store accepted `complete` under `token` with `bytes` for `ttl`; it was sent at
    /// `sent`.
    pub fn completed(&self, key: Key, token: LeaseToken, bytes: &[u8], ttl: Duration, sent: u64) {
        let at = self.now();
        let mut s = self.lock();
        let list = s.completions.entry(key).or_default();
        if list.iter().any(|c| c.token == token) {
            return; // a repeated complete of the same claim changes nothing
        }
        s.since_record.insert(key, 0);
        s.seq += 1;
        let seq = s.seq;
        let list = s.completions.entry(key).or_default();
        list.push(Completion {
            seq,
            token,
            content: decode(bytes),
            sent,
            at,
            expires: at + ms(ttl),
        });
    }

    /// A renewal of the claim `token` is sent: its id, for [`renewal_ended`](Self::renewal_ended).
    pub fn renewal_sent(&self, token: LeaseToken) -> u64 {
        let now = self.now();
        let mut s = self.lock();
        s.next_renewal += 1;
        let id = s.next_renewal;
        s.pending_renewals.insert(id, (token, now));
        id
    }

    /// Renewal `id` was answered (`clean`: at once, and not with a store error) or dropped
    /// unanswered.
    pub fn renewal_ended(&self, id: u64, clean: bool) {
        let now = self.now();
        let mut s = self.lock();
        if let Some((token, sent)) = s.pending_renewals.remove(&id)
            && (!clean || now > sent)
        {
            s.troubled_leases.insert(token);
        }
    }

    /// The store refused `complete` of `bytes` under `token`: the claim's lease had ended. If
    /// the store's faults took that lease (a renewal of it failed, answered late, or is still
    /// unanswered), the result is
    /// documented as unrecorded and no longer protects the key; otherwise the engine let a
    /// lease lapse on its own, and a later execution still counts as a duplicate.
    pub fn lease_lost(&self, key: Key, token: LeaseToken, bytes: &[u8]) {
        let now = self.now();
        let mut s = self.lock();
        // Troubled: a renewal failed or came late, or one is still waiting for its answer.
        let waiting = s
            .pending_renewals
            .values()
            .any(|&(pending, sent)| pending == token && now > sent);
        if !waiting && !s.troubled_leases.contains(&token) {
            return;
        }
        let Content::Value(val) = decode(bytes) else {
            return;
        };
        if let Some(finishes) = s.finishes.get_mut(&key) {
            let before = finishes.len();
            finishes.retain(|f| f.val != val);
            if finishes.len() < before {
                s.counts.excused_records += 1;
            }
        }
    }

    /// A caller of `key` was answered with `val` (an `Ok`, or a recorded tool `Err`; checked
    /// when the run is over, see [`settle`]).
    pub fn answered(&self, key: Key, val: Val) {
        let now = self.now();
        let mut s = self.lock();
        s.seq += 1;
        let seq = s.seq;
        s.answers.push((key, val, now, seq));
    }

    /// A caller of `key`, which called at `called`, was refused with the idem error `name` (its
    /// variant): each must be true at some moment of the call, when the store made the answer
    /// ("interrupted" and "not replayable" are checked after the run: the marker may have
    /// expired while the answer travelled).
    pub fn refused(&self, key: Key, name: &str, called: u64) {
        let now = self.now();
        let mut s = self.lock();
        let untrue = match name {
            // "Stuck" and "this new action was not started": untrue for a key that holds a
            // recorded result or runs — all the time from the call to its answer, since the
            // store made the answer at some moment in between (a holder whose lease ran out
            // may record just after the store read the key as free).
            "BudgetExhausted" | "ToolBudgetExhausted" | "TurnBudgetExhausted" => {
                let recorded = s
                    .completions
                    .get(&key)
                    .is_some_and(|c| c.iter().any(|c| c.at <= called && now < c.expires));
                let running = s.alive_since.get(&key).is_some_and(|&at| at <= called);
                (recorded || running)
                    .then(|| format!("\"stuck\" while recorded: {recorded}, running: {running}"))
            }
            "Interrupted" | "NotReplayable" => {
                s.marked_refusals.push((key, name.to_owned(), called, now));
                None
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
        let mut s = self.lock();
        settle(&mut s);
        (s.counts, s.problems.clone())
    }
}

/// Checks the side effects and answers of the run against the results finished and recorded
/// at their moments. It runs once the run is over, because a result may be found unrecorded
/// only after a later execution started: the late `complete` whose lease the store's faults
/// took is refused after the store gave the key to another caller.
fn settle(s: &mut State) {
    for (key, name, called, now) in std::mem::take(&mut s.marked_refusals) {
        // A marker that may have been live at some moment of the call: sent by then (a store
        // may apply a `complete` before its answer arrives) and not expired when it began.
        let marked = s.completions.get(&key).is_some_and(|c| {
            c.iter()
                .any(|c| c.content == Content::Marker && c.sent <= now && called < c.expires)
        });
        if !marked {
            s.counts.false_refusals += 1;
            s.problems.push(format!(
                "false refusal: a caller of key {} was told {name} without a live marker at \
                 {now} ms",
                key.short()
            ));
        }
    }
    for (key, exec, now, seq) in std::mem::take(&mut s.effects) {
        let finished = s.finishes.get(&key).and_then(|f| {
            f.iter()
                .find(|f| f.seq < seq && f.val.exec != exec && f.at <= now && now < f.at + f.ttl)
                .copied()
        });
        let recorded = s.completions.get(&key).and_then(|c| {
            c.iter()
                .find(|c| c.seq < seq && c.at <= now && now < c.expires)
                .cloned()
        });
        if finished.is_some() || recorded.is_some() {
            s.counts.duplicates += 1;
            s.problems.push(format!(
                "duplicate: execution {exec} of key {} performed its side effect at {now} ms \
                 after {finished:?} finished / while {recorded:?} was recorded",
                key.short(),
            ));
        }
    }
    for (key, val, now, seq) in std::mem::take(&mut s.answers) {
        let first_finish = s.finishes.get(&key).and_then(|f| {
            f.iter()
                .find(|f| f.seq < seq && f.at <= now && now < f.at + f.ttl)
                .map(|f| f.val)
        });
        let recorded = s.completions.get_mut(&key).and_then(|c| {
            c.iter_mut()
                .find(|c| c.seq < seq && c.at <= now && now < c.expires)
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
}

/// What a record holds: a marker (as `replay::kind` tells), or the harness tools' result
/// (`Ok(exec)` or `Err(ToolError::Tool(exec))`) read back through the record format.
fn decode(bytes: &[u8]) -> Content {
    use idem_tools_runtime::replay::{RecordKind, bench, kind, render};
    match kind(bytes) {
        Ok(RecordKind::Interrupted | RecordKind::NotReplayable { .. }) => Content::Marker,
        Ok(RecordKind::Ok) => match bench::decode::<u64>(bytes) {
            Ok(exec) => Content::Value(Val { exec, ok: true }),
            Err(_) => Content::Opaque(None),
        },
        // `Err({"Tool": 7})`: the error's serde form, rendered.
        Ok(RecordKind::Err) => {
            let shown = render(bytes).unwrap_or_default();
            let digits: String = shown
                .split("\"Tool\"")
                .nth(1)
                .unwrap_or_default()
                .chars()
                .skip_while(|c| !c.is_ascii_digit())
                .take_while(char::is_ascii_digit)
                .collect();
            match digits.parse() {
                Ok(exec) => Content::Value(Val { exec, ok: false }),
                Err(_) => Content::Opaque(None),
            }
        }
        Err(_) => Content::Opaque(None),
    }
}

fn ms(d: Duration) -> u64 {
    u64::try_from(d.as_millis()).unwrap_or(u64::MAX)
}

/// The excuse for a result left unrecorded holds only for a lease whose renewals met the
/// store's faults: one the engine let lapse on its own still makes the next execution a
/// duplicate.
#[test]
fn a_lost_lease_excuses_an_unrecorded_result_only_after_troubled_renewals() {
    use idem_tools_runtime::clock::ManualClock;
    use idem_tools_runtime::replay::bench;

    let run = |troubled: bool| {
        let clock = Arc::new(ManualClock::new(1_000));
        let ledger = Ledger::new(clock.clone());
        let key = Key::from_bytes([1; 32]);
        let token = LeaseToken::generate();
        let (first, alive) = ledger.start(key);
        let renewal = ledger.renewal_sent(token);
        if troubled {
            clock.advance(Duration::from_millis(5)); // answered late
        }
        ledger.renewal_ended(renewal, true);
        clock.advance(Duration::from_millis(5));
        ledger.effect(key, first);
        ledger.finish(
            key,
            Val {
                exec: first,
                ok: true,
            },
            Duration::from_secs(60),
        );
        drop(alive);
        let (second, _alive) = ledger.start(key);
        ledger.effect(key, second);
        let mut bytes = Vec::new();
        bench::encode(&first, &mut bytes).expect("encode");
        ledger.lease_lost(key, token, &bytes);
        ledger.verdict().0
    };
    let excused = run(true);
    assert_eq!((excused.duplicates, excused.excused_records), (0, 1));
    let lapsed = run(false);
    assert_eq!((lapsed.duplicates, lapsed.excused_records), (1, 0));
}

/// "Interrupted" is a true refusal when a marker may have been live at some moment of the call:
/// its `complete` sent by the time the caller was answered (a network store applies it before
/// its answer comes back), even if that answer arrives after the refusal; it is false without
/// one, or with one sent only afterwards.
#[test]
fn an_interrupted_refusal_needs_a_marker_sent_before_it() {
    use idem_tools_runtime::clock::ManualClock;

    // A refusal at 1 010 ms of a call made at 1 000 ms, and a marker sent at `sent` whose
    // answer came back at 1 020 ms.
    let run = |sent: Option<u64>| {
        let clock = Arc::new(ManualClock::new(1_000));
        let ledger = Ledger::new(clock.clone());
        let key = Key::from_bytes([2; 32]);
        clock.advance(Duration::from_millis(10));
        ledger.refused(key, "Interrupted", 1_000);
        clock.advance(Duration::from_millis(10));
        if let Some(sent) = sent {
            let mut s = ledger.lock();
            s.seq += 1;
            let seq = s.seq;
            s.completions.entry(key).or_default().push(Completion {
                seq,
                token: LeaseToken::generate(),
                content: Content::Marker,
                sent,
                at: 1_020,
                expires: 1_020 + 60_000,
            });
        }
        ledger.verdict().0.false_refusals
    };
    assert_eq!(
        run(Some(1_005)),
        0,
        "applied before the refusal, answered after it"
    );
    assert_eq!(run(None), 1, "no marker at all");
    assert_eq!(run(Some(1_015)), 1, "a marker sent only after the refusal");
}

/// The ledger counts a tool's keys per turn against the cap of new actions: a second key of a
/// tool with a cap of 1 is an overrun, a second start of the same key (a retry) is not, nor is
/// another tool's or another turn's key.
#[test]
fn a_tools_new_actions_past_its_cap_are_overruns() {
    use idem_tools_runtime::clock::ManualClock;

    let ledger = Ledger::new(Arc::new(ManualClock::new(1_000))).with_actions_per_tool(1);
    let (a, b) = (Key::from_bytes([1; 32]), Key::from_bytes([2; 32]));
    ledger.started_in(a, "charge of t1".into());
    ledger.started_in(a, "charge of t1".into());
    ledger.started_in(b, "refund of t1".into());
    ledger.started_in(b, "charge of t2".into());
    assert_eq!(ledger.verdict().0.budget_overruns, 0);
    ledger.started_in(b, "charge of t1".into());
    assert_eq!(ledger.verdict().0.budget_overruns, 1);
}

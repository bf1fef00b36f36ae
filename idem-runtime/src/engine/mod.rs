//! The engine every `#[idempotent]` tool runs through: key → budget → store → execute or replay.

mod claimed;
mod held;
mod lease;
mod report;
pub mod telemetry;

use std::future::Future;
use std::sync::Arc;
use std::time::Duration;

use serde::Serialize;
use serde::de::DeserializeOwned;
use tokio::time::Instant;

use crate::Error;
use crate::flight::{self, Leader, Role, Shared, Waited};
use crate::key::{Fingerprint, Key};
use crate::replay::{OkAndErr, OkOnly, ResultCodec};
use crate::stats::Outcome;
use crate::store::{
    Begin, BeginRequest, Exhausted, FirstResult, KeyCounter, Lease, LeaseToken, Store, StoreFuture,
    default_store,
};
use crate::tool::ToolInfo;
use crate::turn::Turn;

pub use held::current_key;

use claimed::Claimed;
use lease::PendingClaim;
use report::Reporter;

/// Logs and counts a call refused before it could reach the engine (outside a turn, an
/// argument that does not encode), so that every call yields exactly one outcome; returns the
/// error for the caller.
pub fn refuse(tool: &'static ToolInfo, error: Error) -> Error {
    report::refused(tool, &error);
    error
}

/// How many keys are in flight in this process's single-flight registry right now (for soak
/// tests and metrics: it returns to zero when no call runs).
pub fn flights_registered() -> usize {
    flight::registered()
}

/// One call of a state-changing tool, ready for [`execute`].
#[derive(Clone)]
pub struct Call {
    tool: &'static ToolInfo,
    turn: Turn,
    key: Key,
    fingerprint: Fingerprint,
    store: Option<Arc<dyn Store>>,
    counter: KeyCounter,
}

impl Call {
    /// A call of `tool` in `turn` with the key and fingerprint of its arguments.
    pub fn new(tool: &'static ToolInfo, turn: &Turn, key: Key, fingerprint: Fingerprint) -> Self {
        Self::in_turn(tool, turn.clone(), key, fingerprint)
    }

    /// [`Call::new`], taking the turn by value.
    pub fn in_turn(
        tool: &'static ToolInfo,
        turn: Turn,
        key: Key,
        fingerprint: Fingerprint,
    ) -> Self {
        Call {
            tool,
            turn,
            key,
            fingerprint,
            store: None,
            counter: KeyCounter::TurnAndKey,
        }
    }

    /// Declares that the key was derived from the turn id ([`ArgsDigest::finish`] without a
    /// caller key), so it stands for one (turn, key) pair and the store counts the call's
    /// attempts with the key itself ([`KeyCounter::Key`]) instead of hashing the pair.
    ///
    /// [`ArgsDigest::finish`]: crate::key::ArgsDigest::finish
    pub fn counted_by_key(mut self) -> Self {
        self.counter = KeyCounter::Key;
        self
    }

    /// Uses `store` instead of the turn's or the process default.
    pub fn with_store(mut self, store: &Arc<dyn Store>) -> Self {
        self.store = Some(Arc::clone(store));
        self
    }

    /// The call's key.
    pub fn key(&self) -> Key {
        self.key
    }

    /// The store this call uses: its own, else its turn's, else the process default.
    fn store(&self) -> &Arc<dyn Store> {
        match (&self.store, self.turn.store()) {
            (Some(store), _) | (None, Some(store)) => store,
            (None, None) => default_store(),
        }
    }

    /// The claim this call makes on its key with `token`.
    fn lease(&self, token: LeaseToken) -> Lease {
        Lease {
            namespace: Arc::clone(self.turn.namespace_arc()),
            key: self.key,
            token,
        }
    }
}

/// Runs `tool_future` at most once per key: executes it the first time, replays its recorded
/// result afterwards, and makes concurrent duplicates wait for the first.
///
/// In order:
/// 1. a task that already holds the key (a tool calling itself, directly or through other
///    tools) gets [`Error::Reentrant`];
/// 2. an identical call already running in this process is joined (single-flight), for at
///    most the turn's in-flight wait;
/// 3. the store charges the turn's budget and claims the key, in one atomic step:
///    - claimed: the tool runs (its lease renewed while it runs); `Ok` is recorded, `Err`
///      releases the key so a retry runs again. If the caller drops the call after the tool
///      started, the key is kept as *interrupted* (retries get [`Error::Interrupted`]) unless
///      the tool sets `release_on_cancel`; a panic releases the key and propagates;
///    - completed: the first result is decoded and returned without running the tool;
///    - in flight elsewhere: polled with backoff up to the turn's wait bound, then
///      [`Error::InFlight`];
///    - recorded under other arguments: [`Error::PayloadMismatch`];
///    - over budget: [`Error::AlreadySucceeded`] if the key's action is recorded, else
///      [`Error::BudgetExhausted`] / [`Error::TurnBudgetExhausted`].
///
/// The tool future is not polled unless the call claims the key. To keep running when the
/// caller goes away, use [`execute_detached`]. Needs a Tokio runtime with the time driver.
///
/// # Errors
/// The tool's own errors, and any [`Error`] above converted with `E: From<Error>`.
pub async fn execute<T, E, F>(call: Call, tool_future: F) -> Result<T, E>
where
    T: Serialize + DeserializeOwned,
    E: From<Error>,
    F: Future<Output = Result<T, E>>,
{
    let span = telemetry::span(&call);
    let run = run::<OkOnly, T, E, _, _>(call, |claimed| {
        claimed.attached::<OkOnly, T, E, F>(tool_future)
    });
    telemetry::traced(span, run).await
}

/// Like [`execute`], but an `Err` result is recorded and replayed too (Stripe's behaviour), so
/// a failed call is not retried until its record expires.
///
/// # Errors
/// As [`execute`].
pub async fn execute_caching_errors<T, E, F>(call: Call, tool_future: F) -> Result<T, E>
where
    T: Serialize + DeserializeOwned,
    E: From<Error> + Serialize + DeserializeOwned,
    F: Future<Output = Result<T, E>>,
{
    let span = telemetry::span(&call);
    let run = run::<OkAndErr, T, E, _, _>(call, |claimed| {
        claimed.attached::<OkAndErr, T, E, F>(tool_future)
    });
    telemetry::traced(span, run).await
}

/// Like [`execute`], but the tool runs in its own task: if the caller goes away (a timeout, a
/// `select!`, an MCP cancellation) it still finishes and records its result, and a retry in
/// the meantime joins it. One execution, and every caller gets the first result.
///
/// The turn, the held keys and the current `tracing` span follow the tool into its task. A
/// panic in the tool propagates to the caller, if it still waits.
///
/// # Errors
/// As [`execute`].
pub async fn execute_detached<T, E, F>(call: Call, tool_future: F) -> Result<T, E>
where
    T: Serialize + DeserializeOwned + Send + 'static,
    E: From<Error> + Send + 'static,
    F: Future<Output = Result<T, E>> + Send + 'static,
{
    let span = telemetry::span(&call);
    let run = run::<OkOnly, T, E, _, _>(call, |claimed| {
        claimed.detached::<OkOnly, T, E, F>(tool_future)
    });
    telemetry::traced(span, run).await
}

/// [`execute_detached`] with `Err` results recorded and replayed too.
///
/// # Errors
/// As [`execute`].
pub async fn execute_detached_caching_errors<T, E, F>(call: Call, tool_future: F) -> Result<T, E>
where
    T: Serialize + DeserializeOwned + Send + 'static,
    E: From<Error> + Serialize + DeserializeOwned + Send + 'static,
    F: Future<Output = Result<T, E>> + Send + 'static,
{
    let span = telemetry::span(&call);
    let run = run::<OkAndErr, T, E, _, _>(call, |claimed| {
        claimed.detached::<OkAndErr, T, E, F>(tool_future)
    });
    telemetry::traced(span, run).await
}

async fn run<C, T, E, S, R>(call: Call, start: S) -> Result<T, E>
where
    C: ResultCodec<T, E>,
    E: From<Error>,
    S: FnOnce(Claimed) -> R,
    R: Future<Output = Result<T, E>>,
{
    let report = Reporter::new(call);
    let call = report.call();
    if held::holds(&call.key) {
        // Single-flight would make this call wait for the one it runs inside of.
        let error = Error::Reentrant {
            tool: call.tool.name,
            key: call.key.short(),
        };
        return report.fail(Outcome::Reentrant, error);
    }
    let lease = match lease::duration(call.tool) {
        Ok(lease) => lease,
        Err(error) => return report.fail(Outcome::ConfigError, error),
    };
    // The one clock read of a replay: when the wait for other callers starts, and a
    // conservative "sent" time for the first request's lease.
    let mut sent = Instant::now();
    let deadline = sent + call.turn.in_flight_wait();
    let store_id = Arc::as_ptr(call.store()).cast::<()>() as usize;
    let mut charged = false;
    loop {
        let call = report.call();
        let leader = match flight::join(store_id, call.key) {
            Role::Leader(leader) => leader,
            Role::Done(shared) => return joined::<C, T, E>(report, &shared),
            Role::Follower(follower) => match follower.wait(deadline).await {
                Waited::Done(shared) => return joined::<C, T, E>(report, &shared),
                Waited::Abandoned => {
                    sent = Instant::now();
                    continue; // the leader recorded nothing: maybe lead now
                }
                Waited::TimedOut => return in_flight(report, deadline),
            },
        };
        let mut backoff = Duration::from_millis(5);
        loop {
            let call = report.call();
            let store = call.store();
            let token = LeaseToken::generate();
            let request = BeginRequest {
                namespace: call.turn.namespace(),
                key: &call.key,
                tool: call.tool.name,
                fingerprint: &call.fingerprint,
                lease,
                token,
                // Only the first request of a call is an attempt; polling again is not.
                charge: (!std::mem::replace(&mut charged, true))
                    .then(|| call.turn.charge(call.tool.budget, call.counter)),
            };
            let begun = match store.begin(request).into_ready() {
                // Answered at once (an in-memory store): no timer, nothing to give back.
                Ok(answer) => answer,
                Err(pending) => awaited(store, call.lease(token), pending, lease).await,
            };
            let begun = match begun {
                Ok(begun) => begun,
                Err(error) => {
                    // Gives back a claim that may have landed before the error.
                    lease::release_in_background(Arc::clone(store), call.lease(token));
                    return report.fail(Outcome::StoreError, error);
                }
            };
            match begun {
                Begin::Claimed if Instant::now() < sent + lease => {
                    let (store, claimed_lease) = (Arc::clone(store), call.lease(token));
                    let claimed = Claimed::new(report, store, claimed_lease, lease, sent, leader);
                    // Boxed: a replay's future stays small, only an execution pays for the
                    // state of running the tool.
                    return Box::pin(start(claimed)).await;
                }
                Begin::Claimed => {
                    // The answer came after the lease it granted had run out: another caller
                    // may hold the key by now. Give the claim back and ask again.
                    lease::release_in_background(Arc::clone(store), call.lease(token));
                }
                Begin::Completed(first) => return replay::<C, T, E>(report, leader, first),
                Begin::InFlight { fingerprint } => {
                    if fingerprint != call.fingerprint {
                        return mismatch(report);
                    }
                }
                Begin::Exhausted(exhausted) => return over_budget(report, exhausted),
            }
            let now = Instant::now();
            if now >= deadline {
                return in_flight(report, deadline);
            }
            tokio::time::sleep(backoff.min(deadline - now)).await;
            backoff = (backoff * 2).min(Duration::from_millis(250));
            sent = Instant::now();
        }
    }
}

/// A `begin` the store did not answer at once, bounded by the lease it asks for (an answer
/// after that is of no use). If the caller drops it meanwhile, the claim it may have made is
/// given back; after an error, the caller gives it back.
async fn awaited(
    store: &Arc<dyn Store>,
    claim: Lease,
    begin: StoreFuture<'_, Begin>,
    lease: Duration,
) -> Result<Begin, Error> {
    let pending = PendingClaim::new(store, claim);
    let answer = tokio::time::timeout(lease, begin).await;
    pending.answered();
    answer.unwrap_or_else(|_| Err(Error::store("begin", "no answer within the lease")))
}

/// A completed key: the first result, without running the tool.
fn replay<C, T, E>(mut report: Reporter, leader: Leader, first: FirstResult) -> Result<T, E>
where
    C: ResultCodec<T, E>,
    E: From<Error>,
{
    let call = report.call();
    if first.fingerprint != call.fingerprint {
        return mismatch(report);
    }
    match C::decode(call.tool.name, &call.key, &first.result) {
        Ok(result) => {
            leader.publish(|| first);
            report.report(Outcome::Replayed);
            result
        }
        Err(error) => decode_failed(report, error),
    }
}

/// The result of an identical call this one waited for.
fn joined<C, T, E>(mut report: Reporter, shared: &Shared) -> Result<T, E>
where
    C: ResultCodec<T, E>,
    E: From<Error>,
{
    let call = report.call();
    if shared.fingerprint != call.fingerprint {
        return mismatch(report);
    }
    match C::decode(call.tool.name, &call.key, &shared.result) {
        Ok(result) => {
            report.report(Outcome::Joined);
            result
        }
        Err(error) => decode_failed(report, error),
    }
}

/// A record that does not decode: corrupt, or a marker (interrupted, not replayable) that
/// answers the call with its error.
fn decode_failed<T, E: From<Error>>(report: Reporter, error: Error) -> Result<T, E> {
    let outcome = match error {
        Error::Interrupted { .. } | Error::NotReplayable { .. } => Outcome::Replayed,
        _ => Outcome::DecodeError,
    };
    report.fail(outcome, error)
}

fn mismatch<T, E: From<Error>>(report: Reporter) -> Result<T, E> {
    let call = report.call();
    let error = Error::PayloadMismatch {
        tool: call.tool.name,
        key: call.key.short(),
    };
    report.fail(Outcome::PayloadMismatch, error)
}

fn in_flight<T, E: From<Error>>(report: Reporter, deadline: Instant) -> Result<T, E> {
    let call = report.call();
    let error = Error::InFlight {
        tool: call.tool.name,
        key: call.key.short(),
        waited: call.turn.in_flight_wait() + Instant::now().saturating_duration_since(deadline),
    };
    report.fail(Outcome::InFlight, error)
}

fn over_budget<T, E: From<Error>>(report: Reporter, exhausted: Exhausted) -> Result<T, E> {
    let call = report.call();
    let (tool, key) = (call.tool.name, call.key.short());
    let (outcome, error) = match exhausted {
        Exhausted::Key {
            attempts,
            completed: true,
            ..
        } => (
            Outcome::AlreadySucceeded,
            Error::AlreadySucceeded {
                tool,
                key,
                attempts,
            },
        ),
        Exhausted::Key {
            attempts, limit, ..
        } => (
            Outcome::BudgetExhausted,
            Error::BudgetExhausted {
                tool,
                key,
                attempts,
                limit,
            },
        ),
        Exhausted::Turn { calls, limit } => (
            Outcome::BudgetExhausted,
            Error::TurnBudgetExhausted {
                tool,
                turn: call.turn.id().to_owned(),
                calls,
                limit,
            },
        ),
    };
    report.fail(outcome, error)
}

impl std::fmt::Debug for Call {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Call")
            .field("tool", &self.tool.name)
            .field("turn", &self.turn.id())
            .field("key", &self.key)
            .finish_non_exhaustive()
    }
}

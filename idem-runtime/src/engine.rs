//! The engine every `#[idempotent]` tool runs through: key → budget → store → execute or replay.

use std::future::Future;
use std::pin::{Pin, pin};
use std::sync::Arc;
use std::task::{Context, Waker};
use std::time::Duration;

use serde::Serialize;
use serde::de::DeserializeOwned;
use tokio::time::Instant;

use crate::Error;
use crate::flight::{self, Leader, Role};
use crate::key::{Fingerprint, Key};
use crate::replay::{OkAndErr, OkOnly, ResultCodec};
use crate::stats::{GLOBAL, Outcome};
use crate::store::{
    Begin, BeginRequest, DEFAULT_LEASE, DEFAULT_TTL, LeaseToken, Store, default_store,
};
use crate::tool::ToolInfo;
use crate::turn::Turn;

tokio::task_local! {
    static CURRENT_KEY: Key;
}

/// The key of the `#[idempotent]` tool running in this task, if any.
///
/// Forward it to downstream APIs that deduplicate (an `Idempotency-Key` HTTP header, a message
/// id): that closes the one window idem cannot close alone, a crash after the side effect and
/// before the result is recorded.
///
/// ```
/// # use idem_runtime::{current_key, execute, Call, ToolInfo, Turn, key::ArgsDigest};
/// # #[tokio::main(flavor = "current_thread")] async fn main() -> Result<(), idem_runtime::Error> {
/// const CHARGE: ToolInfo = ToolInfo::idempotent("charge");
/// let turn = Turn::new("turn-1");
/// let mut args = ArgsDigest::new(CHARGE.name);
/// args.arg("cents", &500)?;
/// let (key, fingerprint) = args.finish(turn.namespace(), turn.id(), CHARGE.name, CHARGE.version);
/// let header = execute(Call::new(&CHARGE, &turn, key, fingerprint), async {
///     let key = current_key().expect("inside a tool");
///     Ok::<_, idem_runtime::Error>(format!("Idempotency-Key: {key}"))
/// })
/// .await?;
/// assert_eq!(header, format!("Idempotency-Key: {key}"));
/// # Ok(()) }
/// ```
pub fn current_key() -> Option<Key> {
    CURRENT_KEY.try_with(|key| *key).ok()
}

/// One call of a state-changing tool, ready for [`execute`].
#[derive(Clone)]
pub struct Call<'a> {
    tool: &'static ToolInfo,
    turn: &'a Turn,
    key: Key,
    fingerprint: Fingerprint,
    store: Option<&'a Arc<dyn Store>>,
}

impl<'a> Call<'a> {
    /// A call of `tool` in `turn` with the key and fingerprint of its arguments.
    pub fn new(
        tool: &'static ToolInfo,
        turn: &'a Turn,
        key: Key,
        fingerprint: Fingerprint,
    ) -> Self {
        Call {
            tool,
            turn,
            key,
            fingerprint,
            store: None,
        }
    }

    /// Uses `store` instead of the turn's or the process default.
    pub fn with_store(mut self, store: &'a Arc<dyn Store>) -> Self {
        self.store = Some(store);
        self
    }

    /// The call's key.
    pub fn key(&self) -> Key {
        self.key
    }
}

/// Runs `tool_future` at most once per key: executes it the first time, replays its recorded
/// result afterwards, and makes concurrent duplicates wait for the first.
///
/// In order:
/// 1. the turn's retry budget is charged, before any store I/O ([`Error::BudgetExhausted`]);
/// 2. an identical call already running in this process is joined (single-flight);
/// 3. the store is asked to claim the key:
///    - claimed: the tool runs (its lease renewed while it runs); `Ok` is recorded, `Err`
///      releases the key so a retry runs again; if the call is dropped or the tool panics, the
///      key is released and the panic propagates;
///    - completed: the first result is decoded and returned without running the tool;
///    - in flight elsewhere: polled with backoff up to the turn's wait bound, then
///      [`Error::InFlight`];
///    - recorded under other arguments: [`Error::PayloadMismatch`].
///
/// The tool future is not polled unless the call claims the key. Needs a Tokio runtime with
/// the time driver (the default of `#[tokio::main]`).
///
/// # Errors
/// The tool's own errors, and any [`Error`] above converted with `E: From<Error>`.
pub async fn execute<T, E, F>(call: Call<'_>, tool_future: F) -> Result<T, E>
where
    T: Serialize + DeserializeOwned,
    E: From<Error>,
    F: Future<Output = Result<T, E>>,
{
    run::<OkOnly, T, E, F>(call, tool_future).await
}

/// Like [`execute`], but an `Err` result is recorded and replayed too (Stripe's behaviour), so
/// a failed call is not retried until its record expires.
///
/// # Errors
/// As [`execute`].
pub async fn execute_caching_errors<T, E, F>(call: Call<'_>, tool_future: F) -> Result<T, E>
where
    T: Serialize + DeserializeOwned,
    E: From<Error> + Serialize + DeserializeOwned,
    F: Future<Output = Result<T, E>>,
{
    run::<OkAndErr, T, E, F>(call, tool_future).await
}

/// Logs and counts the outcome of a call.
fn report(call: &Call<'_>, outcome: Outcome, attempt: u32) {
    GLOBAL.add(outcome);
    call.turn.record(outcome);
    let (tool, key, turn) = (call.tool.name, call.key.short(), call.turn.id());
    match outcome {
        Outcome::Executed | Outcome::Replayed | Outcome::Joined => tracing::info!(
            target: "idem", tool, %key, turn, attempt, outcome = outcome.as_str(), "tool call"
        ),
        _ => tracing::warn!(
            target: "idem", tool, %key, turn, attempt, outcome = outcome.as_str(), "tool call"
        ),
    }
}

async fn run<C, T, E, F>(call: Call<'_>, tool_future: F) -> Result<T, E>
where
    C: ResultCodec<T, E>,
    E: From<Error>,
    F: Future<Output = Result<T, E>>,
{
    let tool = call.tool;
    if current_key() == Some(call.key) {
        // Single-flight would make this call wait for the one it runs inside of.
        let error = Error::Reentrant {
            tool: tool.name,
            key: call.key.short(),
        };
        tracing::error!(target: "idem", tool = tool.name, key = %call.key.short(), %error);
        return Err(error.into());
    }
    let attempt = match call.turn.charge(tool.name, &call.key, tool.budget) {
        Ok(attempt) => attempt,
        Err(error) => {
            let attempt = match &error {
                Error::BudgetExhausted { attempts, .. } => *attempts,
                Error::TurnBudgetExhausted { calls, .. } => *calls,
                _ => 0,
            };
            report(&call, Outcome::BudgetExhausted, attempt);
            return Err(error.into());
        }
    };
    let store = call
        .store
        .or(call.turn.store())
        .unwrap_or_else(|| default_store())
        .clone();
    let store_id = Arc::as_ptr(&store).cast::<()>() as usize;
    let namespace = call.turn.namespace();
    let started = Instant::now();
    let fail = |outcome: Outcome, error: Error| -> Result<T, E> {
        report(&call, outcome, attempt);
        Err(error.into())
    };

    loop {
        let leader = match flight::join(store_id, call.key) {
            Role::Follower(follower) => {
                let Some(shared) = follower.wait().await else {
                    continue; // the leader recorded nothing: try again, maybe as leader
                };
                let (fingerprint, bytes) = &*shared;
                if *fingerprint != call.fingerprint {
                    return fail(Outcome::PayloadMismatch, mismatch(&call));
                }
                return match C::decode(tool.name, &call.key, bytes) {
                    Ok(result) => {
                        report(&call, Outcome::Joined, attempt);
                        result
                    }
                    Err(error) => fail(Outcome::DecodeError, error),
                };
            }
            Role::Leader(leader) => leader,
        };

        let mut backoff = Duration::from_millis(5);
        loop {
            let request = BeginRequest {
                namespace,
                key: &call.key,
                tool: tool.name,
                fingerprint: &call.fingerprint,
                lease: tool.lease.unwrap_or(DEFAULT_LEASE),
            };
            match store.begin(request).await {
                Err(error) => return fail(Outcome::StoreError, error),
                Ok(Begin::Claimed(token)) => {
                    let claim = Claim {
                        store: &store,
                        namespace,
                        key: call.key,
                        token,
                    };
                    return run_claimed::<C, T, E, F>(&call, attempt, claim, leader, tool_future)
                        .await;
                }
                Ok(Begin::Completed(record)) => {
                    if record.fingerprint != call.fingerprint {
                        return fail(Outcome::PayloadMismatch, mismatch(&call));
                    }
                    let Some(bytes) = record.result else {
                        let error = Error::CorruptRecord {
                            key: call.key.short(),
                            message: "completed without a result".to_owned(),
                        };
                        return fail(Outcome::DecodeError, error);
                    };
                    return match C::decode(tool.name, &call.key, &bytes) {
                        Ok(result) => {
                            if leader.has_followers() {
                                leader.publish(record.fingerprint, bytes);
                            }
                            report(&call, Outcome::Replayed, attempt);
                            result
                        }
                        Err(error) => fail(Outcome::DecodeError, error),
                    };
                }
                Ok(Begin::InFlight(record)) => {
                    if record.fingerprint != call.fingerprint {
                        return fail(Outcome::PayloadMismatch, mismatch(&call));
                    }
                    let waited = started.elapsed();
                    let bound = call.turn.in_flight_wait();
                    if waited >= bound {
                        let error = Error::InFlight {
                            tool: tool.name,
                            key: call.key.short(),
                            waited,
                        };
                        return fail(Outcome::InFlight, error);
                    }
                    tokio::time::sleep(backoff.min(bound - waited)).await;
                    backoff = (backoff * 2).min(Duration::from_millis(250));
                }
            }
        }
    }
}

fn mismatch(call: &Call<'_>) -> Error {
    Error::PayloadMismatch {
        tool: call.tool.name,
        key: call.key.short(),
    }
}

/// A key this call holds in the store.
struct Claim<'s> {
    store: &'s Arc<dyn Store>,
    namespace: &'s str,
    key: Key,
    token: LeaseToken,
}

async fn run_claimed<C, T, E, F>(
    call: &Call<'_>,
    attempt: u32,
    claim: Claim<'_>,
    leader: Leader,
    tool_future: F,
) -> Result<T, E>
where
    C: ResultCodec<T, E>,
    E: From<Error>,
    F: Future<Output = Result<T, E>>,
{
    let tool = call.tool;
    let lease = tool.lease.unwrap_or(DEFAULT_LEASE);
    // Declared after `leader`'s binding in the caller, so it drops first: the key is released
    // before followers are woken to try again.
    let mut guard = ClaimGuard::new(call, attempt, &claim);
    let result = CURRENT_KEY
        .scope(claim.key, with_renewal(tool_future, &claim, lease))
        .await;

    let Some(encoded) = C::encode(tool.name, &result) else {
        // An `Err` that is not recorded: give the key back so a retry runs the tool again.
        guard.disarm();
        if let Err(error) = claim
            .store
            .release(claim.namespace, &claim.key, claim.token)
            .await
        {
            tracing::warn!(target: "idem", tool = tool.name, key = %claim.key.short(), %error,
                "could not release the key; it is freed when its lease expires");
        }
        report(call, Outcome::Failed, attempt);
        return result;
    };
    let bytes = match encoded {
        Ok(bytes) => bytes,
        Err(error) => {
            // The tool ran but its result cannot be recorded: hand it back, and release the key
            // so that nobody waits on a record that will never come.
            tracing::error!(target: "idem", tool = tool.name, key = %claim.key.short(), %error,
                "result not recorded; a retry will run the tool again");
            drop(guard); // releases
            report(call, Outcome::StoreError, attempt);
            return result;
        }
    };
    guard.finished(&bytes);
    let ttl = tool.ttl.unwrap_or(DEFAULT_TTL);
    let completed = claim
        .store
        .complete(claim.namespace, &claim.key, claim.token, &bytes, ttl)
        .await;
    guard.disarm();
    match completed {
        Ok(()) => {
            if leader.has_followers() {
                leader.publish(call.fingerprint, bytes);
            }
            let outcome = if result.is_ok() {
                Outcome::Executed
            } else {
                Outcome::Failed
            };
            report(call, outcome, attempt);
        }
        Err(error) => {
            // The work is done: return its result rather than an error that would invite a
            // second execution, and say loudly that a retry is not protected.
            tracing::error!(target: "idem", tool = tool.name, key = %claim.key.short(), %error,
                "the tool ran but its result was not recorded; a retry will run it again");
            report(call, Outcome::StoreError, attempt);
        }
    }
    result
}

/// Polls the tool, renewing the lease every third of its duration while it runs.
async fn with_renewal<F: Future>(tool_future: F, claim: &Claim<'_>, lease: Duration) -> F::Output {
    let period = lease / 3;
    let mut tool_future = pin!(tool_future);
    if period.is_zero() {
        return tool_future.await;
    }
    let sleep = tokio::time::sleep(period);
    let mut sleep = pin!(sleep);
    loop {
        tokio::select! {
            biased;
            output = &mut tool_future => return output,
            () = &mut sleep => {
                // Renewal is awaited alone: it is one quick store call every lease/3.
                let renewed = claim.store.renew(claim.namespace, &claim.key, claim.token, lease).await;
                if let Err(error) = renewed {
                    tracing::warn!(target: "idem", key = %claim.key.short(), %error,
                        "could not renew the lease; another caller may run this key if it expires");
                }
                sleep.as_mut().reset(Instant::now() + period);
            }
        }
    }
}

/// Gives the key back if the call ends early: dropped by its caller (cancellation) or unwound by
/// a panic. If the tool already finished, it records the result instead.
struct ClaimGuard<'c> {
    call: &'c Call<'c>,
    attempt: u32,
    store: Arc<dyn Store>,
    namespace: &'c str,
    key: Key,
    token: LeaseToken,
    state: GuardState,
}

enum GuardState {
    Running,
    Finished(Vec<u8>, Duration),
    Disarmed,
}

impl<'c> ClaimGuard<'c> {
    fn new(call: &'c Call<'c>, attempt: u32, claim: &Claim<'c>) -> Self {
        ClaimGuard {
            call,
            attempt,
            store: Arc::clone(claim.store),
            namespace: claim.namespace,
            key: claim.key,
            token: claim.token,
            state: GuardState::Running,
        }
    }

    fn finished(&mut self, bytes: &[u8]) {
        let ttl = self.call.tool.ttl.unwrap_or(DEFAULT_TTL);
        self.state = GuardState::Finished(bytes.to_vec(), ttl);
    }

    fn disarm(&mut self) {
        self.state = GuardState::Disarmed;
    }
}

impl Drop for ClaimGuard<'_> {
    fn drop(&mut self) {
        let store = Arc::clone(&self.store);
        let namespace = self.namespace.to_owned();
        let (key, token) = (self.key, self.token);
        match std::mem::replace(&mut self.state, GuardState::Disarmed) {
            GuardState::Disarmed => {}
            GuardState::Running => {
                let outcome = if std::thread::panicking() {
                    Outcome::Panicked
                } else {
                    Outcome::Cancelled
                };
                report(self.call, outcome, self.attempt);
                run_detached(async move {
                    if let Err(error) = store.release(&namespace, &key, token).await {
                        tracing::warn!(target: "idem", key = %key.short(), %error,
                            "could not release the key; it is freed when its lease expires");
                    }
                });
            }
            GuardState::Finished(bytes, ttl) => {
                // The caller went away while the result was being recorded: finish recording it
                // so that the retry replays instead of running the tool again.
                report(self.call, Outcome::Executed, self.attempt);
                run_detached(async move {
                    if let Err(error) = store.complete(&namespace, &key, token, &bytes, ttl).await {
                        tracing::error!(target: "idem", key = %key.short(), %error,
                            "the tool ran but its result was not recorded; a retry will run it again");
                    }
                });
            }
        }
    }
}

/// Runs a clean-up future from a destructor: polled once in place (enough for in-memory
/// stores), else spawned on the current Tokio runtime. Without a runtime it is dropped, and the
/// lease expiry frees the key.
fn run_detached(cleanup: impl Future<Output = ()> + Send + 'static) {
    let mut cleanup: Pin<Box<dyn Future<Output = ()> + Send>> = Box::pin(cleanup);
    let mut cx = Context::from_waker(Waker::noop());
    if cleanup.as_mut().poll(&mut cx).is_ready() {
        return;
    }
    if let Ok(handle) = tokio::runtime::Handle::try_current() {
        handle.spawn(cleanup);
    }
}

impl std::fmt::Debug for Call<'_> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Call")
            .field("tool", &self.tool.name)
            .field("turn", &self.turn.id())
            .field("key", &self.key)
            .finish_non_exhaustive()
    }
}

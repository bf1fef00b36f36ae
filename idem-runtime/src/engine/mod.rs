//! The engine every `#[idempotent]` tool runs through: key → budget → store → execute or replay.

mod claimed;
mod execution;
mod held;
mod lease;
mod report;
mod steps;
pub mod telemetry;

use std::future::Future;
use std::sync::Arc;

use serde::Serialize;
use serde::de::DeserializeOwned;

use crate::Error;
use crate::flight;
use crate::key::{Fingerprint, Key};
use crate::replay::{OkAndErr, OkOnly};
use crate::store::{KeyCounter, Lease, LeaseToken, Store, default_store};
use crate::tool::ToolInfo;
use crate::turn::Turn;

pub use held::current_key;

use execution::execution;

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
pub fn execute<T, E, F>(call: Call, tool_future: F) -> impl Future<Output = Result<T, E>>
where
    T: Serialize + DeserializeOwned,
    E: From<Error>,
    F: Future<Output = Result<T, E>>,
{
    execution::<OkOnly, T, E, F, _, _>(call, tool_future, |claimed, body| {
        claimed.attached::<OkOnly, T, E, F>(body)
    })
}

/// Like [`execute`], but an `Err` result is recorded and replayed too (Stripe's behaviour), so
/// a failed call is not retried until its record expires.
///
/// # Errors
/// As [`execute`].
pub fn execute_caching_errors<T, E, F>(
    call: Call,
    tool_future: F,
) -> impl Future<Output = Result<T, E>>
where
    T: Serialize + DeserializeOwned,
    E: From<Error> + Serialize + DeserializeOwned,
    F: Future<Output = Result<T, E>>,
{
    execution::<OkAndErr, T, E, F, _, _>(call, tool_future, |claimed, body| {
        claimed.attached::<OkAndErr, T, E, F>(body)
    })
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
pub fn execute_detached<T, E, F>(call: Call, tool_future: F) -> impl Future<Output = Result<T, E>>
where
    T: Serialize + DeserializeOwned + Send + 'static,
    E: From<Error> + Send + 'static,
    F: Future<Output = Result<T, E>> + Send + 'static,
{
    execution::<OkOnly, T, E, F, _, _>(call, tool_future, |claimed, body| {
        claimed.detached::<OkOnly, T, E, F>(body)
    })
}

/// [`execute_detached`] with `Err` results recorded and replayed too.
///
/// # Errors
/// As [`execute`].
pub fn execute_detached_caching_errors<T, E, F>(
    call: Call,
    tool_future: F,
) -> impl Future<Output = Result<T, E>>
where
    T: Serialize + DeserializeOwned + Send + 'static,
    E: From<Error> + Serialize + DeserializeOwned + Send + 'static,
    F: Future<Output = Result<T, E>> + Send + 'static,
{
    execution::<OkAndErr, T, E, F, _, _>(call, tool_future, |claimed, body| {
        claimed.detached::<OkAndErr, T, E, F>(body)
    })
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

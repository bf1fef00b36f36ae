//! The engine every `#[idempotent]` tool runs through: key → budget → store → execute or
//! replay.
//!
//! A call's life is two `async fn`s of `call.rs`, read top to bottom: `ask` joins an identical
//! call running here or asks the store (which answers a recorded result, a holder elsewhere, a
//! refusal, or a claim); `run` runs the body under the lease keeper, records the result,
//! publishes it to the calls waiting here and reports the outcome. One drop guard (`guard.rs`)
//! decides what an early end means. The tool's types never reach them: the typed layer, the
//! only generic part, hands the body in boxed, encoding its result with the tool's [`Codec`],
//! and decodes a recorded result.

mod background;
mod call;
mod guard;
pub(crate) mod held;
mod keeper;
mod refusals;
mod report;
pub mod telemetry;
#[cfg(feature = "postgres")]
pub mod transactional;
mod typed;

use std::future::Future;
use std::sync::Arc;

use crate::Error;
use crate::error::{Earlier, Mismatch, Unkeyed};
use crate::flight;
use crate::key::{Fingerprint, Key};
use crate::store::{BeginRequest, Lease, LeaseToken, Store, default_store};
use crate::tool::ToolInfo;
use crate::turn::Turn;

pub use held::current_key;
pub use typed::{Codec, ToolResult};

/// What the code `#[idempotent]` generates runs a tool through (via `idem_tools::__private`):
/// [`execute`] and [`execute_detached`] with the body kept in the caller's future, so that the
/// only code generated per tool is the body's future and its boxing. Not API.
#[doc(hidden)]
pub mod in_place {
    pub use super::typed::{Unstarted, attached, detached};
}

/// Logs and counts a call refused before it could reach the engine (outside a turn, an
/// argument that does not encode, a tool name taken twice), so that every call yields exactly
/// one outcome — in `turn`'s counters too, when it was made in one; returns the error for the
/// caller.
#[doc(hidden)]
pub fn refuse(tool: &'static ToolInfo, turn: Option<&Turn>, error: Error) -> Error {
    report::refused(tool, turn, &error);
    error
}

/// How many keys are in flight in this process's single-flight registry right now (for soak
/// tests and metrics: it returns to zero when no call runs).
#[doc(hidden)]
pub fn flights_registered() -> usize {
    flight::registered()
}

/// Spawns `future` on the current Tokio runtime *inside this task's turn and tool calls*: in
/// the new task, [`Turn::current`] is this task's turn, [`current_key`] this task's key while
/// its tool runs, and a tool called there with a key a caller holds fails at once with
/// [`Error::Reentrant`] instead of waiting for itself. `tokio::spawn` carries none of these
/// (task-locals do not follow a spawn): use this for work a tool hands to a task of its own.
///
/// ```
/// # extern crate idem_tools_runtime as idem_tools;
/// use idem_tools::{Turn, engine::spawn};
///
/// # #[tokio::main(flavor = "current_thread")] async fn main() {
/// Turn::new("turn-1")
///     .scope(async {
///         let id = spawn(async { Turn::current().map(|t| t.id().to_owned()) }).await.unwrap();
///         assert_eq!(id.as_deref(), Some("turn-1"));
///     })
///     .await;
/// # }
/// ```
///
/// # Panics
/// Outside a Tokio runtime, as `tokio::spawn` does.
pub fn spawn<F>(future: F) -> tokio::task::JoinHandle<F::Output>
where
    F: Future + Send + 'static,
    F::Output: Send + 'static,
{
    let (turn, held) = (Turn::current(), held::current());
    let within = crate::conversation::scope::capture();
    let future = crate::conversation::scope::restore(within, future);
    tokio::spawn(async move {
        match (turn, held) {
            (Some(turn), Some(held)) => turn.scope(held::scope(held, future)).await,
            (Some(turn), None) => turn.scope(future).await,
            (None, Some(held)) => held::scope(held, future).await,
            (None, None) => future.await,
        }
    })
}

/// One call of a state-changing tool, ready for [`execute`].
#[derive(Clone)]
pub struct Call {
    tool: &'static ToolInfo,
    turn: Turn,
    key: Key,
    fingerprint: Fingerprint,
    store: Option<Arc<dyn Store>>,
    /// The lease to claim the key for, instead of the tool's.
    lease: Option<std::time::Duration>,
    /// How long to keep the result, instead of the tool's TTL.
    ttl: Option<std::time::Duration>,
    /// How the key was made, for the error that refuses it when it was used with other
    /// arguments.
    origin: Origin,
}

/// How a call's key was made.
#[derive(Clone)]
enum Origin {
    /// From the arguments; bit `i` set when the tool's `skipped[i]` is in the fingerprint.
    Arguments(u32),
    /// From the arguments of an `#[idempotent]` tool, whose fingerprint is marked as the
    /// tool's (docs/key-spec.md, §5); bits as for `Arguments`.
    Tool(u32),
    /// An argument of the call (`#[key]`), which the model sets: its name.
    KeyArgument(&'static str),
    /// Supplied by the application calling the tool (MCP's `_meta["idempotencyKey"]`), not by
    /// the model.
    ClientKey,
    /// A model step of a conversation ([`Conversation`](crate::Conversation)).
    Step { label: Arc<str>, step: u32 },
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
            lease: None,
            ttl: None,
            origin: Origin::Arguments(u32::MAX),
        }
    }

    /// Claims the key for `lease` (renewed while the body runs) instead of the tool's own
    /// lease: how long a process killed mid-call holds the key.
    #[must_use]
    pub fn with_lease(mut self, lease: std::time::Duration) -> Self {
        self.lease = Some(lease);
        self
    }

    /// Keeps the result for `ttl` (at most [`MAX_DURATION`](crate::store::MAX_DURATION))
    /// instead of the tool's TTL.
    #[must_use]
    pub fn with_ttl(mut self, ttl: std::time::Duration) -> Self {
        self.ttl = Some(ttl);
        self
    }

    /// How long the result is kept: [`with_ttl`](Self::with_ttl)'s, else the tool's.
    pub(crate) fn record_ttl(&self) -> std::time::Duration {
        match self.ttl {
            Some(ttl) => ttl.min(crate::store::MAX_DURATION),
            None => self.tool.record_ttl(),
        }
    }

    /// Uses `store` instead of the turn's or the process default.
    #[must_use]
    pub fn with_store(mut self, store: &Arc<dyn Store>) -> Self {
        self.store = Some(Arc::clone(store));
        self
    }

    /// Says how the key of an `#[idempotent]` tool's call was made (its fingerprint marked as
    /// the tool's: docs/key-spec.md, §5), for the error of a key used
    /// before by other arguments ([`Error::PayloadMismatch`]) or another tool
    /// ([`Error::NameClash`]): `Some(bits)` when it was derived from the arguments, bit `i` set
    /// when the tool's [`skipped`](ToolInfo::skipped)`[i]` is in the fingerprint; `None` when
    /// the application calling the tool supplied it (MCP's `_meta["idempotencyKey"]`), which
    /// the model cannot change ([`Mismatch::ClientKey`]).
    #[must_use]
    pub fn with_unkeyed(mut self, unkeyed: Option<u32>) -> Self {
        self.origin = match unkeyed {
            Some(bits) => Origin::Tool(bits),
            None => Origin::ClientKey,
        };
        self
    }

    /// Says that the key of an `#[idempotent]` tool's call is its argument `name` (`#[key]`),
    /// which the model sets: the error of a key used before by other arguments tells the model
    /// to give a new `name` for a new action ([`Mismatch::KeyArgument`]); `""` for an argument
    /// the model knows by no name (a pattern parameter), of which it is told as "the idempotency
    /// key".
    #[must_use]
    pub fn with_key_argument(mut self, name: &'static str) -> Self {
        self.origin = Origin::KeyArgument(name);
        self
    }

    /// Step `step` of the conversation `label`: its key was used before with another request.
    pub(crate) fn model_step(mut self, label: Arc<str>, step: u32) -> Self {
        self.origin = Origin::Step { label, step };
        self
    }

    /// Whether this call is a model step of a conversation.
    pub(crate) fn is_model_step(&self) -> bool {
        matches!(self.origin, Origin::Step { .. })
    }

    /// The error for this call's key used before with the fingerprint `recorded` (by a call
    /// still `running`, or recorded): by a call with other arguments — or, for a tool whose
    /// fingerprints are marked, by another tool of the same name (the same arguments under
    /// another mark).
    fn mismatch(&self, recorded: &Fingerprint, running: bool, earlier: Earlier) -> Error {
        let (tool, key) = (self.tool.name, self.key.short());
        let marked = matches!(
            self.origin,
            Origin::Tool(_) | Origin::KeyArgument(_) | Origin::ClientKey
        );
        if marked && recorded.same_arguments(&self.fingerprint) {
            return Error::NameClash { tool, key };
        }
        let differs = match &self.origin {
            Origin::Arguments(bits) | Origin::Tool(bits) => {
                Mismatch::Unkeyed(Unkeyed::new(self.tool.skipped, *bits))
            }
            Origin::KeyArgument(name) => Mismatch::KeyArgument(name),
            Origin::ClientKey => Mismatch::ClientKey,
            Origin::Step { label, step } => {
                return Error::ModelStepDiverged {
                    conversation: label.to_string(),
                    step: *step,
                    turn: self.turn.id().to_owned(),
                };
            }
        };
        let refused = refusals::count(self.key);
        Error::PayloadMismatch {
            tool,
            key,
            differs,
            running,
            earlier,
            refused,
        }
    }

    /// The call's key.
    pub fn key(&self) -> Key {
        self.key
    }

    /// The store this call uses: its own, else its turn's, else the process default.
    pub(crate) fn store(&self) -> &Arc<dyn Store> {
        match (&self.store, self.turn.store()) {
            (Some(store), _) | (None, Some(store)) => store,
            (None, None) => default_store(),
        }
    }

    /// What the store is asked to begin for this call: a claim with `token` for `lease`,
    /// charged to the turn's budget.
    fn begin_request(&self, token: LeaseToken, lease: std::time::Duration) -> BeginRequest<'_> {
        BeginRequest {
            namespace: self.turn.namespace(),
            key: &self.key,
            tool: self.tool.name,
            turn: self.turn.id(),
            fingerprint: &self.fingerprint,
            lease,
            ttl: self.record_ttl(),
            token,
            charge: self.turn.charge(self.tool),
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

/// Runs `body` at most once per key: executes it the first time, replays its recorded result
/// afterwards, and makes concurrent duplicates wait for the first.
///
/// In order:
/// 1. a task that already holds the key (a tool calling itself, directly or through other
///    tools) gets [`Error::Reentrant`];
/// 2. an identical call already running in this process is joined (single-flight), for at
///    most the turn's in-flight wait;
/// 3. the store answers:
///    - a recorded result: decoded and returned without running the tool (an interrupted or
///      not-replayable record answers [`Error::Interrupted`] / [`Error::NotReplayable`]);
///      recorded under other arguments: [`Error::PayloadMismatch`];
///    - in flight elsewhere: asked again with backoff up to the turn's in-flight wait, then
///      [`Error::InFlight`]; waiting charges nothing;
///    - no record: the claim is charged to the key's budget and, when it starts a new action,
///      the turn's and the tool's, and past them refused ([`Error::BudgetExhausted`],
///      [`Error::TurnBudgetExhausted`], [`Error::ToolBudgetExhausted`]);
///    - claimed: the body runs, its lease renewed meanwhile (a lease that cannot be kept stops
///      the body: [`Error::LeaseLost`]); `Ok` is recorded, `Err` gives the key back so a retry
///      runs again (unless the codec records errors). If the caller drops the call after the
///      body started, the key is kept as *interrupted* unless the tool sets
///      `release_on_cancel`; a panic gives the key back and propagates.
///
/// The body is not polled unless the call claims the key. To keep running when the caller
/// goes away, use [`execute_detached`]. Needs a Tokio runtime with the time driver.
///
/// ```
/// # extern crate idem_tools_runtime as idem_tools;
/// use idem_tools::engine::{Call, Codec, execute};
/// use idem_tools::{key::ArgsDigest, ToolInfo, Turn};
///
/// # #[tokio::main(flavor = "current_thread")] async fn main() -> Result<(), idem_tools::Error> {
/// static SEND: ToolInfo = ToolInfo::idempotent("send");
/// let turn = Turn::new("turn-1");
/// let call = || {
///     let mut args = ArgsDigest::new(SEND.name);
///     args.arg("to", "ada").unwrap();
///     let (key, fingerprint) = args.finish(turn.namespace(), turn.id(), SEND.name, SEND.version);
///     Call::new(&SEND, &turn, key, fingerprint)
/// };
/// let first = execute(call(), Codec::ok_only(), async { Ok::<u32, idem_tools::Error>(7) }).await?;
/// let retry = execute(call(), Codec::ok_only(), async { Ok(8) }).await?; // replayed
/// assert_eq!((first, retry), (7, 7));
/// # Ok(()) }
/// ```
///
/// # Errors
/// The tool's own errors, and any [`Error`] above converted with `E: From<Error>`.
#[allow(clippy::manual_async_fn)] // the signature says the future is `Send`
pub fn execute<F>(
    call: Call,
    codec: Codec<<F::Output as ToolResult>::Ok, <F::Output as ToolResult>::Err>,
    body: F,
) -> impl Future<Output = F::Output> + Send
where
    F: Future + Send,
    F::Output: ToolResult + Send,
    <F::Output as ToolResult>::Ok: Send,
    <F::Output as ToolResult>::Err: Send,
{
    async move {
        let mut body = Some(body);
        typed::attached(Ok(call), codec, &mut body).await
    }
}

/// Like [`execute`], but once the key is claimed the rest of the call — the body, its lease,
/// recording — runs in a task of its own: if the caller goes away (a timeout, a `select!`, an
/// MCP cancellation) it still finishes and records its result, and a retry in the meantime
/// joins it. One execution, and every caller gets the first result.
///
/// The turn, the held keys and the call's `tracing` span follow the body into its task. A panic
/// in the body propagates to the caller, if it still waits.
///
/// # Errors
/// As [`execute`].
#[allow(clippy::manual_async_fn)] // the signature says the future is `Send`
pub fn execute_detached<F>(
    call: Call,
    codec: Codec<<F::Output as ToolResult>::Ok, <F::Output as ToolResult>::Err>,
    body: F,
) -> impl Future<Output = F::Output> + Send
where
    F: Future + Send + 'static,
    F::Output: ToolResult + Send + 'static,
    <F::Output as ToolResult>::Ok: Send + 'static,
    <F::Output as ToolResult>::Err: Send + 'static,
{
    async move {
        let mut body = Some(body);
        typed::detached(Ok(call), codec, &mut body).await
    }
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

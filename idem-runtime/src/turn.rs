//! Turns: the unit of agent work that keys and retry budgets are scoped to.

use std::fmt;
use std::future::Future;
use std::sync::Arc;
use std::time::Duration;

use crate::stats::{Outcome, Stats, StatsCounters};
use crate::store::budget::TurnIdentity;
use crate::store::{Charge, DEFAULT_BUDGET_WINDOW, Store};
use crate::tool::ToolInfo;
use crate::{Error, Result};

/// How many times a turn may run one action (one key) without recording a result, when the
/// tool sets no `budget`.
pub const DEFAULT_ATTEMPTS_PER_KEY: u32 = 3;

/// How many new actions one tool may start in one turn, when neither the tool
/// (`#[idempotent(actions_per_turn = N)]`) nor the turn
/// ([`Turn::with_actions_per_tool`]) says otherwise: a model that loops on a tool with reworded
/// arguments (each call a new key) is stopped at the sixth and told it is stuck.
pub const DEFAULT_ACTIONS_PER_TOOL: u32 = 5;

/// How many times one turn may ask its model (the steps of all its conversations that are not
/// replayed) when the turn ([`Turn::with_max_model_steps`]) says nothing else: an agent loop
/// that never ends is stopped there with [`Error::ModelStepsExhausted`].
pub const DEFAULT_MODEL_STEPS: u32 = 50;

/// How long a call waits for the same key running in another process before failing with
/// [`Error::InFlight`].
pub const DEFAULT_IN_FLIGHT_WAIT: Duration = Duration::from_secs(10);

/// The longest in-flight wait, 24 days: [`Turn::with_in_flight_wait`] takes a longer one
/// (`Duration::MAX` included) as this.
pub const MAX_IN_FLIGHT_WAIT: Duration = Duration::from_secs(24 * 24 * 60 * 60);

/// The longest turn id, in bytes. Every store keeps a turn's id with its records, and
/// PostgreSQL indexes it; a call in a turn with a longer id is refused with [`Error::Config`]
/// on every store, so that stores stay interchangeable.
pub const MAX_TURN_ID_LEN: usize = 1024;

/// The longest namespace, in bytes (as [`MAX_TURN_ID_LEN`]).
pub const MAX_NAMESPACE_LEN: usize = 256;

tokio::task_local! {
    static CURRENT_TURN: Turn;
}

/// One turn of an agent: an id that keys are derived from, and the retry budget they share.
///
/// A genuine retry inside the same turn derives the same key and is deduplicated; a new turn
/// derives new keys. Enter a turn for a future with [`Turn::scope`]; tools read it with
/// [`Turn::current`] (or take a `&Turn` parameter).
///
/// **The retry budget** stops work that fails or keeps running; it never withholds a result.
/// What counts is a *claim*: a call about to run the tool. A replay of a recorded result,
/// joining an identical call, and waiting for a holder elsewhere are not claims: they cost
/// nothing and always get the true answer. A claim is either
///
/// - a **new action**: no call of this turn claimed the key since its last recorded result. A
///   tool may start [`with_actions_per_tool`](Self::with_actions_per_tool) new actions per turn
///   ([`DEFAULT_ACTIONS_PER_TOOL`], 5, unless the tool's `actions_per_turn` says otherwise),
///   then the next new action fails with [`Error::ToolBudgetExhausted`] ("it is stuck"); and a
///   turn may start [`with_max_calls`](Self::with_max_calls) new actions in all (no cap by
///   default), then [`Error::TurnBudgetExhausted`];
/// - or a **retry** of an action this turn already started (it failed, or was cut off): it is
///   counted with its key alone, which may be claimed
///   [`with_max_attempts_per_key`](Self::with_max_attempts_per_key) times by the turn (3 by
///   default, unless the tool's `budget` says otherwise) without a recorded result — recording
///   one resets the count — and then fails with [`Error::BudgetExhausted`]. A retry is never
///   counted against, nor refused by, the turn's or the tool's cap.
///
/// A key supplied by the caller (not derived from the turn) may be claimed by several turns:
/// its count belongs to the turn that claimed it last, so its failures stop at the end of their
/// turn, and in the next turn it is a new action again.
///
/// A `Turn` value holds settings, and one run of the turn: the counts belong to the turn's
/// identity (namespace + id) and its keys, in the store, charged atomically with each claim:
/// every `Turn` with the same identity shares them — in this process, and with a durable or
/// shared store in every process and across restarts. Changing a setting never resets them.
/// How many times a turn's calls were replayed or joined is in [`Turn::stats`]. The run is the
/// value's and its clones' (its conversations' steps, which keys it gave back): a new value
/// (`Turn::new` with the same id) is a new run, as a restarted process makes — so the tools of
/// one run take its `Turn` (a clone, or [`Turn::current`]), not a `Turn::new` of their own.
///
/// ```
/// # extern crate idem_tools_runtime as idem_tools;
/// use idem_tools::Turn;
///
/// # #[tokio::main(flavor = "current_thread")] async fn main() {
/// let turn = Turn::new("conv-42/turn-7").with_max_attempts_per_key(5);
/// turn.clone()
///     .scope(async {
///         assert_eq!(Turn::current().unwrap().id(), "conv-42/turn-7");
///     })
///     .await;
/// # }
/// ```
#[derive(Clone)]
pub struct Turn {
    inner: Arc<TurnInner>,
}

#[derive(Clone)]
struct TurnInner {
    id: Arc<str>,
    namespace: Arc<str>,
    /// The digest of namespace and id that names the turn's budget counters in stores.
    identity: TurnIdentity,
    max_attempts_per_key: u32,
    max_calls: Option<u32>,
    actions_per_tool: u32,
    max_model_steps: u32,
    in_flight_wait: Duration,
    budget_window: Duration,
    store: Option<Arc<dyn Store>>,
    /// Counters of calls made through this value and its clones and edits.
    stats: Arc<StatsCounters>,
    /// The cap on the tokens the turn's model steps report (`None`: no cap).
    max_tokens: Option<u64>,
    /// This run of the turn: its conversations' steps and the tokens they reported, shared by
    /// this value, its clones and its edits (a restarted run makes a new `Turn`).
    run: Arc<crate::conversation::Run>,
}

impl Turn {
    /// A turn with the given id, namespace `""` and default budgets.
    pub fn new(id: impl Into<String>) -> Self {
        let id: Arc<str> = Arc::from(id.into());
        Turn {
            inner: Arc::new(TurnInner {
                identity: TurnIdentity::new("", &id),
                id,
                namespace: Arc::from(""),
                max_attempts_per_key: DEFAULT_ATTEMPTS_PER_KEY,
                max_calls: None,
                actions_per_tool: DEFAULT_ACTIONS_PER_TOOL,
                max_model_steps: DEFAULT_MODEL_STEPS,
                in_flight_wait: DEFAULT_IN_FLIGHT_WAIT,
                budget_window: DEFAULT_BUDGET_WINDOW,
                store: None,
                stats: Arc::default(),
                max_tokens: None,
                run: Arc::default(),
            }),
        }
    }

    fn edit(mut self, f: impl FnOnce(&mut TurnInner)) -> Self {
        f(Arc::make_mut(&mut self.inner));
        self
    }

    /// The tenant or namespace keys are scoped to: the same call in two namespaces gets two keys.
    pub fn with_namespace(self, namespace: impl Into<String>) -> Self {
        let namespace: Arc<str> = Arc::from(namespace.into());
        self.edit(|t| {
            t.identity = TurnIdentity::new(&namespace, &t.id);
            t.namespace = namespace;
            t.run = Arc::default(); // another turn: its conversations start anew
        })
    }

    /// Claims allowed per key by this turn without a recorded result (default 3): the first
    /// starts the action, the others retry it; see [`Turn`] for what counts. A tool's own
    /// `budget` takes precedence.
    pub fn with_max_attempts_per_key(self, limit: u32) -> Self {
        self.edit(|t| t.max_attempts_per_key = limit)
    }

    /// Caps the new actions this turn may start, whatever their tools (default: no cap): past
    /// it, a call that would start a new action is refused, while a retry of an action already
    /// started is still run (within its key's budget), joined or replayed. Retries and calls
    /// refused by a budget do not count. The count is kept in the store each call uses, with
    /// its claim: a tool with a store of its own (`store = …`) is capped apart there.
    pub fn with_max_calls(self, limit: u32) -> Self {
        self.edit(|t| t.max_calls = Some(limit))
    }

    /// Caps the new actions each tool may start in this turn (default
    /// [`DEFAULT_ACTIONS_PER_TOOL`], 5), for tools that set no `actions_per_turn` of their own:
    /// past it, a call of that tool that would start a new action is refused with
    /// [`Error::ToolBudgetExhausted`], while retries of its actions already started are still
    /// run, joined or replayed. `u32::MAX` lifts the cap (the count is still kept).
    pub fn with_actions_per_tool(self, limit: u32) -> Self {
        self.edit(|t| t.actions_per_tool = limit)
    }

    /// How long a call waits for its key to finish elsewhere — another process, or another
    /// task of this one — before [`Error::InFlight`] (default 10 s; at most
    /// [`MAX_IN_FLIGHT_WAIT`], which a longer wait is taken as).
    pub fn with_in_flight_wait(self, wait: Duration) -> Self {
        self.edit(|t| t.in_flight_wait = wait.min(MAX_IN_FLIGHT_WAIT))
    }

    /// How long the store keeps this turn's budget counts after their last charge (default one
    /// day): the memory budgets take is bounded by the turns active within this window. Keep it
    /// longer than the turn runs: counts that expire between two attempts (a window shorter
    /// than a tool's run, or zero) no longer cap anything. At most
    /// [`MAX_DURATION`](crate::store::MAX_DURATION), which a longer window is taken as.
    pub fn with_budget_window(self, window: Duration) -> Self {
        self.edit(|t| t.budget_window = window.min(crate::store::MAX_DURATION))
    }

    /// Caps how many times this turn may ask its model ([`DEFAULT_MODEL_STEPS`], 50, by
    /// default): the steps of all its conversations that ask the model, in every run of the
    /// turn, count; a replayed step costs nothing and a step asked again after a failure is a
    /// retry, capped like a tool's. Past the cap a step fails with
    /// [`Error::ModelStepsExhausted`]. Model steps never count against
    /// [`with_max_calls`](Self::with_max_calls) or a tool's cap of actions.
    pub fn with_max_model_steps(self, limit: u32) -> Self {
        self.edit(|t| t.max_model_steps = limit)
    }

    /// Caps the tokens this turn's model steps may report, as their responses count them
    /// ([`Conversation::step_counting`](crate::Conversation::step_counting); default: no cap):
    /// once this run's steps reported `limit`, a step that would ask the model is refused
    /// ([`Error::TokenBudgetExhausted`]) while recorded steps still replay. A restarted run
    /// counts the tokens of the steps it replays, so the cap holds across restarts — except
    /// for the steps of an agent run inside a tool call that replays: the tool's recorded
    /// result answers, its agent's steps are not replayed, and their tokens are not counted
    /// again (see docs/adopting.md, durable turns).
    pub fn with_max_tokens(self, limit: u64) -> Self {
        self.edit(|t| t.max_tokens = Some(limit))
    }

    /// The store for tools in this turn that name none (default: [`default_store`](crate::store::default_store)).
    pub fn with_store(self, store: Arc<dyn Store>) -> Self {
        self.edit(|t| t.store = Some(store))
    }

    /// The turn id.
    pub fn id(&self) -> &str {
        &self.inner.id
    }

    /// The namespace (empty by default).
    pub fn namespace(&self) -> &str {
        &self.inner.namespace
    }

    /// [`Error::Config`] if the id or the namespace is longer than a store keeps
    /// ([`MAX_TURN_ID_LEN`], [`MAX_NAMESPACE_LEN`]).
    pub(crate) fn check_sizes(&self) -> Result<(), Error> {
        let too_long = |what: &str, len: usize, max: usize| {
            Error::Config(format!(
                "the turn's {what} is {len} bytes long, more than the {max} a store keeps: \
                 shorten it (a digest of a long id keeps it unique)"
            ))
        };
        match (self.id().len(), self.namespace().len()) {
            (len, _) if len > MAX_TURN_ID_LEN => Err(too_long("id", len, MAX_TURN_ID_LEN)),
            (_, len) if len > MAX_NAMESPACE_LEN => {
                Err(too_long("namespace", len, MAX_NAMESPACE_LEN))
            }
            _ => Ok(()),
        }
    }

    pub(crate) fn namespace_arc(&self) -> &Arc<str> {
        &self.inner.namespace
    }

    /// The store chosen for this turn, if any.
    pub fn store(&self) -> Option<&Arc<dyn Store>> {
        self.inner.store.as_ref()
    }

    /// The cap on the tokens of the turn's model steps, if any.
    pub fn max_tokens(&self) -> Option<u64> {
        self.inner.max_tokens
    }

    /// This run of the turn.
    pub(crate) fn run(&self) -> &Arc<crate::conversation::Run> {
        &self.inner.run
    }

    /// The in-flight wait bound.
    pub fn in_flight_wait(&self) -> Duration {
        self.inner.in_flight_wait
    }

    /// Counters of the calls made through this `Turn` value, its clones and its edits.
    pub fn stats(&self) -> Stats {
        self.inner.stats.snapshot()
    }

    /// How many times a run may ask its model for one step that keeps failing: the turn's
    /// per-key budget ([`with_max_attempts_per_key`](Self::with_max_attempts_per_key)).
    pub(crate) fn model_step_attempts(&self) -> u32 {
        self.inner.max_attempts_per_key
    }

    pub(crate) fn record(&self, outcome: Outcome) {
        self.inner.stats.add(outcome);
    }

    /// What a claim of `tool` in this turn charges: the tool's own per-key budget and cap of
    /// actions if it sets them, else the turn's.
    /// A model step ([`MODEL_STEP`](crate::conversation::MODEL_STEP)) is capped by the turn's
    /// model steps instead, and not counted as an action of the turn.
    pub(crate) fn charge(&self, tool: &ToolInfo) -> Charge {
        if tool.name == crate::conversation::MODEL_STEP.name {
            // Asking a model changes nothing in the world: a step's failures are counted by
            // the run that made them ([`Conversation`](crate::Conversation)), so that a run
            // restarted after an outage asks again; the store counts none.
            return Charge {
                turn: self.inner.identity,
                max_attempts: u32::MAX,
                max_calls: None,
                max_tool_actions: Some(self.inner.max_model_steps),
                window: self.inner.budget_window,
            };
        }
        Charge {
            turn: self.inner.identity,
            max_attempts: tool.budget.unwrap_or(self.inner.max_attempts_per_key),
            max_calls: self.inner.max_calls,
            max_tool_actions: Some(tool.actions_per_turn.unwrap_or(self.inner.actions_per_tool)),
            window: self.inner.budget_window,
        }
    }

    /// Runs `future` with this turn as [`Turn::current`].
    ///
    /// The turn is task-local: it does not follow work into `tokio::spawn`ed tasks. Spawn with
    /// `idem_tools::spawn` instead (it carries the turn and the tool calls
    /// around it), enter the turn again there, or pass the `Turn`.
    pub fn scope<F: Future>(self, future: F) -> impl Future<Output = F::Output> {
        CURRENT_TURN.scope(self, future)
    }

    /// Runs `f` (one poll of a tool's body) with this turn as [`Turn::current`].
    pub(crate) fn sync_scope<R>(self, f: impl FnOnce() -> R) -> R {
        CURRENT_TURN.sync_scope(self, f)
    }

    /// The turn entered with [`Turn::scope`] around the current task, if any.
    pub fn current() -> Option<Turn> {
        CURRENT_TURN.try_with(Turn::clone).ok()
    }

    /// The current turn, or [`Error::NoTurn`] naming `tool`.
    ///
    /// # Errors
    /// [`Error::NoTurn`] outside of [`Turn::scope`].
    pub fn current_for(tool: &'static str) -> Result<Turn> {
        Self::current().ok_or(Error::NoTurn { tool })
    }
}

impl fmt::Debug for Turn {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Turn")
            .field("id", &self.inner.id)
            .field("namespace", &self.inner.namespace)
            .field("max_attempts_per_key", &self.inner.max_attempts_per_key)
            .field("max_calls", &self.inner.max_calls)
            .field("actions_per_tool", &self.inner.actions_per_tool)
            .field("max_model_steps", &self.inner.max_model_steps)
            .finish_non_exhaustive()
    }
}

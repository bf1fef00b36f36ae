//! Turns: the unit of agent work that keys and retry budgets are scoped to.

use std::collections::HashMap;
use std::fmt;
use std::future::Future;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use crate::key::Key;
use crate::stats::{Outcome, Stats, StatsCounters};
use crate::store::Store;
use crate::{Error, Result};

/// How many attempts a turn allows per distinct key when the tool sets no `budget`.
pub const DEFAULT_ATTEMPTS_PER_KEY: u32 = 3;

/// How long a call waits for the same key running in another process before failing with
/// [`Error::InFlight`].
pub const DEFAULT_IN_FLIGHT_WAIT: Duration = Duration::from_secs(10);

tokio::task_local! {
    static CURRENT_TURN: Turn;
}

/// One turn of an agent: an id that keys are derived from, and the retry budget they share.
///
/// A genuine retry inside the same turn derives the same key and is deduplicated; a new turn
/// derives new keys. Enter a turn for a future with [`Turn::scope`]; tools read it with
/// [`Turn::current`] (or take a `&Turn` parameter).
///
/// ```
/// use idem_runtime::Turn;
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

struct TurnInner {
    id: String,
    namespace: String,
    max_attempts_per_key: u32,
    max_calls: Option<u32>,
    in_flight_wait: Duration,
    store: Option<Arc<dyn Store>>,
    budget: Mutex<Budget>,
    stats: StatsCounters,
}

#[derive(Default)]
struct Budget {
    attempts: HashMap<Key, u32>,
    calls: u32,
}

impl Turn {
    /// A turn with the given id, namespace `""` and default budgets.
    pub fn new(id: impl Into<String>) -> Self {
        Turn {
            inner: Arc::new(TurnInner {
                id: id.into(),
                namespace: String::new(),
                max_attempts_per_key: DEFAULT_ATTEMPTS_PER_KEY,
                max_calls: None,
                in_flight_wait: DEFAULT_IN_FLIGHT_WAIT,
                store: None,
                budget: Mutex::default(),
                stats: StatsCounters::default(),
            }),
        }
    }

    fn edit(mut self, f: impl FnOnce(&mut TurnInner)) -> Self {
        match Arc::get_mut(&mut self.inner) {
            Some(inner) => f(inner),
            None => {
                // Shared already: build a fresh turn with the same settings (budgets restart).
                let old = &self.inner;
                let mut inner = TurnInner {
                    id: old.id.clone(),
                    namespace: old.namespace.clone(),
                    max_attempts_per_key: old.max_attempts_per_key,
                    max_calls: old.max_calls,
                    in_flight_wait: old.in_flight_wait,
                    store: old.store.clone(),
                    budget: Mutex::default(),
                    stats: StatsCounters::default(),
                };
                f(&mut inner);
                self.inner = Arc::new(inner);
            }
        }
        self
    }

    /// The tenant or namespace keys are scoped to: the same call in two namespaces gets two keys.
    pub fn with_namespace(self, namespace: impl Into<String>) -> Self {
        let namespace = namespace.into();
        self.edit(|t| t.namespace = namespace)
    }

    /// Attempts allowed per distinct key in this turn, counting replays and joins (default 3).
    /// A tool's own `budget` takes precedence.
    pub fn with_max_attempts_per_key(self, limit: u32) -> Self {
        self.edit(|t| t.max_attempts_per_key = limit)
    }

    /// Caps all state-changing calls in this turn, whatever their keys (default: no cap).
    pub fn with_max_calls(self, limit: u32) -> Self {
        self.edit(|t| t.max_calls = Some(limit))
    }

    /// How long a call waits for its key to finish in another process (default 10 s).
    pub fn with_in_flight_wait(self, wait: Duration) -> Self {
        self.edit(|t| t.in_flight_wait = wait)
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

    /// The store chosen for this turn, if any.
    pub fn store(&self) -> Option<&Arc<dyn Store>> {
        self.inner.store.as_ref()
    }

    /// The in-flight wait bound.
    pub fn in_flight_wait(&self) -> Duration {
        self.inner.in_flight_wait
    }

    /// Counters of the calls made in this turn.
    pub fn stats(&self) -> Stats {
        self.inner.stats.snapshot()
    }

    pub(crate) fn record(&self, outcome: Outcome) {
        self.inner.stats.add(outcome);
    }

    /// Runs `future` with this turn as [`Turn::current`].
    ///
    /// The turn is task-local: it does not follow work into `tokio::spawn`ed tasks; enter it
    /// again there, or pass the `Turn`.
    pub fn scope<F: Future>(self, future: F) -> impl Future<Output = F::Output> {
        CURRENT_TURN.scope(self, future)
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

    /// Counts one attempt with `key`, failing when a budget is used up.
    ///
    /// # Errors
    /// [`Error::BudgetExhausted`] past the per-key limit (`limit`, or the turn's default),
    /// [`Error::TurnBudgetExhausted`] past [`Turn::with_max_calls`].
    pub fn charge(&self, tool: &'static str, key: &Key, limit: Option<u32>) -> Result<u32> {
        let limit = limit.unwrap_or(self.inner.max_attempts_per_key);
        let mut budget = self
            .inner
            .budget
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner);
        let calls = budget.calls.saturating_add(1);
        if let Some(max) = self.inner.max_calls
            && calls > max
        {
            return Err(Error::TurnBudgetExhausted {
                tool,
                turn: self.inner.id.clone(),
                calls,
                limit: max,
            });
        }
        let attempts = budget.attempts.entry(*key).or_insert(0);
        *attempts = attempts.saturating_add(1);
        let attempts = *attempts;
        budget.calls = calls;
        if attempts > limit {
            return Err(Error::BudgetExhausted {
                tool,
                key: key.short(),
                attempts,
                limit,
            });
        }
        Ok(attempts)
    }
}

impl fmt::Debug for Turn {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Turn")
            .field("id", &self.inner.id)
            .field("namespace", &self.inner.namespace)
            .field("max_attempts_per_key", &self.inner.max_attempts_per_key)
            .field("max_calls", &self.inner.max_calls)
            .finish_non_exhaustive()
    }
}

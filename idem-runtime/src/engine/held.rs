//! The keys a task holds: what `current_key` reports and what re-entrancy is checked against.

use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};

use crate::key::Key;

tokio::task_local! {
    static HELD: Held;
}

/// The keys held by the running tool and the tools that called it, innermost first.
#[derive(Clone)]
pub(crate) struct Held {
    key: Key,
    /// The scope of conversations where the tool was called (`conversation::scope`).
    within: Option<Key>,
    /// Whether the tool still runs, and whether idem refused a call it made.
    state: Arc<State>,
    /// If the tool is transactional, its body runs inside its transaction, open while `state`
    /// says the tool runs: the tool's name.
    transaction: Option<&'static str>,
    outer: Option<Arc<Held>>,
}

/// What a tool's call shares with the tasks its body runs in and hands work to.
#[derive(Debug)]
pub(crate) struct State {
    /// Whether the tool still runs (its body, or for a transactional tool its transaction): a
    /// task the body spawned (`idem_tools::spawn`), or a detached tool it called, may outlive
    /// it, and then no longer holds its key.
    running: AtomicBool,
    /// Whether idem refused or failed a call of an `#[idempotent]` tool that this tool made
    /// (its body, or a task it handed work to): an `Err` of the body may then be that refusal
    /// ("still running: call again"), which is not the tool's own failure to record.
    refused: AtomicBool,
}

impl State {
    /// A tool that runs, with no call refused yet.
    pub(crate) fn running() -> Arc<State> {
        Arc::new(State {
            running: AtomicBool::new(true),
            refused: AtomicBool::new(false),
        })
    }

    /// The tool's body finished, or was dropped (for a transactional tool: its transaction
    /// ended): it no longer holds its key.
    pub(crate) fn end(&self) {
        self.running.store(false, Ordering::Release);
    }
}

impl Held {
    /// Whether the tool that holds this key still runs.
    fn runs(&self) -> bool {
        self.state.running.load(Ordering::Acquire)
    }

    /// The tool's body finished, or was dropped: it no longer holds its key.
    pub(crate) fn end(&self) {
        self.state.end();
    }

    /// Whether idem refused or failed a call this tool made while it ran ([`refused`]).
    pub(crate) fn refused_a_call(&self) -> bool {
        self.state.refused.load(Ordering::Acquire)
    }

    /// An `Err` of this tool's body, in which idem refused a call it made, may be that refusal:
    /// its caller (the tool whose body, or task it handed work to, made this call, if it still
    /// runs) gets it as this tool's `Err`, and may return it as its own in turn.
    pub(crate) fn refusal_to_caller(&self) {
        if let Some(outer) = self.outer.as_deref().filter(|outer| outer.runs()) {
            outer.state.refused.store(true, Ordering::Release);
        }
    }

    /// This key and its callers', innermost first: those of tools that still run.
    fn running(&self) -> impl Iterator<Item = &Held> {
        std::iter::successors(Some(self), |held| held.outer.as_deref()).filter(|held| held.runs())
    }
}

/// The key of the `#[idempotent]` tool running in this task, if any. In a task the tool
/// handed work to ([`spawn`](crate::spawn)), the tool's key while it runs; once it is over, the
/// task runs no tool (`None`, even while a tool that called that tool still runs): a request
/// the task sends then is neither tool's, and must not carry a key either sends its own
/// requests with.
///
/// Forward it to downstream APIs that deduplicate (an `Idempotency-Key` HTTP header, a message
/// id): that closes the one window idem cannot close alone, a crash after the side effect and
/// before the result is recorded.
///
/// ```
/// # extern crate idem_tools_runtime as idem_tools;
/// # use idem_tools::{current_key, engine::{execute, Call, Codec}, ToolInfo, Turn, key::ArgsDigest};
/// # #[tokio::main(flavor = "current_thread")] async fn main() -> Result<(), idem_tools::Error> {
/// const CHARGE: ToolInfo = ToolInfo::idempotent("charge");
/// let turn = Turn::new("turn-1");
/// let mut args = ArgsDigest::new(CHARGE.name);
/// args.arg("cents", &500)?;
/// let (key, fingerprint) = args.finish(turn.namespace(), turn.id(), CHARGE.name, CHARGE.version);
/// let header = execute(Call::new(&CHARGE, &turn, key, fingerprint), Codec::ok_only(), async {
///     let key = current_key().expect("inside a tool");
///     Ok::<_, idem_tools::Error>(format!("Idempotency-Key: {key}"))
/// })
/// .await?;
/// assert_eq!(header, format!("Idempotency-Key: {key}"));
/// # Ok(()) }
/// ```
pub fn current_key() -> Option<Key> {
    // The innermost tool only: a task spawned from a tool's body that outlives it runs no tool,
    // whatever still runs around that tool.
    HELD.try_with(|held| held.runs().then_some(held.key))
        .ok()
        .flatten()
}

/// The key of the innermost tool this task runs in, or was spawned from, whether or not its
/// body still runs: what names the scope of conversations made here.
pub(crate) fn innermost_key() -> Option<Key> {
    HELD.try_with(|held| held.key).ok()
}

/// A call of an `#[idempotent]` tool made in this task was refused or failed by idem (its
/// caller gets an [`Error`](crate::Error)), or a conversation's step was before its model was
/// asked: noted for the tool running here, if any, whose body may return that error as its own.
pub(crate) fn refused() {
    let _ = HELD.try_with(|held| {
        if held.runs() {
            held.state.refused.store(true, Ordering::Release);
        }
    });
}

/// Whether this task (or a tool that called it) holds `key`: the tool holding it still runs.
pub(crate) fn holds(key: &Key) -> bool {
    HELD.try_with(|held| held.running().any(|held| held.key == *key))
        .unwrap_or(false)
}

/// Where a call was made: the keys its caller's task held and the scope of conversations it
/// was in — taken in the caller's task, as a detached body runs in a task of its own, where
/// task-locals do not follow (a cycle through it would otherwise wait instead of being
/// refused as re-entrant).
#[derive(Default)]
pub(crate) struct Caller {
    within: Option<Key>,
    outer: Option<Arc<Held>>,
}

impl Caller {
    /// The caller of a call made in this task (allocating only inside another tool).
    pub(crate) fn here() -> Caller {
        Caller {
            within: crate::conversation::scope::current(),
            outer: HELD.try_with(|held| Arc::new(held.clone())).ok(),
        }
    }
}

/// The keys held by a tool holding `key`, called by `caller`, until [`Held::end`].
pub(crate) fn with(key: Key, caller: Caller) -> Held {
    Held {
        key,
        within: caller.within,
        state: State::running(),
        transaction: None,
        outer: caller.outer,
    }
}

/// [`with`], for the body of the transactional tool `tool`, which runs inside its transaction
/// while `open` says so.
#[cfg(feature = "postgres")]
pub(crate) fn in_transaction_of(
    key: Key,
    caller: Caller,
    tool: &'static str,
    open: Arc<State>,
) -> Held {
    Held {
        key,
        within: caller.within,
        state: open,
        transaction: Some(tool),
        outer: caller.outer,
    }
}

/// The transactional tool whose body this task runs in (directly, through the tools it called
/// or a task it spawned), if its transaction is still open.
pub(crate) fn transaction() -> Option<&'static str> {
    HELD.try_with(|held| held.running().find_map(|held| held.transaction))
        .ok()
        .flatten()
}

/// The key of the tool running in this task and the scope of conversations it was called in.
pub(crate) fn innermost() -> Option<(Key, Option<Key>)> {
    HELD.try_with(|held| (held.key, held.within)).ok()
}

/// The held keys of this task, if it runs inside a tool.
pub(crate) fn current() -> Option<Held> {
    HELD.try_with(Held::clone).ok()
}

/// Runs `future` holding `held`.
pub(crate) async fn scope<F: std::future::Future>(held: Held, future: F) -> F::Output {
    HELD.scope(held, future).await
}

/// Runs `f` (one poll of a tool's body) holding `held`.
pub(crate) fn sync_scope<R>(held: Held, f: impl FnOnce() -> R) -> R {
    HELD.sync_scope(held, f)
}

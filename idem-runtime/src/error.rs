//! The one error type of idem.

use std::time::Duration;

use crate::key::ShortKey;

/// Everything that can go wrong in idem, each message saying what happened and what to do.
///
/// A tool annotated with `#[idempotent]` returns `Result<T, E>` with `E: From<idem_tools::Error>`, so
/// these errors flow out as the tool's own error type.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum Error {
    /// A state-changing tool was called outside of a turn.
    #[error(
        "tool `{tool}` was called outside of a turn: wrap the agent loop in \
         `idem_tools::Turn::new(turn_id).scope(async {{ ... }})` or pass a `&Turn` parameter \
         (a task started with `tokio::spawn` inside a turn does not inherit it: start it with \
         `idem_tools::spawn`)"
    )]
    NoTurn {
        /// The tool's name.
        tool: &'static str,
    },

    /// The action (this key) was attempted as often as the turn allows without recording a
    /// result: it keeps failing, or keeps being cut off.
    #[error(
        "tool `{tool}` ran {} with key {key} in this turn without a recorded \
         result (limit {limit}): it is stuck; stop retrying and report the failure instead of \
         calling it again",
        times(*attempts)
    )]
    BudgetExhausted {
        /// The tool's name.
        tool: &'static str,
        /// The key that was retried.
        key: ShortKey,
        /// Attempts made with this key since its last recorded result (not counting this call).
        attempts: u32,
        /// The configured limit.
        limit: u32,
    },

    /// The turn started as many actions as its cap allows; this call would have started a new
    /// one (a retry of an action already started is never refused by the cap).
    #[error(
        "turn `{turn}` already started {} (limit {limit}), so this new action of tool `{tool}` \
         was not started; retries of the actions already started are still run or replayed: \
         end the turn or raise `Turn::with_max_calls`",
        actions(*calls)
    )]
    TurnBudgetExhausted {
        /// The tool that was refused.
        tool: &'static str,
        /// The turn id.
        turn: String,
        /// Actions started in this turn (not counting this call).
        calls: u32,
        /// The configured limit.
        limit: u32,
    },

    /// The tool started as many actions in this turn as its cap allows; this call would have
    /// started a new one (a model looping on the tool with reworded arguments). A retry of an
    /// action already started is never refused by the cap.
    #[error(
        "tool `{tool}` already started {} in turn `{turn}` (limit {limit}), so this new action \
         was not started: the model may be looping on it with reworded arguments; retries of \
         its actions already started are still run or replayed. If the turn needs more, raise \
         the cap with `#[idempotent(actions_per_turn = N)]` on the tool or \
         `Turn::with_actions_per_tool`",
        actions(*calls)
    )]
    ToolBudgetExhausted {
        /// The tool that was refused.
        tool: &'static str,
        /// The turn id.
        turn: String,
        /// Actions this tool started in this turn (not counting this call).
        calls: u32,
        /// The configured limit.
        limit: u32,
    },

    /// The key was used before with different arguments.
    #[error(
        "tool `{tool}` was called with key {key} that was first used with different arguments: \
         {differs}"
    )]
    PayloadMismatch {
        /// The tool's name.
        tool: &'static str,
        /// The reused key.
        key: ShortKey,
        /// Where the key came from, and so which arguments can differ.
        differs: Mismatch,
        /// Whether the call that holds the key is still running (its result not recorded
        /// yet): it may still fail and give the key back.
        running: bool,
        /// What the record of the call that holds the key says became of its action, when it
        /// is not `running` ([`Earlier::Done`] while it runs): the model is told the action was
        /// done only if it was.
        earlier: Earlier,
        /// How many calls this process refused for reusing this key with other arguments,
        /// this one included (the key names its turn: every run of the turn here counts):
        /// from the second on, the model is told to stop ([`model_text`](Error::model_text)).
        refused: u32,
    },

    /// Another call with this key (in this process or another) is still running after the
    /// turn's in-flight wait.
    #[error(
        "tool `{tool}` with key {key} is still running in another call after waiting {waited:?} \
         (the turn's in-flight wait): retry in {free_within:?}, when it has finished or, if its \
         holder crashed, lost the key at the latest (its lease); give turns an in-flight wait \
         longer than the tool runs, or than its lease where an orchestrator restarts runs right \
         after a crash (`Turn::with_in_flight_wait`)"
    )]
    InFlight {
        /// The tool's name.
        tool: &'static str,
        /// The key in flight.
        key: ShortKey,
        /// How long this call waited before giving up.
        waited: Duration,
        /// When to retry: by then a holder that crashed has lost the key (the tool's lease).
        free_within: Duration,
    },

    /// A stored result could not be decoded into the tool's result type.
    #[error(
        "the stored result of tool `{tool}` for key {key} could not be decoded ({message}): \
         the record is corrupt or the result type changed; bump the tool's `version` or remove \
         the record"
    )]
    Decode {
        /// The tool's name.
        tool: &'static str,
        /// The key whose record failed to decode.
        key: ShortKey,
        /// What the decoder said.
        message: String,
    },

    /// The tool already ran for this key, but its result could not be recorded faithfully, so
    /// it cannot be replayed.
    #[error(
        "tool `{tool}` already ran for key {key} in this turn and finished, but its result cannot \
         be shown again ({message}): do not call it again with the same arguments; treat the \
         action as done and, if its outcome matters, check it another way or tell the user"
    )]
    NotReplayable {
        /// The tool's name.
        tool: &'static str,
        /// The key of the call that ran.
        key: ShortKey,
        /// Why its result was not recorded.
        message: String,
    },

    /// The tool was started for this key and interrupted before it finished.
    #[error(
        "tool `{tool}` was started earlier in this turn with key {key} and interrupted before it \
         finished: it may or may not have taken effect; do not call it again blindly: first \
         check whether it happened, or report it to the user"
    )]
    Interrupted {
        /// The tool's name.
        tool: &'static str,
        /// The key of the interrupted call.
        key: ShortKey,
    },

    /// Bytes given to [`replay::render`](crate::replay::render) are not a record.
    #[error(
        "the record could not be read ({message}): it is corrupt or was written by a newer \
         version of idem"
    )]
    UnreadableRecord {
        /// What is wrong with it.
        message: String,
    },

    /// An argument or a result could not be encoded.
    #[error("tool `{tool}`: could not encode {what} ({message}); check its `Serialize` impl")]
    Encode {
        /// The tool's name.
        tool: &'static str,
        /// What failed to encode (an argument name or "its result").
        what: String,
        /// What the encoder said.
        message: String,
    },

    /// The dedup store failed; the tool was not run (idem fails closed).
    #[error(
        "the idempotency store failed during {operation} ({source}); the tool was not run \
         without a lock, retry when the store is reachable"
    )]
    Store {
        /// The store operation that failed.
        operation: &'static str,
        /// The underlying error.
        #[source]
        source: Box<dyn std::error::Error + Send + Sync + 'static>,
    },

    /// A tool called itself with the same key from inside its own run.
    #[error(
        "tool `{tool}` called itself with its own key {key} while running: the inner call would \
         wait for the outer one forever; give the inner call different arguments or a new turn"
    )]
    Reentrant {
        /// The tool's name.
        tool: &'static str,
        /// The key of the running call.
        key: ShortKey,
    },

    /// A claim could not be kept: the store did not answer a renewal in time, or another
    /// caller holds the key now. The tool's body was stopped (or its result not recorded).
    #[error(
        "the lease on key {key} was lost (the store could not renew it in time, or another \
         caller took the key over): the tool was stopped or its result was not recorded; if \
         the store is slow, raise the tool's `lease`"
    )]
    LeaseLost {
        /// The key whose lease was lost.
        key: ShortKey,
    },

    /// A stored record is malformed.
    #[error("corrupt record for key {key} in the store: {message}; remove it with the admin API")]
    CorruptRecord {
        /// The key of the corrupt record.
        key: ShortKey,
        /// What is wrong with it.
        message: String,
    },

    /// Two different tools reached the engine under one name, so they would share keys.
    #[error(
        "two different tools are named `{name}` in this process, so they would share \
         idempotency keys and replay each other's results; this call was refused: give one of \
         them `#[idempotent(name = \"…\")]` (for methods, `#[idem_tools::tool_impl]` on the impl \
         block names them `Type__method`; two blocks of one generic type, `impl Payout<Usd>` and \
         `impl Payout<Eur>`, get the same names: give the methods of one its own `name`)"
    )]
    DuplicateTool {
        /// The shared name.
        name: &'static str,
    },

    /// The key's record was made by another tool of the same name: its fingerprint carries
    /// another tool's mark (docs/key-spec.md, §5). Two services
    /// sharing a store and namespace with a tool of one name each, or a generic item's code
    /// compiled for another type in another process, would otherwise replay each other's
    /// results.
    #[error(
        "tool `{tool}` was called with key {key}, whose record was made by another tool of \
         the same name — one defined elsewhere (another module or crate, another service \
         sharing this store and namespace), the same generic code compiled for another type, \
         or this tool before it moved to another module or its crate was renamed — so this call \
         was refused and nothing ran now (the earlier call may have done the action): give each \
         tool its own `#[idempotent(name = \"…\")]`, each service its own namespace \
         (`Turn::with_namespace`), or a generic item's tool a `self_key` that names the type; \
         if this tool moved, its retries of calls recorded before the move are refused until \
         those records expire (`idem remove KEY` deletes one)"
    )]
    NameClash {
        /// The tool's name.
        tool: &'static str,
        /// The key whose record is another tool's.
        key: ShortKey,
    },

    /// One tool's code compiled for two types — a trait's default method called on two
    /// implementing types, or a method of a generic `impl` block on two of its parameters — with
    /// nothing of the type in the key: they would share keys, so the second type is refused.
    #[error(
        "tool `{name}` is one function compiled for several types, and its key does not say \
         which: `{now}` would share idempotency keys with `{first}` (which called first) and \
         replay its results, so this call was refused. Give each type its own tool: implement \
         the method in each `impl` (with its own `name`) rather than as a trait's default, or, \
         for a method with `self`, put the type in its `self_key`: on a trait's default method \
         `#[idempotent(self_key = (Self::CODE, self.account()))]`, in a generic `impl` block \
         `#[idem_tools::tool_impl(self_key = (C::CODE, &self.account))]` (a `self_key` names \
         the type when it mentions `Self` or a parameter of the `#[tool_impl]` block; the \
         receiver's identity alone is the same for both types); for a function without \
         `self`, take that identity as an argument or write it in each concrete `impl`"
    )]
    SharedAcrossTypes {
        /// The tool's name.
        name: &'static str,
        /// The instantiation that called first (a type name, as `std::any::type_name` writes
        /// it).
        first: &'static str,
        /// The instantiation refused.
        now: &'static str,
    },

    /// A transactional tool's body ended the transaction idem opened for it: a `COMMIT` or
    /// `ROLLBACK` sent on its connection.
    #[error(
        "tool `{tool}` ended the transaction idem opened for it (a COMMIT or ROLLBACK sent on \
         its connection, or a savepoint of it that failed or was dropped, which sqlx rolls back \
         with the whole transaction), so nothing of this call was recorded; {}: run every \
         statement of the tool on its connection without ending the transaction, and handle a \
         failed statement by returning its error",
        match kept {
            KeyKept::Committed => "what it wrote before may have committed, so its key is kept \
                as interrupted",
            KeyKept::MarkedAfter => "its claim was rolled back, but what it ran afterwards ran \
                outside any transaction and may have committed, so its key is kept as \
                interrupted",
            KeyKept::NotKept => "its claim was rolled back, but what it ran afterwards ran \
                outside any transaction and may have committed, and its key could not be kept \
                as interrupted (another call holds or recorded it, or the store failed), so a \
                retry may run the tool again",
        }
    )]
    TransactionEnded {
        /// The tool's name.
        tool: &'static str,
        /// The call's key.
        key: ShortKey,
        /// What became of the key: whether retries are told the outcome is unknown.
        kept: KeyKept,
    },

    /// A transactional tool ran, but committing its transaction failed: all of it committed,
    /// the result with it, or none of it did.
    #[error(
        "tool `{tool}` ran in its transaction, but committing it failed ({message}): either all \
         of it committed with its result or none of it did; a retry finds out — it replays the \
         result, or runs the tool"
    )]
    CommitFailed {
        /// The tool's name.
        tool: &'static str,
        /// The call's key.
        key: ShortKey,
        /// What failed.
        message: String,
    },

    /// A model step of a durable turn was asked with another request than the one recorded
    /// for it: the run that recorded it and this run are two different conversations.
    #[error(
        "step {step} of conversation `{conversation}` in turn `{turn}` asks the model something \
         other than the step recorded for it (the prompt, the tools or a tool's result changed \
         since the turn first ran this far — a tool call that failed then and succeeded when \
         retried replays its success now, unless its failure was recorded with \
         `Conversation::model_tool_call`): the run was stopped before anything was sent, \
         rather than mix two conversations. Check what the turn did (`idem turn {turn}`) before \
         starting a new turn: a new turn's tool calls are new actions, so the ones this turn \
         made would run again. Keep what changes between runs out of the request (a date in \
         the prompt; a `#[read_only]` tool whose result changes can be made `#[idempotent]` so \
         that it replays)"
    )]
    ModelStepDiverged {
        /// The conversation's label.
        conversation: String,
        /// The step's index in the conversation (0 for the first).
        step: u32,
        /// The turn id.
        turn: String,
    },

    /// Another run of the turn runs at the same time as this one (an orchestrator resumed the
    /// turn twice), and a call its model made after a step failed in one run and was made again
    /// by the other: this run stopped rather than go on from an outcome the other run's model
    /// does not read. Nothing was started.
    #[error(
        "another run of turn `{turn}` runs at the same time as this one: a call of tool `{tool}` \
         made after step {step} of conversation `{conversation}` failed in one run and was made \
         again by the other, so this run stopped before it told its model something the other \
         run's model does not read (which could start the action again with reworded \
         arguments); nothing was started. Resume a turn in one run at a time (a lock or a queue \
         per turn id in the orchestrator): the other run goes on unless it was stopped too, \
         and a run resumed alone replays what both did and goes on"
    )]
    RunOverlap {
        /// The turn id.
        turn: String,
        /// The conversation's label.
        conversation: String,
        /// The step the call followed (0 for the first).
        step: u32,
        /// The tool that was called.
        tool: String,
    },

    /// The turn's model steps reported as many tokens as its cap allows; this step would have
    /// asked the model again.
    #[error(
        "turn `{turn}` already spent {spent} tokens on its model steps (limit {limit}), so this \
         step was not sent; steps already recorded still replay: end the turn or raise \
         `Turn::with_max_tokens`"
    )]
    TokenBudgetExhausted {
        /// The turn id.
        turn: String,
        /// Tokens reported by the turn's steps so far.
        spent: u64,
        /// The configured limit.
        limit: u64,
    },

    /// The turn asked its model as many times as its cap allows; this step would have asked it
    /// again (an agent loop that does not end).
    #[error(
        "turn `{turn}` already asked its model {} (limit {limit}), so this step was not sent; \
         steps already recorded still replay: end the turn or raise `Turn::with_max_model_steps`",
        times(*steps)
    )]
    ModelStepsExhausted {
        /// The turn id.
        turn: String,
        /// Steps that asked the model in this turn (not counting this one).
        steps: u32,
        /// The configured limit.
        limit: u32,
    },

    /// An invalid configuration value.
    #[error("invalid configuration: {0}")]
    Config(String),
}

/// `once`, `twice`, `3 times`.
pub(crate) fn times(n: u32) -> String {
    match n {
        1 => "once".to_owned(),
        2 => "twice".to_owned(),
        n => format!("{n} times"),
    }
}

/// What became of the key of a transactional call whose body ended its own transaction
/// ([`Error::TransactionEnded`]).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum KeyKept {
    /// The body committed the claim with what it wrote before: the claim stands as an
    /// interrupted call's record, so retries are told the outcome is unknown.
    Committed,
    /// The claim was rolled back; the key was marked interrupted afterwards, under a new claim,
    /// so retries are told the outcome is unknown.
    MarkedAfter,
    /// The claim was rolled back and the key could not be marked: another call holds or
    /// recorded it, or the store failed. A retry may run the tool again.
    NotKept,
}

/// Which arguments differ when a key is reused with other arguments
/// ([`Error::PayloadMismatch`]), as far as idem can tell.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Mismatch {
    /// The key is this argument of the call (`#[key]`), which the model sets: any other
    /// argument may differ, and a new action needs a new value of it. `""` for a pattern
    /// parameter, whose name (`argN`) the model does not know.
    KeyArgument(&'static str),
    /// The key was supplied by the application calling the tool (MCP's
    /// `_meta["idempotencyKey"]`), not by the model: any argument may differ, and the model
    /// cannot give a new key.
    ClientKey,
    /// The key was derived from the arguments: one of these, in the fingerprint but not in the
    /// key (`skip(..)`), differs.
    Unkeyed(Unkeyed),
}

/// What became of the earlier call that holds a key reused with other arguments
/// ([`Error::PayloadMismatch`]'s `earlier`), as its record says.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Earlier {
    /// It finished and its result is recorded (or it finished and its result cannot be
    /// replayed): the action was done.
    Done,
    /// It failed and its `Err` is recorded (`cache_errors`): the action was not done, and its
    /// failure answers every call with its exact arguments.
    Failed,
    /// It was cut off before it finished (its key is kept interrupted): the action may or may
    /// not have taken effect.
    Interrupted,
    /// Its record cannot be read (damaged, or written by a newer version of idem): whether the
    /// action was done is not known.
    Unknown,
}

/// The arguments of a call that are in its fingerprint but not in its key: those of a tool's
/// `skip(..)` that were `Serialize` (the others are in neither).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Unkeyed {
    skipped: &'static [&'static str],
    /// Bit `i` set: `skipped[i]` is in the fingerprint (past 32, all are).
    present: u32,
}

impl Unkeyed {
    /// All of `skipped`.
    pub const fn all(skipped: &'static [&'static str]) -> Self {
        Unkeyed {
            skipped,
            present: u32::MAX,
        }
    }

    /// Those of `skipped` whose bit is set in `present` (bit `i` for `skipped[i]`; from the 33rd
    /// on, all are kept).
    pub const fn new(skipped: &'static [&'static str], present: u32) -> Self {
        Unkeyed { skipped, present }
    }

    /// Their names, in order.
    pub fn names(&self) -> impl Iterator<Item = &'static str> + '_ {
        self.skipped
            .iter()
            .enumerate()
            .filter(|(i, _)| *i >= 32 || self.present & (1 << i) != 0)
            .map(|(_, name)| *name)
    }

    /// `` `memo` ``, `` `memo`, `note` ``, and how many.
    pub(crate) fn listed(&self) -> (String, usize) {
        let names: Vec<String> = self.names().map(|n| format!("`{n}`")).collect();
        (names.join(", "), names.len())
    }
}

impl std::fmt::Display for Mismatch {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        const ONE_ACTION: &str = "must identify exactly one action — the same arguments, and \
             for a tool with a `self_key` the same instance (its `self_key` is in the \
             fingerprint, not the key)";
        let (names, count) = match self {
            Mismatch::Unkeyed(unkeyed) => unkeyed.listed(),
            Mismatch::KeyArgument("") => {
                return write!(
                    f,
                    "the `#[key]` argument (a pattern) {ONE_ACTION}; a new action needs a new key"
                );
            }
            Mismatch::KeyArgument(name) => {
                return write!(
                    f,
                    "the `#[key]` argument `{name}` {ONE_ACTION}; a new action needs a new `{name}`"
                );
            }
            Mismatch::ClientKey => {
                return write!(
                    f,
                    "a key the application supplied (MCP's `_meta[\"idempotencyKey\"]`) \
                     {ONE_ACTION}; the application must send a new key for a new action"
                );
            }
        };
        match count {
            0 => write!(f, "a key {ONE_ACTION}; use a new key for a new action"),
            1 => write!(
                f,
                "every argument in the key is the same, and {names}, which is in `skip(..)` (in \
                 the fingerprint, not the key), differs; a retry of one action must repeat it, \
                 or leave it out of the fingerprint too with `ignore(..)`"
            ),
            _ => write!(
                f,
                "every argument in the key is the same, and one of {names}, which are in \
                 `skip(..)` (in the fingerprint, not the key), differs; a retry of one action \
                 must repeat them, or leave them out of the fingerprint too with `ignore(..)`"
            ),
        }
    }
}

/// `1 action`, `3 actions`.
pub(crate) fn actions(n: u32) -> String {
    match n {
        1 => "1 action".to_owned(),
        n => format!("{n} actions"),
    }
}

impl Error {
    /// Wraps any error from a store backend.
    pub fn store(
        operation: &'static str,
        source: impl Into<Box<dyn std::error::Error + Send + Sync + 'static>>,
    ) -> Self {
        Error::Store {
            operation,
            source: source.into(),
        }
    }
}

/// `Result` with [`Error`] as its error type.
pub type Result<T, E = Error> = std::result::Result<T, E>;

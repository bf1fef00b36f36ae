//! Durable turns: the model's side of a turn, recorded step by step.
//!
//! An agent's turn is a conversation — the model asked, its answer, tool calls, the model asked
//! again — and an orchestrator that restarts a failed run from the top with the same turn id
//! asks the model again. The model rewords (`"coffee for Ada."` instead of `"Coffee for
//! Ada"`), its tool calls get new keys, and the actions run twice. A [`Conversation`] records
//! each model call of a turn as a **step** in the turn's store, through the engine that records
//! tool calls: a restarted run gets the earlier responses back without sending anything, so its
//! tool calls carry the same arguments and replay too, and it goes on live from the first step
//! that was not recorded.
//!
//! A step is keyed by the turn, the conversation's label and the step's index in this run of
//! the turn (the n-th model call of the conversation) — and, for an agent run inside a tool
//! call, that call (`conversation/scope.rs`) — and fingerprinted by its request. A
//! restarted run whose request differs from the recorded one at some step (the prompt changed,
//! the tools changed, a `#[read_only]` tool returned something else) is **stopped** there with
//! [`Error::ModelStepDiverged`], before anything is sent: going on live would mix the
//! responses of two conversations, and the keys of the old one's later steps would meet the new
//! one at the next restart.
//!
//! A tool call that failed and went through when the model retried it would go through at once
//! in a restarted run, and the next request would differ: [`Conversation::model_tool_call`]
//! records the failures a model reads ([`tool_failure`]).
//!
//! Model steps are counted like tool calls: a step's attempts by the turn's per-key budget, and
//! the tokens its response reports (where the caller says how: [`Conversation::step_counting`])
//! by [`Turn::with_max_tokens`]. Asking a model has no side effect, so a step cut off by its
//! caller while the model is asked gives its key back: a restarted run asks again. (One cut
//! off once the model answered, while the answer is recorded, keeps it: the record lands in
//! the background, and the step replays it: answer a step's error by asking the same step
//! again, which replays what the store kept as a restarted run will, rather than by another
//! path — docs/guarantees.md, "Known limits". A step whose record's reply was lost looks the
//! record up, and answers it if it landed.)

use std::collections::HashMap;
use std::future::Future;
use std::sync::atomic::{AtomicBool, AtomicU32, AtomicU64, Ordering};
use std::sync::{Arc, Mutex, PoisonError};
use std::time::Duration;

use serde::Serialize;
use serde::de::DeserializeOwned;

use crate::engine::{Call, Codec, execute};
use crate::key::{ArgsDigest, Key};
use crate::tool::ToolInfo;
use crate::{Error, Turn};

/// How long a model step is claimed for unless the conversation says otherwise
/// ([`Conversation::with_lease`]): renewed while the model is asked, so a long answer is fine;
/// it is how long a run killed while asking holds the step, kept below the default in-flight
/// wait (10 s) so that a run restarted right away waits for it instead of failing.
pub const DEFAULT_STEP_LEASE: Duration = Duration::from_secs(5);

/// What a model step is to the engine and the store: a tool named `idem:model` (a name no
/// annotated tool can have), whose key is given back when its caller goes away, claimed for
/// [`DEFAULT_STEP_LEASE`].
pub static MODEL_STEP: ToolInfo = ToolInfo::idempotent("idem:model")
    .with_release_on_cancel()
    .with_lease(DEFAULT_STEP_LEASE);

pub(crate) mod overlap;
pub(crate) mod scope;
pub mod tool_failure;

use tool_failure::{Calls, StepRecord};

/// A conversation's name in a run: its scope ([`scope`]) and its label.
type Named = (Option<Key>, Arc<str>);

/// One run of a turn: its conversations, the tokens its steps reported, and which conversation
/// of each scope answered a step last.
#[derive(Default)]
pub(crate) struct Run {
    conversations: Mutex<HashMap<Named, Arc<Shared>>>,
    tokens: AtomicU64,
    latest: Mutex<HashMap<Option<Key>, Arc<str>>>,
    /// The keys given back by calls its models made, and when this run claimed each again, on
    /// its `clock` (none while it holds no claim of it): a key it claimed again since is no
    /// sign of another run (`overlap`).
    claims: Mutex<HashMap<Key, Option<u64>>>,
    /// Ticks at each key given back and each claim after the first; 0 until a key is given
    /// back (claims are not kept before).
    clock: AtomicU64,
}

impl Run {
    /// The label of the conversation of `scope` that answered a step last.
    fn latest(&self, scope: Option<Key>) -> Option<Arc<str>> {
        let latest = self.latest.lock().unwrap_or_else(PoisonError::into_inner);
        latest.get(&scope).cloned()
    }

    fn set_latest(&self, scope: Option<Key>, label: Arc<str>) {
        let mut latest = self.latest.lock().unwrap_or_else(PoisonError::into_inner);
        latest.insert(scope, label);
    }
}

/// A conversation's state in one run, shared by its clones: its steps, and the tool calls its
/// model made since its latest step.
#[derive(Default)]
struct Shared {
    steps: tokio::sync::Mutex<Steps>,
    calls: Mutex<Calls>,
    /// The step this run holds the claim of and asks, plus one (0: none).
    asking: AtomicU32,
}

/// The steps of one conversation in this run.
#[derive(Default)]
struct Steps {
    /// Steps answered so far: the index of the next one.
    answered: u32,
    /// How many times this run asked the model for the next step and the ask failed.
    failed: u32,
    /// A digest of step 0's request: a later step asked with it is a run restarted from the
    /// top with the same `Turn` value (`restarted_in_place`).
    first_request: Option<blake3::Hash>,
}

/// One conversation with a model in a turn, its model calls recorded as steps: see
/// [the module documentation](self).
///
/// A conversation is named by its turn and its label: [`Turn::conversation`] hands out the same
/// steps for the same label to every clone of a turn, and a restarted run — a new [`Turn`]
/// with the same id and namespace — starts again at step 0, replaying. Steps of one
/// conversation run one at a time, in order; give concurrent conversations of one turn (a
/// planner and a writer) labels of their own.
///
/// ```
/// # extern crate idem_tools_runtime as idem_tools;
/// use idem_tools::Turn;
///
/// # #[tokio::main(flavor = "current_thread")] async fn main() -> Result<(), idem_tools::Error> {
/// let ask_model = |prompt: String| async move {
///     Ok::<_, idem_tools::Error>(format!("a reply to {prompt}")) // the model's API
/// };
/// let turn = Turn::new("conv-42/turn-7");
/// let chat = turn.conversation("assistant");
/// let first = chat.step("Tell Ada hi", ask_model("Tell Ada hi".into())).await?;
///
/// // The run is restarted from the top: the model is not asked again.
/// let again = Turn::new("conv-42/turn-7").conversation("assistant");
/// let replayed = again.step("Tell Ada hi", ask_model("not sent".into())).await?;
/// assert_eq!(replayed, "a reply to Tell Ada hi");
/// assert_eq!(first, replayed);
/// # Ok(()) }
/// ```
#[derive(Clone)]
pub struct Conversation {
    turn: Turn,
    label: Arc<str>,
    lease: Option<Duration>,
    ttl: Option<Duration>,
}

/// A conversation as named where it is used: its scope ([`scope`]) and its state there.
#[derive(Clone)]
struct Here {
    scope: Option<Key>,
    shared: Arc<Shared>,
}

impl Turn {
    /// The conversation `label` of this run of the turn: see [`Conversation`]. Used inside a
    /// tool call — an agent run by a tool — it is that call's own: its steps there are neither
    /// the turn's conversation of the same label nor those of another call.
    pub fn conversation(&self, label: &str) -> Conversation {
        Conversation {
            turn: self.clone(),
            label: Arc::from(label),
            lease: None,
            ttl: None,
        }
    }

    /// The tokens this run's model steps reported so far, replayed steps included.
    pub fn tokens_spent(&self) -> u64 {
        self.run().tokens.load(Ordering::Relaxed)
    }
}

impl Conversation {
    /// The turn it belongs to.
    pub fn turn(&self) -> &Turn {
        &self.turn
    }

    /// This conversation in the scope it is used in (the innermost call this task runs in).
    fn here(&self) -> Here {
        let scope = scope::current();
        let mut conversations = self
            .turn
            .run()
            .conversations
            .lock()
            .unwrap_or_else(PoisonError::into_inner);
        let shared = conversations
            .entry((scope, Arc::clone(&self.label)))
            .or_default();
        Here {
            scope,
            shared: Arc::clone(shared),
        }
    }

    /// Its label.
    pub fn label(&self) -> &str {
        &self.label
    }

    /// How long each live step is claimed ([`with_lease`](Self::with_lease); by default
    /// [`DEFAULT_STEP_LEASE`]).
    pub fn lease(&self) -> Duration {
        self.lease.unwrap_or(DEFAULT_STEP_LEASE)
    }

    /// Claims each live step for `lease` instead of [`DEFAULT_STEP_LEASE`] (5 s). The lease
    /// is renewed while the model is asked; it is how long a run killed while asking
    /// (`SIGKILL`, a lost host) holds the step, and a restarted run waits for it at most its
    /// turn's [in-flight wait](Turn::with_in_flight_wait) (10 s by default) before failing
    /// with [`Error::InFlight`]: keep it below that wait.
    #[must_use]
    pub fn with_lease(mut self, lease: Duration) -> Self {
        self.lease = Some(lease);
        self
    }

    /// How long each recorded step is kept, if [`with_ttl`](Self::with_ttl) said (else the
    /// default TTL).
    pub fn ttl(&self) -> Option<Duration> {
        self.ttl
    }

    /// Keeps each recorded step (the model's answer, and the tool failures it was asked with)
    /// for `ttl` instead of the default TTL (one day, [`DEFAULT_TTL`](crate::store::DEFAULT_TTL)).
    /// A run restarted after its steps expired asks the model again, which may reword the
    /// arguments of tool calls already made: keep the steps at least as long as the tools they
    /// call keep their results (their `ttl`).
    #[must_use]
    pub fn with_ttl(mut self, ttl: Duration) -> Self {
        self.ttl = Some(ttl);
        self
    }

    /// How many of its steps this run has answered (replayed or live): the index of the next.
    pub async fn steps(&self) -> u32 {
        self.here().shared.steps.lock().await.answered
    }

    /// The next step: `call`, the model's answer to `request`, unless this turn recorded the
    /// answer to that step already — then the recorded answer, and `call` is dropped unpolled.
    /// `request` is what the model is sent (it is fingerprinted, not recorded); the response is
    /// recorded and must replay exactly (`Serialize` and `DeserializeOwned`, checked before it
    /// is recorded). An `Err` is not recorded: the step is asked again — by this run at most
    /// the turn's per-key budget of times ([`Turn::with_max_attempts_per_key`], 3; an ask its
    /// caller cut off, the step's future dropped before the model answered, counts as failed),
    /// then it is refused with [`Error::BudgetExhausted`] without asking. A run restarted (a new
    /// [`Turn`] value) asks again: asking a model changes nothing, so failed asks are not
    /// counted across runs.
    ///
    /// # Errors
    /// `call`'s own errors; [`Error::ModelStepDiverged`] if the step was recorded for another
    /// request; [`Error::RunOverlap`] if another run of the turn has made a call since that
    /// this run's model read as failed (see [`model_tool_call`](Self::model_tool_call));
    /// [`Error::BudgetExhausted`] once this run's asks of the step all failed; any error of a
    /// tool call ([`execute`]) converted with `E: From<Error>`.
    pub async fn step<Req, Resp, E, F>(&self, request: &Req, call: F) -> Result<Resp, E>
    where
        Req: Serialize + ?Sized,
        Resp: Serialize + DeserializeOwned + Send,
        E: From<Error> + Send,
        F: Future<Output = Result<Resp, E>> + Send,
    {
        self.step_counting(request, |_: &Resp| None, call).await
    }

    /// [`step`](Self::step), counting the tokens the response reports (`tokens` reads them from
    /// it, replayed or live) against the turn's [`with_max_tokens`](Turn::with_max_tokens): a
    /// step that would ask the model once the cap is reached is refused with
    /// [`Error::TokenBudgetExhausted`], and its key given back.
    ///
    /// # Errors
    /// As [`step`](Self::step), and [`Error::TokenBudgetExhausted`].
    pub async fn step_counting<Req, Resp, E, F>(
        &self,
        request: &Req,
        tokens: impl FnOnce(&Resp) -> Option<u64>,
        call: F,
    ) -> Result<Resp, E>
    where
        Req: Serialize + ?Sized,
        Resp: Serialize + DeserializeOwned + Send,
        E: From<Error> + Send,
        F: Future<Output = Result<Resp, E>> + Send,
    {
        let here = self.here();
        let mut steps = here.shared.steps.lock().await;
        let step = steps.answered;
        let turn = &self.turn;
        let mut args = self.step_args(here.scope, step)?;
        args.fingerprint_arg("request", request)?;
        let (key, fingerprint) = args.finish(
            turn.namespace(),
            turn.id(),
            MODEL_STEP.name,
            MODEL_STEP.version,
        );
        let mut call_ = Call::new(&MODEL_STEP, turn, key, fingerprint)
            .model_step(Arc::clone(&self.label), step);
        if let Some(lease) = self.lease {
            call_ = call_.with_lease(lease);
        }
        if let Some(ttl) = self.ttl {
            call_ = call_.with_ttl(ttl);
        }
        // Only a step that is asked live reaches its body: a recorded one (by another run, too)
        // replays whatever this run's failures and the token cap say.
        let limit = turn.model_step_attempts();
        let cap = turn.max_tokens().map(|limit| (limit, turn.clone()));
        let asked = AtomicBool::new(false);
        let (failures, doubted) = {
            let calls = here.calls();
            (calls.pending(), calls.doubted())
        };
        if step == 0 {
            steps.first_request = request_digest(request);
        }
        let first_request = steps.first_request;
        let failed = &mut steps.failed;
        let body = async {
            // The step's claim is this run's: its calls meanwhile need not wait for the step.
            let _asking = overlap::Asking::step(&here.shared.asking, step);
            if *failed >= limit {
                return Err(E::from(Error::BudgetExhausted {
                    tool: MODEL_STEP.name,
                    key: key.short(),
                    attempts: *failed,
                    limit,
                }));
            }
            if let Some((limit, turn)) = cap {
                let spent = turn.tokens_spent();
                if spent >= limit {
                    let turn = turn.id().to_owned();
                    return Err(E::from(Error::TokenBudgetExhausted { turn, spent, limit }));
                }
            }
            if !doubted.is_empty() {
                // The step is claimed: now a call another run made again since its model read
                // it failed would tell a story this run's model does not read.
                let after = step.saturating_sub(1);
                // Refused (another run made a call again) or not known (the store did not
                // answer): a tool that runs the conversation must not record it as its `Err`.
                overlap::outdated(self, after, &doubted)
                    .await
                    .map_err(|error| {
                        crate::engine::held::refused();
                        E::from(error)
                    })?;
            }
            asked.store(true, Ordering::Relaxed);
            // Counted as failed until the model answers: an ask cut off by its caller (a
            // timeout drops the step) is a failed ask too.
            *failed += 1;
            let response = call.await?;
            Ok(StepRecord { failures, response })
        };
        let answer = execute(call_, Codec::ok_only(), body).await;
        let response = match answer {
            Ok(StepRecord { response, .. }) => response,
            // A failed ask was counted when it was asked; a refusal before asking, or
            // another run's claim, is not.
            Err(error) => return Err(error),
        };
        steps.failed = 0;
        steps.answered += 1;
        let replayed = !asked.load(Ordering::Relaxed);
        let repeats_step_0 = || first_request.is_some() && first_request == request_digest(request);
        if !replayed && step > 0 && repeats_step_0() {
            restarted_in_place(turn, &self.label, step);
        }
        here.calls().stepped(step, replayed, &doubted);
        turn.run().set_latest(here.scope, Arc::clone(&self.label));
        if let Some(spent) = tokens(&response) {
            turn.run().tokens.fetch_add(spent, Ordering::Relaxed);
        }
        Ok(response)
    }
}

/// A digest of a step's request (`None` if it does not encode: the step's key says why).
fn request_digest<Req: Serialize + ?Sized>(request: &Req) -> Option<blake3::Hash> {
    crate::key::encode_value(request)
        .ok()
        .map(|bytes| blake3::hash(&bytes))
}

/// Warns that step `step` of `label` is asked with step 0's request: a run restarted from the
/// top with the `Turn` value of the run before goes on after that run's last step and asks the
/// model again, where a new `Turn` would replay its steps.
fn restarted_in_place(turn: &Turn, label: &str, step: u32) {
    tracing::warn!(target: "idem", turn = turn.id(), conversation = label, step,
        "this step is asked with the request of step 0: a run restarted from the top with the \
         same `Turn` value goes on after its last step and asks the model again (and its tool \
         calls may be new actions); give a restarted run a new `Turn` (`Turn::new` with the same \
         id), whose steps replay");
}

impl Conversation {
    /// The key arguments of step `step`: the conversation (its scope, if it has one, and its
    /// label) and the step's index.
    fn step_args(&self, scope: Option<Key>, step: u32) -> Result<ArgsDigest, Error> {
        let mut args = ArgsDigest::new(MODEL_STEP.name);
        args.arg("conversation", &*self.label)?;
        args.arg("step", &step)?;
        if let Some(scope) = scope {
            args.arg("within", scope.as_bytes())?;
        }
        Ok(args)
    }

    /// The key of step `step` in `scope` (the request goes into its fingerprint, not its key).
    fn step_key(&self, scope: Option<Key>, step: u32) -> Result<Key, Error> {
        let turn = &self.turn;
        let args = self.step_args(scope, step)?;
        let (key, _) = args.finish(
            turn.namespace(),
            turn.id(),
            MODEL_STEP.name,
            MODEL_STEP.version,
        );
        Ok(key)
    }
}

impl std::fmt::Debug for Conversation {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Conversation")
            .field("turn", &self.turn.id())
            .field("label", &self.label)
            .finish_non_exhaustive()
    }
}

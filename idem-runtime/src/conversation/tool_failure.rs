//! Durable turns: the failures of tool calls that a model read, recorded with the model's next
//! step so that a restarted run reads them again.
//!
//! A model that reads a failed tool call (a timeout, a provider down, a refusal) often calls the
//! tool again, and the retry succeeds. A restarted run replays the model's steps, so it makes
//! the failed call again — and this time the call may succeed. The model's next request would
//! then hold a success where the recorded step saw a failure, and the run would stop with
//! [`Error::ModelStepDiverged`]: the turn could not be finished.
//!
//! [`Conversation::model_tool_call`] keeps each failure a model read of a call made after one
//! of its steps, by the tool, its arguments as the model sent them and the call's order among
//! the calls of that tool with those arguments since the step; the conversation's next step is
//! recorded with them, in the same record. A restarted run that replays a step reads the
//! failures recorded with the step after it, and a call that failed then fails again with the
//! same failure, without running. The failures are the next step's: a run that makes the
//! calls and then diverges, or is cut off before its next step, leaves nothing that a later run
//! would read.

use std::collections::HashMap;
use std::convert::Infallible;
use std::future::Future;
use std::sync::{Arc, MutexGuard, PoisonError};
use std::time::Duration;

use tokio::time::Instant;

use serde::de::DeserializeOwned;
use serde::{Deserialize, Serialize};

use super::MODEL_STEP;
use super::overlap::{Released, Watch};
use crate::key::{ArgsDigest, Key};
use crate::replay::{OkOnly, Recorded, ResultCodec};
use crate::store::{RecordState, default_store};
use crate::{Conversation, Error, Turn};

/// A model step as recorded: the model's response, and the failures the conversation's model
/// read of the calls made after the step before it.
#[derive(Serialize, Deserialize)]
pub(super) struct StepRecord<R> {
    pub(super) failures: Vec<ReadFailure>,
    pub(super) response: R,
}

/// The failures of a recorded step, its response left unread.
#[derive(Serialize, Deserialize)]
struct FailuresOf {
    failures: Vec<ReadFailure>,
}

/// A failure a model read: which call (its tool and arguments), its order among the calls of
/// that tool with those arguments since the step before, and the failure as recorded.
#[derive(Clone, Serialize, Deserialize)]
pub(super) struct ReadFailure {
    call: [u8; 32],
    order: u32,
    failure: Vec<u8>,
}

impl ReadFailure {
    /// Whether it is the failure of the `order`-th call of `made`.
    pub(super) fn is(&self, made: Key, order: u32) -> bool {
        self.call == *made.as_bytes() && self.order == order
    }
}

/// The calls a conversation's model made since its latest step, in this run.
#[derive(Default)]
pub(super) struct Calls {
    /// The latest step answered, and whether it was replayed: then the next step may be
    /// recorded already, with the failures of the calls made in between.
    pub(super) after: Option<(u32, bool)>,
    /// How many times each call (by tool and arguments) was made since the step.
    made: HashMap<Key, u32>,
    /// How many times the step's response asked for each call, where the caller said
    /// ([`Conversation::expect_tool_call`]).
    requested: HashMap<Key, u32>,
    /// The failures read since the step, for the next step's record.
    pending: Vec<ReadFailure>,
    /// The failures recorded with the next step, once read (while replaying): that step's
    /// index, and its failures.
    recorded: Option<(u32, Arc<[ReadFailure]>)>,
    /// The tool calls made in the model's calls since the step that gave their key back after
    /// a failure: another run that has claimed one since stops this run at the next step
    /// (`overlap`).
    pub(super) doubted: Vec<Released>,
}

impl Calls {
    /// Step `step` was answered (`replayed`: from its record), having checked the keys
    /// `checked` gave back: the calls start over.
    pub(super) fn stepped(&mut self, step: u32, replayed: bool, checked: &[Released]) {
        // A key given back while the step was asked (a call alongside it) was not checked by
        // it: the next step checks it.
        let mut doubted = std::mem::take(&mut self.doubted);
        doubted.retain(|doubted| !checked.iter().any(|seen| seen.same(doubted)));
        *self = Calls {
            after: Some((step, replayed)),
            doubted,
            ..Calls::default()
        };
    }

    /// The failures to record with the next step.
    pub(super) fn pending(&self) -> Vec<ReadFailure> {
        self.pending.clone()
    }

    /// The tool calls made in calls the model read as failed since the step.
    pub(super) fn doubted(&self) -> Vec<Released> {
        self.doubted.clone()
    }
}

impl Conversation {
    /// Says that the response of this conversation's latest step asked for a call of `tool`
    /// with `args` (as sent): [`Turn::model_tool_call`] then takes such a call for this
    /// conversation's, whichever conversation answered a step last. rig's `RecordedModel` says
    /// it of every tool call of each response.
    pub fn expect_tool_call<A: Serialize + ?Sized>(&self, tool: &str, args: &A) {
        if let Ok(made) = call_key(&self.turn, tool, args) {
            let here = self.here();
            let mut calls = here.calls();
            if calls.after.is_some() {
                *calls.requested.entry(made).or_insert(0) += 1;
            }
        }
    }

    /// Whether the latest step's response asked for a call of `made` not made yet.
    fn expects(&self, made: Key) -> bool {
        let here = self.here();
        let calls = here.calls();
        let requested = calls.requested.get(&made).copied().unwrap_or(0);
        requested > calls.made.get(&made).copied().unwrap_or(0)
    }

    /// Runs `call`, a call of `tool` with `args` that this conversation's model asked for in
    /// its latest step and whose outcome it reads, so that a restarted run reads the same: a
    /// failure is recorded with the conversation's next step, and a restarted run that replays
    /// the steps gets the recorded failure for the same call instead of running it. See
    /// [the module documentation](self).
    ///
    /// `args` are the arguments as the model sent them; calls of one tool with the same
    /// arguments after one step are told apart by their order (as they start: two made at the
    /// same time may swap places in a restarted run — they are one action to the tool's key).
    /// A success is not recorded here: the tool's own `#[idempotent]` key replays it. A call made before the conversation's
    /// first step just runs. While the run replays the conversation's steps, the first call
    /// after a step reads the next step's record (one read of the store); otherwise nothing is
    /// read or written until the next step. A next step that another run is still asking (an
    /// orchestrator restarted a run that is alive) is waited for, up to the turn's in-flight
    /// wait ([`Turn::with_in_flight_wait`]; past it the call runs, and a warning is logged). If
    /// the store fails or does not answer within that wait, `call` runs as it would without
    /// this.
    ///
    /// Two runs of the turn at once (an orchestrator resumed it twice) are kept from reading
    /// different outcomes of an `#[idempotent]` tool called directly in `call`: once the
    /// tool's key is claimed, the next step is read again (a step another run asks is waited
    /// for, up to the in-flight wait; a failure it records for this call is returned, the tool
    /// not run; a step still asked after the wait fails the tool's call with
    /// [`Error::RunOverlap`]), and a run whose model read the failure of a call that gave its
    /// key back stops at its next step with [`Error::RunOverlap`] if another run has claimed
    /// that key since.
    ///
    /// ```
    /// # extern crate idem_tools_runtime as idem_tools;
    /// use idem_tools::Turn;
    ///
    /// /// What the model reads of a failed call.
    /// #[derive(Clone, Debug, PartialEq, serde::Serialize, serde::Deserialize)]
    /// struct Failed(String);
    ///
    /// # #[tokio::main(flavor = "current_thread")] async fn main() -> Result<(), idem_tools::Error> {
    /// let ask = |text: &'static str| async move { Ok::<_, idem_tools::Error>(text.to_owned()) };
    /// let send = |up: bool| async move {
    ///     if up { Ok(7) } else { Err(Failed("the mail server timed out".into())) }
    /// };
    /// let run = |up: bool| async move {
    ///     let chat = Turn::new("conv-9/turn-2").conversation("assistant");
    ///     let tool = chat.step("Mail Ada", ask("send_mail")).await?;
    ///     let read = chat.model_tool_call(&tool, "ada@example.com", send(up)).await;
    ///     chat.step(&format!("{read:?}"), ask("It failed: I will try again.")).await?;
    ///     Ok::<_, idem_tools::Error>(read)
    /// };
    /// assert_eq!(run(false).await?, Err(Failed("the mail server timed out".into())));
    /// // Restarted from the top: the model's steps replay, and so does the failure it read,
    /// // though the server is up now, so the model's next request is the one it sent before.
    /// assert_eq!(run(true).await?, Err(Failed("the mail server timed out".into())));
    /// # Ok(()) }
    /// ```
    pub async fn model_tool_call<A, T, F, C>(&self, tool: &str, args: &A, call: C) -> Result<T, F>
    where
        A: Serialize + ?Sized,
        F: Serialize + DeserializeOwned,
        C: Future<Output = Result<T, F>>,
    {
        let Ok(made) = call_key(&self.turn, tool, args) else {
            return call.await;
        };
        let here = self.here();
        let Some((order, after)) = here.count_call(made) else {
            return call.await;
        };
        // One in-flight wait for another run asking the next step, however often it is read.
        let give_up = tokio::time::Instant::now() + self.turn.in_flight_wait();
        if let (step, true) = after
            && let Some(read) = self
                .recorded_failure(&here, (after, give_up), step + 1, made, order)
                .await
            && let Some(failed) = decode(&read.failure)
        {
            // Kept for the next step too, should it be asked live (its record expired).
            here.keep(after, read);
            return Err(failed);
        }
        // The call is a scope of its own: an agent it runs has conversations of the call's, and
        // a call made inside it is not this conversation's. It watches the tool calls made in
        // it, for another run of the turn (`overlap`).
        let within = super::scope::of_call(here.scope, &self.label, made, order, after.0);
        let Some(within) = within else {
            return call.await;
        };
        let watch = Arc::new(Watch::new(self, &here, (after, give_up), made, order));
        let ran = super::scope::enter(within, Arc::clone(&watch), call).await;
        if let Some(read) = watch.take_recorded()
            && let Some(failed) = decode(&read.failure)
        {
            // Another run recorded this call's failure with the next step: so it failed here.
            here.keep(after, read);
            return Err(failed);
        }
        let failed = match ran {
            Ok(output) => return Ok(output),
            Err(failed) => failed,
        };
        // Kept for the next step's record, unless it cannot be replayed as it is.
        let failed: Result<F, Infallible> = Ok(failed);
        if let Some(Recorded::Faithful(bytes)) =
            <OkOnly as ResultCodec<F, Infallible>>::record(MODEL_STEP.name, &failed)
        {
            let read = ReadFailure {
                call: *made.as_bytes(),
                order,
                failure: bytes,
            };
            here.keep(after, read);
        }
        let Ok(failed) = failed;
        Err(failed)
    }
}

impl super::Here {
    /// Keeps `read` for the next step's record, if the conversation is still after the step
    /// the call followed.
    fn keep(&self, after: (u32, bool), read: ReadFailure) {
        let mut calls = self.calls();
        if calls.after == Some(after) {
            calls.pending.push(read);
        }
    }

    /// Counts a call of `made` after the latest step: its order, and the step (none before the
    /// first step).
    fn count_call(&self, made: Key) -> Option<(u32, (u32, bool))> {
        let mut calls = self.calls();
        let after = calls.after?;
        let count = calls.made.entry(made).or_insert(0);
        let order = *count;
        *count = count.saturating_add(1);
        Some((order, after))
    }

    pub(super) fn calls(&self) -> MutexGuard<'_, Calls> {
        self.shared
            .calls
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
    }
}

impl Conversation {
    /// The failure recorded with step `next` of this conversation for the `order`-th call of
    /// `made`, if that step is recorded and holds one. The step's failures are read once per
    /// step (a read the store fails, or taken while another run still asks the step, is not
    /// kept: the next call reads again).
    async fn recorded_failure(
        &self,
        here: &super::Here,
        (after, give_up): ((u32, bool), Instant),
        next: u32,
        made: Key,
        order: u32,
    ) -> Option<ReadFailure> {
        let cached = match &here.calls().recorded {
            Some((step, recorded)) if *step == next => Some(Arc::clone(recorded)),
            _ => None,
        };
        let recorded = match cached {
            Some(recorded) => recorded,
            None => {
                let read = self.read_failures(here, next, give_up).await;
                let (read, settled) = read.ok()?;
                let mut calls = here.calls();
                if settled && calls.after == Some(after) {
                    calls.recorded = Some((next, Arc::clone(&read)));
                }
                read
            }
        };
        let found = recorded.iter().find(|read| read.is(made, order))?;
        Some(found.clone())
    }

    /// The failures recorded with step `step`: none if it is not recorded (or its record does
    /// not decode); an error if the store failed or did not answer within the turn's in-flight
    /// wait. A step that another run is asking (claimed, not recorded: an orchestrator
    /// restarted a run that is still alive) is waited for, as its key would be, until
    /// `give_up` (the turn's in-flight wait after the call began): the failures it records are
    /// the ones its model read. With them, whether the read is settled (the step recorded, or
    /// not claimed at all).
    pub(super) async fn read_failures(
        &self,
        here: &super::Here,
        step: u32,
        give_up: Instant,
    ) -> Result<(Arc<[ReadFailure]>, bool), Error> {
        let scope = here.scope;
        let key = self.step_key(scope, step)?;
        let turn = &self.turn;
        let store = turn.store().unwrap_or_else(|| default_store());
        let wait = turn.in_flight_wait();
        let mut pause = Duration::from_millis(5);
        let record = loop {
            let read = tokio::time::timeout(wait, store.get(turn.namespace(), &key)).await;
            let record = read.map_err(|_| Error::store("get", "no answer within the wait"))??;
            match record {
                // This run holds the step and asks it (the call is made alongside): it records
                // no failure of another run.
                Some(r) if r.state == RecordState::InProgress && here.asks(step) => {
                    return Ok((Arc::from([]), true));
                }
                // A dead run's claim (SQLite knows its process is gone): it will record
                // nothing, and this run's next step takes it over.
                Some(r) if r.state == RecordState::InProgress && r.holder_gone => break None,
                Some(r) if r.state == RecordState::InProgress => {
                    let now = tokio::time::Instant::now();
                    if now >= give_up {
                        tracing::warn!(target: "idem", turn = turn.id(), conversation = %self.label,
                            step, waited = ?wait,
                            "another run is still asking this step: the call after the step \
                             before runs without the failures that step will record; give a \
                             turn that may be restarted while it runs a longer in-flight wait");
                        return Ok((Arc::from([]), false));
                    }
                    tokio::time::sleep(pause.min(give_up - now)).await;
                    pause = (pause * 2).min(Duration::from_millis(200));
                }
                record => break record,
            }
        };
        let failures = record.and_then(|r| r.result).and_then(|bytes| {
            let decoded =
                <OkOnly as ResultCodec<FailuresOf, ()>>::decode(MODEL_STEP.name, &key, &bytes);
            decoded.ok()?.ok()
        });
        let failures = failures.map_or_else(|| Arc::from([]), |f| Arc::from(f.failures));
        Ok((failures, true))
    }
}

impl Turn {
    /// [`Conversation::model_tool_call`] for a call whose conversation is not known (rig's
    /// [`tool`](https://docs.rs/idem-tools/latest/idem_tools/rig/fn.tool.html) calls it): the
    /// call is taken for the conversation that answered a step last if that step asked for it
    /// ([`Conversation::expect_tool_call`]; rig's `RecordedModel` says so of every response),
    /// else for the one conversation whose latest step asked for it, else for the one that
    /// answered a step last — all among the conversations of the scope it is made in: inside
    /// a tool call, those of that call (an agent the tool runs), none until one has stepped
    /// there (a call the tool's own code makes just runs). Two
    /// conversations that ask for the same call (one tool, the same arguments: one action) at
    /// the same time may have their calls taken for each other's. Without [`expect_tool_call`](Conversation::expect_tool_call), agents of one
    /// turn that run at the same time may have a call taken for another's, and a restarted run
    /// that interleaves them otherwise may then miss its failure (and stop with
    /// [`Error::ModelStepDiverged`], as without the record). Outside a durable turn (no
    /// [`Conversation`] has answered a step), `call` just runs.
    pub async fn model_tool_call<A, T, F, C>(&self, tool: &str, args: &A, call: C) -> Result<T, F>
    where
        A: Serialize + ?Sized,
        F: Serialize + DeserializeOwned,
        C: Future<Output = Result<T, F>>,
    {
        let scope = super::scope::current();
        let latest = self
            .run()
            .latest(scope)
            .map(|label| self.conversation(&label));
        let made = call_key(self, tool, args).ok();
        // The latest conversation if it expects the call, else the one conversation that does,
        // else the latest.
        let conversation = match (made, latest) {
            (Some(made), Some(latest)) if latest.expects(made) => Some(latest),
            (Some(made), latest) => self.conversation_expecting(scope, made).or(latest),
            (None, latest) => latest,
        };
        match conversation {
            Some(conversation) => conversation.model_tool_call(tool, args, call).await,
            None => call.await,
        }
    }

    /// The one conversation of `scope` in this run whose latest step asked for a call of
    /// `made` not made yet (none if several did: which one a call is would depend on the
    /// map's order).
    fn conversation_expecting(&self, scope: Option<Key>, made: Key) -> Option<Conversation> {
        let labels: Vec<Arc<str>> = {
            let conversations = self
                .run()
                .conversations
                .lock()
                .unwrap_or_else(PoisonError::into_inner);
            let here = conversations.keys().filter(|(within, _)| *within == scope);
            here.map(|(_, label)| Arc::clone(label)).collect()
        };
        let mut expecting = labels
            .iter()
            .map(|label| self.conversation(label))
            .filter(|conversation| conversation.expects(made));
        let first = expecting.next();
        match expecting.next() {
            None => first,
            Some(_) => None,
        }
    }
}

/// What tells a call apart: the tool and the arguments the model sent.
fn call_key<A: Serialize + ?Sized>(turn: &Turn, tool: &str, args: &A) -> Result<Key, Error> {
    let mut digest = ArgsDigest::new(MODEL_STEP.name);
    digest.arg("tool", tool)?;
    digest.arg("args", args)?;
    let (key, _) = digest.finish(turn.namespace(), turn.id(), MODEL_STEP.name, 0);
    Ok(key)
}

fn decode<F: Serialize + DeserializeOwned>(bytes: &[u8]) -> Option<F> {
    let key = Key::from_bytes([0; 32]);
    let decoded = <OkOnly as ResultCodec<F, ()>>::decode(MODEL_STEP.name, &key, bytes);
    decoded.ok()?.ok()
}

//! Durable turns: the failures of tool calls that a model read, recorded so that a restarted run
//! reads them again.
//!
//! A model that reads a failed tool call (a timeout, a provider down, a refusal) often calls the
//! tool again, and the retry succeeds. A restarted run replays the model's steps, so it makes
//! the failed call again — and this time the call may succeed. The model's next request would
//! then hold a success where the recorded step saw a failure, and the run would stop with
//! [`Error::ModelStepDiverged`](crate::Error::ModelStepDiverged): the turn could not be
//! finished. [`Conversation::model_tool_call`] (and [`Turn::model_tool_call`]) records each
//! failure a model read, by the model step whose response made the call, the tool, its
//! arguments as the model sent them and how many times that step's calls had made that call
//! before; a restarted run that makes the call again while it replays its model's steps reads
//! the recorded failure instead of running the call, and its next request is the recorded one.

use std::collections::HashMap;
use std::future::Future;
use std::sync::atomic::{AtomicU32, Ordering};
use std::sync::{Arc, Mutex, PoisonError};

use serde::Serialize;
use serde::de::DeserializeOwned;

use crate::engine::{Call, Codec, execute};
use crate::key::{ArgsDigest, Key};
use crate::replay::{OkOnly, ResultCodec};
use crate::store::default_store;
use crate::tool::ToolInfo;
use crate::{Conversation, Error, Turn};

/// What a failure a model read is to the engine and the store: a tool named
/// `idem:tool-failure` (a name no annotated tool can have) whose key is given back when its
/// caller goes away. Not capped: each is one failure of a call that was capped already.
pub static TOOL_FAILURE: ToolInfo =
    ToolInfo::idempotent("idem:tool-failure").with_release_on_cancel();

/// The tool calls of one run of a turn, for [`Turn::model_tool_call`].
#[derive(Default)]
pub(crate) struct ToolCalls {
    made: Mutex<Made>,
    /// How many of the run's conversations are replaying recorded steps and have not asked
    /// their model yet: while one is, a call may have a recorded failure.
    replaying: AtomicU32,
}

#[derive(Default)]
struct Made {
    /// The run's latest model step: its conversation and index.
    last_step: Option<Step>,
    /// How many times the calls of each step made each call (by tool and arguments) so far.
    counts: HashMap<Key, u32>,
}

/// A model step: its conversation's label and its index there.
type Step = (Arc<str>, u32);

impl ToolCalls {
    /// The index of this call of `call` among its step's calls: 0 the first time.
    fn next(&self, call: Key) -> u32 {
        let mut made = self.made.lock().unwrap_or_else(PoisonError::into_inner);
        let count = made.counts.entry(call).or_insert(0);
        let index = *count;
        *count = count.saturating_add(1);
        index
    }

    /// The model step `step` of the conversation `label` was answered.
    pub(crate) fn stepped(&self, label: &Arc<str>, step: u32) {
        let mut made = self.made.lock().unwrap_or_else(PoisonError::into_inner);
        made.last_step = Some((Arc::clone(label), step));
    }

    fn last_step(&self) -> Option<Step> {
        let made = self.made.lock().unwrap_or_else(PoisonError::into_inner);
        made.last_step.clone()
    }

    /// A conversation began to replay its recorded steps.
    pub(crate) fn replay_started(&self) {
        self.replaying.fetch_add(1, Ordering::Relaxed);
    }

    /// A conversation that was replaying asked its model.
    pub(crate) fn replay_ended(&self) {
        self.replaying.fetch_sub(1, Ordering::Relaxed);
    }

    fn replaying(&self) -> bool {
        self.replaying.load(Ordering::Relaxed) > 0
    }
}

impl Conversation {
    /// Runs `call`, a call of `tool` with `args` that this conversation's model asked for in
    /// its latest step and whose outcome it reads, so that a restarted run reads the same: a
    /// failure is recorded, and a restarted run that makes the same call after the same step
    /// while it replays its model's steps gets the recorded failure instead of running the
    /// call. See [the module documentation](self).
    ///
    /// `args` are the arguments as the model sent them (the failures of one call after one
    /// step are told apart by how many times it was made before: the first, then the second).
    /// A success is not recorded here: the tool's own `#[idempotent]` key replays it. A failure
    /// is looked up (one read) only while one of the run's conversations replays recorded
    /// steps; once they all ask their model, no earlier run can have recorded the call. A call
    /// made before the conversation's first step just runs. If the store fails, `call` runs, or
    /// its failure is returned, as it would without this: a restarted run may then stop with
    /// [`Error::ModelStepDiverged`] at the next step, as it would have.
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
    /// let send = |up: bool| async move {
    ///     if up { Ok(7) } else { Err(Failed("the mail server timed out".into())) }
    /// };
    /// let run = |up: bool| async move {
    ///     let chat = Turn::new("conv-9/turn-2").conversation("assistant");
    ///     let model = async { Ok::<_, idem_tools::Error>("send_mail".to_owned()) };
    ///     let tool: String = chat.step("Mail Ada", model).await?;
    ///     Ok::<_, idem_tools::Error>(chat.model_tool_call(&tool, "ada@example.com", send(up)).await)
    /// };
    /// assert_eq!(run(false).await?, Err(Failed("the mail server timed out".into())));
    /// // Restarted from the top: the model's step replays, and so does the failure it read,
    /// // though the server is up now, so the model's next request is the one it sent before.
    /// assert_eq!(run(true).await?, Err(Failed("the mail server timed out".into())));
    /// # Ok(()) }
    /// ```
    pub async fn model_tool_call<A, T, F, C>(&self, tool: &str, args: &A, call: C) -> Result<T, F>
    where
        A: Serialize + ?Sized,
        T: Send,
        F: Serialize + DeserializeOwned + Clone + Send,
        C: Future<Output = Result<T, F>> + Send,
    {
        let step = self.steps().await.checked_sub(1);
        let step = step.map(|step| (Arc::clone(&self.label), step));
        self.turn.tool_call_after(step, tool, args, call).await
    }
}

impl Turn {
    /// [`Conversation::model_tool_call`] for a call whose conversation is not known (rig's
    /// [`tool`](https://docs.rs/idem-tools/latest/idem_tools/rig/fn.tool.html) calls it): the
    /// call is taken to follow the run's latest model step, whichever conversation asked it.
    /// Agents of one turn that run one after another, or one at a time, find their failures
    /// again; agents that run at the same time may attribute a call to another's step, and a
    /// restarted run that interleaves them otherwise then misses the failure (and may stop
    /// with [`Error::ModelStepDiverged`], as without the record). Outside a durable turn (no
    /// [`Conversation`]), `call` just runs.
    pub async fn model_tool_call<A, T, F, C>(&self, tool: &str, args: &A, call: C) -> Result<T, F>
    where
        A: Serialize + ?Sized,
        T: Send,
        F: Serialize + DeserializeOwned + Clone + Send,
        C: Future<Output = Result<T, F>> + Send,
    {
        let step = self.run().tool_calls.last_step();
        self.tool_call_after(step, tool, args, call).await
    }

    /// A model's call made after `step` (none: before the run's first step, and just run).
    async fn tool_call_after<A, T, F, C>(
        &self,
        step: Option<Step>,
        tool: &str,
        args: &A,
        call: C,
    ) -> Result<T, F>
    where
        A: Serialize + ?Sized,
        T: Send,
        F: Serialize + DeserializeOwned + Clone + Send,
        C: Future<Output = Result<T, F>> + Send,
    {
        let run = self.run();
        let Some((label, step)) = step else {
            return call.await;
        };
        let Ok(made) = self.tool_call_key(&label, step, tool, args) else {
            return call.await;
        };
        let index = run.tool_calls.next(made);
        let mut digest = ArgsDigest::new(TOOL_FAILURE.name);
        let added = digest
            .arg("call", &made.to_hex())
            .and_then(|()| digest.arg("index", &index));
        if added.is_err() {
            return call.await;
        }
        let (key, fingerprint) = digest.finish(
            self.namespace(),
            self.id(),
            TOOL_FAILURE.name,
            TOOL_FAILURE.version,
        );
        if run.tool_calls.replaying()
            && let Some(failed) = self.recorded_failure(&key).await
        {
            return Err(failed);
        }
        let failed = match call.await {
            Ok(output) => return Ok(output),
            Err(failed) => failed,
        };
        // Recorded for a restarted run; this run reads its own failure whatever the store says.
        let record = Call::new(&TOOL_FAILURE, self, key, fingerprint);
        let recorded = failed.clone();
        let _ = execute(record, Codec::<F, Error>::ok_only(), async { Ok(recorded) }).await;
        Err(failed)
    }

    /// The failure recorded under `key`, if a live record holds one.
    async fn recorded_failure<F: Serialize + DeserializeOwned>(&self, key: &Key) -> Option<F> {
        let store = self.store().unwrap_or_else(|| default_store());
        let record = store.get(self.namespace(), key).await.ok()??;
        let decoded =
            <OkOnly as ResultCodec<F, Error>>::decode(TOOL_FAILURE.name, key, &record.result?);
        decoded.ok()?.ok()
    }

    /// What tells a call apart: the step whose response made it, the tool and the arguments the
    /// model sent.
    fn tool_call_key<A: Serialize + ?Sized>(
        &self,
        label: &str,
        step: u32,
        tool: &str,
        args: &A,
    ) -> Result<Key, Error> {
        let mut digest = ArgsDigest::new(TOOL_FAILURE.name);
        digest.arg("conversation", label)?;
        digest.arg("step", &step)?;
        digest.arg("tool", tool)?;
        digest.arg("args", args)?;
        let (key, _) = digest.finish(self.namespace(), self.id(), TOOL_FAILURE.name, 0);
        Ok(key)
    }
}

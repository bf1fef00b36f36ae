//! **Prototype** (issue #28, point 1; see `docs/design-durable-rig.md`): a rig agent's model
//! steps recorded per turn, so that a run restarted with the same turn replays the model's
//! earlier responses instead of asking the model again, and continues live from the first step
//! not recorded.
//!
//! [`RecordedModel`] is a completion handler on the agent's bus, in place of rig's own
//! (`ModelAdapter`): the one place in rig-agent 0.44 that can answer a model call without
//! sending it. It runs each step through `stand_in::model_step`, **a stand-in for the
//! runtime's model steps** (the lead's engine work): it keeps its records in this process only,
//! takes no claim, and counts no budget. Nothing here is done until that stand-in is replaced.

use std::sync::atomic::{AtomicU32, Ordering};

use rig_core::DynModel;
use rig_core::completion::{CompletionRequest, ModelRef};
use rig_core::effect::{EffectKind, HandlerDescriptor, Outcome, family};
use rig_core::error::{ErrorKind, ErrorReport};
use rig_core::operation::Completion;
use rig_core::serve::adapters::ModelAdapter;
use rig_core::serve::{Dispatch, Reply, Serve};

use crate::{Error, Turn};

/// A completion model whose steps are recorded in one turn and replayed when a run of that
/// turn is restarted: register it as the agent's model with
/// `AgentBuilder::model_route_handler(label, RecordedModel::new(label, model, &turn))`, where
/// `label` is the model's label (`"default"` for `AgentBuilder::new`'s), on an agent built for
/// this turn.
///
/// Step `n` of a run (its `n`th model response) is keyed by the turn, the label and `n`, and
/// fingerprinted by the request (the history, tools and options the model is sent). A
/// restarted run sends the same first request, gets the recorded response without a request
/// to the model, so its tool calls carry the same arguments and replay too, which makes its
/// next request the same again; it continues live from the first step not recorded. A step
/// whose request differs from the recorded one (the prompt, the tools or a tool's result
/// changed) fails the run with a [`Divergence`](ErrorKind::Divergence) report, without asking
/// the model: the run never continues one conversation with the other's responses.
///
/// A streamed run is served too: rig's bus hands a streaming consumer the response's events
/// at once, when the step is complete (live or replayed).
pub struct RecordedModel {
    inner: ModelAdapter<Completion>,
    label: String,
    turn: Turn,
    steps: AtomicU32,
}

impl RecordedModel {
    /// `model`, registered under `label`, its steps recorded in `turn`.
    pub fn new(
        label: impl Into<ModelRef>,
        model: impl Into<DynModel<Completion>>,
        turn: &Turn,
    ) -> Self {
        let label = label.into();
        RecordedModel {
            label: label.as_str().to_owned(),
            inner: ModelAdapter::new(label, model),
            turn: turn.clone(),
            steps: AtomicU32::new(0),
        }
    }

    /// The live step: rig's own handler, its reply folded into one response.
    async fn live(
        &self,
        request: CompletionRequest,
        stream: bool,
        dispatch: Dispatch,
    ) -> Result<rig_core::completion::CompletionResponse, StepError> {
        let kind = EffectKind::Completion { request, stream };
        match self.inner.serve(kind, dispatch).await.into_outcome().await {
            Ok(Outcome::Completion(response)) => Ok(response),
            Ok(other) => Err(StepError::Model(Box::new(ErrorReport::new(
                ErrorKind::Internal,
                format!("the model answered with a {} outcome", other.family()),
            )))),
            Err(report) => Err(StepError::Model(Box::new(report))),
        }
    }
}

/// What a step fails with: the model's own failure, or idem's.
enum StepError {
    Model(Box<ErrorReport>),
    Idem(Error),
}

impl From<Error> for StepError {
    fn from(error: Error) -> Self {
        StepError::Idem(error)
    }
}

/// The report a run fails with for an idem error of a step.
fn report(label: &str, step: u32, error: &Error) -> ErrorReport {
    match error {
        // The stand-in's divergence (the runtime will have an error of its own).
        Error::PayloadMismatch { .. } => ErrorReport::new(
            ErrorKind::Divergence,
            format!(
                "model step {step} of `{label}` was recorded in this turn for another request \
                 (the prompt, the tools or a tool's result changed since): the run stops rather \
                 than continue the recorded conversation with another; start a new turn to run \
                 it afresh"
            ),
        )
        .with_retryable(false),
        other => ErrorReport::new(ErrorKind::Other, other.to_string()).with_retryable(false),
    }
}

impl Serve for RecordedModel {
    type Family = family::Completion;

    fn descriptor(&self) -> HandlerDescriptor {
        self.inner.descriptor()
    }

    async fn serve(&self, kind: EffectKind, dispatch: Dispatch) -> Reply {
        let EffectKind::Completion { request, stream } = kind else {
            // Not a model call: rig's handler refuses it as it would.
            return self.inner.serve(kind, dispatch).await;
        };
        // A run asks its model one step at a time, so the count is this run's step.
        let step = self.steps.load(Ordering::SeqCst);
        let live = self.live(request.clone(), stream, dispatch);
        match stand_in::model_step(&self.turn, &self.label, step, &request, live).await {
            Ok(response) => {
                self.steps.fetch_add(1, Ordering::SeqCst);
                Reply::Outcome(Ok(Outcome::Completion(response)))
            }
            Err(StepError::Model(report)) => Reply::Outcome(Err(*report)),
            Err(StepError::Idem(error)) => Reply::Outcome(Err(report(&self.label, step, &error))),
        }
    }
}

/// **STAND-IN for the runtime's model steps, not the real thing.** The lead's engine records
/// a model step like an `#[idempotent]` call (claimed, recorded in the turn's store, budgeted,
/// capped per turn in steps and tokens); this keeps what the prototype needs to be tested —
/// key, fingerprint, record, replay, divergence — in a process-wide map, with no claim, no
/// budget, no cap and no expiry. Replace it, keep the signature's shape.
pub(crate) mod stand_in {
    use std::collections::HashMap;
    use std::future::Future;
    use std::sync::{Mutex, OnceLock};

    use rig_core::serde_json;
    use serde::Serialize;
    use serde::de::DeserializeOwned;

    use crate::key::{Fingerprint, derive_key, fingerprint};
    use crate::{Error, Turn};

    /// (namespace, turn id, label, step) → the request's fingerprint and the response.
    type Records = HashMap<(String, String, String, u32), (Fingerprint, Vec<u8>)>;

    /// The stand-in's records: this process only.
    fn records() -> &'static Mutex<Records> {
        static RECORDS: OnceLock<Mutex<Records>> = OnceLock::new();
        RECORDS.get_or_init(Default::default)
    }

    /// The tool name the stand-in's keys and errors use for a model step.
    const STEP: &str = "model step";

    /// Step `step` of the steps labelled `label` in `turn`: the recorded response if the step
    /// was recorded for the same request, else `call`'s response, recorded when it succeeds.
    ///
    /// # Errors
    /// `call`'s error (not recorded: the next run asks again); [`Error::PayloadMismatch`] (the
    /// stand-in's divergence) if the step was recorded for another request; [`Error::Encode`]
    /// or [`Error::Decode`] if the request or the response does not (de)serialize.
    pub(crate) async fn model_step<Req, Resp, E>(
        turn: &Turn,
        label: &str,
        step: u32,
        request: &Req,
        call: impl Future<Output = Result<Resp, E>>,
    ) -> Result<Resp, E>
    where
        Req: Serialize,
        Resp: Serialize + DeserializeOwned,
        E: From<Error>,
    {
        let at = (
            turn.namespace().to_owned(),
            turn.id().to_owned(),
            label.to_owned(),
            step,
        );
        let key = derive_key(turn.namespace(), turn.id(), STEP, step, &label)?.short();
        let fingerprint = fingerprint(STEP, 0, request)?;
        let recorded = lock().get(&at).cloned();
        match recorded {
            Some((recorded, _)) if recorded != fingerprint => {
                Err(Error::PayloadMismatch { tool: STEP, key }.into())
            }
            Some((_, bytes)) => serde_json::from_slice(&bytes).map_err(|error| {
                Error::Decode {
                    tool: STEP,
                    key,
                    message: error.to_string(),
                }
                .into()
            }),
            None => {
                let response = call.await?;
                let bytes = serde_json::to_vec(&response).map_err(|error| Error::Encode {
                    tool: STEP,
                    what: "its response".to_owned(),
                    message: error.to_string(),
                })?;
                lock().insert(at, (fingerprint, bytes));
                Ok(response)
            }
        }
    }

    fn lock() -> std::sync::MutexGuard<'static, Records> {
        records()
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
    }
}

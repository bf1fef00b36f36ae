//! A rig agent's model, its steps recorded in a turn ([`RecordedModel`]).

use rig_core::DynModel;
use rig_core::completion::{AssistantContent, CompletionRequest, CompletionResponse, ModelRef};
use rig_core::effect::{EffectKind, HandlerDescriptor, Outcome, family};
use rig_core::error::{ErrorKind, ErrorReport};
use rig_core::operation::Completion;
use rig_core::serve::adapters::ModelAdapter;
use rig_core::serve::{Dispatch, Reply, Serve};

use crate::{Conversation, Error, Turn};

/// A completion model whose steps are recorded in one turn, so that a run of that turn
/// restarted from the top gets the model's earlier responses back instead of asking again
/// ([`Conversation`]). The one line, where the agent of a turn is built:
///
/// ```ignore
/// let agent = AgentBuilder::new(model.clone())
///     .model_route_handler("default", RecordedModel::new("default", model, &turn))
///     .dynamic_tool(idem_tools::rig::tool(SendMessage::new(api), TOOLS[0])?)
///     .build();
/// let reply = agent.prompt(text).tool_context(with_turn(ToolContext::new(), &turn)).await?;
/// ```
///
/// `"default"` is the label `AgentBuilder::new` gives its model: registering under it replaces
/// rig's own handler. It is a handler on the agent's bus (rig 0.44 calls its models through
/// one), so it sees the request after every hook, as the model would; it is given its turn
/// because a model call runs wherever rig polls the agent's bus, not in the task of the run
/// that asked (as tool calls do). Build an agent per turn.
///
/// Each model call of a run is a step of the conversation `label` of the turn, fingerprinted
/// by rig's `CompletionRequest` (the history, the tools and the options the model is sent) and
/// recorded as rig's `CompletionResponse`. A restarted run sends the same first request, gets
/// the recorded response without a request to the model, so its tool calls carry the same
/// arguments and replay (a call that failed fails again, with the failure the model read, when
/// the tool is registered with [`tool`](super::tool)), and its next request is the same again;
/// it goes on live from the first step that was not recorded. A run whose request differs from the recorded one at a
/// step (the prompt, the tools or a tool's result changed) fails with a report of rig's kind
/// `ErrorKind::Divergence` before the model is asked: it never goes on with
/// another conversation's responses. The tokens a response reports (`usage.total_tokens`, or
/// input and output) count against [`Turn::with_max_tokens`].
///
/// Streamed runs are served too: rig's bus hands a streaming consumer a step's events when the
/// step is complete, live or replayed.
///
/// A completion is recorded whatever its stop reason, one that reports a failure (the
/// provider's error, filtered content) included, so that a restarted run takes the steps the
/// original run took (a hook that answers a failed turn with feedback sends its next request at
/// the next step). A run that ended on such a completion ends there again when restarted. To
/// ask the model again, answer the message under a new turn id — but every tool call of a new
/// turn is a new action, so the actions this run made would run again: check what it did
/// first (`idem turn ID`).
pub struct RecordedModel {
    inner: ModelAdapter<Completion>,
    conversation: Conversation,
}

impl RecordedModel {
    /// `model`, registered under `label`, its steps recorded in `turn` as the conversation
    /// `label`.
    pub fn new(
        label: impl Into<ModelRef>,
        model: impl Into<DynModel<Completion>>,
        turn: &Turn,
    ) -> Self {
        let label = label.into();
        RecordedModel {
            conversation: turn.conversation(label.as_str()),
            inner: ModelAdapter::new(label, model),
        }
    }

    /// Records the steps as the conversation `label` of the turn instead of the route's label:
    /// give each agent of a turn that runs at the same time as another (a planner and a writer,
    /// both under rig's `"default"` route) a conversation of its own, so that a restarted run
    /// finds each agent's steps whatever order they run in. (Two agents in one conversation
    /// share its step counter: a restart that runs them in another order diverges.)
    #[must_use]
    pub fn with_conversation(mut self, label: &str) -> Self {
        let (lease, ttl) = (self.conversation.lease(), self.conversation.ttl());
        let conversation = self.conversation.turn().conversation(label);
        self.conversation = match ttl {
            Some(ttl) => conversation.with_lease(lease).with_ttl(ttl),
            None => conversation.with_lease(lease),
        };
        self
    }

    /// Keeps each recorded step for `ttl` instead of a day ([`Conversation::with_ttl`]): at
    /// least as long as the tools the agent calls keep their results, so that a run restarted
    /// later replays the model's answers instead of asking again (which rewords).
    #[must_use]
    pub fn with_ttl(mut self, ttl: std::time::Duration) -> Self {
        self.conversation = self.conversation.with_ttl(ttl);
        self
    }

    /// Claims each live step for `lease` instead of the default 5 s: a run killed while it
    /// asks the model holds the step that long, and a restarted run waits for it at most its
    /// turn's in-flight wait ([`Conversation::with_lease`]).
    #[must_use]
    pub fn with_lease(mut self, lease: std::time::Duration) -> Self {
        self.conversation = self.conversation.with_lease(lease);
        self
    }

    /// The live step: rig's own handler, its reply folded into one response.
    async fn live(
        &self,
        request: CompletionRequest,
        stream: bool,
        dispatch: Dispatch,
    ) -> Result<CompletionResponse, StepError> {
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

/// The tokens a response reports: its total, else its input and output.
fn tokens(response: &CompletionResponse) -> Option<u64> {
    let usage = &response.usage;
    usage
        .total_tokens
        .or(match (usage.input_tokens, usage.output_tokens) {
            (None, None) => None,
            (input, output) => Some(input.unwrap_or(0).saturating_add(output.unwrap_or(0))),
        })
}

/// The report a run fails with for an idem error of a step: a divergence is rig's
/// `Divergence`, a cap `Denied`; none is worth retrying in the same turn.
fn report(error: &Error) -> ErrorReport {
    let kind = match error {
        Error::ModelStepDiverged { .. } | Error::RunOverlap { .. } => ErrorKind::Divergence,
        Error::TokenBudgetExhausted { .. }
        | Error::ModelStepsExhausted { .. }
        | Error::BudgetExhausted { .. } => ErrorKind::Denied,
        _ => ErrorKind::Other,
    };
    ErrorReport::new(kind, error.to_string()).with_retryable(false)
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
        let live = self.live(request.clone(), stream, dispatch);
        match self
            .conversation
            .step_counting(&request, tokens, live)
            .await
        {
            Ok(response) => {
                // The calls it asks for are this conversation's, whoever answered a step since.
                for content in &response.choice {
                    if let AssistantContent::ToolCall(call) = content {
                        let function = &call.function;
                        let name = function.name.as_str();
                        self.conversation
                            .expect_tool_call(name, &function.arguments);
                    }
                }
                Reply::Outcome(Ok(Outcome::Completion(response)))
            }
            Err(StepError::Model(report)) => Reply::Outcome(Err(*report)),
            Err(StepError::Idem(error)) => Reply::Outcome(Err(report(&error))),
        }
    }
}

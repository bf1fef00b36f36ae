//! Tools of [rig](https://docs.rs/rig-core/0.44) agents (the `rig` feature, rig 0.44): the turn
//! of a run travels with each of its tool calls, the model sees each tool under its name in the
//! catalog, and reads idem's words when idem refuses a call.
//!
//! A rig agent (`rig-agent` 0.44) does not run a tool in the task that awaits
//! `agent.prompt(..)`: it sends each call over its bus, and the bus is polled by whichever run
//! of that agent (or of a clone of it) polls next, or by the application's own task for a bus
//! it spawned. A turn entered with [`Turn::scope`] around `prompt(..)` is a task-local value, so
//! a tool can see another run's turn (the runs of one shared agent) or none. Instead, give the
//! run its turn in its tool context with [`with_turn`], and register each `#[idempotent]` tool
//! with [`tool`], which enters that turn around every poll of the call:
//!
//! ```no_run
//! use idem_tools::rig::with_turn;
//! use idem_tools::{ToolInfo, Turn, idempotent, tool_impl};
//! use rig_core::tool::{Tool, ToolContext};
//!
//! #[derive(Clone)]
//! struct SendMessage;
//!
//! #[derive(serde::Serialize, serde::Deserialize)]
//! struct Message { to: String, text: String }
//!
//! #[tool_impl(same_service)] // every `SendMessage` is one service
//! impl Tool for SendMessage {
//!     const NAME: &'static str = "send_message";
//!     type Args = Message;
//!     type Output = u64;
//!     type Error = idem_tools::Error;
//!
//!     fn description(&self) -> String { "Send a message".into() }
//!     fn parameters(&self) -> serde_json::Value { serde_json::json!({ "type": "object" }) }
//!
//!     #[idempotent(ignore(context))] // catalogued as `SendMessage__call`
//!     async fn call(&self, context: &mut ToolContext, message: Message) -> Result<u64, idem_tools::Error> {
//!         Ok(7) // sends once per turn and arguments; a repeated call replays this
//!     }
//! }
//!
//! const TOOLS: &[ToolInfo] = idem_tools::tools![SendMessage::call];
//!
//! // What the agent registers: the model sees `SendMessage__call`, as the catalog says.
//! let tool = idem_tools::rig::tool(SendMessage, TOOLS[0])?;
//! let turn = Turn::new("conv-42/msg-7"); // the user message being answered
//! let context = with_turn(ToolContext::new(), &turn); // what the run's prompt carries
//! # Ok::<(), idem_tools::Error>(())
//! ```
//!
//! With rig-agent (the application's dependency, not idem's; `tests/rig/` runs this through
//! rig's own agent loop):
//!
//! ```ignore
//! let agent = rig_agent::AgentBuilder::new(model)
//!     .dynamic_tool(idem_tools::rig::tool(SendMessage, TOOLS[0])?)
//!     .build();
//! let reply = agent
//!     .prompt("Tell Ada hi")
//!     .tool_context(with_turn(ToolContext::new(), &turn))
//!     .await?;
//! ```
//!
//! The tool is still the user's `Tool`: its description, schema and arguments are rig's, and
//! an error that is not idem's goes to its own `map_error`. An idem error reaches the model as
//! [`Error::model_text`] (see [`InTurn`] for how it is found in
//! the tool's error). A tool called outside [`with_turn`] falls back to the task-local turn,
//! and a call with neither fails with [`Error::NoTurn`] without running.
//!
//! rig 0.44 has no tool annotations (read-only, idempotent, destructive hints; they arrive in
//! rig 0.45, which needs Rust 1.97.1): which calls of one reply run side by side is the run's
//! `tool_concurrency` (1 by default: one after another). Either way a repeated call replays:
//! run after the first, or side by side with it (it waits for the first and takes its result).

mod model;

pub use model::RecordedModel;

use std::error::Error as StdError;
use std::sync::Arc;

use rig_core::message::ToolName;
use rig_core::serde_json::Value;
use rig_core::tool::{
    DynamicTool, IntoToolOutput, Tool, ToolContext, ToolErrorKind, ToolExecutionError,
};

use crate::{Error, ToolInfo, Turn};

/// `context` with `turn` attached, for a run's `.tool_context(..)`: each tool call of the run
/// carries it (rig clones a run's context into every call, with what is attached to it), and
/// [`InTurn`] enters it. Attached as a live value, not as data: it is never serialized.
pub fn with_turn(context: ToolContext, turn: &Turn) -> ToolContext {
    context.with_scope(Arc::new(turn.clone()))
}

/// The turn attached to `context` by [`with_turn`], if any.
pub fn turn(context: &ToolContext) -> Option<Turn> {
    context.scope::<Turn>().map(|turn| Turn::clone(&turn))
}

/// `tool` as rig registers it (`.dynamic_tool(..)`), shown to the model under `info.name`,
/// the name the catalog, the logs and the CLI give it, whatever its `Tool::NAME`; each call
/// runs in the turn its context carries ([`with_turn`]), and an idem error reaches the model
/// as idem's words for it (see [`InTurn`]). In a durable turn (a [`RecordedModel`]'s), a
/// failure the model reads is recorded, and a restarted run that replays the model's steps
/// reads it again instead of making the call ([`Turn::model_tool_call`]). `info` is the tool's entry in the catalog
/// (`idem_tools::tools![Type::method][0]`, or the catalog's own constant): the descriptor of
/// the `#[idempotent]` method the tool's `call` is, or calls.
///
/// # Errors
/// [`Error::Config`] if `info.name` is empty (a descriptor made by hand: the macros refuse an
/// empty name at compile time).
pub fn tool<T: Tool + 'static>(tool: T, info: ToolInfo) -> Result<DynamicTool, Error> {
    let name = ToolName::new(info.name).map_err(|_| {
        Error::Config(format!(
            "the rig tool `{}` cannot be shown to a model under an empty name: give its \
             `#[idempotent]` a `name`",
            T::NAME
        ))
    })?;
    let tool = Arc::new(InTurn(tool));
    let (description, parameters) = (tool.description(), tool.parameters());
    Ok(DynamicTool::new_with_context(
        name,
        description,
        parameters,
        move |context: &mut ToolContext, args: Value| {
            let tool = Arc::clone(&tool);
            Box::pin(async move {
                // In a durable turn, a failure the model reads is read again by a restarted run:
                // rig's `ToolExecutionError` (de)serializes (all but its `source`).
                match self::turn(context).or_else(Turn::current) {
                    Some(turn) => {
                        let call = run(&tool, context, args.clone());
                        turn.model_tool_call(info.name, &args, call).await
                    }
                    None => run(&tool, context, args).await,
                }
            })
        },
    ))
}

/// One call of a [`tool`]: rig's typed dispatch, from JSON arguments to the model's output.
async fn run<T: Tool>(
    tool: &InTurn<T>,
    context: &mut ToolContext,
    args: Value,
) -> Result<rig_core::tool::ToolOutput, ToolExecutionError> {
    // As rig's typed dispatch does: `null` arguments are an empty object.
    let args = match args {
        Value::Null => Value::Object(Default::default()),
        args => args,
    };
    let args = rig_core::serde_json::from_value::<T::Args>(args).map_err(|error| {
        ToolExecutionError::invalid_args(format!("failed to parse tool arguments: {error}"))
            .with_source(error)
    })?;
    match tool.call(context, args).await {
        Ok(output) => output.into_tool_output(),
        Err(error) => Err(tool.map_error(error)),
    }
}

/// A rig tool whose calls run in the turn their context carries ([`with_turn`]), and whose
/// idem errors reach the model as idem's words for them. Without a turn in the context, a call
/// runs as it would unwrapped (in the task-local turn of [`Turn::scope`], if any).
///
/// **What the model reads.** rig gives the model the text of the
/// [`ToolExecutionError`] that the tool's `map_error` makes of its error, and rig's default
/// says only "the tool failed". `InTurn` looks for an [`idem_tools::Error`](Error) in the
/// tool's error first, and if there is one the model reads [`Error::model_text`] (what
/// happened to the action and what to do next: stop retrying, wait and repeat, check before
/// calling again, …), never its `Display` text, which names Rust APIs and is for the log (the
/// engine logs it). Any other error goes to the tool's own `map_error`. The idem error is
/// found when it is the tool's error type (`type Error = idem_tools::Error`), or anywhere in
/// its [`source`](std::error::Error::source) chain: a variant of your own error type such as
/// `#[error("sending failed")] Idem(#[from] idem_tools::Error)` (thiserror's `#[from]` and
/// `#[source]` make it the source), or a wrapper whose `source` is an `anyhow::Error`'s (an
/// `anyhow::Error` is not a `std::error::Error` itself, so rig cannot take it as a tool's
/// error). It is *not* found behind `#[error(transparent)]`, which hands out the idem error's
/// own source instead of it: word such a variant with [`tool_error`] in your `map_error`.
///
/// **Its name.** `InTurn` is a typed rig tool, registered with `.tool(..)` under
/// `T::NAME`: the model sees that name, so give the `#[idempotent]` method the same `name`,
/// or register with [`tool`], which shows the model the catalog's name. Register with [`tool`]
/// in durable turns too: it records the failures the model reads
/// ([`Turn::model_tool_call`]), which `InTurn` alone does not.
#[derive(Debug, Clone, Copy, Default)]
pub struct InTurn<T>(pub T);

impl<T: Tool> Tool for InTurn<T> {
    const NAME: &'static str = T::NAME;
    type Args = T::Args;
    type Output = T::Output;
    type Error = T::Error;

    fn description(&self) -> String {
        self.0.description()
    }

    fn parameters(&self) -> rig_core::serde_json::Value {
        self.0.parameters()
    }

    fn map_error(&self, error: Self::Error) -> ToolExecutionError {
        match idem_error(&error).map(tool_error) {
            Some(worded) => worded.with_source(error),
            None => self.0.map_error(error),
        }
    }

    async fn call(
        &self,
        context: &mut ToolContext,
        args: Self::Args,
    ) -> Result<Self::Output, Self::Error> {
        match turn(context) {
            Some(turn) => turn.scope(self.0.call(context, args)).await,
            None => self.0.call(context, args).await,
        }
    }
}

/// How deep [`idem_error`] looks into a chain of sources.
const MAX_SOURCES: usize = 32;

/// The idem error that `error` is, or that is in its chain of sources.
fn idem_error<'a>(error: &'a (dyn StdError + 'static)) -> Option<&'a Error> {
    let mut current = Some(error);
    for _ in 0..MAX_SOURCES {
        let error = current?;
        if let Some(idem) = error.downcast_ref::<Error>() {
            return Some(idem);
        }
        current = error.source();
    }
    None
}

/// The failed tool result of `error` for rig: the model reads [`Error::model_text`], rig's
/// hooks and telemetry get the `Display` text as the operator's message, the error's
/// [`code`](Error::code) and a rig error kind. [`InTurn`] uses it for the idem errors it finds;
/// call it in a tool's own `map_error` for one it cannot find (behind
/// `#[error(transparent)]`):
///
/// ```
/// use idem_tools::rig::tool_error;
///
/// let refused = tool_error(&idem_tools::Error::NoTurn { tool: "send_message" });
/// assert!(refused.model_feedback().is_some_and(|text| text.contains("tell the user")));
/// assert_eq!(refused.code(), Some("no_turn"));
/// ```
pub fn tool_error(error: &Error) -> ToolExecutionError {
    let (kind, retryable) = match error {
        Error::PayloadMismatch { .. } => (ToolErrorKind::InvalidArgs, false),
        Error::InFlight { .. } => (ToolErrorKind::Timeout, true),
        Error::Store { .. } => (ToolErrorKind::Provider, true),
        _ => (ToolErrorKind::Other, false),
    };
    ToolExecutionError::new(kind, error.to_string())
        .with_model_feedback(error.model_text())
        .with_code(error.code())
        .with_retryable(retryable)
}

#[cfg(test)]
mod tests {
    use super::*;

    /// An error of the user's that keeps an `anyhow::Error` (say, from an `#[idempotent]`
    /// function returning `anyhow::Result`) and hands out its chain.
    #[derive(Debug)]
    struct Wrapped(anyhow::Error);

    impl std::fmt::Display for Wrapped {
        fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
            f.write_str("the tool failed")
        }
    }

    impl StdError for Wrapped {
        fn source(&self) -> Option<&(dyn StdError + 'static)> {
            Some(self.0.as_ref())
        }
    }

    /// What `#[error(transparent)]` writes: everything forwarded to the inner error.
    #[derive(Debug)]
    struct Transparent(Error);

    impl std::fmt::Display for Transparent {
        fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
            self.0.fmt(f)
        }
    }

    impl StdError for Transparent {
        fn source(&self) -> Option<&(dyn StdError + 'static)> {
            self.0.source()
        }
    }

    fn no_turn() -> Error {
        Error::NoTurn { tool: "send" }
    }

    #[test]
    fn the_idem_error_is_found_as_the_error_or_in_its_sources() {
        assert_eq!(idem_error(&no_turn()).map(Error::code), Some("no_turn"));
        let wrapped = Wrapped(anyhow::Error::from(no_turn()).context("sending"));
        assert_eq!(idem_error(&wrapped).map(Error::code), Some("no_turn"));
        assert!(idem_error(&Transparent(no_turn())).is_none());
        assert!(idem_error(&std::fmt::Error).is_none());
    }

    #[test]
    fn the_model_reads_idems_words_and_the_operator_the_display_text() {
        let key = crate::Key::from_bytes([3; 32]).short();
        let waiting = Error::InFlight {
            tool: "send",
            key,
            waited: std::time::Duration::from_secs(2),
            free_within: std::time::Duration::from_secs(30),
        };
        let error = tool_error(&waiting);
        assert_eq!(error.model_feedback(), Some(waiting.model_text().as_str()));
        assert_eq!(error.message(), waiting.to_string());
        assert_eq!(error.code(), Some("in_flight"));
        assert_eq!(error.kind(), ToolErrorKind::Timeout);
        assert_eq!(error.retryable(), Some(true));
        assert_eq!(tool_error(&no_turn()).retryable(), Some(false));
    }

    #[test]
    fn a_tool_needs_a_name_to_be_shown_to_a_model() {
        struct Nameless;
        impl Tool for Nameless {
            const NAME: &'static str = "nameless";
            type Args = ();
            type Output = ();
            type Error = Error;
            fn description(&self) -> String {
                String::new()
            }
            fn parameters(&self) -> Value {
                Value::Null
            }
            async fn call(&self, _: &mut ToolContext, _: ()) -> Result<(), Error> {
                Ok(())
            }
        }
        let refused = tool(Nameless, ToolInfo::idempotent(""));
        assert!(matches!(refused, Err(Error::Config(_))));
        let named = tool(Nameless, ToolInfo::idempotent("Nameless__call"));
        assert_eq!(
            named.map(|t| t.name().to_string()).ok().as_deref(),
            Some("Nameless__call")
        );
    }
}

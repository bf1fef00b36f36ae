//! Tools of [rig](https://docs.rs/rig-core/0.44) agents (the `rig` feature, rig 0.44): the turn
//! of a run travels with each of its tool calls.
//!
//! A rig agent (`rig-agent` 0.44) does not run a tool in the task that awaits
//! `agent.prompt(..)`: it sends each call over its bus, and the bus is polled by whichever run
//! of that agent (or of a clone of it) polls next, or by the application's own task for a bus
//! it spawned. A turn entered with [`Turn::scope`] around `prompt(..)` is a task-local value, so
//! a tool can see another run's turn (the runs of one shared agent) or none. Instead, give the
//! run its turn in its tool context with [`with_turn`], and register each `#[idempotent]` tool
//! wrapped in [`InTurn`], which enters that turn around every poll of the call:
//!
//! ```no_run
//! use idem_tools::rig::{InTurn, with_turn};
//! use idem_tools::{Turn, idempotent, tool_impl};
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
//!     #[idempotent(name = "send_message", ignore(context))]
//!     async fn call(&self, context: &mut ToolContext, message: Message) -> Result<u64, idem_tools::Error> {
//!         Ok(7) // sends once per turn and arguments; a repeated call replays this
//!     }
//! }
//!
//! let tool = InTurn(SendMessage); // what the agent registers
//! let turn = Turn::new("conv-42/msg-7"); // the user message being answered
//! let context = with_turn(ToolContext::new(), &turn); // what the run's prompt carries
//! ```
//!
//! With rig-agent (the application's dependency, not idem's; `tests/rig/` runs this through
//! rig's own agent loop):
//!
//! ```ignore
//! let agent = rig_agent::AgentBuilder::new(model).tool(InTurn(SendMessage)).build();
//! let reply = agent
//!     .prompt("Tell Ada hi")
//!     .tool_context(with_turn(ToolContext::new(), &turn))
//!     .await?;
//! ```
//!
//! The tool is still the user's `Tool`; [`InTurn`] forwards its name, description, schema and
//! error mapping. A tool called outside [`InTurn`] falls back to the task-local turn, and a
//! call with neither fails with [`Error::NoTurn`](crate::Error::NoTurn) without running.
//!
//! rig 0.44 has no tool annotations (read-only, idempotent, destructive hints; they arrive in
//! rig 0.45, which needs Rust 1.97.1): which calls of one reply run side by side is the run's
//! `tool_concurrency` (1 by default: one after another). Either way a repeated call replays:
//! run after the first, or side by side with it (it waits for the first and takes its result).

use std::sync::Arc;

use rig_core::tool::{Tool, ToolContext, ToolExecutionError};

use crate::Turn;

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

/// A rig tool whose calls run in the turn their context carries ([`with_turn`]): register
/// `InTurn(tool)` instead of `tool`. Without one in the context, the call runs as it would
/// unwrapped.
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
        self.0.map_error(error)
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

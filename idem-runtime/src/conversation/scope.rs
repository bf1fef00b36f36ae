//! Durable turns: where a conversation lives. An agent run inside a tool call (an agent used as
//! a tool, a tool that asks a model of its own) has steps of its own, and they belong to that
//! call, not to the turn at large: a restarted run whose call replays — from the tool's key, or
//! as a failure recorded with the model's next step — does not run the agent again, so its
//! steps must not take indices that later calls of the turn would otherwise have.
//!
//! So a conversation is named by its label **within a scope**: none for the turn's own
//! conversations; inside a call a model made ([`Conversation::model_tool_call`]), that call —
//! its conversation, tool, arguments, order and step; inside an `#[idempotent]` tool's body,
//! the tool's key and the scope it was called in (an application's retry of the key, made
//! where the failed call was made, is the same scope: its agent goes on from the steps the
//! failed attempt recorded). The scope is in the key of each step of a conversation that has one,
//! so an agent's steps in one call never meet those of another call (or of the same label
//! outside). It follows a detached tool's body into its task, with the tool's key.
//!
//! [`Conversation::model_tool_call`]: crate::Conversation::model_tool_call

use std::future::Future;
use std::sync::Arc;

use crate::Error;
use crate::engine::held;
use crate::key::{ArgsDigest, Key};

use super::MODEL_STEP;
use super::overlap::Watch;

/// The scope a call a model made opened, the tool key held when it did (a tool's body entered
/// since is a scope of its own, inside it), and what the call learns of the tool calls made in
/// it.
#[derive(Clone)]
struct Within {
    scope: Key,
    held: Option<Key>,
    watch: Arc<Watch>,
}

tokio::task_local! {
    static WITHIN: Within;
}

/// The scope of conversations named here: the innermost of the call a model made and the
/// `#[idempotent]` tool body running in this task, if any.
pub(crate) fn current() -> Option<Key> {
    let held = held::innermost();
    match WITHIN.try_with(|within| (within.scope, within.held)) {
        Ok((scope, within)) if within == held.map(|(key, _)| key) => Some(scope),
        _ => {
            let (key, called_in) = held?;
            Some(called_in.map_or(key, |outer| of_tool(outer, key)))
        }
    }
}

/// What names the body of the tool of `key`, called in scope `outer`.
fn of_tool(outer: Key, key: Key) -> Key {
    named(|digest| {
        digest.arg("within", outer.as_bytes())?;
        digest.arg("tool", key.as_bytes())
    })
    .unwrap_or(key)
}

/// What names a call a model made (`made`: its tool and arguments), the `order`-th of its kind
/// after step `after` of the conversation `label` in scope `outer`.
pub(crate) fn of_call(
    outer: Option<Key>,
    label: &str,
    made: Key,
    order: u32,
    after: u32,
) -> Option<Key> {
    named(|digest| {
        digest.arg("within", &outer.map(|key| *key.as_bytes()))?;
        digest.arg("conversation", label)?;
        digest.arg("call", made.as_bytes())?;
        digest.arg("order", &order)?;
        digest.arg("after", &after)
    })
}

/// A scope named by the entries `fill` adds (none if one does not encode).
fn named(fill: impl FnOnce(&mut ArgsDigest) -> Result<(), Error>) -> Option<Key> {
    let mut digest = ArgsDigest::new(MODEL_STEP.name);
    fill(&mut digest).ok()?;
    Some(digest.finish("", "", MODEL_STEP.name, 0).0)
}

/// The watch of the call a model made that a tool call made in this task is made directly in
/// (not inside another tool's body).
pub(crate) fn watch() -> Option<Arc<Watch>> {
    let (watch, held) = WITHIN
        .try_with(|within| (Arc::clone(&within.watch), within.held))
        .ok()?;
    (held == held::innermost_key()).then_some(watch)
}

/// The watch of the call a model made that this task runs in, if any (also inside the tools it
/// called).
pub(crate) fn enclosing_watch() -> Option<Arc<Watch>> {
    WITHIN.try_with(|within| Arc::clone(&within.watch)).ok()
}

/// Runs `future` (a call a model made, told of the tool calls made in it through `watch`) in
/// `scope`.
pub(crate) async fn enter<F: Future>(scope: Key, watch: Arc<Watch>, future: F) -> F::Output {
    let within = Within {
        scope,
        held: held::innermost_key(),
        watch,
    };
    WITHIN.scope(within, future).await
}

/// The scope of a call a model made that this task runs in, for a task it spawns
/// ([`restore`]).
pub(crate) struct Captured(Option<Within>);

/// This task's call scope, to carry into a task it spawns.
pub(crate) fn capture() -> Captured {
    Captured(WITHIN.try_with(Within::clone).ok())
}

/// `future` in the call scope `captured` (the spawning task's).
pub(crate) async fn restore<F: Future>(captured: Captured, future: F) -> F::Output {
    match captured.0 {
        Some(within) => WITHIN.scope(within, future).await,
        None => future.await,
    }
}

//! Where a call's life ([`call::run`](super::call::run), which never sees the tool's types) and
//! the typed [`Execution`](super::Execution) (which holds the tool's body) meet.
//!
//! The engine asks for something by setting an [`Ask`] and returning `Pending`; the typed layer
//! polls the engine, then does what it asked, in the same poll of the task:
//!
//! - [`Port::body`]: poll the body once (inside the call's span, turn and held keys). When the
//!   body finishes, its encoded result ([`Finished`]) is handed back here.
//! - [`Port::detach`]: move the call — the engine's future and the body — into a task of its
//!   own, so that the caller going away does not cancel it.
//!
//! So the body is polled only right after the engine decided, in that same poll, that it may
//! run: the lease's end is checked before every poll of the body.

use std::future::Future;
use std::sync::{Arc, Mutex, MutexGuard, PoisonError};
use std::task::{Context, Poll};

use bytes::Bytes;

use super::held::Held;
use crate::turn::Turn;

/// What the engine asks of the typed layer.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum Ask {
    /// Poll the body once.
    PollBody,
    /// Move the call into a task of its own.
    Detach,
}

/// How the tool's body finished, as the engine needs to know it (the typed result stays with
/// the typed layer).
#[derive(Debug)]
pub(crate) enum Finished {
    /// Record these bytes (an `Ok`, or an `Err` of a tool that records errors).
    Record {
        /// The record.
        bytes: Bytes,
        /// Whether the result is an `Ok`.
        ok: bool,
    },
    /// The result cannot be replayed faithfully: record this marker instead, so that a retry
    /// is told the tool ran rather than running it again.
    Unreplayable {
        /// The marker.
        bytes: Bytes,
        /// Why, for the operator.
        reason: String,
    },
    /// An `Err` that is not recorded: give the key back so that a retry runs again.
    Release,
}

/// What the body runs with: the keys held by this call and the calls around it, and its turn.
#[derive(Clone)]
pub(super) struct BodyScope {
    pub(super) held: Held,
    pub(super) turn: Turn,
}

#[derive(Default)]
struct State {
    ask: Option<Ask>,
    finished: Option<Finished>,
    /// Whether the body has been polled: a body never polled did nothing.
    started: bool,
    scope: Option<BodyScope>,
}

/// The shared state of one call's engine and typed layer.
#[derive(Default)]
pub(crate) struct Port(Mutex<State>);

impl Port {
    fn state(&self) -> MutexGuard<'_, State> {
        self.0.lock().unwrap_or_else(PoisonError::into_inner)
    }

    /// The body's result, once it finished: asks for the body to be polled until then.
    pub(super) fn body(self: &Arc<Self>) -> impl Future<Output = Finished> + Send + 'static {
        let port = Arc::clone(self);
        std::future::poll_fn(move |_| {
            let mut state = port.state();
            match state.finished.take() {
                Some(finished) => Poll::Ready(finished),
                None => {
                    state.ask = Some(Ask::PollBody);
                    Poll::Pending
                }
            }
        })
    }

    /// Sets the scope the body is polled in (before its first poll).
    pub(super) fn enter(&self, scope: BodyScope) {
        self.state().scope = Some(scope);
    }

    /// Moves the call into a task of its own: ready once the typed layer has done so.
    pub(super) fn detach(self: &Arc<Self>) -> impl Future<Output = ()> + Send + 'static {
        let port = Arc::clone(self);
        let mut asked = false;
        std::future::poll_fn(move |_| {
            if std::mem::replace(&mut asked, true) {
                return Poll::Ready(());
            }
            port.state().ask = Some(Ask::Detach);
            Poll::Pending
        })
    }

    /// Whether the body has been polled.
    pub(super) fn started(&self) -> bool {
        self.state().started
    }

    /// The typed layer: what the engine asked for in the poll that just returned `Pending`.
    pub(super) fn take_ask(&self) -> Option<Ask> {
        self.state().ask.take()
    }

    /// The typed layer: polls the body once in the call's scope, as the engine asked (the
    /// typed layer's closure polls it and encodes its result). Not generic: the task-local
    /// scopes are entered by code compiled once.
    pub(super) fn poll_body(
        &self,
        cx: &mut Context<'_>,
        body: &mut dyn FnMut(&mut Context<'_>) -> Poll<Finished>,
    ) -> Poll<Finished> {
        let scope = {
            let mut state = self.state();
            state.started = true;
            state.scope.clone()
        };
        match scope {
            Some(BodyScope { held, turn }) => {
                super::held::sync_scope(held, || turn.sync_scope(|| body(cx)))
            }
            None => body(cx),
        }
    }

    /// The typed layer: the body finished with `finished`.
    pub(super) fn finish(&self, finished: Finished) {
        self.state().finished = Some(finished);
    }
}

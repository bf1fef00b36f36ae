//! The engine's half of an [`Execution`](super::Execution), compiled once for every tool: it
//! starts the call's life ([`call::run`]), polls it inside the call's span, polls the body when
//! the engine asks (through the typed layer's closure), and runs a detached call in a task of
//! its own. The typed layer keeps only what needs the tool's types: the body, its result, and
//! how the result is encoded and decoded.

use std::any::Any;
use std::future::Future;
use std::pin::Pin;
use std::sync::Arc;
use std::task::{Context, Poll};

use tokio::task::JoinHandle;
use tracing::Span;

use super::call::{self, Answer};
use super::port::{Ask, Finished, Port};
use super::report::Reporter;
use super::{Call, telemetry};
use crate::Error;

/// The rest of a detached call, with its result boxed: every tool's detached task is this one
/// type, so the task machinery is compiled once.
pub(super) type Detached = Pin<Box<dyn Future<Output = Box<dyn Any + Send>> + Send>>;

/// What the driver needs of the typed layer.
#[allow(clippy::large_enum_variant)] // one per call, moved once
pub(super) enum Driven {
    /// The engine answered.
    Answer(Answer),
    /// The engine asks for the call to move into a task of its own: the typed layer moves it
    /// (the driver included, with [`Driver::take`]) and hands it to [`Driver::spawn`].
    Detach,
    /// The call's task finished with the tool's result, boxed.
    Joined(Box<dyn Any + Send>),
}

/// The engine's side of one call.
pub(super) struct Driver(Stage);

enum Stage {
    /// Not polled yet; `detachable`: it may move into a task of its own once claimed.
    Start { call: Call, detachable: bool },
    /// Refused before it reached the engine (the refusal is already reported).
    Refused(Error),
    /// The engine runs the call.
    Running(Running),
    /// The rest of the call runs in a task of its own.
    Spawned(JoinHandle<Box<dyn Any + Send>>),
    /// Over, or moved into a task.
    Done,
}

struct Running {
    core: Pin<Box<dyn Future<Output = Answer> + Send>>,
    port: Arc<Port>,
    span: Span,
}

impl Driver {
    /// A call, not started yet.
    pub(super) fn new(call: Call, detachable: bool) -> Self {
        Driver(Stage::Start { call, detachable })
    }

    /// A call refused before it reached the engine: it answers `error`.
    pub(super) fn refused(error: Error) -> Self {
        Driver(Stage::Refused(error))
    }

    /// This driver, leaving one that is over in its place (to move a call into a task).
    pub(super) fn take(&mut self) -> Driver {
        std::mem::replace(self, Driver(Stage::Done))
    }

    /// Runs the rest of a call in a task of the current runtime.
    pub(super) fn spawn(rest: Detached) -> Driver {
        Driver(Stage::Spawned(tokio::spawn(rest)))
    }

    /// Drives the call; `body` polls the tool's body once and, when it finished, encodes its
    /// result.
    pub(super) fn poll(
        &mut self,
        cx: &mut Context<'_>,
        body: &mut dyn FnMut(&mut Context<'_>) -> Poll<Finished>,
    ) -> Poll<Driven> {
        loop {
            match &mut self.0 {
                Stage::Start { .. } => {
                    let Stage::Start { call, detachable } =
                        std::mem::replace(&mut self.0, Stage::Done)
                    else {
                        return Poll::Pending;
                    };
                    // Nothing is spawned outside a runtime: such a call runs in place.
                    let detached = detachable && tokio::runtime::Handle::try_current().is_ok();
                    self.0 = Stage::Running(Running::start(call, detached));
                }
                Stage::Refused(_) => {
                    let Stage::Refused(error) = std::mem::replace(&mut self.0, Stage::Done) else {
                        return Poll::Pending;
                    };
                    return Poll::Ready(Driven::Answer(Answer::Refused(error)));
                }
                Stage::Running(running) => {
                    let span = running.span.clone();
                    let _entered = span.enter();
                    if let Poll::Ready(answer) = running.core.as_mut().poll(cx) {
                        self.0 = Stage::Done;
                        return Poll::Ready(Driven::Answer(answer));
                    }
                    match running.port.take_ask() {
                        None => return Poll::Pending,
                        Some(Ask::PollBody) => {
                            let finished = std::task::ready!(running.port.poll_body(cx, body));
                            running.port.finish(finished);
                        }
                        Some(Ask::Detach) => return Poll::Ready(Driven::Detach),
                    }
                }
                Stage::Spawned(task) => {
                    let joined = std::task::ready!(Pin::new(task).poll(cx));
                    self.0 = Stage::Done;
                    return Poll::Ready(match joined {
                        Ok(result) => Driven::Joined(result),
                        Err(error) => match error.try_into_panic() {
                            Ok(panic) => std::panic::resume_unwind(panic),
                            // The runtime shut down: the task was dropped, and the engine's
                            // guard kept the key as interrupted.
                            Err(_) => Driven::Answer(Answer::Refused(Error::Config(
                                "the Tokio runtime shut down while the tool ran".to_owned(),
                            ))),
                        },
                    });
                }
                // Polled after it finished: it never answers again.
                Stage::Done => return Poll::Pending,
            }
        }
    }
}

impl Running {
    fn start(call: Call, detached: bool) -> Self {
        let span = telemetry::span(&call);
        let port = Arc::new(Port::default());
        let report = Reporter::new(call, span.clone(), Span::current());
        Running {
            core: Box::pin(call::run(report, Arc::clone(&port), detached)),
            port,
            span,
        }
    }
}

//! The typed side of a call, and the only generic code of the engine: it holds the tool's body
//! and result, polls the body when the engine asks (see [`port`](super::port)), encodes the
//! result for recording and decodes a recorded one. Everything else — the store, the lease,
//! single-flight, the outcome — is [`call::run`](super::call::run), compiled once.

use std::future::Future;
use std::pin::Pin;
use std::sync::Arc;
use std::task::{Context, Poll};

use serde::Serialize;
use serde::de::DeserializeOwned;
use tokio::task::JoinHandle;
use tracing::Span;

use super::call::{self, Answer};
use super::port::{Ask, Finished, Port};
use super::report::Reporter;
use super::{Call, telemetry};
use crate::Error;
use crate::key::Key;
use crate::replay::{OkAndErr, OkOnly, Recorded, ResultCodec};
use crate::stats::Outcome;

/// Decodes a tool's recorded result (tool name and key for the error message).
type Decode<T, E> = fn(&'static str, &Key, &[u8]) -> Result<Result<T, E>, Error>;

/// Moves the rest of a detached call into a task of its own.
type Spawn<T, E, F> = fn(Execution<T, E, F>) -> JoinHandle<Result<T, E>>;

/// How a tool's results are recorded and replayed.
///
/// ```
/// # extern crate idem_tools_runtime as idem_tools;
/// use idem_tools::engine::Codec;
///
/// // `Ok` results are recorded; an `Err` gives the key back, so a retry runs the tool again.
/// let plain: Codec<u64, idem_tools::Error> = Codec::ok_only();
/// // `Ok` and `Err` are both recorded and replayed (`cache_errors`).
/// let both: Codec<u64, String> = Codec::ok_and_err();
/// // An `Ok` that reports a failure (here: 0) is not recorded either.
/// let checked = plain.not_recording(|n: &u64| *n == 0);
/// # let _ = (both, checked);
/// ```
pub struct Codec<T, E> {
    record: fn(&'static str, &Result<T, E>) -> Option<Recorded>,
    decode: Decode<T, E>,
    unrecorded: Option<fn(&T) -> bool>,
}

impl<T, E> Clone for Codec<T, E> {
    fn clone(&self) -> Self {
        *self
    }
}

impl<T, E> Copy for Codec<T, E> {}

impl<T: Serialize + DeserializeOwned, E> Codec<T, E> {
    /// Records `Ok` results; an `Err` gives the key back so that a retry runs the tool again.
    pub fn ok_only() -> Self {
        Codec {
            record: <OkOnly as ResultCodec<T, E>>::record,
            decode: <OkOnly as ResultCodec<T, E>>::decode,
            unrecorded: None,
        }
    }
}

impl<T: Serialize + DeserializeOwned, E: Serialize + DeserializeOwned> Codec<T, E> {
    /// Records and replays `Err` results too (`cache_errors`, Stripe's behaviour): a failed call
    /// is not retried until its record expires.
    pub fn ok_and_err() -> Self {
        Codec {
            record: <OkAndErr as ResultCodec<T, E>>::record,
            decode: <OkAndErr as ResultCodec<T, E>>::decode,
            unrecorded: None,
        }
    }
}

impl<T, E> Codec<T, E> {
    /// An `Ok` for which `failed` is true is treated like an `Err` that is not recorded: the
    /// caller gets it, the key is given back, and a retry runs the tool again (for results
    /// that report a failure in-band, such as an MCP `CallToolResult` with `isError`).
    #[must_use]
    pub fn not_recording(mut self, failed: fn(&T) -> bool) -> Self {
        self.unrecorded = Some(failed);
        self
    }

    /// What the engine does with `result`.
    pub(super) fn finished(&self, tool: &'static str, result: &Result<T, E>) -> Finished {
        if let (Ok(value), Some(failed)) = (result, self.unrecorded)
            && failed(value)
        {
            return Finished::Release;
        }
        match (self.record)(tool, result) {
            None => Finished::Release,
            Some(Recorded::Faithful(bytes)) => Finished::Record {
                bytes: bytes.into(),
                ok: result.is_ok(),
            },
            Some(Recorded::Unreplayable { bytes, error }) => Finished::Unreplayable {
                bytes: bytes.into(),
                reason: error.to_string(),
            },
        }
    }
}

/// A call of a state-changing tool, as [`execute`](super::execute) returns it: a future of the
/// tool's result. Its `tracing` span is entered whenever it is polled.
#[must_use = "a call does nothing unless awaited"]
pub struct Execution<T, E, F> {
    stage: Stage<T, E, F>,
    codec: Codec<T, E>,
    /// Moves the rest of a detached call into a task of its own.
    spawn: Option<Spawn<T, E, F>>,
}

enum Stage<T, E, F> {
    /// Not polled yet.
    Start { call: Call, body: F },
    /// The engine runs the call.
    Running(Running<T, E, F>),
    /// The rest of the call runs in a task of its own.
    Detached(JoinHandle<Result<T, E>>),
    /// Over.
    Done,
}

/// A call the engine runs, and the body it polls on the engine's behalf.
struct Running<T, E, F> {
    core: Pin<Box<dyn Future<Output = Answer> + Send>>,
    port: Arc<Port>,
    body: Body<F>,
    result: Option<Result<T, E>>,
    tool: &'static str,
    span: Span,
}

enum Body<F> {
    /// Not polled yet (so it can still move, into a task of its own).
    Waiting(F),
    /// Polled: boxed, since it cannot move any more.
    Polled(Pin<Box<F>>),
    /// Finished, or dropped.
    Gone,
}

impl<T, E, F> Drop for Running<T, E, F> {
    fn drop(&mut self) {
        // The body goes first: by the time the engine's guard gives the key back (or marks it),
        // the body is no longer alive, so two bodies of one key never overlap.
        self.body = Body::Gone;
    }
}

impl<T, E, F> Execution<T, E, F> {
    pub(super) fn new(call: Call, codec: Codec<T, E>, body: F) -> Self {
        Execution {
            stage: Stage::Start { call, body },
            codec,
            spawn: None,
        }
    }

    pub(super) fn detached(mut self, spawn: Spawn<T, E, F>) -> Self {
        self.spawn = Some(spawn);
        self
    }
}

// Nothing is pinned in place: the body is moved into a box before it is first polled.
impl<T, E, F> Unpin for Execution<T, E, F> {}

impl<T, E, F> Future for Execution<T, E, F>
where
    E: From<Error>,
    F: Future<Output = Result<T, E>>,
{
    type Output = Result<T, E>;

    fn poll(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Result<T, E>> {
        let this = self.get_mut();
        loop {
            match &mut this.stage {
                Stage::Start { .. } => {
                    let Stage::Start { call, body } =
                        std::mem::replace(&mut this.stage, Stage::Done)
                    else {
                        return Poll::Pending;
                    };
                    let detached =
                        this.spawn.is_some() && tokio::runtime::Handle::try_current().is_ok();
                    this.stage = Stage::Running(Running::start(call, body, detached));
                }
                Stage::Running(running) => {
                    let entered = running.span.clone();
                    let _entered = entered.enter();
                    if let Poll::Ready(answer) = running.core.as_mut().poll(cx) {
                        running.body = Body::Gone;
                        let result = running.result.take();
                        this.stage = Stage::Done;
                        return Poll::Ready(answered(answer, result, this.codec));
                    }
                    match running.port.take_ask() {
                        None => return Poll::Pending,
                        Some(Ask::PollBody) => match running.poll_body(cx) {
                            Poll::Ready(result) => {
                                running
                                    .port
                                    .finish(this.codec.finished(running.tool, &result));
                                running.result = Some(result);
                                running.body = Body::Gone;
                            }
                            Poll::Pending => return Poll::Pending,
                        },
                        Some(Ask::Detach) => {
                            if let Some(spawn) = this.spawn.take() {
                                let rest = std::mem::replace(&mut this.stage, Stage::Done);
                                let rest = Execution {
                                    stage: rest,
                                    codec: this.codec,
                                    spawn: None,
                                };
                                this.stage = Stage::Detached(spawn(rest));
                            }
                        }
                    }
                }
                Stage::Detached(task) => {
                    let joined = std::task::ready!(Pin::new(task).poll(cx));
                    this.stage = Stage::Done;
                    return Poll::Ready(match joined {
                        Ok(result) => result,
                        Err(error) => match error.try_into_panic() {
                            Ok(panic) => std::panic::resume_unwind(panic),
                            // The runtime shut down: the task was dropped, and the engine's
                            // guard kept the key as interrupted.
                            Err(_) => Err(Error::Config(
                                "the Tokio runtime shut down while the tool ran".to_owned(),
                            )
                            .into()),
                        },
                    });
                }
                // Polled after it finished: it never answers again.
                Stage::Done => return Poll::Pending,
            }
        }
    }
}

impl<T, E, F: Future<Output = Result<T, E>>> Running<T, E, F> {
    fn start(call: Call, body: F, detached: bool) -> Self {
        let span = telemetry::span(&call);
        let port = Arc::new(Port::default());
        let tool = call.tool.name;
        let report = Reporter::new(call, span.clone(), Span::current());
        Running {
            core: Box::pin(call::run(report, Arc::clone(&port), detached)),
            port,
            body: Body::Waiting(body),
            result: None,
            tool,
            span,
        }
    }

    /// Polls the body once, as the engine asked.
    fn poll_body(&mut self, cx: &mut Context<'_>) -> Poll<Result<T, E>> {
        if let Body::Waiting(_) = self.body {
            let Body::Waiting(body) = std::mem::replace(&mut self.body, Body::Gone) else {
                return Poll::Pending;
            };
            self.body = Body::Polled(Box::pin(body));
        }
        match &mut self.body {
            Body::Polled(body) => self.port.poll_body(body.as_mut(), cx),
            // Asked to poll a body that is gone: cannot happen (the engine asks only while it
            // runs); stay pending rather than poll it again.
            Body::Waiting(_) | Body::Gone => Poll::Pending,
        }
    }
}

/// The caller's result for the engine's answer.
pub(super) fn answered<T, E: From<Error>>(
    answer: Answer,
    result: Option<Result<T, E>>,
    codec: Codec<T, E>,
) -> Result<T, E> {
    match answer {
        Answer::Ran => result.unwrap_or_else(|| {
            Err(
                Error::Config("the engine answered before the tool's body finished".to_owned())
                    .into(),
            )
        }),
        Answer::Recorded {
            bytes,
            outcome,
            mut report,
        } => {
            let call = report.call();
            match (codec.decode)(call.tool.name, &call.key, &bytes) {
                Ok(result) => {
                    report.report(outcome);
                    result
                }
                Err(error) => report.fail(Outcome::DecodeError, error),
            }
        }
        Answer::Refused(error) => Err(error.into()),
    }
}

//! The typed side of a call, and the only generic code of the engine: it holds the tool's body
//! and result, polls the body when the engine asks, encodes the result for recording and
//! decodes a recorded one. Everything else — the store, the lease, single-flight, the outcome,
//! the span, the detached task — is the [`Driver`](super::driver) and
//! [`call::run`](super::call::run), compiled once for every tool.

use std::any::Any;
use std::future::Future;
use std::pin::Pin;
use std::task::{Context, Poll};

use serde::Serialize;
use serde::de::DeserializeOwned;

use super::Call;
use super::call::Answer;
use super::driver::{Driven, Driver};
use super::port::Finished;
use crate::Error;
use crate::key::Key;
use crate::replay::{OkAndErr, OkOnly, Recorded, ResultCodec};
use crate::stats::Outcome;

/// What a tool returns: `Result<T, E>` (or an alias of it). The engine records and replays the
/// `Ok` (and with [`Codec::ok_and_err`], the `Err`), and returns its own failures as `E`.
#[diagnostic::on_unimplemented(
    message = "an `#[idempotent]` tool must return `Result<T, E>`, found `{Self}`",
    label = "not a `Result`",
    note = "with `T: Serialize + DeserializeOwned` (the result is recorded and replayed) and \
            `E: From<idem_tools::Error>` (so budget and store failures flow out as the tool's own error)",
    note = "an MCP tool (rmcp) returning `Json<T>` returns \
            `Result<idem_tools::mcp::Json<T>, idem_tools::mcp::ToolError>` instead (feature `rmcp`)"
)]
pub trait ToolResult: Sized {
    /// `T`.
    type Ok;
    /// `E`.
    type Err;
    /// `self` as a `Result`.
    fn into_result(self) -> Result<Self::Ok, Self::Err>;
    /// A `Result` as `Self`.
    fn from_result(result: Result<Self::Ok, Self::Err>) -> Self;
}

impl<T, E> ToolResult for Result<T, E> {
    type Ok = T;
    type Err = E;
    fn into_result(self) -> Self {
        self
    }
    fn from_result(result: Self) -> Self {
        result
    }
}

/// The `Ok` type of a body `F`.
type OkOf<F> = <<F as Future>::Output as ToolResult>::Ok;
/// The `Err` type of a body `F`.
type ErrOf<F> = <<F as Future>::Output as ToolResult>::Err;

/// Decodes a tool's recorded result (tool name and key for the error message).
type Decode<T, E> = fn(&'static str, &Key, &[u8]) -> Result<Result<T, E>, Error>;

/// How a tool's results are recorded and replayed.
///
/// ```
/// # extern crate idem_tools_runtime as idem_tools;
/// use idem_tools::engine::Codec;
///
/// // `Ok` results are recorded; an `Err` gives the key back, so a retry runs the tool again.
/// let plain: Codec<u64, idem_tools::Error> = Codec::ok_only();
/// // `Ok` and `Err` are both recorded and replayed (`cache_errors`): the error type
/// // (de)serializes, and takes the engine's own failures.
/// #[derive(serde::Serialize, serde::Deserialize)]
/// struct Declined(String);
/// impl From<idem_tools::Error> for Declined {
///     fn from(error: idem_tools::Error) -> Self {
///         Declined(error.to_string())
///     }
/// }
/// let both: Codec<u64, Declined> = Codec::ok_and_err();
/// // An `Ok` that reports a failure (here: 0) is not recorded either.
/// let checked = plain.not_recording(|n: &u64| *n == 0);
/// # let _ = (both, checked);
/// ```
pub struct Codec<T, E> {
    record: fn(&'static str, &Result<T, E>) -> Option<Recorded>,
    decode: Decode<T, E>,
    unrecorded: Option<fn(&T) -> bool>,
    /// The engine's own failures as the tool's error.
    error: fn(Error) -> E,
}

impl<T, E> Clone for Codec<T, E> {
    fn clone(&self) -> Self {
        *self
    }
}

impl<T, E> Copy for Codec<T, E> {}

impl<T: Serialize + DeserializeOwned, E: From<Error>> Codec<T, E> {
    /// Records `Ok` results; an `Err` gives the key back so that a retry runs the tool again.
    pub fn ok_only() -> Self {
        Codec {
            record: <OkOnly as ResultCodec<T, E>>::record,
            decode: <OkOnly as ResultCodec<T, E>>::decode,
            unrecorded: None,
            error: E::from,
        }
    }
}

impl<T: Serialize + DeserializeOwned, E: From<Error> + Serialize + DeserializeOwned> Codec<T, E> {
    /// Records and replays `Err` results too (`cache_errors`, Stripe's behaviour): a failed call
    /// is not retried until its record expires.
    pub fn ok_and_err() -> Self {
        Codec {
            record: <OkAndErr as ResultCodec<T, E>>::record,
            decode: <OkAndErr as ResultCodec<T, E>>::decode,
            unrecorded: None,
            error: E::from,
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
///
/// `F` is the tool's body: its own future type for [`execute`](super::execute), and
/// `dyn Future<Output = R> + Send` for [`execute_detached`](super::execute_detached)
/// ([`DetachedExecution`]), so that every detached tool with one result type shares one
/// compiled copy.
#[must_use = "a call does nothing unless awaited"]
pub struct Execution<F: ?Sized + Future>
where
    F::Output: ToolResult,
{
    /// The body, boxed so that the call can move into a task of its own after it started;
    /// `None` once it finished. Dropped before the driver, so that by the time the engine's
    /// guard gives the key back (or marks it), the body is no longer alive: two bodies of one
    /// key never overlap.
    body: Option<Pin<Box<F>>>,
    driver: Driver,
    /// The body's result, once it finished, until the engine answers.
    result: Option<F::Output>,
    codec: Codec<OkOf<F>, ErrOf<F>>,
    tool: &'static str,
    detach: Option<Detach<F>>,
}

/// How a detached call moves into a task of its own, and how its result comes back: set only
/// where the body and its result are `Send + 'static`.
struct Detach<F: ?Sized + Future>
where
    F::Output: ToolResult,
{
    /// Moves the rest of the call into a task, leaving the driver that joins it.
    spawn: fn(&mut Execution<F>) -> Driver,
    unbox: fn(Box<dyn Any + Send>) -> Option<F::Output>,
}

impl<F: ?Sized + Future> Clone for Detach<F>
where
    F::Output: ToolResult,
{
    fn clone(&self) -> Self {
        *self
    }
}

impl<F: ?Sized + Future> Copy for Detach<F> where F::Output: ToolResult {}

/// A detached call ([`execute_detached`](super::execute_detached)): its body type-erased.
pub type DetachedExecution<R> = Execution<dyn Future<Output = R> + Send>;

impl<F: Future> Execution<F>
where
    F::Output: ToolResult,
{
    pub(super) fn new(call: Call, codec: Codec<OkOf<F>, ErrOf<F>>, body: F) -> Self {
        let tool = call.tool.name;
        Self::with(Driver::new(call, false), tool, codec, Box::pin(body))
    }

    /// A call refused before it reached the engine — outside a turn, an argument that does not
    /// encode — that answers `error` (converted into the tool's error) without polling `body`.
    /// Report the refusal with [`refuse`](super::refuse) first, so that it is logged and
    /// counted as the call's one outcome.
    pub fn refused(
        tool: &'static str,
        error: Error,
        codec: Codec<<F::Output as ToolResult>::Ok, <F::Output as ToolResult>::Err>,
        body: F,
    ) -> Self {
        Self::with(Driver::refused(error), tool, codec, Box::pin(body))
    }
}

impl<F: ?Sized + Future> Execution<F>
where
    F::Output: ToolResult,
{
    fn with(
        driver: Driver,
        tool: &'static str,
        codec: Codec<OkOf<F>, ErrOf<F>>,
        body: Pin<Box<F>>,
    ) -> Self {
        Execution {
            body: Some(body),
            driver,
            result: None,
            codec,
            tool,
            detach: None,
        }
    }
}

impl<R: ToolResult + Send + 'static> DetachedExecution<R> {
    /// [`execute_detached`](super::execute_detached) of a body already boxed.
    pub fn boxed(
        call: Call,
        codec: Codec<R::Ok, R::Err>,
        body: Pin<Box<dyn Future<Output = R> + Send>>,
    ) -> Self {
        let tool = call.tool.name;
        let mut execution = Self::with(Driver::new(call, true), tool, codec, body);
        execution.detach = Some(Detach {
            spawn: Self::spawn,
            unbox: |result| result.downcast().ok().map(|result| *result),
        });
        execution
    }

    /// Moves the rest of the call into a task of its own; returns the driver that joins it.
    fn spawn(&mut self) -> Driver {
        let rest = Execution {
            body: self.body.take(),
            driver: self.driver.take(),
            result: None,
            codec: self.codec,
            tool: self.tool,
            detach: None,
        };
        Driver::spawn(Box::pin(Boxed(rest)))
    }

    /// A detached call refused before it reached the engine (see [`Execution::refused`]).
    pub fn refused_boxed(
        tool: &'static str,
        error: Error,
        codec: Codec<R::Ok, R::Err>,
        body: Pin<Box<dyn Future<Output = R> + Send>>,
    ) -> Self {
        Self::with(Driver::refused(error), tool, codec, body)
    }
}

/// The rest of a detached call, in its own task: its result boxed, so that every detached
/// call's task has one type.
struct Boxed<R: ToolResult>(DetachedExecution<R>);

impl<R: ToolResult + Send + 'static> Future for Boxed<R> {
    type Output = Box<dyn Any + Send>;

    fn poll(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Box<dyn Any + Send>> {
        Pin::new(&mut self.get_mut().0)
            .poll(cx)
            .map(|result| Box::new(result) as Box<dyn Any + Send>)
    }
}

impl<F: ?Sized + Future> Drop for Execution<F>
where
    F::Output: ToolResult,
{
    fn drop(&mut self) {
        // The body goes first (see the field).
        self.body = None;
    }
}

impl<F> Future for Execution<F>
where
    F: ?Sized + Future,
    F::Output: ToolResult,
{
    type Output = F::Output;

    fn poll(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<F::Output> {
        let this = self.get_mut();
        let driven = loop {
            let Execution {
                body,
                driver,
                result,
                codec,
                tool,
                detach,
            } = &mut *this;
            match std::task::ready!(driver.poll(cx, &mut |cx| {
                let Some(polled) = body.as_mut() else {
                    // Asked to poll a body that is gone: cannot happen (the engine asks only
                    // while it runs); stay pending rather than poll it again.
                    return Poll::Pending;
                };
                let output = std::task::ready!(polled.as_mut().poll(cx)).into_result();
                *body = None;
                let finished = codec.finished(tool, &output);
                *result = Some(ToolResult::from_result(output));
                Poll::Ready(finished)
            })) {
                // Only a detachable call is asked to detach.
                Driven::Detach => {
                    if let Some(detach) = *detach {
                        this.driver = (detach.spawn)(this);
                    }
                }
                driven => break driven,
            }
        };
        this.body = None;
        let output = match driven {
            Driven::Answer(answer) => {
                let result = this.result.take().map(ToolResult::into_result);
                answered(answer, result, this.codec)
            }
            Driven::Joined(joined) => match this.detach.and_then(|detach| (detach.unbox)(joined)) {
                Some(result) => return Poll::Ready(result),
                None => Err((this.codec.error)(Error::Config(
                    "a detached call's task returned a result of another type".to_owned(),
                ))),
            },
            Driven::Detach => unreachable!("handled above"),
        };
        Poll::Ready(ToolResult::from_result(output))
    }
}

// Nothing is pinned in place: the body is boxed.
impl<F: ?Sized + Future> Unpin for Execution<F> where F::Output: ToolResult {}

/// The caller's result for the engine's answer.
pub(super) fn answered<T, E>(
    answer: Answer,
    result: Option<Result<T, E>>,
    codec: Codec<T, E>,
) -> Result<T, E> {
    match answer {
        Answer::Ran => result.unwrap_or_else(|| {
            let error =
                Error::Config("the engine answered before the tool's body finished".to_owned());
            Err((codec.error)(error))
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
                Err(error) => {
                    report.fail_with(Outcome::DecodeError, &error);
                    Err((codec.error)(error))
                }
            }
        }
        Answer::Refused(error) => Err((codec.error)(error)),
    }
}

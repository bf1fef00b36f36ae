//! The typed side of a call, and the only generic code of the engine: it asks the engine
//! ([`call::ask`](super::call::ask)), starts the tool's body when the key is claimed — boxed,
//! handing its result to a [`Sink`] that encodes it for recording (`Finished`) — and decodes a
//! recorded result. Everything else — the store, the lease, single-flight, the outcome, the
//! span, the detached task — is [`call`](super::call), compiled once for every tool.
//!
//! The body waits in the caller's future (an `Option`, reached as `dyn` [`Unstarted`]) until
//! then, so [`attached`] and [`detached`] are compiled once per result type, and what is
//! compiled per tool is the body's own future and its boxing ([`Running`]).

use std::future::Future;
use std::panic::{self, AssertUnwindSafe};
use std::pin::Pin;
use std::sync::{Arc, Mutex, PoisonError};
use std::task::{Context, Poll};

use pin_project_lite::pin_project;

use serde::Serialize;
use serde::de::DeserializeOwned;

use super::Call;
use super::call::{self, Asked, Body, Claiming, Finished};
use crate::Error;
use crate::key::Key;
use crate::replay::{OkAndErr, OkOnly, Recorded, ResultCodec};

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
        let (record, unrecorded) = (self.record, self.unrecorded);
        let recorded = guarded(tool, &mut || match (result, unrecorded) {
            (Ok(value), Some(failed)) if failed(value) => None,
            _ => record(tool, result),
        });
        match recorded {
            None => Finished::Release,
            Some(Recorded::Faithful(bytes)) => Finished::Record {
                bytes: bytes.into(),
                ok: result.is_ok(),
            },
            // An `Err` that would not replay as returned is not recorded: a marker would tell a
            // retry that the tool ran, and a model that the action was done.
            Some(Recorded::Unreplayable { error, .. }) if result.is_err() => {
                unreplayable_err(tool, &error)
            }
            Some(Recorded::Unreplayable { bytes, error }) => Finished::Unreplayable {
                bytes: bytes.into(),
                reason: error.to_string(),
            },
        }
    }
}

/// What the engine does with an `Err` (of a tool with `cache_errors`) whose record would not
/// replay as returned (`error` says why): give the key back, as without `cache_errors`, so that
/// a retry runs the tool again rather than being told it ran. Compiled once.
fn unreplayable_err(tool: &'static str, error: &Error) -> Finished {
    tracing::warn!(target: "idem", tool, %error, "the tool's `Err` would not replay as it was \
        returned, so it is not recorded: its key is given back and a retry runs the tool again");
    Finished::Release
}

/// `record()`, or, if it panicked (the result's `Serialize` or `Deserialize`, or the
/// [`not_recording`](Codec::not_recording) check), a not-replayable marker: the panic is not
/// the body's, which ran, so the key of an `Ok` must not be given back for a retry to run it
/// again (an `Err`'s is, as every `Err` that is not recorded: [`Codec::finished`]). Compiled
/// once.
fn guarded(tool: &'static str, record: &mut dyn FnMut() -> Option<Recorded>) -> Option<Recorded> {
    match panic::catch_unwind(AssertUnwindSafe(record)) {
        Ok(recorded) => recorded,
        Err(panic) => Some(Recorded::panicked(tool, &*panic)),
    }
}

/// A tool's body before it runs, kept by the caller in an `Option` of its future. Once the
/// key is claimed, the engine takes it out, boxed, and runs it: when it finishes it hands its
/// result to a `Sink`. So the only code generic over the body is the body's own future and
/// its boxing; [`attached`] and [`detached`] are generic over the result type only.
///
/// Implemented by `Option<F>` for every body `F`; generated code passes `&mut Some(body)`.
pub trait Unstarted<'a, T, E>: Send {
    /// The body, boxed, handing its result to `sink` (a body taken already records nothing,
    /// and its call answers an error).
    fn start<'s>(&mut self, sink: Sink<'s, T, E>) -> Started<'s>
    where
        'a: 's;
}

impl<'a, F> Unstarted<'a, OkOf<F>, ErrOf<F>> for Option<F>
where
    F: Future + Send + 'a,
    F::Output: ToolResult,
    OkOf<F>: Send,
    ErrOf<F>: Send,
{
    fn start<'s>(&mut self, sink: Sink<'s, OkOf<F>, ErrOf<F>>) -> Started<'s>
    where
        'a: 's,
    {
        match self.take() {
            Some(body) => Started(Box::pin(Running {
                sink: Some(sink),
                body,
            })),
            None => Started(Box::pin(std::future::ready(Finished::Release))),
        }
    }
}

pin_project! {
    /// A started body: the tool's future, whose result goes to the sink. A struct rather than
    /// an `async` block, whose state machine would be compiled for every tool.
    struct Running<'s, F: Future, T, E> {
        sink: Option<Sink<'s, T, E>>,
        #[pin]
        body: F,
    }
}

impl<F, T, E> Future for Running<'_, F, T, E>
where
    F: Future,
    F::Output: ToolResult<Ok = T, Err = E>,
{
    type Output = Finished;

    /// Not polled again once ready (as any future); the work is [`finish`]'s, once per result type.
    fn poll(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Finished> {
        let this = self.project();
        match this.body.poll(cx) {
            Poll::Ready(output) => Poll::Ready(finish(this.sink, output)),
            Poll::Pending => Poll::Pending,
        }
    }
}

/// Hands a body's `output` to its sink (the first time: a body finishes once).
fn finish<R: ToolResult>(sink: &mut Option<Sink<'_, R::Ok, R::Err>>, output: R) -> Finished {
    match sink.take() {
        Some(sink) => sink.finish(output.into_result()),
        None => Finished::Release,
    }
}

/// A started body, as the engine runs it.
pub struct Started<'s>(Body<'s>);

/// Where a body's result goes when it finishes: it is encoded for recording (with the tool's
/// [`Codec`]) and kept for the caller.
pub struct Sink<'s, T, E> {
    codec: Codec<T, E>,
    tool: &'static str,
    slot: Slot<'s, T, E>,
}

/// Where the caller finds the result: in its own future (attached), or shared with the call's
/// task, which outlives the caller if it goes away (detached).
enum Slot<'s, T, E> {
    Here(&'s mut Option<Result<T, E>>),
    Shared(Arc<Mutex<Option<Result<T, E>>>>),
}

impl<T, E> Sink<'_, T, E> {
    /// Tells the engine what to do with `output`, and keeps it for the caller.
    fn finish(self, output: Result<T, E>) -> Finished {
        let finished = self.codec.finished(self.tool, &output);
        match self.slot {
            Slot::Here(slot) => *slot = Some(output),
            Slot::Shared(slot) => {
                *slot.lock().unwrap_or_else(PoisonError::into_inner) = Some(output);
            }
        }
        finished
    }
}

/// Runs `body` in the caller's task: see [`execute`](super::execute). `call` is the call, or
/// the error that refused it before it could reach the engine (reported already).
#[allow(clippy::manual_async_fn)] // see `call::asking`: an async block keeps no second copy of its arguments
#[inline(always)] // built in place in the caller's future (see `__private::run`)
pub fn attached<'b, R>(
    call: Result<Call, Error>,
    codec: Codec<R::Ok, R::Err>,
    body: &'b mut (dyn Unstarted<'b, R::Ok, R::Err> + 'b),
) -> impl Future<Output = R> + Send + 'b
where
    R: ToolResult,
    R::Ok: Send + 'b,
    R::Err: Send + 'b,
{
    async move {
        let call = match call {
            Ok(call) => call,
            Err(error) => return R::from_result(Err((codec.error)(error))),
        };
        let mut result = None;
        let asked = call::ask_plain(call, &mut Claiming, &mut codec.decoder(&mut result)).await;
        let answer = match asked {
            Asked::Answered(answer) => answer,
            Asked::Granted(granted) => {
                let tool = granted.call.tool.name;
                let slot = Slot::Here(&mut result);
                let Started(body) = body.start(Sink { codec, tool, slot });
                call::run(granted, body).await
            }
        };
        R::from_result(codec.answered(answer, result))
    }
}

/// Runs `body` in a task of its own once the key is claimed: see
/// [`execute_detached`](super::execute_detached). `call` as in [`attached`].
#[allow(clippy::manual_async_fn)] // see `call::asking`: an async block keeps no second copy of its arguments
#[inline(always)] // built in place in the caller's future (see `__private::run`)
pub fn detached<'b, R>(
    call: Result<Call, Error>,
    codec: Codec<R::Ok, R::Err>,
    body: &'b mut (dyn Unstarted<'static, R::Ok, R::Err> + 'b),
) -> impl Future<Output = R> + Send + 'b
where
    R: ToolResult,
    R::Ok: Send + 'static,
    R::Err: Send + 'static,
{
    async move {
        let call = match call {
            Ok(call) => call,
            Err(error) => return R::from_result(Err((codec.error)(error))),
        };
        let mut result = None;
        let asked = call::ask_plain(call, &mut Claiming, &mut codec.decoder(&mut result)).await;
        let answer = match asked {
            Asked::Answered(answer) => answer,
            Asked::Granted(granted) => {
                // The task outlives this call if the caller goes away: the result is shared.
                let shared = Arc::new(Mutex::new(None));
                let tool = granted.call.tool.name;
                let slot = Slot::Shared(Arc::clone(&shared));
                let Started(body) = body.start(Sink { codec, tool, slot });
                let answer = call::run_detached(granted, body).await;
                result = shared.lock().unwrap_or_else(PoisonError::into_inner).take();
                answer
            }
        };
        R::from_result(codec.answered(answer, result))
    }
}

impl<T, E> Codec<T, E> {
    /// The engine's [`Decode`](call::Decode): decodes a recorded result into `result`.
    pub(super) fn decoder<'r>(
        self,
        result: &'r mut Option<Result<T, E>>,
    ) -> impl FnMut(&Call, &[u8]) -> Result<(), Error> + Send + 'r
    where
        T: Send,
        E: Send,
    {
        move |call, bytes| {
            *result = Some((self.decode)(call.tool.name, &call.key, bytes)?);
            Ok(())
        }
    }

    /// The caller's result: the one the typed layer holds, or the engine's error as the tool's
    /// error.
    pub(super) fn answered(
        self,
        answer: call::Answer,
        result: Option<Result<T, E>>,
    ) -> Result<T, E> {
        match (answer, result) {
            (Ok(()), Some(result)) => result,
            (Ok(()), None) => Err((self.error)(Error::Config(
                "the engine answered before the tool's result was known".to_owned(),
            ))),
            (Err(error), _) => {
                // The tool running here (if this call was made in one) may return it as its own.
                super::held::refused();
                Err((self.error)(error))
            }
        }
    }
}

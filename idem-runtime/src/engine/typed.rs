//! The typed side of a call, and the only generic code of the engine: it asks the engine
//! ([`call::ask`](super::call::ask)), hands it the tool's body, boxed and encoding its result
//! (`Finished`), when the key is claimed, and decodes a recorded result. Everything else — the
//! store, the lease, single-flight, the outcome, the span, the detached task — is
//! [`call`](super::call), compiled once for every tool.

use std::future::Future;
use std::sync::{Arc, Mutex, PoisonError};

use serde::Serialize;
use serde::de::DeserializeOwned;

use super::Call;
use super::call::{self, Asked, Claiming, Finished};
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

/// Runs `body` in the caller's task: see [`execute`](super::execute).
#[allow(clippy::manual_async_fn)] // see `asking`: an async block keeps no second copy of its arguments
pub(super) fn attached<F>(
    call: Call,
    codec: Codec<OkOf<F>, ErrOf<F>>,
    body: F,
) -> impl Future<Output = F::Output> + Send
where
    F: Future + Send,
    F::Output: ToolResult + Send,
    OkOf<F>: Send,
    ErrOf<F>: Send,
{
    // An `async` block, not an `async fn`: see `call::asking`.
    async move {
        let mut result = None;
        let asked = call::ask(call, &mut Claiming, &mut codec.decoder(&mut result)).await;
        let answer = match asked {
            Asked::Answered(answer) => answer,
            Asked::Granted(granted) => {
                let tool = granted.call.tool.name;
                let body = encoded(body, codec, tool, |output| result = Some(output));
                call::run(granted, Box::pin(body)).await
            }
        };
        ToolResult::from_result(codec.answered(answer, result))
    }
}

/// Runs `body` in a task of its own once the key is claimed: see
/// [`execute_detached`](super::execute_detached).
#[allow(clippy::manual_async_fn)] // see `asking`: an async block keeps no second copy of its arguments
pub(super) fn detached<F>(
    call: Call,
    codec: Codec<OkOf<F>, ErrOf<F>>,
    body: F,
) -> impl Future<Output = F::Output> + Send
where
    F: Future + Send + 'static,
    F::Output: ToolResult + Send + 'static,
    OkOf<F>: Send + 'static,
    ErrOf<F>: Send + 'static,
{
    async move {
        let mut result = None;
        let asked = call::ask(call, &mut Claiming, &mut codec.decoder(&mut result)).await;
        let answer = match asked {
            Asked::Answered(answer) => answer,
            Asked::Granted(granted) => {
                // The task outlives this call if the caller goes away: the result is shared.
                let slot = Arc::new(Mutex::new(None));
                let tool = granted.call.tool.name;
                let body = encoded(body, codec, tool, {
                    let slot = Arc::clone(&slot);
                    move |output| {
                        *slot.lock().unwrap_or_else(PoisonError::into_inner) = Some(output)
                    }
                });
                let answer = call::run_detached(granted, Box::pin(body)).await;
                result = slot.lock().unwrap_or_else(PoisonError::into_inner).take();
                answer
            }
        };
        ToolResult::from_result(codec.answered(answer, result))
    }
}

/// The body as the engine runs it: awaits the tool's body, hands its result to `keep` and
/// tells the engine what to do with it.
#[allow(clippy::manual_async_fn)] // see `asking`: an async block keeps no second copy of its arguments
fn encoded<F>(
    body: F,
    codec: Codec<OkOf<F>, ErrOf<F>>,
    tool: &'static str,
    keep: impl FnOnce(Result<OkOf<F>, ErrOf<F>>),
) -> impl Future<Output = Finished>
where
    F: Future,
    F::Output: ToolResult,
{
    async move {
        let output = body.await.into_result();
        let finished = codec.finished(tool, &output);
        keep(output);
        finished
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
            (Err(error), _) => Err((self.error)(error)),
        }
    }
}

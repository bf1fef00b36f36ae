//! The future of one call: its first poll runs the call's steps as far as they go without
//! waiting, in place; only a call that has to wait builds (and boxes) the future of the rest.

use std::future::Future;
use std::marker::PhantomData;
use std::pin::Pin;
use std::task::{Context, Poll};

use tracing::Span;

use super::Call;
use super::claimed::Claimed;
use super::report::Reporter;
use super::steps::{self, At, Next};
use super::telemetry;
use crate::Error;
use crate::replay::ResultCodec;

/// A call of a state-changing tool, as [`execute`](super::execute) returns it. The call's
/// `tracing` span is entered whenever it is polled or dropped.
pub(super) struct Execution<C, T, E, F, S, G> {
    stage: Stage<F, S, G>,
    span: Span,
    /// Builds the future of the rest of a call that has to wait.
    rest: fn(Reporter, At, F, S) -> G,
    codec: Codec<C, T, E>,
}

/// The codec and result types, which an execution holds none of.
type Codec<C, T, E> = PhantomData<fn() -> (C, T, E)>;

enum Stage<F, S, G> {
    /// Not polled yet: the call, the tool's body and how to run it once claimed.
    Fresh { call: Call, body: F, start: S },
    /// Waiting.
    Waiting(Pin<Box<G>>),
    /// Over.
    Finished,
}

/// `execute`: a call of `body` that, once it claims its key, runs `start(claimed, body)`.
pub(super) fn execution<C, T, E, F, S, R>(
    call: Call,
    body: F,
    start: S,
) -> impl Future<Output = Result<T, E>>
where
    C: ResultCodec<T, E>,
    E: From<Error>,
    S: FnOnce(Claimed, F) -> R,
    R: Future<Output = Result<T, E>>,
{
    Execution::<C, T, E, F, S, _> {
        stage: Stage::Fresh { call, body, start },
        span: Span::none(),
        rest: steps::wait::<C, T, E, F, S, R>,
        codec: PhantomData,
    }
}

// Nothing is pinned in place: the body and `start` are moved out before anything polls them,
// and the rest of the call is polled in its own box.
impl<C, T, E, F, S, G> Unpin for Execution<C, T, E, F, S, G> {}

impl<C, T, E, F, S, G> Future for Execution<C, T, E, F, S, G>
where
    C: ResultCodec<T, E>,
    E: From<Error>,
    G: Future<Output = Result<T, E>>,
{
    type Output = Result<T, E>;

    fn poll(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Result<T, E>> {
        let this = self.get_mut();
        if let Stage::Fresh { .. } = this.stage {
            let Stage::Fresh { call, body, start } =
                std::mem::replace(&mut this.stage, Stage::Finished)
            else {
                return Poll::Pending;
            };
            this.span = telemetry::span(&call);
            let _entered = this.span.enter();
            let mut report = Reporter::new(call, this.span.clone());
            match steps::start::<C, T, E>(&mut report) {
                Next::Done(result) => return Poll::Ready(result),
                Next::Wait(at) => {
                    this.stage = Stage::Waiting(Box::pin((this.rest)(report, at, body, start)));
                }
            }
        }
        match &mut this.stage {
            Stage::Waiting(rest) => {
                let _entered = this.span.enter();
                let result = std::task::ready!(rest.as_mut().poll(cx));
                this.stage = Stage::Finished;
                Poll::Ready(result)
            }
            // Polled after it finished: it never answers again.
            Stage::Fresh { .. } | Stage::Finished => Poll::Pending,
        }
    }
}

impl<C, T, E, F, S, G> Drop for Execution<C, T, E, F, S, G> {
    fn drop(&mut self) {
        // What the call reports as it is dropped (cancelled, interrupted) belongs to its span.
        let _entered = self.span.enter();
        self.stage = Stage::Finished;
    }
}

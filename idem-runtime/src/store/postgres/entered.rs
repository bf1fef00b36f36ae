//! Store operations that can be dropped anywhere: a pooled `sqlx` connection dropped mid-query
//! goes back to its pool through a task of the runtime, and panics on a thread outside any
//! runtime. A caller may drop an unfinished call there (a future kept past the `block_on` that
//! polled it), so every operation drops what it holds inside the runtime it was polled on.

use std::future::Future;
use std::pin::Pin;
use std::task::{Context, Poll};

use crate::Result;
use crate::store::StoreFuture;

/// `op` as a store operation that, dropped unfinished, is dropped inside the runtime it was
/// last polled on.
pub(super) fn entered<'a, T: Send + 'a>(
    op: impl Future<Output = Result<T>> + Send + 'a,
) -> StoreFuture<'a, T> {
    StoreFuture::new(Entered {
        op: Some(StoreFuture::new(op)),
        runtime: None,
    })
}

struct Entered<'a, T> {
    op: Option<StoreFuture<'a, T>>,
    runtime: Option<tokio::runtime::Handle>,
}

impl<T> Future for Entered<'_, T> {
    type Output = Result<T>;

    fn poll(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Result<T>> {
        if self.runtime.is_none() {
            self.runtime = tokio::runtime::Handle::try_current().ok();
        }
        let Some(op) = self.op.as_mut() else {
            return Poll::Ready(Err(crate::Error::store(
                "postgres",
                "an operation was polled after it answered",
            )));
        };
        let answer = std::task::ready!(Pin::new(op).poll(cx));
        self.op = None;
        Poll::Ready(answer)
    }
}

impl<T> Drop for Entered<'_, T> {
    fn drop(&mut self) {
        if let Some(op) = self.op.take() {
            inside(self.runtime.as_ref(), op, drop);
        }
    }
}

/// Ends `value` with `end` inside `runtime` (what it holds may need the runtime to be dropped).
/// On a thread that is exiting and has destroyed Tokio's context already (a value dropped by
/// another thread-local's destructor), no runtime can be entered any more: `value` is leaked
/// instead — the thread is going away.
pub(crate) fn inside<T>(runtime: Option<&tokio::runtime::Handle>, value: T, end: impl FnOnce(T)) {
    if matches!(tokio::runtime::Handle::try_current(), Err(e) if e.is_thread_local_destroyed()) {
        std::mem::forget(value);
        return;
    }
    let _entered = runtime.map(tokio::runtime::Handle::enter);
    end(value);
}

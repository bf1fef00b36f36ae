//! [`StoreFuture`]: what store methods return — an answer already known (an in-memory store),
//! or a boxed future (a store that does I/O).

use std::fmt;
use std::future::Future;
use std::pin::Pin;
use std::task::{Context, Poll};

use crate::Result;

/// The answer of a [`Store`](super::Store) method: either ready at once, or a future to await.
///
/// A store that answers without waiting (such as [`MemoryStore`](super::MemoryStore)) returns
/// [`StoreFuture::ready`], which allocates nothing; the engine takes such an answer without
/// arming a timer or awaiting. A store that does I/O returns [`StoreFuture::new`] with an
/// `async` block. Either way it is a `Future`, so callers may simply `.await` it.
///
/// ```
/// use idem_tools_runtime::store::StoreFuture;
///
/// # #[tokio::main(flavor = "current_thread")] async fn main() -> idem_tools_runtime::Result<()> {
/// let ready: StoreFuture<'_, u64> = StoreFuture::ready(Ok(7));
/// assert!(ready.is_ready());
/// let later: StoreFuture<'_, u64> = StoreFuture::new(async { Ok(7) });
/// assert!(!later.is_ready());
/// assert_eq!(later.await?, 7);
/// # Ok(()) }
/// ```
#[must_use = "a store answer does nothing unless awaited or taken"]
pub struct StoreFuture<'a, T>(Repr<'a, T>);

enum Repr<'a, T> {
    /// The answer, until it is taken.
    Ready(Option<Result<T>>),
    /// The operation, still running.
    Pending(Pin<Box<dyn Future<Output = Result<T>> + Send + 'a>>),
}

impl<'a, T> StoreFuture<'a, T> {
    /// An answer known already.
    pub fn ready(answer: Result<T>) -> Self {
        StoreFuture(Repr::Ready(Some(answer)))
    }

    /// An answer `future` will give (boxed).
    pub fn new(future: impl Future<Output = Result<T>> + Send + 'a) -> Self {
        StoreFuture(Repr::Pending(Box::pin(future)))
    }

    /// Whether the answer is known without polling.
    pub fn is_ready(&self) -> bool {
        matches!(self.0, Repr::Ready(Some(_)))
    }

    /// The answer if it is known without polling, else the future back.
    ///
    /// # Errors
    /// `Err(self)` when the answer is not known yet: await it.
    pub fn into_ready(self) -> std::result::Result<Result<T>, Self> {
        match self.0 {
            Repr::Ready(Some(answer)) => Ok(answer),
            repr => Err(StoreFuture(repr)),
        }
    }
}

// The answer is moved out, never pinned in place, so the future is `Unpin` whatever `T` is.
impl<T> Unpin for StoreFuture<'_, T> {}

impl<T> Future for StoreFuture<'_, T> {
    type Output = Result<T>;

    fn poll(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Result<T>> {
        match &mut self.get_mut().0 {
            Repr::Ready(answer) => match answer.take() {
                Some(answer) => Poll::Ready(answer),
                None => Poll::Pending, // polled after completion: never answers again
            },
            Repr::Pending(future) => future.as_mut().poll(cx),
        }
    }
}

impl<T> fmt::Debug for StoreFuture<'_, T> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let state = match &self.0 {
            Repr::Ready(Some(_)) => "ready",
            Repr::Ready(None) => "taken",
            Repr::Pending(_) => "pending",
        };
        f.debug_tuple("StoreFuture").field(&state).finish()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_ready_answer_is_taken_without_polling() {
        let answer = StoreFuture::ready(Ok(3u8)).into_ready();
        assert!(matches!(answer, Ok(Ok(3))));
        let future = StoreFuture::new(async { Ok(3u8) });
        assert!(future.into_ready().is_err(), "a boxed future is not ready");
    }

    #[tokio::test]
    async fn both_kinds_await_to_their_answer() {
        assert_eq!(StoreFuture::ready(Ok(1u8)).await.ok(), Some(1));
        assert_eq!(StoreFuture::new(async { Ok(2u8) }).await.ok(), Some(2));
    }
}

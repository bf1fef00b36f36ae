//! The client-supplied key of the MCP call being routed, handed to the first `#[idempotent]`
//! tool the call reaches.

use std::future::Future;
use std::sync::{Arc, Mutex, PoisonError};

/// The key of one routed call, shared by the tasks `idem_tools::spawn` starts from it: the
/// first `#[idempotent]` tool any of them runs takes it.
type Slot = Arc<Mutex<Option<String>>>;

tokio::task_local! {
    static CALLER_KEY: Slot;
}

/// Runs `future` with `key` as the caller key of the first `#[idempotent]` call it makes.
pub(crate) fn with_caller_key<F: Future>(
    key: Option<String>,
    future: F,
) -> impl Future<Output = F::Output> {
    CALLER_KEY.scope(Arc::new(Mutex::new(key)), future)
}

/// The caller key of the MCP call running in this task, taken: the first `#[idempotent]` tool
/// the call runs gets it (when its call first runs), tools that one calls derive their keys as
/// usual.
pub(crate) fn take_routed_key() -> Option<String> {
    CALLER_KEY
        .try_with(|slot| slot.lock().unwrap_or_else(PoisonError::into_inner).take())
        .ok()
        .flatten()
}

/// `future` sharing the caller key of the MCP call running in this task (`idem_tools::spawn`
/// runs it in a task of its own): whichever of them runs an `#[idempotent]` tool first takes
/// the key, the handler's own tool as well as one in the new task.
pub(crate) fn carry_routed_key<F: Future>(future: F) -> impl Future<Output = F::Output> {
    let slot = CALLER_KEY.try_with(Arc::clone).unwrap_or_default();
    CALLER_KEY.scope(slot, future)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[tokio::test]
    async fn the_first_idempotent_call_takes_the_key_and_the_ones_it_makes_do_not() {
        assert_eq!(take_routed_key(), None, "outside an MCP call");
        let key = with_caller_key(Some("k-1".to_owned()), async {
            (take_routed_key(), take_routed_key())
        })
        .await;
        assert_eq!(key, (Some("k-1".to_owned()), None));
    }

    #[tokio::test]
    async fn a_future_carried_away_shares_the_key_with_the_call() {
        let (carried, here) = with_caller_key(Some("k-2".to_owned()), async {
            let unrelated = carry_routed_key(async {}); // spawned first, takes nothing
            unrelated.await;
            let here = take_routed_key();
            (carry_routed_key(async { take_routed_key() }).await, here)
        })
        .await;
        assert_eq!((carried, here), (None, Some("k-2".to_owned())));
        let carried = with_caller_key(Some("k-3".to_owned()), async {
            carry_routed_key(async { take_routed_key() }).await
        })
        .await;
        assert_eq!(carried.as_deref(), Some("k-3"));
    }
}

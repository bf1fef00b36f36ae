//! The client-supplied key of the MCP call being routed, handed to the first `#[idempotent]`
//! tool the call reaches.

use std::cell::Cell;
use std::future::Future;

tokio::task_local! {
    static CALLER_KEY: Cell<Option<String>>;
}

/// Runs `future` with `key` as the caller key of the first `#[idempotent]` call it makes.
pub(crate) fn with_caller_key<F: Future>(
    key: Option<String>,
    future: F,
) -> impl Future<Output = F::Output> {
    CALLER_KEY.scope(Cell::new(key), future)
}

/// The caller key of the MCP call running in this task, taken: the first `#[idempotent]` tool
/// the call runs gets it (when its call first runs), tools that one calls derive their keys as
/// usual.
pub(crate) fn take_routed_key() -> Option<String> {
    CALLER_KEY.try_with(Cell::take).ok().flatten()
}

/// `future` with the caller key of the MCP call running in this task, taken from it: the
/// first `#[idempotent]` tool that `future` calls gets it (`idem_tools::spawn` carries it so).
pub(crate) fn carry_routed_key<F: Future>(future: F) -> impl Future<Output = F::Output> {
    with_caller_key(take_routed_key(), future)
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
}

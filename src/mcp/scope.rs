//! The client-supplied key of the MCP call being routed, handed to the first `#[idempotent]`
//! tool the call reaches.

use std::cell::Cell;
use std::future::Future;

use crate::__private::Digest;

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
/// gets it, tools that one calls derive their keys as usual.
fn take_caller_key() -> Option<String> {
    CALLER_KEY.try_with(Cell::take).ok().flatten()
}

/// `digest` with the client-supplied key of the MCP call being routed
/// ([`IdemServer`](super::IdemServer)), if it is the first `#[idempotent]` call the routed call
/// makes: whether it takes its turn from the scope or as a `&Turn` parameter.
pub(crate) fn route_caller_key(mut digest: Digest) -> Digest {
    if let Some(key) = take_caller_key() {
        digest.caller_key(key.as_str());
    }
    digest
}

#[cfg(test)]
mod tests {
    use super::*;

    #[tokio::test]
    async fn the_first_idempotent_call_takes_the_key_and_the_ones_it_makes_do_not() {
        assert_eq!(take_caller_key(), None, "outside an MCP call");
        let key = with_caller_key(Some("k-1".to_owned()), async {
            (take_caller_key(), take_caller_key())
        })
        .await;
        assert_eq!(key, (Some("k-1".to_owned()), None));
    }
}

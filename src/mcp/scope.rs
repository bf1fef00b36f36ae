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
/// gets it, tools that one calls derive their keys as usual.
pub(crate) fn take_caller_key() -> Option<String> {
    CALLER_KEY.try_with(Cell::take).ok().flatten()
}

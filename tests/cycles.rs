//! A call cycle — a tool reaching itself through other tools — fails at once with
//! `Error::Reentrant` whatever shape the tools have: a detached tool's body runs in a task of
//! its own, and the keys its callers hold follow it there.

use std::future::Future;
use std::pin::Pin;
use std::sync::Arc;
use std::time::{Duration, Instant};

use idem_tools::{Error, MemoryStore, Turn, idempotent};

type Boxed = Pin<Box<dyn Future<Output = Result<u32, Error>> + Send>>;

// Owned arguments: detached (the default for a free function).
#[idempotent]
async fn detached_a(x: u32) -> Result<u32, Error> {
    detached_b(x).await
}

#[idempotent]
async fn detached_b(x: u32) -> Result<u32, Error> {
    call_detached_a(x).await
}

/// `detached_a`'s future, boxed (a recursive `async fn` cannot be `Send`).
fn call_detached_a(x: u32) -> Boxed {
    Box::pin(detached_a(x))
}

// An attached tool whose callee is detached.
#[idempotent(attached)]
async fn attached_e(x: u32) -> Result<u32, Error> {
    detached_f(x).await
}

#[idempotent]
async fn detached_f(x: u32) -> Result<u32, Error> {
    call_attached_e(x).await
}

fn call_attached_e(x: u32) -> Boxed {
    Box::pin(attached_e(x))
}

/// Runs `call` in a turn whose in-flight wait (30 s) would show as a hang; its answer and how
/// long it took.
async fn in_turn(call: Boxed) -> (Result<u32, Error>, Duration) {
    let turn = Turn::new("cycles")
        .with_in_flight_wait(Duration::from_secs(30))
        .with_store(Arc::new(MemoryStore::new()));
    let started = Instant::now();
    let answer = tokio::time::timeout(Duration::from_secs(10), turn.scope(call))
        .await
        .expect("the cycle waited for itself");
    (answer, started.elapsed())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_cycle_through_detached_tools_is_reentrant_at_once() {
    let (answer, took) = in_turn(call_detached_a(1)).await;
    assert!(
        matches!(
            answer,
            Err(Error::Reentrant {
                tool: "detached_a",
                ..
            })
        ),
        "{answer:?}"
    );
    assert!(took < Duration::from_secs(2), "took {took:?}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_cycle_from_an_attached_tool_through_a_detached_one_is_reentrant_at_once() {
    let (answer, took) = in_turn(call_attached_e(1)).await;
    assert!(
        matches!(
            answer,
            Err(Error::Reentrant {
                tool: "attached_e",
                ..
            })
        ),
        "{answer:?}"
    );
    assert!(took < Duration::from_secs(2), "took {took:?}");
}

//! What a caller that gives up does to an annotated tool: a detached tool (owned arguments)
//! finishes and its retry gets the first result; an attached tool (borrowed arguments) is kept
//! as interrupted, or released with `release_on_cancel`.

use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::Duration;

use idem_tools::{Error, MemoryStore, Turn, idempotent};

static DETACHED_STARTED: AtomicUsize = AtomicUsize::new(0);
static DETACHED_DONE: AtomicUsize = AtomicUsize::new(0);

/// Owned arguments and no receiver: runs detached.
#[idempotent]
async fn send_message(to: String, text: String) -> Result<String, Error> {
    DETACHED_STARTED.fetch_add(1, Ordering::SeqCst);
    tokio::time::sleep(Duration::from_millis(150)).await; // the downstream reply is slow
    let n = DETACHED_DONE.fetch_add(1, Ordering::SeqCst) + 1;
    Ok(format!("message {n} to {to}: {text}"))
}

#[tokio::test]
async fn a_timeout_then_a_retry_sends_one_message_and_the_retry_gets_the_first_receipt() {
    let turn = Turn::new("conv-1/turn-1").with_store(Arc::new(MemoryStore::new()));
    turn.scope(async {
        let first = tokio::time::timeout(
            Duration::from_millis(30),
            send_message("ada".into(), "hi".into()),
        )
        .await;
        assert!(first.is_err(), "the caller timed out");
        let retry = send_message("ada".into(), "hi".into()).await.unwrap();
        assert_eq!(retry, "message 1 to ada: hi");
        assert_eq!(DETACHED_STARTED.load(Ordering::SeqCst), 1);
        assert_eq!(DETACHED_DONE.load(Ordering::SeqCst), 1);
    })
    .await;
}

static ATTACHED_RUNS: AtomicUsize = AtomicUsize::new(0);

/// A borrowed argument: runs attached, in the caller's task.
#[idempotent]
async fn open_ticket(title: &str) -> Result<usize, Error> {
    ATTACHED_RUNS.fetch_add(1, Ordering::SeqCst);
    tokio::time::sleep(Duration::from_millis(150)).await;
    Ok(title.len())
}

#[tokio::test]
async fn an_attached_tool_cut_mid_run_tells_the_retry_the_outcome_is_unknown() {
    let turn = Turn::new("conv-1/turn-2").with_store(Arc::new(MemoryStore::new()));
    turn.scope(async {
        let first = tokio::time::timeout(Duration::from_millis(30), open_ticket("printer")).await;
        assert!(first.is_err());
        let retry = open_ticket("printer").await;
        let Err(error @ Error::Interrupted { .. }) = retry else {
            panic!("expected Interrupted, got {retry:?}");
        };
        assert!(
            error
                .to_string()
                .contains("may or may not have taken effect"),
            "{error}"
        );
        assert_eq!(ATTACHED_RUNS.load(Ordering::SeqCst), 1);
    })
    .await;
}

static RELEASING_RUNS: AtomicUsize = AtomicUsize::new(0);

#[idempotent(release_on_cancel)]
async fn ping_pager(service: &str) -> Result<usize, Error> {
    RELEASING_RUNS.fetch_add(1, Ordering::SeqCst);
    tokio::time::sleep(Duration::from_millis(150)).await;
    Ok(service.len())
}

#[tokio::test]
async fn release_on_cancel_lets_the_retry_run_again() {
    let turn = Turn::new("conv-1/turn-3").with_store(Arc::new(MemoryStore::new()));
    turn.scope(async {
        let first = tokio::time::timeout(Duration::from_millis(30), ping_pager("db")).await;
        assert!(first.is_err());
        assert_eq!(ping_pager("db").await.unwrap(), 2);
        assert_eq!(RELEASING_RUNS.load(Ordering::SeqCst), 2);
    })
    .await;
}

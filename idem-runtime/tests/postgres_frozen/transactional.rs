//! Transactional calls when the server stops answering: the record and `COMMIT`, the claim and
//! the body are each bounded, and a transaction the server keeps open for a client that went
//! silent ends after the tool's lease, freeing the key.

use std::time::{Duration, Instant};

use idem_tools_runtime::Error;

use crate::BOUND;
use crate::postgres_common::Failure;
use crate::setup::{Frozen, PAY_LEASE, Pool, pay};

/// Runs `pay(memo)`, which must end within `bound`; its answer.
async fn bounded_pay(frozen: &Frozen, memo: &str, bound: Duration) -> Result<i64, Failure> {
    let started = Instant::now();
    let answer = tokio::time::timeout(Duration::from_secs(60), pay(&frozen.store, memo))
        .await
        .expect("the call ends");
    let took = started.elapsed();
    assert!(took <= bound, "pay({memo}) took {took:?}: {answer:?}");
    answer
}

/// Failed closed: a store error, or a commit whose outcome is unknown.
fn store_error(answer: &Result<i64, Failure>) -> bool {
    matches!(
        answer,
        Err(Failure::Idem(
            Error::Store { .. } | Error::CommitFailed { .. }
        ))
    )
}

/// The answer to `idem_record(…); COMMIT` never comes back: the call ends with a store error
/// (outcome unknown), the retry replays what committed, and the store goes on.
async fn a_commit_never_answered(pool: Pool) {
    let Some(frozen) = Frozen::setup("frozen_commit", pool).await else {
        return;
    };
    frozen.forwarder.freeze_on(b"idem_record(", true);
    let lost = bounded_pay(&frozen, "c", BOUND).await;
    assert!(store_error(&lost), "{lost:?}");
    assert_eq!(frozen.forwarder.triggered(), 1);
    let retry = bounded_pay(&frozen, "c", BOUND).await.expect("replays");
    assert_eq!(
        frozen.rows("c").await,
        1,
        "it committed once, and was replayed"
    );
    let again = bounded_pay(&frozen, "c", BOUND).await.expect("replays");
    assert_eq!(again, retry);
    bounded_pay(&frozen, "fresh", BOUND)
        .await
        .expect("the store goes on");
    frozen.cleanup().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_commit_whose_answer_never_comes_ends_and_is_replayed_connect_pool() {
    a_commit_never_answered(Pool::Own).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_commit_whose_answer_never_comes_ends_and_is_replayed_application_pool() {
    a_commit_never_answered(Pool::App).await;
}

/// `pattern`'s request never reaches the server: the call ends in bounded time; the server
/// keeps the transaction (and the key's row lock) of a client it no longer hears from, so a
/// retry is told the key is in flight, until the tool's lease of idleness ends that session and
/// a retry runs the tool afresh, once. (A body stopped at its lease has been idle that long:
/// its retry may run at once.)
async fn a_request_that_never_arrives(pool: Pool, pattern: &str, memo: &str, bound: Duration) {
    let Some(frozen) = Frozen::setup("frozen_tx", pool).await else {
        return;
    };
    frozen.forwarder.freeze_on(pattern.as_bytes(), false);
    let started = Instant::now();
    let lost = bounded_pay(&frozen, memo, bound).await;
    assert!(lost.is_err(), "{lost:?}");
    assert_eq!(frozen.forwarder.triggered(), 1);
    if bound == BOUND {
        let held = bounded_pay(&frozen, memo, BOUND).await;
        assert!(
            matches!(held, Err(Failure::Idem(Error::InFlight { .. }))),
            "{held:?}"
        );
    }
    // The server ends the silent session once it has been idle in its transaction for the
    // tool's lease.
    let mut ran = None;
    while started.elapsed() < PAY_LEASE + Duration::from_secs(10) {
        match bounded_pay(&frozen, memo, BOUND).await {
            Ok(id) => {
                ran = Some(id);
                break;
            }
            Err(Failure::Idem(Error::InFlight { .. })) => {}
            Err(other) => panic!("{other:?}"),
        }
    }
    let freed = started.elapsed();
    ran.expect("the key is freed after the lease");
    assert_eq!(frozen.rows(memo).await, 1, "one execution committed");
    println!(
        "postgres frozen transaction ({pool:?} pool, {pattern:?} never arrives): the key was \
         free again after {freed:?}"
    );
    frozen.cleanup().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_commit_that_never_arrives_ends_and_the_key_is_freed_after_the_lease_connect_pool() {
    a_request_that_never_arrives(Pool::Own, "idem_record(", "z", BOUND).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_commit_that_never_arrives_ends_and_the_key_is_freed_after_the_lease_app_pool() {
    a_request_that_never_arrives(Pool::App, "idem_record(", "z", BOUND).await;
}

/// The body's own statement never answered: the body is stopped at the tool's lease.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_body_whose_statement_is_never_answered_is_stopped_at_its_lease() {
    let bound = PAY_LEASE + BOUND;
    a_request_that_never_arrives(Pool::Own, "INSERT INTO", "b", bound).await;
}

//! Transactional calls when the server stops answering: the claim and the record and `COMMIT`
//! are each bounded.

use std::time::{Duration, Instant};

use idem_tools_runtime::Error;

use crate::BOUND;
use crate::postgres_common::Failure;
use crate::setup::{Frozen, Pool, pay};

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

fn store_error(answer: &Result<i64, Failure>) -> bool {
    matches!(answer, Err(Failure::Idem(Error::Store { .. })))
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

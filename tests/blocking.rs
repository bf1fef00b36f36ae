//! A body that blocks its thread past its lease (no `.await` for that long) can be neither
//! renewed nor stopped. It ran, so its result is what its caller gets and what a retry
//! replays: recorded under a new claim when nobody took the key meanwhile — not left
//! unrecorded for the retry to run the tool again.

use std::future::Future;
use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::Duration;

use idem_tools::{Error, MemoryStore, Turn, idempotent};

static DETACHED_CHARGES: AtomicUsize = AtomicUsize::new(0);
static ATTACHED_CHARGES: AtomicUsize = AtomicUsize::new(0);

#[idempotent(lease = "100ms")]
async fn charge_blocking(cents: u64) -> Result<usize, Error> {
    let _ = cents;
    std::thread::sleep(Duration::from_millis(300)); // blocks its thread; no `.await` after it
    Ok(DETACHED_CHARGES.fetch_add(1, Ordering::SeqCst) + 1)
}

#[idempotent(attached, lease = "100ms")]
async fn charge_blocking_attached(cents: u64) -> Result<usize, Error> {
    let _ = cents;
    std::thread::sleep(Duration::from_millis(300));
    Ok(ATTACHED_CHARGES.fetch_add(1, Ordering::SeqCst) + 1)
}

/// Four calls of `call` in a turn of its own: their answers, and the turn.
async fn four_calls<F>(turn: &str, call: impl Fn() -> F) -> (Vec<Result<usize, String>>, Turn)
where
    F: Future<Output = Result<usize, Error>>,
{
    let turn = Turn::new(turn).with_store(Arc::new(MemoryStore::new()));
    let answers = turn
        .clone()
        .scope(async {
            let mut answers = Vec::new();
            for _ in 0..4 {
                answers.push(call().await.map_err(|e| e.to_string()));
            }
            answers
        })
        .await;
    (answers, turn)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_detached_body_that_blocks_past_its_lease_is_recorded_and_replayed() {
    let (answers, turn) = four_calls("blocking-detached", || charge_blocking(500)).await;
    assert_eq!(answers, vec![Ok(1); 4], "one charge, then replays");
    assert_eq!(DETACHED_CHARGES.load(Ordering::SeqCst), 1);
    let stats = turn.stats();
    assert_eq!((stats.lease_lost, stats.replayed), (1, 3), "{stats:?}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_attached_body_that_blocks_past_its_lease_is_recorded_and_replayed() {
    let (answers, _) = four_calls("blocking-attached", || charge_blocking_attached(500)).await;
    assert_eq!(answers, vec![Ok(1); 4], "one charge, then replays");
    assert_eq!(ATTACHED_CHARGES.load(Ordering::SeqCst), 1);
}

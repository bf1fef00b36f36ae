//! A PostgreSQL server that stops answering without resetting its connections — a frozen
//! primary, a partition after a DNS or virtual-IP switch — on a real server
//! (`IDEM_POSTGRES_URL`) behind a [`Forwarder`] that freezes connections: every call ends in
//! bounded time, the store sheds the connections that stopped answering and recovers by
//! itself, and a claim whose `begin` reply was lost is not left behind. Each test runs with the
//! pool `PostgresStore::connect` builds and with an application's pool handed to `from_pool`.
#![cfg(feature = "postgres")]

#[path = "../postgres_common/mod.rs"]
mod postgres_common;

mod late_requests;
mod lost_begin;
mod setup;
mod transactional;

use std::time::{Duration, Instant};

use idem_tools_runtime::Error;
use setup::{Frozen, LOCK, Pool, REPLY, pay, plain};

/// The longest a call may take when the server stops answering: the claim's lock wait and the
/// reply timeout, with room for a loaded machine.
const BOUND: Duration = Duration::from_secs(4);

/// `n` plain calls of fresh keys at once; each one's answer and how long it took.
async fn wave(frozen: &Frozen, tag: &str, n: usize) -> Vec<(Result<i64, Error>, Duration)> {
    let calls = (0..n).map(|i| {
        let (store, memo) = (frozen.store.clone(), format!("{tag}-{i}"));
        tokio::spawn(async move {
            let started = Instant::now();
            let answer = tokio::time::timeout(Duration::from_secs(60), plain(&store, &memo))
                .await
                .unwrap_or_else(|_| Err(Error::store("test", "no answer within 60 s")));
            (answer, started.elapsed())
        })
    });
    let mut out = Vec::new();
    for call in calls.collect::<Vec<_>>() {
        out.push(call.await.expect("the call's task"));
    }
    out
}

/// Freezes the store's pooled connections (a partition after a switch: the address now
/// reaches a host that answers), then calls: the calls that meet a frozen connection fail
/// within [`BOUND`], the frozen connections are shed, and the store answers every call again.
async fn plain_calls_end_and_the_store_recovers(pool: Pool) {
    let Some(frozen) = Frozen::setup("frozen_plain", pool).await else {
        return;
    };
    // Every connection of the pool open and idle.
    let warm = wave(&frozen, "warm", 8).await;
    assert!(warm.iter().all(|(a, _)| a.is_ok()), "{warm:?}");
    frozen.forwarder.freeze();
    frozen.forwarder.switch(frozen.server);
    let switched = Instant::now();
    let first = wave(&frozen, "first", 8).await;
    let slowest = first
        .iter()
        .map(|(_, took)| *took)
        .max()
        .unwrap_or_default();
    let failed = first.iter().filter(|(a, _)| a.is_err()).count();
    for (answer, took) in &first {
        assert!(*took <= BOUND, "a call took {took:?}: {answer:?}");
        if let Err(error) = answer {
            assert!(matches!(error, Error::Store { .. }), "{error:?}");
        }
    }
    // The frozen connections are gone: every call answers.
    let mut recovered = None;
    for round in 0..10 {
        let again = wave(&frozen, &format!("again-{round}"), 8).await;
        assert!(again.iter().all(|(_, took)| *took <= BOUND), "{again:?}");
        if again.iter().all(|(a, _)| a.is_ok()) {
            recovered = Some(switched.elapsed());
            break;
        }
    }
    let recovered = recovered.expect("the store answers every call again");
    println!(
        "postgres frozen connections ({pool:?} pool): first wave failed={failed}/8 slowest={slowest:?}; \
         every call answered again {recovered:?} after the switch (reply timeout {REPLY:?}, \
         lock timeout {LOCK:?})"
    );
    frozen.cleanup().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn plain_calls_on_frozen_connections_end_and_the_connect_pool_recovers() {
    plain_calls_end_and_the_store_recovers(Pool::Own).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn plain_calls_on_frozen_connections_end_and_an_application_pool_recovers() {
    plain_calls_end_and_the_store_recovers(Pool::App).await;
}

/// The server stops answering — its open connections and new ones alike (the forwarder holds
/// new connections unanswered) — under an application's pool whose acquire timeout is
/// `sqlx`'s default (30 s): every call, plain or transactional, still fails closed within
/// [`BOUND`] (a call waited for a connection as long as the pool let it), and the store answers
/// again once the server does.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_call_waits_for_a_connection_at_most_the_reply_timeout_whatever_the_pool_says() {
    let Some(frozen) = Frozen::setup("frozen_acquire", Pool::AppSlowAcquire).await else {
        return;
    };
    let warm = wave(&frozen, "warm", 8).await;
    assert!(warm.iter().all(|(a, _)| a.is_ok()), "{warm:?}");
    frozen.forwarder.freeze();
    let payments = (0..4).map(|i| {
        let store = frozen.store.clone();
        tokio::spawn(async move {
            let started = Instant::now();
            let answer =
                tokio::time::timeout(Duration::from_secs(60), pay(&store, &format!("p{i}")))
                    .await
                    .expect("the call ends");
            (answer, started.elapsed())
        })
    });
    let payments: Vec<_> = payments.collect();
    // Twice as many calls as the pool has connections: most of them need a new one.
    for round in 0..2 {
        for (answer, took) in wave(&frozen, &format!("frozen-{round}"), 8).await {
            assert!(took <= BOUND, "a plain call took {took:?}: {answer:?}");
            assert!(matches!(answer, Err(Error::Store { .. })), "{answer:?}");
        }
    }
    for payment in payments {
        let (answer, took) = payment.await.expect("the call's task");
        assert!(
            took <= BOUND,
            "a transactional call took {took:?}: {answer:?}"
        );
        assert!(answer.is_err(), "{answer:?}");
    }
    frozen.forwarder.thaw();
    let mut recovered = false;
    for round in 0..20 {
        let again = wave(&frozen, &format!("thawed-{round}"), 8).await;
        if again.iter().all(|(a, _)| a.is_ok()) {
            recovered = true;
            break;
        }
    }
    assert!(recovered, "the store answers every call again");
    frozen.cleanup().await;
}

//! A claim whose `begin` reply was lost while the server stopped answering: given back once
//! the server answers again, not held for a whole lease.

use std::time::{Duration, Instant};

use idem_tools_runtime::store::PostgresStore;
use idem_tools_runtime::{Error, Turn};
use sqlx::Connection as _;

use crate::BOUND;
use crate::setup::{Frozen, Pool, plain, plain_in};

/// The first `begin` through the forwarder lands and its answer never comes; the whole host
/// then freezes (the engine's first give-back cannot reach it) and is switched back after a
/// moment. Another process (its own store, straight to the server) calls the same key: it
/// runs, well before the lost claim's lease (10 s) would have ended.
async fn a_lost_begin_is_given_back(pool: Pool) {
    let Some(frozen) = Frozen::setup("lost_begin", pool).await else {
        return;
    };
    let other = PostgresStore::builder()
        .schema(frozen.store.schema().expect("a schema"))
        .connect(&frozen.url)
        .await
        .expect("another process's store");
    frozen.forwarder.freeze_after(b"idem_begin");
    let forwarder = &frozen.forwarder;
    let started = Instant::now();
    let (lost, ()) = tokio::join!(plain(&frozen.store, "lost"), async {
        while forwarder.triggered() == 0 {
            tokio::time::sleep(Duration::from_millis(1)).await;
        }
        forwarder.freeze();
    });
    assert!(matches!(lost, Err(Error::Store { .. })), "{lost:?}");
    assert!(started.elapsed() <= BOUND, "{:?}", started.elapsed());
    assert_eq!(claimed(&frozen).await, 1, "the claim landed");
    tokio::time::sleep(Duration::from_millis(2500).saturating_sub(started.elapsed())).await;
    forwarder.switch(frozen.server);
    let turn = Turn::new("frozen")
        .with_in_flight_wait(Duration::from_secs(4))
        .with_actions_per_tool(u32::MAX)
        .with_store(std::sync::Arc::new(other.clone()));
    let ran = plain_in(&turn, "lost").await;
    let took = started.elapsed();
    assert_eq!(
        ran.ok(),
        Some(7),
        "the other process ran the key after {took:?}"
    );
    println!(
        "postgres lost begin ({pool:?} pool): the key ran elsewhere {took:?} after the lost claim"
    );
    frozen.cleanup().await;
}

/// Live claims in the store, counted through a connection of its own.
async fn claimed(frozen: &Frozen) -> i64 {
    let mut conn = sqlx::PgConnection::connect_with(&frozen.url.parse().expect("a URL"))
        .await
        .expect("connect");
    let schema = frozen.store.schema().expect("a schema");
    sqlx::query_scalar(&format!(
        "SELECT count(*) FROM \"{schema}\".idem_records WHERE state = 'in_progress' \
         AND expires_at_ms > \"{schema}\".idem_now_ms()"
    ))
    .fetch_one(&mut conn)
    .await
    .expect("count claims")
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_claim_whose_begin_answer_was_lost_is_given_back_connect_pool() {
    a_lost_begin_is_given_back(Pool::Own).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_claim_whose_begin_answer_was_lost_is_given_back_application_pool() {
    a_lost_begin_is_given_back(Pool::App).await;
}

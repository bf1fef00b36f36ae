//! `PostgresStore` behaviours beyond the conformance suite, on a real server
//! (`IDEM_POSTGRES_URL`).
#![cfg(feature = "postgres")]

mod postgres_common;

use std::time::Duration;

use idem_tools_runtime::key::{Fingerprint, Key};
use idem_tools_runtime::store::budget::TurnIdentity;
use idem_tools_runtime::store::{BeginRequest, Charge, Lease, LeaseToken, Store};
use postgres_common::{cleanup, postgres_url, store};

/// A `begin` whose caller gave up while it waited is given back by a `release` with its
/// token, even though the claim lands after the release was sent: no key is left claimed by
/// nobody (connections of a pool keep no order between them).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_begin_given_up_midway_is_given_back_after_it_lands() {
    let Some(url) = postgres_url("a_begin_given_up_midway_is_given_back_after_it_lands") else {
        return;
    };
    let store = store(&url, "given_up").await;
    let turn = TurnIdentity::new("ns", "turn-given-up");
    let (key, fingerprint) = (Key::from_bytes([7; 32]), Fingerprint::from_bytes([8; 32]));
    // Hold the turn's budget row, so that the claim waits inside its statement.
    let schema = store.schema().expect("a schema").to_owned();
    let mut holder = store.pool().begin().await.expect("begin");
    sqlx::query(&format!(
        "INSERT INTO \"{schema}\".idem_budgets (id, count, expires_at_ms) VALUES ($1, 0, \
         9000000000000) ON CONFLICT (id) DO UPDATE SET count = 0"
    ))
    .bind(turn.turn_counter().as_slice())
    .execute(&mut *holder)
    .await
    .expect("lock the budget row");
    let token = LeaseToken::generate();
    let request = BeginRequest {
        namespace: "ns",
        key: &key,
        tool: "t",
        fingerprint: &fingerprint,
        lease: Duration::from_secs(60),
        token,
        charge: Charge {
            max_calls: Some(10),
            turn,
            ..Charge::unlimited()
        },
    };
    let gave_up = tokio::time::timeout(Duration::from_millis(50), store.begin(request)).await;
    assert!(gave_up.is_err(), "the claim was still waiting");
    let lease = Lease {
        namespace: "ns".into(),
        key,
        token,
    };
    let release = tokio::spawn({
        let store = store.clone();
        async move { store.release(&lease).await }
    });
    tokio::time::sleep(Duration::from_millis(200)).await;
    holder.commit().await.expect("let the claim through");
    let released = release.await.expect("joins");
    assert!(
        released.is_ok(),
        "the release gave the landed claim back: {released:?}"
    );
    assert_eq!(
        store.get("ns", &key).await.expect("get"),
        None,
        "no orphan claim"
    );
    cleanup(&store).await;
}

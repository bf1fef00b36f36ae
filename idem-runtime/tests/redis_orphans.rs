//! A `begin` whose reply is lost (the server busy past the client's response timeout) leaves no
//! orphaned claim: the engine fails the call with a store error, and gives the claim back with
//! the token it chose before sending, once the server gets to it.
//!
//! Runs its own `redis-server` (with `DEBUG` enabled), so making it busy disturbs nobody.
#![cfg(feature = "redis")]

mod redis_common;

use idem_tools_runtime::Codec;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::{Duration, Instant};

use idem_tools_runtime::key::ArgsDigest;
use idem_tools_runtime::store::{RecordState, RedisStore, Store};
use idem_tools_runtime::{Call, Error, ToolInfo, Turn, execute};
use redis_common::{PrivateServer, raw, redis_url};

/// A lease far longer than the test: only a release can free the key in time.
const SHIP: ToolInfo = ToolInfo::idempotent("ship").with_lease(Duration::from_secs(120));

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_begin_lost_to_a_busy_server_leaves_no_orphaned_claim() {
    let Some(_) = redis_url("a_begin_lost_to_a_busy_server_leaves_no_orphaned_claim") else {
        return;
    };
    let server = PrivateServer::start_with(false, &["--enable-debug-command", "yes"]);
    let url = server.url();
    let store = RedisStore::builder()
        .response_timeout(Duration::from_millis(300))
        .connect(&url)
        .await
        .unwrap();
    let shared: Arc<dyn Store> = Arc::new(store.clone());
    let turn = Turn::new("orphans").with_store(Arc::clone(&shared));
    let mut args = ArgsDigest::new(SHIP.name);
    args.arg("order", &7).unwrap();
    let (k, fp) = args.finish(turn.namespace(), turn.id(), SHIP.name, SHIP.version);

    // The server sleeps 1.5 s; the call's begin waits 300 ms for its reply, then gives up.
    let sleeper = {
        let url = url.clone();
        tokio::spawn(async move {
            // A connection that waits for the reply however long the server sleeps.
            let config = redis::AsyncConnectionConfig::new().set_response_timeout(None);
            let mut conn = redis::Client::open(url.as_str())
                .unwrap()
                .get_multiplexed_async_connection_with_config(&config)
                .await
                .unwrap();
            redis::cmd("DEBUG")
                .arg("SLEEP")
                .arg("1.5")
                .query_async::<()>(&mut conn)
                .await
        })
    };
    tokio::time::sleep(Duration::from_millis(200)).await;
    let ran = Arc::new(AtomicBool::new(false));
    let flag = Arc::clone(&ran);
    let started = Instant::now();
    let lost = execute(
        Call::new(&SHIP, &turn, k, fp),
        Codec::ok_only(),
        async move {
            flag.store(true, Ordering::SeqCst);
            Ok::<_, Error>(1)
        },
    )
    .await;
    assert!(matches!(lost, Err(Error::Store { .. })), "{lost:?}");
    assert!(!ran.load(Ordering::SeqCst), "the tool ran without a claim");
    assert!(
        started.elapsed() < Duration::from_millis(1_200),
        "the call failed by its response timeout, not after the server woke up: {:?}",
        started.elapsed()
    );
    sleeper.await.unwrap().expect("DEBUG SLEEP");

    // The server woke up and ran the queued begin: the key's attempt count (kept in its hash,
    // and kept when the claim is given back) says one claim landed...
    let record_key = store.redis_key(turn.namespace(), &k);
    let mut conn = raw(&url).await;
    let attempts: Option<String> = redis::cmd("HGET")
        .arg(&record_key)
        .arg("att")
        .query_async(&mut conn)
        .await
        .unwrap();
    assert_eq!(
        attempts.as_deref(),
        Some("1"),
        "the lost begin reached the server"
    );
    // ...and was given back: the key is free long before its 120 s lease would end.
    let deadline = Instant::now() + Duration::from_secs(5);
    while let Some(record) = store.get(turn.namespace(), &k).await.unwrap() {
        assert_eq!(record.state, RecordState::InProgress);
        assert!(
            Instant::now() < deadline,
            "an orphaned claim blocks the key"
        );
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    // ...and the claim did land: its attempt is counted in the key's hash, which the release
    // kept.
    let record_key = store.redis_key(turn.namespace(), &k);
    let mut conn = raw(&url).await;
    let attempts: Option<String> = redis::cmd("HGET")
        .arg(&record_key)
        .arg("att")
        .query_async(&mut conn)
        .await
        .unwrap();
    assert_eq!(
        attempts.as_deref(),
        Some("1"),
        "the lost begin reached the server"
    );
    let retried = execute(
        Call::new(&SHIP, &turn, k, fp),
        Codec::ok_only(),
        async move {
            ran.store(true, Ordering::SeqCst);
            Ok::<_, Error>(2)
        },
    )
    .await;
    assert_eq!(retried.unwrap(), 2, "the retry runs the tool");
}

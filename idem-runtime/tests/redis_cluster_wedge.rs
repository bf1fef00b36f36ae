//! A Redis Cluster store answers again after the server drops its connections (`CLIENT KILL
//! TYPE normal`, as a restart or a proxy does) while requests are in flight.
//! Needs `IDEM_REDIS_CLUSTER_URLS` (`scripts/redis-cluster.sh run …`). Found by a kill storm
//! (`redis_kill_storm`): connections killed while requests are in flight left redis-rs's
//! cluster client (1.8.1 and 1.8.2, with or without its response timeout; the bare client
//! with `EVALSHA` requests too) timing out every request for good — every call of every key
//! failed closed (`Error::Store`; the process's memory grew to about 1 GB in 10 minutes of
//! retries) until the process restarted; once after a single kill, always after ten 3 ms
//! apart. Now the store makes its connection again when it has answered nothing for a reply
//! timeout (`conn::Cluster`). Idle connections killed were always made again at once.
#![cfg(feature = "redis")]

mod redis_common;

use std::time::{Duration, Instant};

use idem_tools_runtime::key::Key;
use idem_tools_runtime::store::{RedisStore, Store};
use redis_common::{cluster_urls, raw, unique_prefix};

/// The tests kill every client of the one test cluster: one at a time.
static SERIAL: tokio::sync::Mutex<()> = tokio::sync::Mutex::const_new(());

/// Kills every normal client of every node `times` times, `gap` apart.
async fn kill_all(urls: &[String], times: usize, gap: Duration) {
    let mut conns = Vec::new();
    for url in urls {
        conns.push(raw(url).await);
    }
    for _ in 0..times {
        for conn in &mut conns {
            let _: redis::RedisResult<i64> = redis::cmd("CLIENT")
                .arg("KILL")
                .arg("TYPE")
                .arg("normal")
                .arg("SKIPME")
                .arg("yes")
                .query_async(conn)
                .await;
        }
        tokio::time::sleep(gap).await;
    }
}

/// How long until a read of each of 30 keys (spread over the slots) answers, up to `limit`.
async fn recovery(store: &RedisStore, limit: Duration) -> Option<Duration> {
    let started = Instant::now();
    while started.elapsed() < limit {
        let mut all = true;
        for i in 0..30u8 {
            all &= store.get("ns", &Key::from_bytes([i; 32])).await.is_ok();
        }
        if all {
            return Some(started.elapsed());
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    None
}

/// Kills the store's connections `times` times, `gap` apart, while 200 tasks read keys
/// through it (or none); then how long until it answers again.
async fn after_kills(urls: &[String], times: usize, gap: Duration, busy: bool) -> Option<Duration> {
    let _one_at_a_time = SERIAL.lock().await;
    let store = RedisStore::builder()
        .prefix(unique_prefix("wedge"))
        .connect_cluster(urls)
        .await
        .expect("connect");
    assert!(recovery(&store, Duration::from_secs(5)).await.is_some());
    let load: Vec<_> = (0..if busy { 200u8 } else { 0 })
        .map(|i| {
            let store = store.clone();
            tokio::spawn(async move {
                for _ in 0..50 {
                    let _ = store.get("ns", &Key::from_bytes([i; 32])).await;
                }
            })
        })
        .collect();
    kill_all(urls, times, gap).await;
    for task in load {
        task.abort();
    }
    let took = recovery(&store, Duration::from_secs(20)).await;
    eprintln!("killed {times}x {gap:?} apart (busy: {busy}): answered again after {took:?}");
    // About a reply timeout (2 s): the first read times out and starts making the connection
    // again, and the next waits for the new one — not for a reply timeout on the old one
    // (4.1 s, every time, when it did).
    if let Some(took) = took {
        assert!(
            took < Duration::from_millis(3500),
            "killed {times}x {gap:?} apart (busy: {busy}): answered again after {took:?}"
        );
    }
    took
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_cluster_store_answers_again_after_its_connections_are_killed() {
    let Some(urls) = cluster_urls("a_cluster_store_answers_again_after_its_connections_are_killed")
    else {
        return;
    };
    for (times, gap_ms, busy) in [
        (1, 0, false),
        (10, 3, false),
        (30, 1, false),
        (1, 0, true),
        (10, 3, true),
    ] {
        assert!(
            after_kills(&urls, times, Duration::from_millis(gap_ms), busy)
                .await
                .is_some(),
            "killed {times}x {gap_ms} ms apart (busy: {busy}): the store never answered again"
        );
    }
}

/// A call whose timeout starts making the connection again answers within about its reply
/// timeout: it does not wait for the new connection, which, every node paused, takes its own
/// timeouts (before: the call waited for them too, twice its reply timeout here).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_call_that_starts_making_the_connection_again_does_not_wait_for_it() {
    let Some(urls) =
        cluster_urls("a_call_that_starts_making_the_connection_again_does_not_wait_for_it")
    else {
        return;
    };
    let _one_at_a_time = SERIAL.lock().await;
    let reply = Duration::from_millis(300);
    let store = RedisStore::builder()
        .prefix(unique_prefix("wedge"))
        .response_timeout(reply)
        .connection_timeout(reply)
        .connect_cluster(&urls)
        .await
        .expect("connect");
    assert!(recovery(&store, Duration::from_secs(5)).await.is_some());
    // Nothing answered for more than a reply timeout, then every node stops answering.
    tokio::time::sleep(2 * reply).await;
    let pause = Duration::from_millis(2500);
    for url in &urls {
        let _: () = redis::cmd("CLIENT")
            .arg("PAUSE")
            .arg(u64::try_from(pause.as_millis()).unwrap_or(u64::MAX))
            .arg("ALL")
            .query_async(&mut raw(url).await)
            .await
            .expect("CLIENT PAUSE");
    }
    let paused = Instant::now();
    let started = Instant::now();
    let answer = store.get("ns", &Key::from_bytes([7; 32])).await;
    let took = started.elapsed();
    eprintln!("a call on a paused cluster failed after {took:?}: {answer:?}");
    assert!(answer.is_err(), "{answer:?}");
    assert!(
        took < reply * 3 / 2,
        "a call on a paused cluster took {took:?} (reply timeout {reply:?}): it waited for the \
         connection being made again"
    );
    tokio::time::sleep(pause.saturating_sub(paused.elapsed())).await;
    assert!(
        recovery(&store, Duration::from_secs(10)).await.is_some(),
        "the store never answered again after the pause"
    );
}

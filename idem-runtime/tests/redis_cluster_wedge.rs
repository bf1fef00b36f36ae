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

//! What a call costs in round trips to Redis, counted by the server itself.
//!
//! A private `redis-server` is watched with `MONITOR`, which reports every command a client
//! sends, and every command a script runs (with the source `lua`: not round trips, but the
//! server's work). A marker `ECHO` sent after each step delimits its commands.
#![cfg(feature = "redis")]

mod redis_common;

use idem_tools_runtime::Codec;
use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};

use idem_tools_runtime::key::ArgsDigest;
use idem_tools_runtime::store::{RedisStore, Store};
use idem_tools_runtime::{Call, Error, ToolInfo, Turn, execute};
use redis_common::{PrivateServer, cleanup_cluster, cluster_urls, raw, redis_url, unique_prefix};
use tokio::io::{AsyncBufReadExt, AsyncWriteExt, BufReader, Lines};
use tokio::net::TcpStream;

const SEND: ToolInfo = ToolInfo::idempotent("send_message");

/// The commands clients sent up to the next marker, by name (`EVALSHA`, ...), and the
/// commands the scripts ran meanwhile.
async fn commands_until_marker(
    monitor: &mut Lines<BufReader<TcpStream>>,
    marker: &str,
) -> (Vec<String>, Vec<String>) {
    let (mut commands, mut in_scripts) = (Vec::new(), Vec::new());
    loop {
        let line = tokio::time::timeout(std::time::Duration::from_secs(10), monitor.next_line())
            .await
            .expect("MONITOR output")
            .expect("MONITOR connection")
            .expect("MONITOR stream open");
        // `1712345678.123456 [0 127.0.0.1:40000] "EVALSHA" "…" …` or `[0 lua] "HSET" …`.
        let Some((source, rest)) = line.split_once("] ") else {
            continue;
        };
        let name = rest.split('"').nth(1).unwrap_or_default().to_uppercase();
        if source.ends_with(" lua") {
            in_scripts.push(name);
            continue;
        }
        if name == "ECHO" && rest.contains(marker) {
            return (commands, in_scripts);
        }
        commands.push(name);
    }
}

/// A connection in `MONITOR` mode, read line by line (each line is `+<command>`).
async fn monitor(url: &str) -> Lines<BufReader<TcpStream>> {
    let address = url.trim_start_matches("redis://");
    let mut stream = TcpStream::connect(address).await.expect("connect");
    stream.write_all(b"MONITOR\r\n").await.expect("MONITOR");
    let mut lines = BufReader::new(stream).lines();
    let ok = lines.next_line().await.expect("MONITOR reply");
    assert_eq!(ok.as_deref(), Some("+OK"));
    lines
}

#[tokio::test]
async fn a_first_execution_costs_two_round_trips_and_a_replay_one() {
    let Some(_url) = redis_url("a_first_execution_costs_two_round_trips_and_a_replay_one") else {
        return;
    };
    let server = PrivateServer::start(false);
    let url = server.url();
    let store: Arc<dyn Store> = Arc::new(RedisStore::connect(&url).await.expect("connect"));
    let mut marker_conn = raw(&url).await;
    let mut monitor = monitor(&url).await;
    let mut step = 0;
    let mut mark = async || -> String {
        step += 1;
        let marker = format!("idem-marker-{step}");
        let _: String = redis::cmd("ECHO")
            .arg(&marker)
            .query_async(&mut marker_conn)
            .await
            .unwrap();
        marker
    };

    let sent = AtomicUsize::new(0);
    let turn = Turn::new("turn-1").with_store(Arc::clone(&store));
    let call = || {
        let mut args = ArgsDigest::new(SEND.name);
        args.arg("to", "ada").unwrap();
        let (k, fp) = args.finish(turn.namespace(), turn.id(), SEND.name, SEND.version);
        execute(Call::new(&SEND, &turn, k, fp), Codec::ok_only(), async {
            Ok::<_, Error>(sent.fetch_add(1, Ordering::SeqCst))
        })
    };

    let marker = mark().await;
    assert_eq!(
        commands_until_marker(&mut monitor, &marker).await,
        (vec![], vec![])
    );

    // A first execution: the claim reads the record's hash; as a new action it reads the turn's
    // hash, counts the tool's action and indexes the key there (one write, one expiry), then
    // writes the record and sets its expiry; the completion reads, writes, sets the expiry.
    call().await.unwrap();
    let marker = mark().await;
    let (first, in_scripts) = commands_until_marker(&mut monitor, &marker).await;
    assert_eq!(first, ["EVALSHA", "EVALSHA"], "begin + complete");
    assert_eq!(
        in_scripts,
        [
            "TIME",
            "HMGET",
            "HMGET",
            "HSET",
            "PEXPIREAT",
            "HSET",
            "PEXPIREAT",
            "TIME",
            "HMGET",
            "HSET",
            "PEXPIREAT"
        ],
        "the fewest commands a claim of a new action and a completion need"
    );

    // A replay: one round trip, whose script reads the clock and the hash and writes nothing.
    call().await.unwrap();
    let marker = mark().await;
    let (replay, in_scripts) = commands_until_marker(&mut monitor, &marker).await;
    assert_eq!(replay, ["EVALSHA"], "begin answers a replay");
    assert_eq!(in_scripts, ["TIME", "HMGET"], "a replay is a read");
    assert_eq!(sent.load(Ordering::SeqCst), 1);

    // After the server loses its script cache (a restart), a script costs one extra load.
    let _: () = redis::cmd("SCRIPT")
        .arg("FLUSH")
        .query_async(&mut raw(&url).await)
        .await
        .unwrap();
    let marker = mark().await;
    let _ = commands_until_marker(&mut monitor, &marker).await;
    call().await.unwrap();
    let marker = mark().await;
    let (reload, _) = commands_until_marker(&mut monitor, &marker).await;
    assert_eq!(reload, ["EVALSHA", "SCRIPT", "EVALSHA"]);
    assert_eq!(sent.load(Ordering::SeqCst), 1);
}

/// The round trips (`EVALSHA`s) every node of `urls` received since the last call: each node is
/// sent the marker `marker`, and its `MONITOR` read up to it.
async fn scripts_on_every_node(
    urls: &[String],
    monitors: &mut [Lines<BufReader<TcpStream>>],
    marker: &str,
) -> usize {
    let mut scripts = 0;
    for (url, monitor) in urls.iter().zip(monitors) {
        let _: String = redis::cmd("ECHO")
            .arg(marker)
            .query_async(&mut raw(url).await)
            .await
            .unwrap();
        let (commands, _) = commands_until_marker(monitor, marker).await;
        scripts += commands.iter().filter(|c| c.starts_with("EVAL")).count();
    }
    scripts
}

/// On a Redis Cluster, a first execution whose turn hash (the counts of started actions, the
/// index of records) lies in another slot than the record costs four round trips (a check, the
/// turn's charge, the claim, the completion) — in a turn with `max_calls` or without, since the
/// tool's count and the index are always kept — and a replay one, as the `RedisStore` docs say.
#[tokio::test]
async fn on_a_cluster_a_first_execution_costs_four_round_trips() {
    let Some(urls) = cluster_urls("on_a_cluster_a_first_execution_costs_four_round_trips") else {
        return;
    };
    let store = RedisStore::builder()
        .prefix(unique_prefix("round-trips"))
        .connect_cluster(&urls)
        .await
        .unwrap();
    let shared: Arc<dyn Store> = Arc::new(store.clone());
    let mut monitors = Vec::new();
    for url in &urls {
        monitors.push(monitor(url).await);
    }
    let sent = AtomicUsize::new(0);
    let capped = Turn::new("capped-turn")
        .with_namespace("tenant")
        .with_max_calls(10)
        .with_store(Arc::clone(&shared));
    let uncapped = Turn::new("uncapped-turn")
        .with_namespace("tenant")
        .with_store(Arc::clone(&shared));
    let call = |turn: &Turn, to: &'static str| {
        let mut args = ArgsDigest::new(SEND.name);
        args.arg("to", to).unwrap();
        let (k, fp) = args.finish(turn.namespace(), turn.id(), SEND.name, SEND.version);
        execute(Call::new(&SEND, turn, k, fp), Codec::ok_only(), async {
            Ok::<_, Error>(sent.fetch_add(1, Ordering::SeqCst))
        })
    };
    // Every script used once, so that none costs a load below.
    call(&capped, "warm-up").await.unwrap();
    let _ = scripts_on_every_node(&urls, &mut monitors, "idem-marker-0").await;

    let mut marker = 0;
    for turn in [&capped, &uncapped] {
        for to in ["ada", "bob", "cy"] {
            call(turn, to).await.unwrap();
            marker += 1;
            let first =
                scripts_on_every_node(&urls, &mut monitors, &format!("idem-marker-{marker}")).await;
            // A key whose record shares its turn hash's slot costs two, as on one server.
            assert!(
                first == 4 || first == 2,
                "check, charge, claim, complete: {first}"
            );
            call(turn, to).await.unwrap();
            marker += 1;
            let replay =
                scripts_on_every_node(&urls, &mut monitors, &format!("idem-marker-{marker}")).await;
            assert_eq!(replay, 1, "the check answers a replay");
        }
    }
    assert_eq!(sent.load(Ordering::SeqCst), 7);
    cleanup_cluster(&urls, store.prefix()).await;
}

//! `RedisStore` on a Redis Cluster whose slot is half-migrated (`MIGRATING` on its master,
//! `IMPORTING` on another), as `redis-cli --cluster reshard` leaves it mid-way or a crash leaves
//! it for good: what each kind of call does, and how long it takes (printed), against
//! `IDEM_REDIS_CLUSTER_URLS` (`scripts/redis-cluster.sh run CMD`). docs/guarantees.md quotes it.
//!
//! A call's script names its record (which holds its attempt count) and, when it shares the
//! record's slot (a namespace hash tag puts both in one), its turn's hash (the counts of started
//! actions and the index of records, which every new action writes): two keys, which Redis
//! refuses with `TRYAGAIN` while the slot moves and the keys are not all on one side.
#![cfg(feature = "redis")]

mod redis_common;

use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::{Duration, Instant};

use idem_tools_runtime::key::ArgsDigest;
use idem_tools_runtime::store::{RedisStore, Store};
use idem_tools_runtime::{Call, Codec, Error, ToolInfo, Turn, execute};
use redis_common::{cleanup_cluster, cluster_urls, raw, unique_prefix};

const SEND: ToolInfo = ToolInfo::idempotent("send_migrating");

/// A master: its node id and URL.
#[derive(Debug, Clone)]
struct Master {
    id: String,
    url: String,
}

/// The master serving `slot`, and another one (from `CLUSTER NODES` of `url`).
async fn owner_and_other(url: &str, slot: u16) -> (Master, Master) {
    let nodes: String = redis::cmd("CLUSTER")
        .arg("NODES")
        .query_async(&mut raw(url).await)
        .await
        .unwrap();
    let (mut owner, mut others) = (None, Vec::new());
    for line in nodes.lines() {
        let fields: Vec<&str> = line.split_whitespace().collect();
        if fields.len() < 8 || !fields[2].contains("master") {
            continue;
        }
        let address = fields[1].split('@').next().unwrap();
        let master = Master {
            id: fields[0].to_owned(),
            url: format!("redis://{address}"),
        };
        let serves = fields[8..].iter().any(|range| {
            let (start, end) = range.split_once('-').unwrap_or((range, range));
            match (start.parse::<u16>(), end.parse::<u16>()) {
                (Ok(start), Ok(end)) => (start..=end).contains(&slot),
                _ => false,
            }
        });
        if serves {
            owner = Some(master);
        } else {
            others.push(master);
        }
    }
    (owner.expect("a master serves the slot"), others.remove(0))
}

/// `CLUSTER <args>` on the node at `url`.
async fn cluster(url: &str, args: &[&str]) {
    let _: redis::Value = redis::cmd("CLUSTER")
        .arg(args)
        .query_async(&mut raw(url).await)
        .await
        .unwrap_or_else(|e| panic!("CLUSTER {args:?} on {url}: {e}"));
}

/// Moves the keys of `slot` from `from` to `to` and gives `to` the slot, on every master.
async fn finish_migration(urls: &[String], slot: u16, from: &Master, to: &Master) {
    let mut source = raw(&from.url).await;
    let port = to.url.rsplit(':').next().unwrap();
    loop {
        let keys: Vec<String> = redis::cmd("CLUSTER")
            .arg("GETKEYSINSLOT")
            .arg(slot)
            .arg(100)
            .query_async(&mut source)
            .await
            .unwrap();
        if keys.is_empty() {
            break;
        }
        let _: redis::Value = redis::cmd("MIGRATE")
            .arg("127.0.0.1")
            .arg(port)
            .arg("")
            .arg(0)
            .arg(5000)
            .arg("KEYS")
            .arg(&keys)
            .query_async(&mut source)
            .await
            .unwrap();
    }
    let slot = slot.to_string();
    cluster(&to.url, &["SETSLOT", &slot, "NODE", &to.id]).await;
    cluster(&from.url, &["SETSLOT", &slot, "NODE", &to.id]).await;
    for url in urls {
        cluster(url, &["SETSLOT", &slot, "NODE", &to.id]).await;
    }
}

/// What one call returned, whether it executed or replayed, and how long it took.
type Sent = (Result<usize, Error>, (u64, u64), Duration);

/// One call of `SEND` with `invoice` in `turn`, its body counting the runs in `runs`.
async fn send(turn: &Turn, invoice: &str, runs: &Arc<AtomicUsize>) -> Sent {
    let mut args = ArgsDigest::new(SEND.name);
    args.arg("invoice", &invoice).unwrap();
    let (key, fingerprint) = args.finish(turn.namespace(), turn.id(), SEND.name, SEND.version);
    let runs = Arc::clone(runs);
    let before = turn.stats();
    let started = Instant::now();
    let result = execute(
        Call::new(&SEND, turn, key, fingerprint),
        Codec::ok_only(),
        async move { Ok::<_, Error>(runs.fetch_add(1, Ordering::SeqCst) + 1) },
    )
    .await;
    let elapsed = started.elapsed();
    let after = turn.stats();
    let counts = (
        after.executed - before.executed,
        after.replayed - before.replayed,
    );
    (result, counts, elapsed)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_half_migrated_slot_serves_one_key_calls_and_refuses_two_key_claims_until_it_moves() {
    let test =
        "a_half_migrated_slot_serves_one_key_calls_and_refuses_two_key_claims_until_it_moves";
    let Some(urls) = cluster_urls(test) else {
        return;
    };
    let store = RedisStore::builder()
        .prefix(unique_prefix("migration"))
        .connect_cluster(&urls)
        .await
        .unwrap();
    let prefix = store.prefix().to_owned();
    let shared: Arc<dyn Store> = Arc::new(store.clone());
    // `{tag}` pins the records and the turns' hashes to one slot, the slot of `tag`.
    let tag = unique_prefix("slot");
    let namespace = format!("{{{tag}}}");
    let slot: u16 = redis::cmd("CLUSTER")
        .arg("KEYSLOT")
        .arg(&tag)
        .query_async(&mut raw(&urls[0]).await)
        .await
        .unwrap();
    let turn = |capped: bool| {
        let turn = Turn::new(if capped {
            "capped-turn"
        } else {
            "uncapped-turn"
        })
        .with_namespace(namespace.clone())
        .with_store(Arc::clone(&shared));
        if capped {
            turn.with_max_calls(100)
        } else {
            turn
        }
    };
    let runs = Arc::new(AtomicUsize::new(0));
    let (capped, uncapped) = (turn(true), turn(false));

    // Before: one action of each turn, recorded on the slot's master.
    let (first, ..) = send(&capped, "before", &runs).await;
    assert_eq!(first.unwrap(), 1);
    send(&uncapped, "before", &runs).await.0.unwrap();
    let (from, to) = owner_and_other(&urls[0], slot).await;
    let slot_text = slot.to_string();
    cluster(&to.url, &["SETSLOT", &slot_text, "IMPORTING", &from.id]).await;
    cluster(&from.url, &["SETSLOT", &slot_text, "MIGRATING", &to.id]).await;

    // Half-migrated. Every call names two keys, its record and its turn's hash (which the
    // namespace's hash tag puts in the slot), capped turn or not. Both still on the source: a
    // replay is served.
    for (turn, run) in [(&uncapped, 2), (&capped, 1)] {
        let (replay, stats, took) = send(turn, "before", &runs).await;
        assert_eq!((replay.unwrap(), stats), (run, (0, 1)));
        eprintln!("migration: two-key replay {took:?}");
    }
    // A new action (a new record, not on the source): TRYAGAIN, retried by the client, then
    // refused, failing closed: the tool does not run.
    for turn in [&uncapped, &capped] {
        let (refused, _, took) = send(turn, "during", &runs).await;
        assert!(matches!(refused, Err(Error::Store { .. })), "{refused:?}");
        assert_eq!(runs.load(Ordering::SeqCst), 2, "the tool did not run");
        eprintln!("migration: two-key new action refused after {took:?}: {refused:?}");
        // Bounded by the reply timeout (2 s by default), during which the client retries.
        assert!(
            (Duration::from_millis(1_900)..Duration::from_secs(5)).contains(&took),
            "{took:?}"
        );
    }

    // Moved: the same calls run, and everything replays from the new master.
    finish_migration(&urls, slot, &from, &to).await;
    for (turn, run) in [(&capped, 3), (&uncapped, 4)] {
        let (after, stats, took) = send(turn, "during", &runs).await;
        assert_eq!((after.unwrap(), stats), (run, (1, 0)));
        eprintln!("migration: two-key new action after the move {took:?}");
    }
    for (turn, invoice, run) in [(&capped, "before", 1), (&uncapped, "before", 2)] {
        assert_eq!(send(turn, invoice, &runs).await.0.unwrap(), run);
    }
    cleanup_cluster(&urls, &prefix).await;
}

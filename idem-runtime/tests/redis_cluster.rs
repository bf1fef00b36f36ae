//! `RedisStore` on a real three-master Redis Cluster (`IDEM_REDIS_CLUSTER_URLS`, as
//! `scripts/redis-cluster.sh run CMD` exports it): the conformance suite, claims with their
//! budget charges on the master of their slot, replay through the engine, and `list` across
//! every master.
#![cfg(feature = "redis")]

mod redis_common;

use idem_tools_runtime::Codec;
use std::collections::{HashMap, HashSet};
use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::Duration;

use idem_tools_runtime::key::{ArgsDigest, Key};
use idem_tools_runtime::store::conformance::{self, Harness};
use idem_tools_runtime::store::{RedisStore, Store, StoreFuture};
use idem_tools_runtime::{Call, Error, ToolInfo, Turn, execute};
use redis::cluster_async::ClusterConnection;
use redis_common::{cleanup_cluster, cluster_urls, raw, unique_prefix};

async fn cluster_store(urls: &[String], tag: &str) -> RedisStore {
    RedisStore::builder()
        .prefix(unique_prefix(tag))
        .connect_cluster(urls)
        .await
        .expect("connect to the cluster")
}

/// A claim of `key` by tool `send` in namespace `ns`, whose tool may start `max_tool` new actions
/// in the turn.
fn new_action<'a>(
    key: &'a Key,
    fingerprint: &'a idem_tools_runtime::key::Fingerprint,
    turn_id: &'a str,
    turn: idem_tools_runtime::store::budget::TurnIdentity,
    max_tool: u32,
) -> idem_tools_runtime::store::BeginRequest<'a> {
    use idem_tools_runtime::store::{Charge, LeaseToken};
    idem_tools_runtime::store::BeginRequest {
        namespace: "ns",
        key,
        tool: "send",
        turn: turn_id,
        fingerprint,
        lease: Duration::from_secs(30),
        ttl: Duration::from_secs(60),
        token: LeaseToken::generate(),
        charge: Charge {
            turn,
            max_tool_actions: Some(max_tool),
            ..Charge::unlimited()
        },
    }
}

async fn cluster_conn(urls: &[String]) -> ClusterConnection {
    redis::cluster::ClusterClient::new(urls.to_vec())
        .expect("cluster URLs")
        .get_async_connection()
        .await
        .expect("the test cluster is reachable")
}

/// The URL of the node holding each of `redis_keys` (asked of every node with `EXISTS`).
async fn nodes_holding(urls: &[String], redis_keys: &[String]) -> HashMap<String, String> {
    let mut holders = HashMap::new();
    for url in urls {
        let mut conn = raw(url).await;
        for redis_key in redis_keys {
            // READONLY-free: a master answers EXISTS for its own slots and MOVED otherwise.
            let exists: redis::RedisResult<u64> = redis::cmd("EXISTS")
                .arg(redis_key)
                .query_async(&mut conn)
                .await;
            if exists == Ok(1) {
                holders.insert(redis_key.clone(), url.clone());
            }
        }
    }
    holders
}

struct Cluster {
    store: RedisStore,
    shared: Arc<dyn Store>,
    conn: ClusterConnection,
}

impl Harness for Cluster {
    fn store(&self) -> Arc<dyn Store> {
        Arc::clone(&self.shared)
    }

    fn short(&self) -> Duration {
        Duration::from_millis(400)
    }

    fn advance(&self, by: Duration) -> StoreFuture<'_, ()> {
        StoreFuture::new(async move {
            tokio::time::sleep(by).await;
            Ok(())
        })
    }

    fn corrupt<'a>(&'a self, namespace: &'a str, key: &'a Key) -> Option<StoreFuture<'a, ()>> {
        let redis_key = self.store.redis_key(namespace, key);
        let mut conn = self.conn.clone();
        Some(StoreFuture::new(async move {
            redis::cmd("SET")
                .arg(redis_key)
                .arg(b"\x00\xffnot a record".as_slice())
                .query_async::<()>(&mut conn)
                .await
                .map_err(|e| Error::store("corrupt", e))
        }))
    }

    fn expires_by_itself(&self) -> bool {
        true
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn redis_cluster_store_conforms() {
    let Some(urls) = cluster_urls("redis_cluster_store_conforms") else {
        return;
    };
    let store = cluster_store(&urls, "cluster-conformance").await;
    assert!(store.is_cluster());
    let harness = Cluster {
        shared: Arc::new(store.clone()),
        conn: cluster_conn(&urls).await,
        store,
    };
    conformance::run_all(&harness).await;
    cleanup_cluster(&urls, harness.store.prefix()).await;
}

const SEND: ToolInfo = ToolInfo::idempotent("send_invoice");

/// Through the engine on a cluster: keys spread over every master, each key's attempt count sits
/// in its record's hash, the turn count is charged (in its own slot) for every action started,
/// calls replay past the cap, and `list` finds the records of every master.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn claims_budgets_and_replays_spread_over_the_masters() {
    let Some(urls) = cluster_urls("claims_budgets_and_replays_spread_over_the_masters") else {
        return;
    };
    let store = cluster_store(&urls, "cluster-engine").await;
    let prefix = store.prefix().to_owned();
    let shared: Arc<dyn Store> = Arc::new(store.clone());
    let runs = Arc::new(AtomicUsize::new(0));
    const KEYS: usize = 24;
    // Only claims count against the turn: the first round spends the cap, the second replays
    // (a replay is never charged, and answers past the cap).
    const CAP: u32 = KEYS as u32;
    let mut keys = Vec::new();
    for round in 0..2 {
        // A fresh turn object each round, as after a restart: only the cluster remembers.
        let turn = Turn::new("cluster-turn")
            .with_namespace("tenant")
            .with_max_calls(CAP)
            .with_actions_per_tool(CAP + 1)
            .with_store(Arc::clone(&shared));
        for i in 0..KEYS {
            let mut args = ArgsDigest::new(SEND.name);
            args.arg("invoice", &i).unwrap();
            let (k, fp) = args.finish(turn.namespace(), turn.id(), SEND.name, SEND.version);
            let runs = Arc::clone(&runs);
            let receipt = execute(
                Call::new(&SEND, &turn, k, fp),
                Codec::ok_only(),
                async move {
                    Ok::<_, Error>(format!(
                        "receipt {i} run {}",
                        runs.fetch_add(1, Ordering::SeqCst)
                    ))
                },
            )
            .await
            .unwrap();
            assert!(
                receipt.starts_with(&format!("receipt {i} run")),
                "{receipt}"
            );
            if round == 0 {
                keys.push(k);
            }
        }
        let stats = turn.stats();
        assert_eq!(
            (stats.executed, stats.replayed),
            if round == 0 {
                (KEYS as u64, 0)
            } else {
                (0, KEYS as u64)
            },
            "round {round}"
        );
    }
    assert_eq!(runs.load(Ordering::SeqCst), KEYS, "each tool ran once");

    // Every record holds its per-key count (in its own hash, so on its master); the records
    // spread.
    let records: Vec<String> = keys.iter().map(|k| store.redis_key("tenant", k)).collect();
    let holders = nodes_holding(&urls, &records).await;
    assert_eq!(holders.len(), KEYS, "every record is on some master");
    let masters: HashSet<&String> = holders.values().collect();
    assert!(
        masters.len() >= 2,
        "{KEYS} keys on one master only: {masters:?}"
    );
    for (record, url) in &holders {
        // The key's attempt count is a field of its record's hash: on its master by design.
        let mut conn = raw(url).await;
        let count: Option<String> = redis::cmd("HGET")
            .arg(record)
            .arg("att")
            .query_async(&mut conn)
            .await
            .unwrap();
        assert_eq!(
            count.as_deref(),
            Some("0"),
            "{record}: its count, reset by the recorded result, is in its hash"
        );
    }

    // The turn's call cap, counted in the turn's own slot, refuses the next call.
    let turn = Turn::new("cluster-turn")
        .with_namespace("tenant")
        .with_max_calls(CAP)
        .with_actions_per_tool(CAP + 1)
        .with_store(Arc::clone(&shared));
    let mut args = ArgsDigest::new(SEND.name);
    args.arg("invoice", &"one too many").unwrap();
    let (k, fp) = args.finish(turn.namespace(), turn.id(), SEND.name, SEND.version);
    let refused = execute(Call::new(&SEND, &turn, k, fp), Codec::ok_only(), async {
        Ok::<_, Error>(String::new())
    })
    .await;
    assert!(
        matches!(refused, Err(Error::TurnBudgetExhausted { .. })),
        "{refused:?}"
    );

    // The admin listing scans every master.
    let listed = store.list(Some("tenant"), 1000).await.unwrap();
    let listed: HashSet<Key> = listed.into_iter().map(|r| r.key).collect();
    assert_eq!(listed, keys.iter().copied().collect::<HashSet<_>>());
    assert_eq!(store.list(None, 5).await.unwrap().len(), 5);
    assert!(store.remove("tenant", &keys[0]).await.unwrap());
    assert_eq!(
        store.list(Some("tenant"), 1000).await.unwrap().len(),
        KEYS - 1
    );
    cleanup_cluster(&urls, &prefix).await;
}

/// A namespace hash tag pins a tenant's records (with their counts) and turn count to one slot.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_namespace_hash_tag_pins_a_tenant_to_one_master() {
    let Some(urls) = cluster_urls("a_namespace_hash_tag_pins_a_tenant_to_one_master") else {
        return;
    };
    let store = cluster_store(&urls, "cluster-tag").await;
    let prefix = store.prefix().to_owned();
    let shared: Arc<dyn Store> = Arc::new(store.clone());
    let turn = Turn::new("tagged-turn")
        .with_namespace("{tenant-42}")
        .with_max_calls(100)
        .with_actions_per_tool(100)
        .with_store(Arc::clone(&shared));
    let mut records = Vec::new();
    for i in 0..12 {
        let mut args = ArgsDigest::new(SEND.name);
        args.arg("invoice", &i).unwrap();
        let (k, fp) = args.finish(turn.namespace(), turn.id(), SEND.name, SEND.version);
        execute(Call::new(&SEND, &turn, k, fp), Codec::ok_only(), async {
            Ok::<_, Error>(i)
        })
        .await
        .unwrap();
        records.push(store.redis_key("{tenant-42}", &k));
    }
    let holders = nodes_holding(&urls, &records).await;
    let masters: HashSet<&String> = holders.values().collect();
    assert_eq!((holders.len(), masters.len()), (12, 1), "{holders:?}");
    let master = masters.into_iter().next().unwrap();
    let mut conn = raw(master).await;
    let everything: Vec<String> = redis::cmd("KEYS")
        .arg(format!("{prefix}:*"))
        .query_async(&mut conn)
        .await
        .unwrap();
    // 12 records (each with its per-key count) and the turn count, all on the tenant's master.
    assert_eq!(everything.len(), 13, "{everything:?}");
    cleanup_cluster(&urls, &prefix).await;
}

/// An empty hash tag (`{}`) is no tag: Redis hashes the whole key. A namespace or prefix with
/// one puts a key's record and its turn's count in different slots, which once failed every
/// call with a cross-slot error. Calls run, replay and are capped, with and without a turn cap.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn empty_hash_tags_in_the_namespace_or_prefix_work() {
    let Some(urls) = cluster_urls("empty_hash_tags_in_the_namespace_or_prefix_work") else {
        return;
    };
    for (prefix_tail, namespace) in [("", "{}"), ("", "user{}"), ("app{}", "tenant")] {
        let prefix = format!("{}{prefix_tail}", unique_prefix("empty-tag"));
        let store = RedisStore::builder()
            .prefix(prefix.clone())
            .connect_cluster(&urls)
            .await
            .expect("connect to the cluster");
        let shared: Arc<dyn Store> = Arc::new(store);
        for cap in [None, Some(2)] {
            let turn = Turn::new(format!("turn-{cap:?}"))
                .with_namespace(namespace)
                .with_store(Arc::clone(&shared));
            let turn = match cap {
                Some(cap) => turn.with_max_calls(cap),
                None => turn,
            };
            let runs = AtomicUsize::new(0);
            for invoice in 0..3u32 {
                let mut args = ArgsDigest::new(SEND.name);
                args.arg("invoice", &invoice).unwrap();
                let (k, fp) = args.finish(turn.namespace(), turn.id(), SEND.name, SEND.version);
                for _ in 0..2 {
                    let answer = execute(Call::new(&SEND, &turn, k, fp), Codec::ok_only(), async {
                        Ok::<_, Error>(runs.fetch_add(1, Ordering::SeqCst))
                    })
                    .await;
                    match (cap, invoice, answer) {
                        (Some(2), 2, Err(Error::TurnBudgetExhausted { calls: 2, .. })) => {}
                        (_, _, Ok(run)) => assert_eq!(run as u32, invoice, "{namespace}: replayed"),
                        (_, _, other) => panic!("{prefix} / {namespace} / {cap:?}: {other:?}"),
                    }
                }
            }
        }
        cleanup_cluster(&urls, &prefix).await;
    }
}

/// On a cluster too (the turn's hash in the record's slot or not), a claim whose process is
/// certainly gone is freed and claimed again at once, and a stopped holder keeps its claim.
#[cfg(target_os = "linux")]
#[tokio::test]
async fn a_claim_whose_process_is_gone_is_claimed_again_after_a_grace_on_a_cluster() {
    use idem_tools_runtime::key::Fingerprint;
    use idem_tools_runtime::store::Begin;
    use idem_tools_runtime::store::budget::TurnIdentity;
    use idem_tools_runtime::store::holder::Holder;

    let Some(urls) = cluster_urls("a_claim_whose_process_is_gone_is_claimed_again_at_once") else {
        return;
    };
    let grace = Duration::from_millis(500);
    let store = RedisStore::builder()
        .prefix(unique_prefix("cluster-holders"))
        .response_timeout(grace)
        .connect_cluster(&urls)
        .await
        .expect("connect to the cluster");
    let mut conn = cluster_conn(&urls).await;
    let processes =
        idem_test_support::HolderProcesses::start(|pid| Holder::of_pid(pid).map(|h| h.encode()));
    let Some(gone) = processes.exited.clone() else {
        return; // exited before it could be named: nothing to test with
    };
    let alive = processes.stopped.clone();
    let turn = TurnIdentity::new("ns", "holders");
    let begin = |k: Key, n: u8| {
        let store = store.clone();
        async move {
            let fingerprint = Fingerprint::from_bytes([n; 32]);
            let request = new_action(&k, &fingerprint, "holders", turn, 1_000);
            store.begin(request).await.unwrap()
        }
    };
    // Keys over several slots: some with the turn's hash in their slot, most apart.
    for i in 0..12u8 {
        let k = Key::from_bytes([i + 1; 32]);
        assert_eq!(begin(k, 1).await, Begin::Claimed);
        let holder = if i % 2 == 0 { &gone } else { &alive };
        let _: () = redis::cmd("HSET")
            .arg(store.redis_key("ns", &k))
            .arg("hold")
            .arg(holder)
            .query_async(&mut conn)
            .await
            .unwrap();
        // Every claim is in flight at first: a gone holder's is left a reply timeout, for a
        // result it sent before it died to land.
        let second = begin(k, 2).await;
        assert!(
            matches!(second, Begin::InFlight { .. }),
            "key {i}: {second:?}"
        );
    }
    tokio::time::sleep(grace + Duration::from_millis(100)).await;
    for i in 0..12u8 {
        let k = Key::from_bytes([i + 1; 32]);
        let second = begin(k, 2).await;
        if i % 2 == 0 {
            assert_eq!(second, Begin::Claimed, "key {i}");
        } else {
            assert!(
                matches!(second, Begin::InFlight { .. }),
                "key {i}: {second:?}"
            );
        }
    }
    drop(processes);
    cleanup_cluster(&urls, store.prefix()).await;
}

/// Duplicates of one call racing for a tool's last new action in a turn, on a cluster where the
/// turn's hash lies in another slot than the record (a check, then the charge, then the claim):
/// one claims it, and the others are told it is in flight — never that the tool is stuck,
/// which a duplicate refused by the count its twin took would be.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn duplicates_racing_for_a_tools_last_action_are_in_flight_not_refused_on_a_cluster() {
    use idem_tools_runtime::key::Fingerprint;
    use idem_tools_runtime::store::Begin;
    use idem_tools_runtime::store::budget::TurnIdentity;

    let Some(urls) = cluster_urls("duplicates_racing_for_a_tools_last_action") else {
        return;
    };
    let store = cluster_store(&urls, "cluster-race-cap").await;
    let fingerprint = Fingerprint::from_bytes([1; 32]);
    let mut refused = 0;
    for round in 0..60u32 {
        let turn_id = format!("race-{round}");
        let turn = TurnIdentity::new("ns", &turn_id);
        let k = Key::from_bytes(*blake3::hash(turn_id.as_bytes()).as_bytes());
        let duplicates: Vec<_> = (0..4)
            .map(|_| {
                let (store, turn_id) = (store.clone(), turn_id.clone());
                tokio::spawn(async move {
                    let request = new_action(&k, &fingerprint, &turn_id, turn, 1);
                    store.begin(request).await.unwrap()
                })
            })
            .collect();
        let mut claimed = 0;
        for duplicate in duplicates {
            match duplicate.await.unwrap() {
                Begin::Claimed => claimed += 1,
                Begin::InFlight { .. } => {}
                Begin::Refused(_) => refused += 1,
                other => panic!("round {round}: {other:?}"),
            }
        }
        assert_eq!(claimed, 1, "round {round}");
    }
    assert_eq!(
        refused, 0,
        "duplicates of a running action were refused as stuck"
    );
    cleanup_cluster(&urls, store.prefix()).await;
}

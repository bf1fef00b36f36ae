//! `RedisStore` against a real server (`IDEM_REDIS_URL`): transitions, fencing, expiry, large
//! results and the admin API (records written by hand: `redis_records.rs`).
//!
//! Redis expires keys on its own clock, so expiry is tested with short real leases and TTLs
//! (200 ms) and sleeps, not with a `ManualClock`.
#![cfg(feature = "redis")]

mod redis_common;

use idem_tools_runtime::Codec;
use idem_tools_runtime::store::Charge;
use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::Duration;

use idem_tools_runtime::key::ArgsDigest;
use idem_tools_runtime::store::conformance::lease_of;
use idem_tools_runtime::store::{
    Begin, BeginRequest, Lease, LeaseToken, RecordState, RedisStore, Store,
};
use idem_tools_runtime::{Call, Error, ToolInfo, Turn, execute};
use redis_common::{cleanup, fingerprint, key, raw, redis_url, unique_prefix};

const LONG: Duration = Duration::from_secs(30);

async fn store(url: &str, tag: &str) -> RedisStore {
    RedisStore::connect(url)
        .await
        .expect("connect")
        .with_prefix(unique_prefix(tag))
}

/// A store whose gone holders' claims end `grace` after they are found (its reply timeout).
async fn store_with_grace(url: &str, tag: &str, grace: Duration) -> RedisStore {
    RedisStore::builder()
        .response_timeout(grace)
        .prefix(unique_prefix(tag))
        .connect(url)
        .await
        .expect("connect")
}

/// Names `holder` as the process holding the claim of `key` in namespace `ns`.
async fn set_holder(
    conn: &mut redis::aio::MultiplexedConnection,
    store: &RedisStore,
    key: &idem_tools_runtime::Key,
    holder: &str,
) {
    let _: () = redis::cmd("HSET")
        .arg(store.redis_key("ns", key))
        .arg("hold")
        .arg(holder)
        .query_async(conn)
        .await
        .unwrap();
}

fn request<'a>(
    namespace: &'a str,
    key: &'a idem_tools_runtime::Key,
    fp: &'a idem_tools_runtime::Fingerprint,
    lease: Duration,
) -> BeginRequest<'a> {
    BeginRequest {
        namespace,
        key,
        tool: "send_message",
        turn: "t",
        fingerprint: fp,
        lease,
        ttl: Duration::from_secs(60),
        token: LeaseToken::generate(),
        charge: Charge::unlimited(),
    }
}

async fn claim(store: &RedisStore, ns: &str, label: &str, lease: Duration) -> Lease {
    let (k, fp) = (key(label), fingerprint(label));
    let req = request(ns, &k, &fp, lease);
    let held = lease_of(&req);
    match store.begin(req).await {
        Ok(Begin::Claimed) => held,
        other => panic!("expected a claim, got {other:?}"),
    }
}

#[tokio::test]
async fn a_key_is_claimed_once_then_in_flight_then_replayed() {
    let Some(url) = redis_url("a_key_is_claimed_once_then_in_flight_then_replayed") else {
        return;
    };
    let store = store(&url, "basic").await;
    let (k, fp) = (key("basic"), fingerprint("basic"));
    let token = claim(&store, "tenant", "basic", LONG).await;

    let Ok(Begin::InFlight { fingerprint }) = store.begin(request("tenant", &k, &fp, LONG)).await
    else {
        panic!("a held key must be in flight");
    };
    assert_eq!(fingerprint, fp);
    let record = store.get("tenant", &k).await.unwrap().unwrap();
    assert_eq!(record.state, RecordState::InProgress);
    assert_eq!((record.namespace.as_str(), record.key), ("tenant", k));
    assert_eq!(
        (record.tool.as_str(), record.fingerprint),
        ("send_message", fp)
    );
    assert_eq!(record.result, None);
    assert_eq!(record.expires_at_ms - record.created_at_ms, 30_000);

    let ttl = Duration::from_secs(3600);
    store.complete(&token, b"{\"id\":1}", ttl).await.unwrap();
    let Ok(Begin::Completed(first)) = store.begin(request("tenant", &k, &fp, LONG)).await else {
        panic!("a completed key must replay");
    };
    assert_eq!(
        (&*first.result, first.fingerprint),
        (&b"{\"id\":1}"[..], fp)
    );
    let done = store.get("tenant", &k).await.unwrap().unwrap();
    assert_eq!(done.result.as_deref(), Some(&b"{\"id\":1}"[..]));
    assert_eq!(done.created_at_ms, record.created_at_ms);
    assert!(done.expires_at_ms >= done.created_at_ms + 3_600_000);
    assert_eq!(store.get("other", &k).await.unwrap(), None);

    // The layout: one hash per key at <prefix>:<namespace>:{<hex>}, expiring with the record.
    let redis_key = format!("{}:tenant:{{{}}}", store.prefix(), k.to_hex());
    assert_eq!(store.redis_key("tenant", &k), redis_key);
    let mut conn = raw(&url).await;
    let (kind, pexpiretime): (String, u64) = redis::pipe()
        .cmd("TYPE")
        .arg(&redis_key)
        .cmd("PEXPIRETIME")
        .arg(&redis_key)
        .query_async(&mut conn)
        .await
        .unwrap();
    assert_eq!(kind, "hash");
    assert_eq!(
        pexpiretime, done.expires_at_ms,
        "Redis expires the key at expires_at_ms"
    );
    let token_field: Option<String> = redis::cmd("HGET")
        .arg(&redis_key)
        .arg("tok")
        .query_async(&mut conn)
        .await
        .unwrap();
    assert_eq!(
        token_field,
        Some(token.token.0.to_string()),
        "a completed record keeps the token that completed it"
    );
    // A second completion by the same lease (a lost reply) succeeds without changing anything;
    // any other token is refused.
    store.complete(&token, b"other", ttl).await.unwrap();
    assert_eq!(store.get("tenant", &k).await.unwrap(), Some(done.clone()));
    let other = Lease {
        token: LeaseToken::generate(),
        ..token.clone()
    };
    let again = store.complete(&other, b"other", ttl).await;
    assert!(matches!(again, Err(Error::LeaseLost { .. })), "{again:?}");
    cleanup(&url, store.prefix()).await;
}

#[tokio::test]
async fn a_stale_token_cannot_act_after_its_lease_expired_and_the_key_was_reclaimed() {
    let Some(url) = redis_url("a_stale_token_cannot_act_after_its_lease_expired") else {
        return;
    };
    let store = store(&url, "fencing").await;
    let k = key("fencing");
    let lease = Duration::from_millis(200);
    let stale = claim(&store, "ns", "fencing", lease).await;
    tokio::time::sleep(Duration::from_millis(350)).await;
    assert_eq!(
        store.get("ns", &k).await.unwrap(),
        None,
        "the lease expired"
    );
    let fresh = claim(&store, "ns", "fencing", LONG).await;
    assert_ne!(stale, fresh);

    for outcome in [
        store.complete(&stale, b"stale", LONG).await,
        store.renew(&stale, LONG).await,
        store.release(&stale).await,
    ] {
        assert!(
            matches!(outcome, Err(Error::LeaseLost { .. })),
            "{outcome:?}"
        );
    }
    let record = store.get("ns", &k).await.unwrap().expect("still claimed");
    assert_eq!(
        record.state,
        RecordState::InProgress,
        "the newer claim survived"
    );

    store.complete(&fresh, b"fresh", LONG).await.unwrap();
    let record = store.get("ns", &k).await.unwrap().expect("completed");
    assert_eq!(record.result.as_deref(), Some(&b"fresh"[..]));
    // Nor can the stale holder touch the completed record.
    let late = store.release(&stale).await;
    assert!(matches!(late, Err(Error::LeaseLost { .. })), "{late:?}");
    cleanup(&url, store.prefix()).await;
}

#[tokio::test]
async fn renewing_keeps_a_lease_alive_and_release_frees_the_key() {
    let Some(url) = redis_url("renewing_keeps_a_lease_alive_and_release_frees_the_key") else {
        return;
    };
    let store = store(&url, "renew").await;
    let (k, fp) = (key("renew"), fingerprint("renew"));
    // Renewed every 100 ms, a 400 ms lease tolerates wake-ups 300 ms late on a busy machine.
    let lease = Duration::from_millis(400);
    let token = claim(&store, "ns", "renew", lease).await;
    for _ in 0..8 {
        tokio::time::sleep(Duration::from_millis(100)).await;
        store.renew(&token, lease).await.unwrap();
    }
    // 800 ms after the claim, two leases' worth: still held thanks to renewal.
    let held = store.begin(request("ns", &k, &fp, lease)).await.unwrap();
    assert!(matches!(held, Begin::InFlight { .. }), "{held:?}");

    store.release(&token).await.unwrap();
    assert_eq!(store.get("ns", &k).await.unwrap(), None);
    let again = store.begin(request("ns", &k, &fp, lease)).await.unwrap();
    assert!(matches!(again, Begin::Claimed), "{again:?}");
    cleanup(&url, store.prefix()).await;
}

#[tokio::test]
async fn completed_records_expire_after_their_ttl() {
    let Some(url) = redis_url("completed_records_expire_after_their_ttl") else {
        return;
    };
    let store = store(&url, "ttl").await;
    let (k, fp) = (key("ttl"), fingerprint("ttl"));
    let token = claim(&store, "ns", "ttl", LONG).await;
    store
        .complete(&token, b"done", Duration::from_millis(200))
        .await
        .unwrap();
    assert!(store.get("ns", &k).await.unwrap().is_some());
    tokio::time::sleep(Duration::from_millis(350)).await;
    assert_eq!(store.get("ns", &k).await.unwrap(), None);
    assert_eq!(
        store.purge_expired().await.unwrap(),
        0,
        "Redis expires keys itself"
    );
    let again = store.begin(request("ns", &k, &fp, LONG)).await.unwrap();
    assert!(matches!(again, Begin::Claimed), "{again:?}");
    cleanup(&url, store.prefix()).await;
}

#[tokio::test]
async fn results_of_several_mebibytes_round_trip() {
    let Some(url) = redis_url("results_of_several_mebibytes_round_trip") else {
        return;
    };
    let store = store(&url, "large").await;
    let (k, fp) = (key("large"), fingerprint("large"));
    // 3 MiB of every byte value, including NUL and invalid UTF-8.
    let result: Vec<u8> = (0..3 * 1024 * 1024u32)
        .map(|i| (i.wrapping_mul(2_654_435_761) >> 13) as u8)
        .collect();
    let token = claim(&store, "ns", "large", LONG).await;
    store.complete(&token, &result, LONG).await.unwrap();
    let Ok(Begin::Completed(first)) = store.begin(request("ns", &k, &fp, LONG)).await else {
        panic!("expected a replay");
    };
    assert!(*first.result == result[..]);
    cleanup(&url, store.prefix()).await;
}

#[tokio::test]
async fn admin_lists_by_namespace_and_removes() {
    let Some(url) = redis_url("admin_lists_by_namespace_and_removes") else {
        return;
    };
    let store = store(&url, "admin").await;
    let namespaces = ["a", "a", "a", "b", "b", "t*[x]?", "a:b"];
    for (i, ns) in namespaces.iter().enumerate() {
        let label = format!("admin-{i}");
        let token = claim(&store, ns, &label, LONG).await;
        if i % 2 == 0 {
            store.complete(&token, b"r", LONG).await.unwrap();
        }
    }
    let count = |ns: Option<&'static str>, limit| {
        let store = store.clone();
        async move { store.list(ns, limit).await.unwrap() }
    };
    let a = count(Some("a"), 100).await;
    assert_eq!(a.len(), 3);
    assert!(a.iter().all(|r| r.namespace == "a"));
    assert_eq!(count(Some("b"), 100).await.len(), 2);
    let glob = count(Some("t*[x]?"), 100).await;
    assert_eq!(glob.len(), 1, "glob characters in a namespace are literal");
    assert_eq!(glob[0].key, key("admin-5"));
    let nested = count(Some("a:b"), 100).await;
    assert_eq!((nested.len(), nested[0].key), (1, key("admin-6")));
    assert_eq!(count(None, 100).await.len(), namespaces.len());
    assert_eq!(count(None, 4).await.len(), 4);
    assert!(count(None, 0).await.is_empty());
    assert!(count(Some("c"), 10).await.is_empty());

    let all = count(None, 100).await;
    let completed = all
        .iter()
        .filter(|r| r.state == RecordState::Completed)
        .count();
    assert_eq!(completed, 4);

    let gone = key("admin-0");
    assert!(store.remove("a", &gone).await.unwrap());
    assert!(!store.remove("a", &gone).await.unwrap());
    assert_eq!(count(Some("a"), 100).await.len(), 2);
    cleanup(&url, store.prefix()).await;
}

#[tokio::test]
async fn an_unreachable_server_is_a_store_error() {
    let Some(_url) = redis_url("an_unreachable_server_is_a_store_error") else {
        return;
    };
    let port = std::net::TcpListener::bind("127.0.0.1:0")
        .and_then(|l| l.local_addr())
        .unwrap()
        .port();
    let connect = RedisStore::connect(&format!("redis://127.0.0.1:{port}")).await;
    assert!(
        matches!(
            connect,
            Err(Error::Store {
                operation: "connect",
                ..
            })
        ),
        "{connect:?}"
    );
    let bad = RedisStore::connect("not a url").await;
    assert!(matches!(bad, Err(Error::Config(_))), "{bad:?}");
    let started = std::time::Instant::now();
    let cluster = RedisStore::connect_cluster(&[format!("redis://127.0.0.1:{port}")]).await;
    assert!(
        matches!(
            cluster,
            Err(Error::Store {
                operation: "connect",
                ..
            })
        ),
        "{cluster:?}"
    );
    assert!(
        started.elapsed() < Duration::from_secs(20),
        "{:?}",
        started.elapsed()
    );
    let none = RedisStore::connect_cluster::<&str>(&[]).await;
    assert!(matches!(none, Err(Error::Config(_))), "{none:?}");
}

const SEND: ToolInfo = ToolInfo::idempotent("send_message");

#[tokio::test]
async fn the_engine_runs_a_tool_once_through_redis() {
    let Some(url) = redis_url("the_engine_runs_a_tool_once_through_redis") else {
        return;
    };
    let store = store(&url, "engine").await;
    let prefix = store.prefix().to_owned();
    let store: Arc<dyn Store> = Arc::new(store);
    let sent = AtomicUsize::new(0);
    for attempt in 0..3 {
        // A fresh turn object each time, as after a worker restart: only Redis remembers.
        let turn = Turn::new("conv-1/turn-1")
            .with_namespace("tenant-1")
            .with_store(Arc::clone(&store));
        let mut args = ArgsDigest::new(SEND.name);
        args.arg("to", "ada").unwrap();
        let (k, fp) = args.finish(turn.namespace(), turn.id(), SEND.name, SEND.version);
        let receipt = execute(Call::new(&SEND, &turn, k, fp), Codec::ok_only(), async {
            Ok::<_, Error>(sent.fetch_add(1, Ordering::SeqCst) + 1)
        })
        .await
        .unwrap();
        assert_eq!(receipt, 1, "attempt {attempt} got another receipt");
        let stats = turn.stats();
        assert_eq!(
            (stats.executed, stats.replayed),
            (u64::from(attempt == 0), u64::from(attempt > 0))
        );
    }
    assert_eq!(sent.load(Ordering::SeqCst), 1);
    cleanup(&url, &prefix).await;
}

/// A claim whose process is certainly gone (on this host, in this pid namespace) is freed and
/// claimed again a reply timeout later (not at its lease's end), its attempt count kept; a holder that runs, is stopped, is this
/// process, ran on another host, or is not named keeps the claim until its lease ends.
#[cfg(target_os = "linux")]
#[tokio::test]
async fn a_claim_whose_process_is_gone_is_claimed_again_at_once() {
    use idem_tools_runtime::store::holder::Holder;

    let Some(url) = redis_url("a_claim_whose_process_is_gone_is_claimed_again_at_once") else {
        return;
    };
    let grace = Duration::from_millis(500);
    let store = store_with_grace(&url, "holders", grace).await;
    let mut conn = raw(&url).await;
    let processes =
        idem_test_support::HolderProcesses::start(|pid| Holder::of_pid(pid).map(|h| h.encode()));
    let this = Holder::this_process_text().expect("a Linux process is named");
    let elsewhere = {
        let mut parts: Vec<&str> = this.split(':').collect();
        parts[1] = "another-host";
        parts[4] = "4194304"; // above Linux's pid_max: never a running process
        parts.join(":")
    };

    let mut cases = vec![
        ("a stopped process", processes.stopped.clone(), false),
        ("this process", this.to_owned(), false),
        ("a process on another host", elsewhere, false),
        ("no holder", String::new(), false),
    ];
    if let Some(text) = processes.exited.clone() {
        cases.push(("an exited process", text, true));
    }
    for (case, holder, gone) in cases {
        let (k, first) = (key(case), fingerprint(case));
        let held = claim(&store, "ns", case, LONG).await;
        set_holder(&mut conn, &store, &k, &holder).await;
        let second = fingerprint("second");
        let mut answer = store.begin(request("ns", &k, &second, LONG)).await.unwrap();
        if gone {
            // Left a reply timeout, for a result it sent before it died to land; then free.
            assert!(
                matches!(answer, Begin::InFlight { .. }),
                "{case}: {answer:?}"
            );
            tokio::time::sleep(grace + Duration::from_millis(100)).await;
            answer = store.begin(request("ns", &k, &second, LONG)).await.unwrap();
            assert!(matches!(answer, Begin::Claimed), "{case}: {answer:?}");
            let record = store.get("ns", &k).await.unwrap().unwrap();
            assert_eq!(record.fingerprint, second, "{case}");
            assert_eq!(record.attempts, 2, "{case}: the freed claim still counts");
            // The freed holder is fenced off.
            assert!(matches!(
                store.release(&held).await,
                Err(Error::LeaseLost { .. })
            ));
        } else {
            assert!(
                matches!(answer, Begin::InFlight { fingerprint } if fingerprint == first),
                "{case}: {answer:?}"
            );
        }
    }
    drop(processes);
    cleanup(&url, store.prefix()).await;
}

/// A process that died right after sending its result: the result may land after another
/// process found the process gone. Its claim is left a reply timeout (the grace) before it is
/// free: a result that lands meanwhile is replayed, and the tool does not run again; without
/// one, the key is claimed once the grace is over.
#[cfg(target_os = "linux")]
#[tokio::test]
async fn a_result_its_gone_holder_sent_lands_before_the_claim_is_freed() {
    use idem_tools_runtime::store::holder::Holder;

    let Some(url) = redis_url("a_result_its_gone_holder_sent_lands_before_the_claim_is_freed")
    else {
        return;
    };
    let grace = Duration::from_millis(800);
    let store = store_with_grace(&url, "late_result", grace).await;
    let mut conn = raw(&url).await;
    let processes =
        idem_test_support::HolderProcesses::start(|pid| Holder::of_pid(pid).map(|h| h.encode()));
    let Some(exited) = processes.exited.clone() else {
        return; // no process could be named here: holders are off
    };
    let second = fingerprint("second");
    let mut held_by_the_gone_process = async |label: &str| {
        let held = claim(&store, "ns", label, LONG).await;
        set_holder(&mut conn, &store, &key(label), &exited).await;
        held
    };

    // The result lands during the grace: replayed.
    let held = held_by_the_gone_process("late").await;
    let k = key("late");
    let early = store.begin(request("ns", &k, &second, LONG)).await.unwrap();
    assert!(
        matches!(early, Begin::InFlight { fingerprint: held } if held == fingerprint("late")),
        "{early:?}"
    );
    store
        .complete(&held, b"sent before it died", Duration::from_secs(60))
        .await
        .expect("the late result is recorded");
    let answer = store.begin(request("ns", &k, &second, LONG)).await.unwrap();
    assert!(
        matches!(&answer, Begin::Completed(first)
            if first.fingerprint == fingerprint("late") && &first.result[..] == b"sent before it died"),
        "replayed, not claimed again: {answer:?}"
    );

    // No result: claimed once the grace is over, long before the lease's end (30 s).
    let held = held_by_the_gone_process("none").await;
    let k = key("none");
    let early = store.begin(request("ns", &k, &second, LONG)).await.unwrap();
    assert!(matches!(early, Begin::InFlight { .. }), "{early:?}");
    tokio::time::sleep(grace + Duration::from_millis(100)).await;
    let answer = store.begin(request("ns", &k, &second, LONG)).await.unwrap();
    assert!(matches!(answer, Begin::Claimed), "{answer:?}");
    assert!(matches!(
        store
            .complete(&held, b"too late", Duration::from_secs(60))
            .await,
        Err(Error::LeaseLost { .. })
    ));
    drop(processes);
    cleanup(&url, store.prefix()).await;
}

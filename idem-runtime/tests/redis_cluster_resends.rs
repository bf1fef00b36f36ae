//! A Redis Cluster client sends a script again when its connection drops after the script ran
//! (redis-rs retries a request on a reconnect), so one call's script may run twice. Each script
//! must answer the second run as it answered the first. The tests lose a reply on purpose: the
//! master is frozen (SIGSTOP) while the request waits in its socket, `CLIENT KILL` is queued
//! behind it, the master thawed — the script runs, then its connection is killed before the
//! reply is read. Needs `IDEM_REDIS_CLUSTER_URLS` (`scripts/redis-cluster.sh run …`) and, for
//! the last test, `IDEM_REDIS_URL`. Found by a review of the Redis store (2026-12-07).
#![cfg(feature = "redis")]

mod redis_common;

use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::Duration;

use idem_tools_runtime::key::{ArgsDigest, Fingerprint, Key};
use idem_tools_runtime::store::budget::TurnIdentity;
use idem_tools_runtime::store::{Begin, BeginRequest, Charge, LeaseToken, RedisStore, Store};
use idem_tools_runtime::{Call, Codec, Error, ToolInfo, Turn, execute};
use redis_common::{cleanup, cleanup_cluster, cluster_urls, fingerprint, key, raw, unique_prefix};

/// The tests freeze masters of the one test cluster: one at a time.
static FREEZER: tokio::sync::Mutex<()> = tokio::sync::Mutex::const_new(());

fn request<'a>(
    namespace: &'a str,
    key: &'a Key,
    fingerprint: &'a Fingerprint,
    turn: &'a str,
    charge: Charge,
) -> BeginRequest<'a> {
    BeginRequest {
        namespace,
        key,
        tool: "send",
        turn,
        fingerprint,
        lease: Duration::from_secs(30),
        ttl: Duration::from_secs(60),
        token: LeaseToken::generate(),
        charge,
    }
}

/// A Redis server's process, frozen with SIGSTOP until thawed (or dropped: a failed test does
/// not leave the cluster frozen for the next one).
struct Node {
    pid: u32,
}

impl Node {
    async fn of(url: &str) -> Node {
        let mut conn = raw(url).await;
        let info: String = redis::cmd("INFO")
            .arg("server")
            .query_async(&mut conn)
            .await
            .expect("INFO server");
        let pid = info
            .lines()
            .find_map(|line| line.strip_prefix("process_id:"))
            .and_then(|pid| pid.trim().parse().ok())
            .expect("process_id in INFO server");
        Node { pid }
    }

    fn signal(&self, signal: &str) {
        let sent = std::process::Command::new("kill")
            .arg(format!("-{signal}"))
            .arg(self.pid.to_string())
            .status()
            .is_ok_and(|status| status.success());
        assert!(sent, "kill -{signal} {}", self.pid);
    }

    fn freeze(&self) {
        self.signal("STOP");
    }

    fn thaw(&self) {
        self.signal("CONT");
    }
}

impl Drop for Node {
    fn drop(&mut self) {
        let _ = std::process::Command::new("kill")
            .arg("-CONT")
            .arg(self.pid.to_string())
            .status();
    }
}

/// The URL of the master that holds `redis_key`'s slot (the others answer `MOVED`).
async fn master_of(urls: &[String], redis_key: &str) -> String {
    for url in urls {
        let mut conn = raw(url).await;
        let owned: redis::RedisResult<u64> = redis::cmd("EXISTS")
            .arg(redis_key)
            .query_async(&mut conn)
            .await;
        if owned.is_ok() {
            return url.clone();
        }
    }
    panic!("no master serves {redis_key}");
}

/// Sends `CLIENT KILL` of every normal connection but `admin`'s, from a task: it waits behind
/// a frozen server's queued requests, and kills their connections once they ran.
fn kill_connections(
    mut admin: redis::aio::MultiplexedConnection,
) -> tokio::task::JoinHandle<redis::RedisResult<redis::Value>> {
    tokio::spawn(async move {
        redis::cmd("CLIENT")
            .arg("KILL")
            .arg("TYPE")
            .arg("normal")
            .arg("SKIPME")
            .arg("yes")
            .query_async::<redis::Value>(&mut admin)
            .await
    })
}

/// Runs `work` while the master at `url` loses the reply of the request `work` sends it first:
/// frozen, the request queued, `CLIENT KILL` of every normal connection queued behind it, thawed.
async fn losing_a_reply<T>(url: &str, work: impl Future<Output = T>) -> T {
    let node = Node::of(url).await;
    let admin = raw(url).await;
    node.freeze();
    let choreography = async {
        tokio::time::sleep(Duration::from_millis(300)).await;
        let kill = kill_connections(admin);
        tokio::time::sleep(Duration::from_millis(300)).await;
        node.thaw();
        let _ = kill.await;
    };
    let (answer, ()) = tokio::join!(work, choreography);
    answer
}

/// `count` keys whose records lie on another master than the hash of `turn` in `namespace`
/// (the multi-step path: check, charge, claim).
async fn keys_apart(
    store: &RedisStore,
    urls: &[String],
    namespace: &str,
    turn: &str,
    count: usize,
) -> Vec<Key> {
    let turn_master = master_of(urls, &store.turn_key(namespace, turn)).await;
    let mut keys = Vec::new();
    for i in 0.. {
        if keys.len() == count {
            break;
        }
        let candidate = key(&format!("apart-{turn}-{i}"));
        if master_of(urls, &store.redis_key(namespace, &candidate)).await != turn_master {
            keys.push(candidate);
        }
    }
    keys
}

/// The turn's count of started actions (`n` of its hash).
async fn turn_count(store: &RedisStore, urls: &[String], namespace: &str, turn: &str) -> u64 {
    let turn_key = store.turn_key(namespace, turn);
    let mut conn = raw(&master_of(urls, &turn_key).await).await;
    let n: Option<u64> = redis::cmd("HGET")
        .arg(&turn_key)
        .arg("n")
        .query_async(&mut conn)
        .await
        .expect("HGET n");
    n.unwrap_or(0)
}

/// A claim whose reply was lost is sent again by the cluster client and finds the claim it made:
/// it is answered "claimed", not "running" (the caller would never learn it holds the key, which
/// nobody would then hold until the lease ends) — in one script (the namespace's hash tag puts
/// the turn's hash in the record's slot) and on the multi-step path.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_claim_sent_again_after_its_reply_was_lost_is_answered_claimed() {
    let Some(urls) = cluster_urls("a_claim_sent_again_after_its_reply_was_lost") else {
        return;
    };
    let _one_at_a_time = FREEZER.lock().await;
    let prefix = unique_prefix("resent-claim");
    let store = RedisStore::builder()
        .prefix(&prefix)
        .connect_cluster(&urls)
        .await
        .expect("connect to the cluster");
    for namespace in ["{tenant}", "plain"] {
        let k = key(&format!("claim-{namespace}"));
        let fp = fingerprint("claim");
        let charge = Charge {
            turn: TurnIdentity::new(namespace, "turn-claim"),
            max_attempts: 1,
            max_calls: Some(5),
            ..Charge::unlimited()
        };
        let req = request(namespace, &k, &fp, "turn-claim", charge);
        let token = req.token;
        let url = master_of(&urls, &store.redis_key(namespace, &k)).await;
        let answer = losing_a_reply(&url, store.begin(req)).await;
        assert!(
            matches!(answer, Ok(Begin::Claimed)),
            "{namespace}: a claim sent again over its own claim: {answer:?}"
        );
        let lease = idem_tools_runtime::store::Lease {
            namespace: namespace.into(),
            key: k,
            token,
        };
        store
            .complete(&lease, b"receipt", Duration::from_secs(60))
            .await
            .expect("the claim is the caller's: it completes");
        assert_eq!(
            turn_count(&store, &urls, namespace, "turn-claim").await,
            1,
            "{namespace}: one action counted once"
        );
    }
    cleanup_cluster(&urls, &prefix).await;
}

static SEND: ToolInfo = ToolInfo::idempotent("send_invoice");

/// Through the engine: a call whose claim's reply was lost runs its tool once, and a retry
/// replays it (before: both ended `InFlight`, the tool never ran, the key held by nobody).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_call_whose_claim_reply_was_lost_runs_once_and_replays() {
    let Some(urls) = cluster_urls("a_call_whose_claim_reply_was_lost") else {
        return;
    };
    let _one_at_a_time = FREEZER.lock().await;
    let prefix = unique_prefix("resent-call");
    let store = RedisStore::builder()
        .prefix(&prefix)
        .connect_cluster(&urls)
        .await
        .expect("connect to the cluster");
    let shared: Arc<dyn Store> = Arc::new(store.clone());
    let turn = Turn::new("turn-call")
        .with_namespace("{tenant}")
        .with_in_flight_wait(Duration::from_secs(2))
        .with_store(Arc::clone(&shared));
    let mut args = ArgsDigest::new(SEND.name);
    args.arg("invoice", &1).expect("encodes");
    let (k, fp) = args.finish(turn.namespace(), turn.id(), SEND.name, SEND.version);
    let url = master_of(&urls, &store.redis_key("{tenant}", &k)).await;
    let runs = Arc::new(AtomicUsize::new(0));
    let call = || {
        let runs = Arc::clone(&runs);
        execute(
            Call::new(&SEND, &turn, k, fp),
            Codec::ok_only(),
            async move {
                runs.fetch_add(1, Ordering::SeqCst);
                Ok::<_, Error>("receipt".to_owned())
            },
        )
    };
    let first = losing_a_reply(&url, call()).await;
    let retry = call().await;
    cleanup_cluster(&urls, &prefix).await;
    assert_eq!(first.as_deref().ok(), Some("receipt"), "{first:?}");
    assert_eq!(retry.as_deref().ok(), Some("receipt"), "{retry:?}");
    assert_eq!(runs.load(Ordering::SeqCst), 1);
}

/// On the multi-step path, a turn's charge whose reply was lost is sent again: it counts its
/// action once (before: twice, and a turn capped at 2 refused its second action).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_charge_sent_again_counts_its_action_once() {
    let Some(urls) = cluster_urls("a_charge_sent_again") else {
        return;
    };
    let _one_at_a_time = FREEZER.lock().await;
    let prefix = unique_prefix("resent-charge");
    let store = RedisStore::builder()
        .prefix(&prefix)
        .connect_cluster(&urls)
        .await
        .expect("connect to the cluster");
    let (namespace, turn) = ("plain", "turn-charge");
    let keys = keys_apart(&store, &urls, namespace, turn, 2).await;
    let fp = fingerprint("charge");
    let charge = Charge {
        turn: TurnIdentity::new(namespace, turn),
        max_attempts: 3,
        max_calls: Some(2),
        ..Charge::unlimited()
    };
    let turn_master = master_of(&urls, &store.turn_key(namespace, turn)).await;
    let first = losing_a_reply(
        &turn_master,
        store.begin(request(namespace, &keys[0], &fp, turn, charge)),
    )
    .await;
    let counted = turn_count(&store, &urls, namespace, turn).await;
    let second = store
        .begin(request(namespace, &keys[1], &fp, turn, charge))
        .await;
    cleanup_cluster(&urls, &prefix).await;
    assert!(matches!(first, Ok(Begin::Claimed)), "{first:?}");
    assert_eq!(counted, 1, "one action, counted once");
    assert!(
        matches!(second, Ok(Begin::Claimed)),
        "one action started, cap 2: {second:?}"
    );
}

/// On the multi-step path, two duplicates of one new action are both charged; the one that
/// finds the other's claim gives its count back, and that refund's reply is lost and it is sent
/// again: it gives the action back once (before: twice, and a turn capped at 2 started 3).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_refund_sent_again_gives_its_action_back_once() {
    let Some(urls) = cluster_urls("a_refund_sent_again") else {
        return;
    };
    let _one_at_a_time = FREEZER.lock().await;
    let prefix = unique_prefix("resent-refund");
    let connect = || async {
        RedisStore::builder()
            .prefix(&prefix)
            .connect_cluster(&urls)
            .await
            .expect("connect to the cluster")
    };
    let (a, b) = (connect().await, connect().await);
    let (namespace, turn) = ("plain", "turn-refund");
    let keys = keys_apart(&a, &urls, namespace, turn, 3).await;
    let turn_node = Node::of(&master_of(&urls, &a.turn_key(namespace, turn)).await).await;
    let record_node = Node::of(&master_of(&urls, &a.redis_key(namespace, &keys[0])).await).await;
    let admin = raw(&master_of(&urls, &a.turn_key(namespace, turn)).await).await;
    let fp = fingerprint("refund");
    let charge = Charge {
        turn: TurnIdentity::new(namespace, turn),
        max_attempts: 3,
        max_calls: Some(2),
        ..Charge::unlimited()
    };
    turn_node.freeze();
    let begin_a = a.begin(request(namespace, &keys[0], &fp, turn, charge));
    let begin_b = async {
        tokio::time::sleep(Duration::from_millis(100)).await;
        b.begin(request(namespace, &keys[0], &fp, turn, charge))
            .await
    };
    let choreography = async {
        tokio::time::sleep(Duration::from_millis(400)).await; // both checked; charges wait
        record_node.freeze();
        turn_node.thaw(); // both charged; both claims wait at the record's master
        tokio::time::sleep(Duration::from_millis(300)).await;
        turn_node.freeze();
        record_node.thaw(); // one claims; the other finds it and its refund waits
        tokio::time::sleep(Duration::from_millis(300)).await;
        let kill = kill_connections(admin);
        tokio::time::sleep(Duration::from_millis(300)).await;
        turn_node.thaw(); // the refund runs, its reply is lost, it is sent again
        let _ = kill.await;
    };
    let (first, duplicate, ()) = tokio::join!(begin_a, begin_b, choreography);
    let counted = turn_count(&a, &urls, namespace, turn).await;
    let second = a
        .begin(request(namespace, &keys[1], &fp, turn, charge))
        .await;
    let third = a
        .begin(request(namespace, &keys[2], &fp, turn, charge))
        .await;
    cleanup_cluster(&urls, &prefix).await;
    let claimed = [&first, &duplicate]
        .iter()
        .filter(|answer| matches!(answer, Ok(Begin::Claimed)))
        .count();
    assert_eq!(
        claimed, 1,
        "one duplicate claims: {first:?} / {duplicate:?}"
    );
    assert_eq!(counted, 1, "one action started, counted once");
    assert!(matches!(second, Ok(Begin::Claimed)), "{second:?}");
    assert!(
        !matches!(third, Ok(Begin::Claimed)),
        "a turn capped at 2 started a third action: {third:?}"
    );
}

/// A tool's count lives until its own window ends, whatever its name: a tool named `xp` had its
/// expiry in the field `e` + `xp`, the turn count's own, so every new action of the turn kept its
/// count alive (any Redis).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_tool_named_xp_keeps_its_own_count_window() {
    let Some(url) = redis_common::redis_url("a_tool_named_xp_keeps_its_own_count_window") else {
        return;
    };
    let prefix = unique_prefix("resent-xp");
    let store = RedisStore::builder()
        .prefix(&prefix)
        .connect(&url)
        .await
        .expect("connect");
    let window = Duration::from_millis(1000);
    for tool in ["xq", "xp"] {
        let turn = format!("turn-{tool}");
        let charge = Charge {
            turn: TurnIdentity::new("ns", &turn),
            max_attempts: 3,
            max_calls: Some(100),
            max_tool_actions: Some(1),
            window,
        };
        let fp = fingerprint("fp");
        let keys = [1, 2, 3].map(|i| key(&format!("{tool}-{i}")));
        let begin = |k, tool| {
            let mut req = request("ns", k, &fp, &turn, charge);
            req.tool = tool;
            store.begin(req)
        };
        let first = begin(&keys[0], tool).await;
        assert!(matches!(first, Ok(Begin::Claimed)), "{tool}: {first:?}");
        tokio::time::sleep(Duration::from_millis(700)).await;
        let other = begin(&keys[1], "other").await;
        assert!(matches!(other, Ok(Begin::Claimed)), "{tool}: {other:?}");
        tokio::time::sleep(Duration::from_millis(500)).await;
        // 1.2 s after the tool's only action, its count's 1 s window has ended.
        let again = begin(&keys[2], tool).await;
        assert!(
            matches!(again, Ok(Begin::Claimed)),
            "tool {tool}: refused after its count's window ended: {again:?}"
        );
    }
    cleanup(&url, &prefix).await;
}

/// Duplicates of one new action on the multi-step path (the same key, charged by each; one
/// claims): each loser gives its own charge back, so the turn counts one action. Before each
/// charge was noted under its own token, only the last charger's refund matched, and the turn
/// counted the losers' charges too (no reply lost). `lose_replies`: the charges' replies are
/// lost, and each is sent again: it finds its own charge, not another duplicate's.
async fn duplicates_charge_one_action(lose_replies: bool) {
    let Some(urls) = cluster_urls("duplicates_charge_one_action") else {
        return;
    };
    let _one_at_a_time = FREEZER.lock().await;
    let prefix = unique_prefix("resent-duplicates");
    let connect = || async {
        RedisStore::builder()
            .prefix(&prefix)
            .connect_cluster(&urls)
            .await
            .expect("connect to the cluster")
    };
    let stores = [connect().await, connect().await, connect().await];
    let (namespace, turn) = ("plain", "turn-duplicates");
    let keys = keys_apart(&stores[0], &urls, namespace, turn, 3).await;
    let turn_master = master_of(&urls, &stores[0].turn_key(namespace, turn)).await;
    let turn_node = Node::of(&turn_master).await;
    let admin = raw(&turn_master).await;
    let fp = fingerprint("duplicates");
    let charge = Charge {
        turn: TurnIdentity::new(namespace, turn),
        max_attempts: 3,
        max_calls: Some(3),
        ..Charge::unlimited()
    };
    turn_node.freeze();
    let duplicate = |i: usize| {
        let (store, key, fp) = (&stores[i], &keys[0], &fp);
        async move {
            tokio::time::sleep(Duration::from_millis(100 * i as u64)).await;
            store.begin(request(namespace, key, fp, turn, charge)).await
        }
    };
    let choreography = async {
        tokio::time::sleep(Duration::from_millis(600)).await; // all checked; charges wait
        if lose_replies {
            let kill = kill_connections(admin);
            tokio::time::sleep(Duration::from_millis(300)).await;
            turn_node.thaw(); // the charges run, their replies are lost, each is sent again
            let _ = kill.await;
        } else {
            turn_node.thaw();
        }
    };
    let (a, b, c, ()) = tokio::join!(duplicate(0), duplicate(1), duplicate(2), choreography);
    let answers = [a, b, c];
    let counted = turn_count(&stores[0], &urls, namespace, turn).await;
    let second = stores[0]
        .begin(request(namespace, &keys[1], &fp, turn, charge))
        .await;
    let third = stores[0]
        .begin(request(namespace, &keys[2], &fp, turn, charge))
        .await;
    cleanup_cluster(&urls, &prefix).await;
    let claimed = answers
        .iter()
        .filter(|answer| matches!(answer, Ok(Begin::Claimed)))
        .count();
    assert_eq!(claimed, 1, "one duplicate claims: {answers:?}");
    assert_eq!(counted, 1, "one action started, counted once");
    assert!(matches!(second, Ok(Begin::Claimed)), "cap 3: {second:?}");
    assert!(matches!(third, Ok(Begin::Claimed)), "cap 3: {third:?}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn each_duplicate_that_loses_gives_its_own_charge_back() {
    duplicates_charge_one_action(false).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn duplicates_whose_charges_are_sent_again_count_one_action() {
    duplicates_charge_one_action(true).await;
}

/// On the multi-step path, a claim that finds another turn's claim whose process is gone gives
/// its charge back, frees that claim and begins again with the same token: the second pass's
/// charge is made again (it was taken for one sent twice, and the action claimed uncounted: a
/// turn capped at 1 started a second one). Found by a review of the resend fix.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_call_that_frees_a_gone_processs_claim_counts_its_action() {
    use idem_tools_runtime::store::holder::Holder;
    let Some(urls) = cluster_urls("a_call_that_frees_a_gone_processs_claim") else {
        return;
    };
    let _one_at_a_time = FREEZER.lock().await;
    // This process's holder text with another start time: a process that is gone.
    let gone = {
        let text = Holder::this_process_text().expect("this process can be named (/proc)");
        let (head, start) = text.rsplit_once(':').expect("a holder text");
        format!("{head}:{}", start.parse::<u64>().expect("a start time") + 1)
    };
    assert!(Holder::text_is_gone(Some(&gone)), "{gone}");
    let prefix = unique_prefix("resent-abandoned");
    let store = RedisStore::builder()
        .prefix(&prefix)
        .response_timeout(Duration::from_secs(10))
        .connect_cluster(&urls)
        .await
        .expect("connect to the cluster");
    let (namespace, turn) = ("plain", "turn-abandoned");
    let keys = keys_apart(&store, &urls, namespace, turn, 2).await;
    let record_key = store.redis_key(namespace, &keys[0]);
    let record_master = master_of(&urls, &record_key).await;
    let turn_node = Node::of(&master_of(&urls, &store.turn_key(namespace, turn)).await).await;
    let record_node = Node::of(&record_master).await;
    let mut record_conn = raw(&record_master).await;
    let fp = fingerprint("abandoned");
    let charge = Charge {
        turn: TurnIdentity::new(namespace, turn),
        max_attempts: 3,
        max_calls: Some(1),
        ..Charge::unlimited()
    };
    turn_node.freeze();
    let begin = store.begin(request(namespace, &keys[0], &fp, turn, charge));
    let choreography = async {
        tokio::time::sleep(Duration::from_millis(300)).await; // checked; the charge waits
        // A claim of the key by another turn (a caller key), whose process is gone.
        let now = std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .expect("after the epoch")
            .as_millis();
        let () = redis::cmd("HSET")
            .arg(&record_key)
            .arg("exp")
            .arg((now + 1500).to_string())
            .arg("state")
            .arg("in_progress")
            .arg("fp")
            .arg(fingerprint("other").as_bytes().as_slice())
            .arg("tok")
            .arg("4242")
            .arg("created")
            .arg(now.to_string())
            .arg("tool")
            .arg("send")
            .arg("turn")
            .arg("another-turn")
            .arg("hold")
            .arg(&gone)
            .query_async(&mut record_conn)
            .await
            .expect("HSET");
        record_node.freeze();
        turn_node.thaw(); // the charge runs; the claim waits at the record's master
        tokio::time::sleep(Duration::from_millis(300)).await;
        turn_node.freeze();
        record_node.thaw(); // the claim finds the gone process's claim; the refund waits
        tokio::time::sleep(Duration::from_millis(1500)).await; // that claim's grace ends
        turn_node.thaw(); // refund, the claim freed, a second pass: check, charge, claim
    };
    let (answer, ()) = tokio::join!(begin, choreography);
    let counted = turn_count(&store, &urls, namespace, turn).await;
    let second = store
        .begin(request(namespace, &keys[1], &fp, turn, charge))
        .await;
    cleanup_cluster(&urls, &prefix).await;
    assert!(matches!(answer, Ok(Begin::Claimed)), "{answer:?}");
    assert_eq!(counted, 1, "the action claimed is counted");
    assert!(
        !matches!(second, Ok(Begin::Claimed)),
        "a turn capped at 1 started a second action: {second:?}"
    );
}

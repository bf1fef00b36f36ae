//! Killing and restarting Redis while calls run: idem fails closed, and nothing it recorded is
//! forgotten.
//!
//! The test starts its own `redis-server` (never the shared one) with the append-only file
//! fsynced on every write (`--appendonly yes --appendfsync always`), and kills it with `SIGKILL`,
//! so only what was durably acknowledged survives. With that persistence every acknowledged
//! claim and completion outlives the crash; `appendfsync everysec` would lose up to a second of
//! them.
//!
//! What is checked:
//! - while the server is down, calls fail with `Error::Store` and the tool does not run, not even
//!   for keys that completed before (idem never runs a tool without a lock);
//! - after the restart, every key whose result was recorded replays that result and never runs
//!   again; keys whose completion was cut off by the crash run again at most once more (the
//!   documented window between the side effect and `complete`).
#![cfg(feature = "redis")]

mod redis_common;

use idem_tools_runtime::Codec;
use std::collections::HashMap;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use idem_tools_runtime::key::{ArgsDigest, Key};
use idem_tools_runtime::store::{
    Begin, BeginRequest, Lease, Record, RedisStore, Removed, Store, StoreFuture,
};
use idem_tools_runtime::{Call, Error, Stats, ToolInfo, Turn, execute};
use redis_common::{PrivateServer, redis_url};

const SHIP: ToolInfo = ToolInfo::idempotent("ship").with_lease(Duration::from_secs(1));

/// The runs of the tool, per key, in order.
#[derive(Default)]
struct Ledger(Mutex<HashMap<usize, u64>>);

impl Ledger {
    fn runs(&self, key: usize) -> u64 {
        self.0
            .lock()
            .unwrap()
            .get(&key)
            .copied()
            .unwrap_or_default()
    }
}

/// The real store, watched: which results Redis acknowledged recording, per key. The engine
/// returns a tool's result even when recording it failed (and keeps retrying in the
/// background), so only the store's acknowledgement says what was recorded.
struct Acknowledged {
    inner: RedisStore,
    recorded: Mutex<HashMap<Key, Vec<Vec<u8>>>>,
}

impl Acknowledged {
    /// The store on `server`, watched, and the same as a `dyn Store`.
    async fn connect(server: &PrivateServer) -> (Arc<Acknowledged>, Arc<dyn Store>) {
        let watched = Arc::new(Acknowledged {
            inner: RedisStore::connect(&server.url()).await.unwrap(),
            recorded: Mutex::default(),
        });
        let store = Arc::clone(&watched) as Arc<dyn Store>;
        (watched, store)
    }

    /// The distinct results acknowledged for `key`.
    fn recorded(&self, key: &Key) -> Vec<Vec<u8>> {
        let mut results = self
            .recorded
            .lock()
            .unwrap()
            .get(key)
            .cloned()
            .unwrap_or_default();
        results.dedup();
        results
    }
}

impl Store for Acknowledged {
    fn begin<'a>(&'a self, req: BeginRequest<'a>) -> StoreFuture<'a, Begin> {
        self.inner.begin(req)
    }
    fn renew<'a>(&'a self, lease: &'a Lease, duration: Duration) -> StoreFuture<'a, ()> {
        self.inner.renew(lease, duration)
    }
    fn complete<'a>(
        &'a self,
        lease: &'a Lease,
        result: &'a [u8],
        ttl: Duration,
    ) -> StoreFuture<'a, ()> {
        StoreFuture::new(async move {
            self.inner.complete(lease, result, ttl).await?;
            let mut recorded = self.recorded.lock().unwrap();
            recorded.entry(lease.key).or_default().push(result.to_vec());
            Ok(())
        })
    }
    fn release<'a>(&'a self, lease: &'a Lease) -> StoreFuture<'a, ()> {
        self.inner.release(lease)
    }
    fn get<'a>(&'a self, namespace: &'a str, key: &'a Key) -> StoreFuture<'a, Option<Record>> {
        self.inner.get(namespace, key)
    }
    fn purge_expired(&self) -> StoreFuture<'_, u64> {
        self.inner.purge_expired()
    }
    fn list<'a>(
        &'a self,
        namespace: Option<&'a str>,
        limit: usize,
    ) -> StoreFuture<'a, Vec<Record>> {
        self.inner.list(namespace, limit)
    }
    fn remove<'a>(&'a self, namespace: &'a str, key: &'a Key) -> StoreFuture<'a, bool> {
        self.inner.remove(namespace, key)
    }
    fn remove_shown<'a>(&'a self, shown: &'a Record) -> StoreFuture<'a, Removed> {
        self.inner.remove_shown(shown)
    }
}

/// The idempotency key of the test's call with `key`.
fn key_of(key: usize) -> Key {
    let turn = Turn::new("fault-turn").with_namespace("fault");
    let mut args = ArgsDigest::new(SHIP.name);
    args.arg("order", &key).unwrap();
    args.finish(turn.namespace(), turn.id(), SHIP.name, SHIP.version)
        .0
}

/// What one call did.
#[derive(Debug)]
struct Outcome {
    result: Result<u64, Error>,
    stats: Stats,
    ran: bool,
}

async fn call(store: &Arc<dyn Store>, ledger: &Arc<Ledger>, key: usize) -> Outcome {
    call_slow(store, ledger, key, Duration::ZERO).await
}

/// A call whose tool takes `work` after its side effect, widening the window in which a crash
/// cuts off its completion.
async fn call_slow(
    store: &Arc<dyn Store>,
    ledger: &Arc<Ledger>,
    key: usize,
    work: Duration,
) -> Outcome {
    let turn = Turn::new("fault-turn")
        .with_namespace("fault")
        .with_in_flight_wait(Duration::from_secs(3))
        // The budget is counted in Redis: these tests retry each key, and make many actions of
        // one tool, on purpose.
        .with_max_attempts_per_key(1_000)
        .with_actions_per_tool(100_000)
        .with_store(Arc::clone(store));
    let mut args = ArgsDigest::new(SHIP.name);
    args.arg("order", &key).unwrap();
    let (k, fp) = args.finish(turn.namespace(), turn.id(), SHIP.name, SHIP.version);
    let ran = Arc::new(AtomicBool::new(false));
    let (ledger, flag) = (Arc::clone(ledger), Arc::clone(&ran));
    let result = execute(
        Call::new(&SHIP, &turn, k, fp),
        Codec::ok_only(),
        async move {
            flag.store(true, Ordering::SeqCst);
            let run = {
                let mut runs = ledger.0.lock().unwrap();
                let run = runs.entry(key).or_default();
                *run += 1;
                *run
            };
            tokio::time::sleep(work).await;
            Ok::<_, Error>(run)
        },
    )
    .await;
    Outcome {
        result,
        stats: turn.stats(),
        ran: ran.load(Ordering::SeqCst),
    }
}

/// Calls until the store answers (it may still be reconnecting).
async fn call_until_ok(store: &Arc<dyn Store>, ledger: &Arc<Ledger>, key: usize) -> Outcome {
    let deadline = Instant::now() + Duration::from_secs(20);
    loop {
        let outcome = call(store, ledger, key).await;
        match &outcome.result {
            Ok(_) => return outcome,
            Err(Error::Store { .. } | Error::InFlight { .. }) if Instant::now() < deadline => {
                tokio::time::sleep(Duration::from_millis(50)).await;
            }
            Err(error) => panic!("key {key}: {error}"),
        }
    }
}

fn store_failed(outcome: &Outcome) -> bool {
    matches!(outcome.result, Err(Error::Store { .. }))
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn restarting_redis_fails_closed_and_forgets_nothing_recorded() {
    let Some(_url) = redis_url("restarting_redis_fails_closed_and_forgets_nothing_recorded") else {
        return;
    };
    let mut server = PrivateServer::start(true);
    let (watched, store) = Acknowledged::connect(&server).await;
    let ledger = Arc::new(Ledger::default());

    // Before the crash: ten keys executed and recorded.
    for key in 0..10 {
        let outcome = call(&store, &ledger, key).await;
        assert_eq!(outcome.result.unwrap(), 1);
        assert_eq!(outcome.stats.executed, 1);
    }

    // Down: every call fails closed, and no tool runs, recorded or not.
    server.kill();
    for key in [0, 5, 100] {
        let outcome = call(&store, &ledger, key).await;
        assert!(store_failed(&outcome), "key {key}: {outcome:?}");
        assert!(!outcome.ran, "key {key}: the tool ran without a lock");
    }
    assert_eq!(
        (ledger.runs(0), ledger.runs(5), ledger.runs(100)),
        (1, 1, 0)
    );

    // Up again (from the append-only file): recorded keys replay, the new key runs once.
    server.restart();
    let outcome = call_until_ok(&store, &ledger, 100).await;
    assert_eq!((outcome.result.unwrap(), outcome.stats.executed), (1, 1));
    for key in 0..10 {
        let outcome = call(&store, &ledger, key).await;
        assert_eq!(outcome.result.unwrap(), 1, "key {key} was forgotten");
        assert_eq!(outcome.stats.replayed, 1, "key {key} did not replay");
        assert!(!outcome.ran);
    }

    // Chaos: six tasks keep calling new keys (two tasks per key sequence, so they also race)
    // while the server is killed for a second and restarted, twice.
    let stop = Arc::new(AtomicBool::new(false));
    let mut tasks = Vec::new();
    for task in 0..6 {
        let (store, ledger, stop) = (Arc::clone(&store), Arc::clone(&ledger), Arc::clone(&stop));
        tasks.push(tokio::spawn(async move {
            let mut outcomes = Vec::new();
            let mut i = 0;
            while !stop.load(Ordering::SeqCst) {
                let key = 200 + i * 3 + task % 3;
                let outcome = call_slow(&store, &ledger, key, Duration::from_millis(20)).await;
                if let Err(error) = &outcome.result {
                    assert!(
                        matches!(error, Error::Store { .. } | Error::InFlight { .. }),
                        "key {key}: {error}"
                    );
                }
                outcomes.push((key, outcome));
                i += 1;
                tokio::time::sleep(Duration::from_millis(3)).await;
            }
            outcomes
        }));
    }
    for _ in 0..2 {
        tokio::time::sleep(Duration::from_millis(300)).await;
        server.kill();
        tokio::time::sleep(Duration::from_millis(1_000)).await;
        server.restart();
    }
    tokio::time::sleep(Duration::from_millis(300)).await;
    stop.store(true, Ordering::SeqCst);
    let mut outcomes = Vec::new();
    for task in tasks {
        outcomes.extend(task.await.expect("a chaos task failed"));
    }
    let failed = outcomes.iter().filter(|(_, o)| store_failed(o)).count();
    assert!(failed > 0, "no call saw the server down");
    let mut keys: Vec<usize> = outcomes.iter().map(|(key, _)| *key).collect();
    keys.sort_unstable();
    keys.dedup();

    // Orphaned claims (the crash cut off their completion) expire after the 1 s lease; then
    // every key completes, and replays from then on.
    tokio::time::sleep(Duration::from_millis(1_200)).await;
    for &key in &keys {
        outcomes.push((key, call_until_ok(&store, &ledger, key).await));
    }
    let mut unrecorded_runs = 0;
    for &key in &keys {
        // Recorded results render as `Ok(<run>)`.
        let recorded: Vec<Option<u64>> = watched
            .recorded(&key_of(key))
            .iter()
            .map(|bytes| {
                let shown = idem_tools_runtime::replay::render(bytes).unwrap();
                shown
                    .strip_prefix("Ok(")
                    .and_then(|s| s.strip_suffix(')'))
                    .and_then(|n| n.parse().ok())
            })
            .collect();
        assert!(
            recorded.len() <= 1,
            "key {key}: a recorded result was forgotten and the tool recorded again: {recorded:?}"
        );
        let runs = ledger.runs(key);
        unrecorded_runs += runs.saturating_sub(recorded.len() as u64);
        let replay = call(&store, &ledger, key).await;
        assert_eq!(replay.stats.replayed, 1, "key {key}: {replay:?}");
        assert!(!replay.ran);
        // What Redis holds now. A completion can land without its acknowledgement (the server
        // killed before replying), so it may be a run nobody saw acknowledged.
        let held = *replay.result.as_ref().unwrap();
        if let Some(acknowledged) = recorded.first() {
            assert_eq!(
                *acknowledged,
                Some(held),
                "key {key} replays another run than the recorded one"
            );
        }
        // Earlier runs lost their completion to a crash (the documented window); none may come
        // after the recorded one.
        assert_eq!(
            runs, held,
            "key {key} ran again after its result was recorded"
        );
    }
    eprintln!(
        "fault test: {} calls, {failed} failed closed with Error::Store, {unrecorded_runs} runs \
         lost their completion to a crash",
        outcomes.len()
    );
}

/// A lease long enough that no renewal falls within the test.
const SHIP_SLOWLY: ToolInfo =
    ToolInfo::idempotent("ship_slowly").with_lease(Duration::from_secs(30));

/// Without persistence a restart forgets every key, claims in flight included (the
/// `RedisStore` docs say so): a call whose body finishes after the restart, before its next
/// renewal, returns its result, and `complete` finds no claim, so the result is recorded under
/// a new claim (nobody took the key meanwhile) and a retry replays it; a body still running at
/// its next renewal is stopped with `LeaseLost`.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn without_persistence_a_call_across_a_restart_returns_ok_and_is_recorded_anew() {
    let test = "without_persistence_a_call_across_a_restart_returns_ok_and_is_recorded_anew";
    let Some(_url) = redis_url(test) else {
        return;
    };
    let mut server = PrivateServer::start(false);
    let (watched, store) = Acknowledged::connect(&server).await;
    let turn = Turn::new("restart-turn")
        .with_namespace("fault")
        .with_store(Arc::clone(&store));
    let mut args = ArgsDigest::new(SHIP_SLOWLY.name);
    args.arg("order", &1).unwrap();
    let (key, fingerprint) = args.finish(turn.namespace(), turn.id(), SHIP_SLOWLY.name, 0);
    let runs = Arc::new(std::sync::atomic::AtomicU64::new(0));
    let run = |finish: tokio::sync::oneshot::Receiver<()>| {
        let runs = Arc::clone(&runs);
        execute(
            Call::new(&SHIP_SLOWLY, &turn, key, fingerprint),
            Codec::ok_only(),
            async move {
                let run = runs.fetch_add(1, Ordering::SeqCst) + 1;
                let _ = finish.await;
                Ok::<_, Error>(run)
            },
        )
    };

    let (finish, finished) = tokio::sync::oneshot::channel();
    let first = tokio::spawn(run(finished));
    while runs.load(Ordering::SeqCst) == 0 {
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
    server.restart(); // no persistence: the claim is gone
    let deadline = Instant::now() + Duration::from_secs(20);
    while store.get("fault", &key).await.is_err() {
        assert!(Instant::now() < deadline, "the store did not reconnect");
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    finish.send(()).unwrap();
    assert_eq!(first.await.unwrap().unwrap(), 1, "its caller gets Ok");
    assert_eq!(
        watched.recorded(&key).len(),
        1,
        "Redis acknowledged the result, under a new claim"
    );
    let (finish, finished) = tokio::sync::oneshot::channel();
    finish.send(()).unwrap();
    assert_eq!(run(finished).await.unwrap(), 1, "the retry replays it");
    assert_eq!(runs.load(Ordering::SeqCst), 1, "the tool ran once");

    // A body still running at its next renewal (every quarter of SHIP's 1 s lease).
    let (_finish, finished) = tokio::sync::oneshot::channel::<()>();
    let mut args = ArgsDigest::new(SHIP.name);
    args.arg("order", &1).unwrap();
    let (key, fingerprint) = args.finish(turn.namespace(), turn.id(), SHIP.name, SHIP.version);
    let running = Arc::new(AtomicBool::new(false));
    let flag = Arc::clone(&running);
    let call = execute(
        Call::new(&SHIP, &turn, key, fingerprint),
        Codec::ok_only(),
        async move {
            flag.store(true, Ordering::SeqCst);
            let _ = finished.await;
            Ok::<_, Error>(0)
        },
    );
    let call = tokio::spawn(call);
    while !running.load(Ordering::SeqCst) {
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
    server.restart();
    let stopped = tokio::time::timeout(Duration::from_secs(5), call).await;
    let stopped = stopped.expect("stopped within the lease").unwrap();
    assert!(
        matches!(stopped, Err(Error::LeaseLost { .. })),
        "{stopped:?}"
    );
    assert!(store.get("fault", &key).await.unwrap().is_none());
}

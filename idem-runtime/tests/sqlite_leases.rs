//! SqliteStore leases under a stepping wall clock, and claims whose `begin` was lost while
//! another connection held the write lock.
#![cfg(feature = "sqlite")]

mod sqlite_common;

use idem_tools_runtime::Codec;
use idem_tools_runtime::store::Charge;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::{Duration, Instant};

use idem_tools_runtime::clock::{Clock, ManualClock};
use idem_tools_runtime::key::{ArgsDigest, Fingerprint, Key};
use idem_tools_runtime::store::conformance::lease_of;
use idem_tools_runtime::store::{Begin, BeginRequest, Lease, LeaseToken, SqliteStore, Store};
use idem_tools_runtime::{Call, Error, ToolInfo, Turn, execute};
use sqlite_common::TempDir;

const NS: &str = "tenant";
const LEASE: Duration = Duration::from_secs(10);

fn req<'a>(key: &'a Key, fp: &'a Fingerprint) -> BeginRequest<'a> {
    BeginRequest {
        namespace: NS,
        key,
        tool: "send",
        turn: "t",
        fingerprint: fp,
        lease: LEASE,
        ttl: Duration::from_secs(60),
        token: LeaseToken::generate(),
        charge: Charge::unlimited(),
    }
}

async fn claim(store: &SqliteStore, key: &Key) -> Lease {
    let fp = Fingerprint::from_bytes([1; 32]);
    let request = req(key, &fp);
    let lease = lease_of(&request);
    assert_eq!(store.begin(request).await.unwrap(), Begin::Claimed);
    lease
}

async fn is_in_flight(store: &SqliteStore, key: &Key) -> bool {
    let fp = Fingerprint::from_bytes([1; 32]);
    matches!(
        store.begin(req(key, &fp)).await.unwrap(),
        Begin::InFlight { .. }
    )
}

/// The documented limit of a wall clock: a step forward by more than the lease frees a live
/// holder's key (and fences the holder off); a step back keeps a dead holder's key blocked for
/// longer than its lease.
#[tokio::test]
async fn wall_clock_steps_larger_than_the_lease() {
    let dir = TempDir::new("clock-step");
    let clock = ManualClock::new(1_000_000_000);
    let store = SqliteStore::open(dir.db())
        .unwrap()
        .with_clock(Arc::new(clock.clone()));

    // Forward: the live holder's lease looks expired at once.
    let k = Key::from_bytes([1; 32]);
    let holder = claim(&store, &k).await;
    clock.advance(LEASE * 2);
    let taker = claim(&store, &k).await;
    assert_ne!(holder, taker);
    for fenced in [
        store.renew(&holder, LEASE).await,
        store.complete(&holder, b"late", LEASE).await,
        store.release(&holder).await,
    ] {
        assert!(matches!(fenced, Err(Error::LeaseLost { .. })), "{fenced:?}");
    }
    store.complete(&taker, b"r", LEASE).await.unwrap();

    // Back: a holder that died right after claiming blocks its key for lease + step.
    let k = Key::from_bytes([2; 32]);
    claim(&store, &k).await;
    let claimed_at = clock.now_ms();
    clock.set(claimed_at - 2 * 10_000);
    clock.advance(LEASE);
    assert!(is_in_flight(&store, &k).await, "a lease after the claim");
    clock.advance(LEASE + LEASE / 2);
    assert!(is_in_flight(&store, &k).await, "lease + step not yet over");
    clock.advance(LEASE / 2);
    claim(&store, &k).await;
}

const LONG_TOOL: ToolInfo = ToolInfo::idempotent("long").with_lease(Duration::from_millis(300));

/// Within one process, the engine stops a tool body whose renewals are refused after a clock
/// step, so it does not keep running beside the caller that took the key over.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_engine_stops_a_body_whose_lease_a_clock_step_ended() {
    let dir = TempDir::new("clock-step-engine");
    let clock = ManualClock::new(1_000_000_000);
    let store: Arc<dyn Store> = Arc::new(
        SqliteStore::open(dir.db())
            .unwrap()
            .with_clock(Arc::new(clock.clone())),
    );
    let turn = Turn::new("t").with_store(Arc::clone(&store));
    let mut args = ArgsDigest::new(LONG_TOOL.name);
    args.arg("n", &1).unwrap();
    let (k, fp) = args.finish(
        turn.namespace(),
        turn.id(),
        LONG_TOOL.name,
        LONG_TOOL.version,
    );
    let running = Arc::new(AtomicBool::new(false));
    let flag = Arc::clone(&running);
    let call = tokio::spawn(async move {
        execute(
            Call::new(&LONG_TOOL, &turn, k, fp),
            Codec::ok_only(),
            async move {
                struct Stopped(Arc<AtomicBool>);
                impl Drop for Stopped {
                    fn drop(&mut self) {
                        self.0.store(false, Ordering::SeqCst);
                    }
                }
                flag.store(true, Ordering::SeqCst);
                let _stopped = Stopped(Arc::clone(&flag));
                tokio::time::sleep(Duration::from_secs(30)).await;
                Ok::<_, Error>(1)
            },
        )
        .await
    });
    while !running.load(Ordering::SeqCst) {
        tokio::time::sleep(Duration::from_millis(5)).await;
    }
    clock.advance(Duration::from_secs(60));
    let stepped = Instant::now();
    let result = tokio::time::timeout(Duration::from_secs(5), call)
        .await
        .expect("the call ends soon after its renewals are refused")
        .unwrap();
    assert!(!running.load(Ordering::SeqCst), "the body was dropped");
    assert!(result.is_err(), "{result:?}");
    assert!(
        stepped.elapsed() < Duration::from_secs(2),
        "stopped within about a lease: {:?}",
        stepped.elapsed()
    );
}

/// Holds the database's write lock from another connection for `hold`.
fn hold_write_lock(path: std::path::PathBuf, hold: Duration) -> std::thread::JoinHandle<()> {
    let (locked, wait) = std::sync::mpsc::channel();
    let holder = std::thread::spawn(move || {
        let conn = rusqlite::Connection::open(path).unwrap();
        conn.execute_batch("BEGIN IMMEDIATE").unwrap();
        locked.send(()).unwrap();
        std::thread::sleep(hold);
        conn.execute_batch("COMMIT").unwrap();
    });
    wait.recv().unwrap();
    holder
}

const SHIP: ToolInfo = ToolInfo::idempotent("ship").with_lease(Duration::from_secs(120));

fn ship_key(turn: &Turn) -> (Key, Fingerprint) {
    let mut args = ArgsDigest::new(SHIP.name);
    args.arg("order", &7).unwrap();
    args.finish(turn.namespace(), turn.id(), SHIP.name, SHIP.version)
}

/// Attempts counted in the file, over every key.
fn charges(path: &std::path::Path) -> i64 {
    let conn = rusqlite::Connection::open(path).unwrap();
    conn.query_row(
        "SELECT coalesce(sum(attempts), 0) FROM idem_records",
        [],
        |row| row.get(0),
    )
    .unwrap()
}

/// Another process holds the write lock past the busy timeout: the call fails closed with a
/// store error, nothing is claimed, and the key is free once the lock is gone.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_begin_refused_by_a_busy_file_leaves_no_orphan() {
    let dir = TempDir::new("busy");
    let store = SqliteStore::open(dir.db())
        .unwrap()
        .with_busy_timeout(Duration::from_millis(200));
    let store: Arc<dyn Store> = Arc::new(store);
    let turn = Turn::new("busy").with_store(Arc::clone(&store));
    let (k, fp) = ship_key(&turn);
    let holder = hold_write_lock(dir.db(), Duration::from_millis(800));
    let ran = Arc::new(AtomicBool::new(false));
    let flag = Arc::clone(&ran);
    let started = Instant::now();
    let busy = execute(
        Call::new(&SHIP, &turn, k, fp),
        Codec::ok_only(),
        async move {
            flag.store(true, Ordering::SeqCst);
            Ok::<_, Error>(1)
        },
    )
    .await;
    assert!(matches!(busy, Err(Error::Store { .. })), "{busy:?}");
    assert!(!ran.load(Ordering::SeqCst));
    assert!(
        started.elapsed() < Duration::from_millis(700),
        "the busy timeout (200 ms) ended the wait: {:?}",
        started.elapsed()
    );
    holder.join().unwrap();
    assert_eq!(store.get(turn.namespace(), &k).await.unwrap(), None);
    let retried = execute(Call::new(&SHIP, &turn, k, fp), Codec::ok_only(), async {
        Ok::<_, Error>(2)
    })
    .await;
    assert_eq!(retried.unwrap(), 2);
}

/// The caller gives up on a call whose `begin` is waiting for another process's write lock;
/// the begin then claims the key when the lock is released, and the release the engine sent on
/// giving up frees it right after: no orphaned claim until the 120 s lease ends.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_call_abandoned_while_its_begin_waits_for_the_lock_leaves_no_orphan() {
    let dir = TempDir::new("abandoned");
    let store: Arc<dyn Store> = Arc::new(SqliteStore::open(dir.db()).unwrap());
    let turn = Turn::new("abandoned").with_store(Arc::clone(&store));
    let (k, fp) = ship_key(&turn);
    let holder = hold_write_lock(dir.db(), Duration::from_millis(500));
    let ran = Arc::new(AtomicBool::new(false));
    let flag = Arc::clone(&ran);
    let call = execute(
        Call::new(&SHIP, &turn, k, fp),
        Codec::ok_only(),
        async move {
            flag.store(true, Ordering::SeqCst);
            Ok::<_, Error>(1)
        },
    );
    let gave_up = tokio::time::timeout(Duration::from_millis(100), call).await;
    assert!(gave_up.is_err(), "the call waits for the lock");
    holder.join().unwrap();
    // Any later call on the store runs after the queued begin and release.
    let record = store.get(turn.namespace(), &k).await.unwrap();
    assert_eq!(record, None, "an orphaned claim blocks the key");
    assert_eq!(
        charges(&dir.db()),
        1,
        "the abandoned begin did run (and charged)"
    );
    assert!(!ran.load(Ordering::SeqCst));
    let retried = execute(Call::new(&SHIP, &turn, k, fp), Codec::ok_only(), async {
        Ok::<_, Error>(2)
    })
    .await;
    assert_eq!(retried.unwrap(), 2);
}

const RECORDED: ToolInfo = ToolInfo::idempotent("recorded").with_lease(Duration::from_millis(400));

/// Polls `call` on `runtime` for `ms` milliseconds; it must still be running.
fn poll_for(
    runtime: &tokio::runtime::Runtime,
    call: &mut std::pin::Pin<Box<dyn Future<Output = Result<u32, Error>> + Send>>,
    ms: u64,
) {
    runtime.block_on(async {
        let waited = tokio::time::timeout(
            Duration::from_millis(ms),
            std::future::poll_fn(|cx| call.as_mut().poll(cx)),
        )
        .await;
        assert!(waited.is_err(), "the call was still running");
    });
}

/// A call dropped while its result is being recorded — with a renewal and the `complete`
/// both waiting for another process's write lock — after the runtime it ran on is gone,
/// inside another runtime: no panic (the renewal in flight was a timer of the dead runtime),
/// and the result is recorded from the new runtime once the lock goes.
#[test]
fn a_call_dropped_while_recording_in_another_runtime_records_without_a_panic() {
    let dir = TempDir::new("recording-other-runtime");
    let store: Arc<dyn Store> = Arc::new(
        SqliteStore::open(dir.db())
            .unwrap()
            .with_busy_timeout(Duration::from_secs(30)),
    );
    let runtime = || {
        tokio::runtime::Builder::new_multi_thread()
            .enable_all()
            .build()
            .unwrap()
    };
    let first = runtime();
    let turn = Turn::new("recording").with_store(Arc::clone(&store));
    let mut args = ArgsDigest::new(RECORDED.name);
    args.arg("a", "x").unwrap();
    let (key, fingerprint) = args.finish(turn.namespace(), turn.id(), RECORDED.name, 1);
    let go = Arc::new(tokio::sync::Notify::new());
    let body = {
        let go = Arc::clone(&go);
        async move {
            go.notified().await;
            Ok::<u32, Error>(7)
        }
    };
    let mut call: std::pin::Pin<Box<dyn Future<Output = Result<u32, Error>> + Send>> =
        Box::pin(execute(
            Call::new(&RECORDED, &turn, key, fingerprint),
            Codec::ok_only(),
            body,
        ));
    poll_for(&first, &mut call, 250); // claimed; renewing every 100 ms
    let locker = rusqlite::Connection::open(dir.db()).unwrap();
    locker.execute_batch("BEGIN IMMEDIATE").unwrap(); // another process writes
    poll_for(&first, &mut call, 120); // a renewal waits for the lock
    go.notify_one();
    poll_for(&first, &mut call, 50); // recording: `complete` waits too
    drop(first);
    let second = runtime();
    let dropped = second.block_on(async {
        std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| drop(call))).is_ok()
    });
    assert!(dropped, "dropping the call in another runtime panicked");
    locker.execute_batch("ROLLBACK").unwrap();
    second.block_on(async {
        let deadline = Instant::now() + Duration::from_secs(10);
        loop {
            if let Some(record) = store.get(turn.namespace(), &key).await.unwrap()
                && record.result.is_some()
            {
                break;
            }
            assert!(Instant::now() < deadline, "the result was never recorded");
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
    });
}

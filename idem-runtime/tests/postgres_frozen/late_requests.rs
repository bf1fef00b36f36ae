//! A server frozen whole (SIGSTOP: a primary that hangs) keeps what is sent to it meanwhile and
//! runs it when it is thawed, after the caller gave up. A claim or a renewal that lands so
//! late starts its lease from there: the engine gives it back once the server answers again,
//! rather than leaving the key held for nobody for a whole lease. Each test freezes a server of
//! its own.

use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::{Duration, Instant};

use idem_tools_runtime::store::PostgresStore;
use idem_tools_runtime::{Codec, Error, ToolInfo, Turn, execute};

use crate::postgres_common::{OwnServer, postgres_url, unique_schema};
use crate::setup::{LOCK, REPLY, call, turn};

/// A server of the test's own and a store on it (replies bounded as in the other tests).
async fn frozen_server(tag: &str) -> Option<(OwnServer, PostgresStore)> {
    postgres_url(tag)?;
    let server = OwnServer::start();
    let store = PostgresStore::builder()
        .schema(unique_schema(tag))
        .lock_timeout(LOCK)
        .reply_timeout(REPLY)
        .connect_timeout(REPLY)
        .max_connections(4)
        .connect(&server.url)
        .await
        .expect("open the store");
    Some((server, store))
}

/// Calls `memo`'s key of `tool` until it runs (its body counts in `runs`), or `within` ends:
/// when it ran, if it did.
async fn runs_by(
    tool: &'static ToolInfo,
    turn: &Turn,
    runs: &Arc<AtomicUsize>,
    since: Instant,
    within: Duration,
) -> Option<Duration> {
    while since.elapsed() < within {
        let runs = Arc::clone(runs);
        let body = async move {
            runs.fetch_add(1, Ordering::SeqCst);
            Ok::<_, Error>(8_i64)
        };
        if execute(call(tool, turn, "m"), Codec::ok_only(), body)
            .await
            .is_ok()
        {
            return Some(since.elapsed());
        }
    }
    None
}

static CLAIMS: ToolInfo = ToolInfo::idempotent("late_claim").with_lease(Duration::from_secs(8));

/// A plain call's `begin` sent to a frozen server that stays frozen longer than the tool's
/// lease: the call fails in bounded time without running; at the thaw the server runs the
/// claim, which starts a lease of 8 s. The engine, still trying to give it back, does: a retry
/// runs well before that lease would end.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_claim_that_lands_after_its_lease_is_given_back() {
    let Some((server, store)) = frozen_server("late_claim").await else {
        return;
    };
    let turn = turn(&store);
    let runs = Arc::new(AtomicUsize::new(0));
    // Every statement prepared on a pooled connection, which the claim then meets frozen.
    let warm = execute(call(&CLAIMS, &turn, "warm"), Codec::ok_only(), async {
        Ok::<_, Error>(1_i64)
    });
    warm.await.expect("warm");
    server.freeze();
    let started = Instant::now();
    let counted = Arc::clone(&runs);
    let lost = execute(call(&CLAIMS, &turn, "m"), Codec::ok_only(), async move {
        counted.fetch_add(1, Ordering::SeqCst);
        Ok::<_, Error>(7_i64)
    })
    .await;
    assert!(matches!(lost, Err(Error::Store { .. })), "{lost:?}");
    assert!(
        started.elapsed() < Duration::from_secs(4),
        "{:?}",
        started.elapsed()
    );
    // Frozen past the end of the lease the claim asked for.
    tokio::time::sleep(Duration::from_secs(9).saturating_sub(started.elapsed())).await;
    server.thaw();
    let thawed = Instant::now();
    let ran = runs_by(&CLAIMS, &turn, &runs, thawed, Duration::from_secs(7)).await;
    assert!(
        ran.is_some_and(|after| after < Duration::from_secs(5)),
        "the key was held by the late claim for nobody: a retry ran {ran:?} after the thaw"
    );
    assert_eq!(
        runs.load(Ordering::SeqCst),
        1,
        "the body ran once, in the retry"
    );
}

static RENEWS: ToolInfo = ToolInfo::idempotent("late_renew").with_lease(Duration::from_secs(4));

/// A body that runs longer than its lease while the server is frozen from 0.3 s to 3.5 s: the
/// keeper cannot renew, drops the body and the call answers `LeaseLost` at about 3 s; the
/// renewal it sent runs at the thaw and extends the claim to about 7.5 s. The engine gives it
/// back: a retry runs before the claim's first lease (4 s) is long over.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_renewal_that_lands_after_the_call_gave_up_is_given_back() {
    let Some((server, store)) = frozen_server("late_renew").await else {
        return;
    };
    let turn = turn(&store);
    // A call long enough to renew: the renewal is prepared on a pooled connection.
    let warm = execute(call(&RENEWS, &turn, "warm"), Codec::ok_only(), async {
        tokio::time::sleep(Duration::from_millis(2500)).await;
        Ok::<_, Error>(1_i64)
    });
    warm.await.expect("warm");
    let started = Instant::now();
    let server = Arc::new(server);
    let freezer = Arc::clone(&server);
    let given_up = execute(call(&RENEWS, &turn, "m"), Codec::ok_only(), async move {
        tokio::time::sleep(Duration::from_millis(300)).await;
        freezer.freeze();
        std::thread::spawn(move || {
            std::thread::sleep(Duration::from_millis(3200));
            freezer.thaw();
        });
        tokio::time::sleep(Duration::from_secs(20)).await;
        Ok::<_, Error>(7_i64)
    })
    .await;
    assert!(
        matches!(given_up, Err(Error::LeaseLost { .. })),
        "{given_up:?} after {:?}",
        started.elapsed()
    );
    let runs = Arc::new(AtomicUsize::new(0));
    let ran = runs_by(&RENEWS, &turn, &runs, started, Duration::from_secs(12)).await;
    assert!(
        ran.is_some_and(|at| at < Duration::from_millis(6500)),
        "the key was held by the late renewal for nobody: a retry ran {ran:?} after the call \
         began (its claim's lease ended at 4 s, the renewal's at about 7.5 s)"
    );
}

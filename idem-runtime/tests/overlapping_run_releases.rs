//! Schedules found by a fifth review of the overlap handshake (`conversation/overlap.rs`): a
//! lone run on a store that gives keys back slowly, or fails to, is not stopped by its own
//! claims; a call alongside the run's own step is seen by the step after.

#[path = "overlap_common/mod.rs"]
mod overlap_common;

use std::sync::Arc;
use std::sync::atomic::{AtomicU32, Ordering};
use std::time::Duration;

use idem_tools_runtime::engine::{Codec, execute};
use idem_tools_runtime::key::Key;
use idem_tools_runtime::store::{
    Begin, BeginRequest, Lease, MemoryStore, Record, Removed, Store, StoreFuture,
};
use idem_tools_runtime::{Error, ToolInfo, Turn};

use overlap_common::*;

static NOTIFY: ToolInfo = ToolInfo::idempotent("notify").with_release_on_cancel();

/// How the wrapped store's `release` behaves.
#[derive(Clone, Copy)]
enum Release {
    /// Answers after this delay.
    Slow(Duration),
    /// Fails the first `n` times (a store blip), then works.
    FailsFirst(u32),
}

/// A `MemoryStore` behind a network hop whose `release` is slow or fails.
struct Net {
    inner: Arc<dyn Store>,
    release: Release,
    releases: AtomicU32,
}

fn net(release: Release) -> Arc<dyn Store> {
    Arc::new(Net {
        inner: Arc::new(MemoryStore::new()),
        release,
        releases: AtomicU32::new(0),
    })
}

impl Store for Net {
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
        self.inner.complete(lease, result, ttl)
    }
    fn release<'a>(&'a self, lease: &'a Lease) -> StoreFuture<'a, ()> {
        StoreFuture::new(async move {
            let n = self.releases.fetch_add(1, Ordering::SeqCst);
            match self.release {
                Release::Slow(delay) => tokio::time::sleep(delay).await,
                Release::FailsFirst(failing) if n < failing => {
                    return Err(Error::store("release", "connection reset"));
                }
                Release::FailsFirst(_) => {}
            }
            self.inner.release(lease).await
        })
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

/// One run, on a store whose `release` takes 100 ms. After step 0 the model asks for a charge;
/// its body fails at once, and the engine gives the key back before the call answers — but the
/// application's 20 ms timeout around the call cuts it off while the key is given back (the
/// guard finishes giving it back in the background). The model reads the timeout, and the
/// next step is asked at once. One run, no overlap: it must go on.
#[tokio::test]
async fn a_lone_run_cut_off_while_giving_a_failed_calls_key_back_is_not_stopped() {
    let store = net(Release::Slow(Duration::from_millis(100)));
    let a = stepped_on(Turn::new(ID).with_store(Arc::clone(&store))).await;
    let turn = a.turn().clone();
    let cut_off = async {
        let failing = async { Err::<u32, Failed>(Failed("the card network said no".into())) };
        let call = execute(call_of(&CHARGE, &turn, 500), Codec::ok_only(), failing);
        match tokio::time::timeout(Duration::from_millis(20), call).await {
            Ok(charged) => charged,
            Err(_) => Err(Failed("charge timed out".into())),
        }
    };
    let read = a.model_tool_call("charge", &500, cut_off).await;
    assert_eq!(read, Err(Failed("charge timed out".into())));
    let (next, asked) = next_step(&a, 1, &read).await;
    assert!(
        next.is_ok() && asked,
        "one run, no overlap: step 1 {next:?}"
    );
}

/// One run, on a store whose first `release` fails (a blip; later calls work). After step 0 the
/// model asks for a charge whose body fails; giving the key back fails (the engine logs it:
/// "freed when its lease ends"), and the model reads the charge's failure. The next step is
/// asked: one run, no overlap — before the handshake it went on.
#[tokio::test]
async fn a_lone_run_whose_failed_calls_release_failed_is_not_stopped() {
    let store = net(Release::FailsFirst(1));
    let a = stepped_on(Turn::new(ID).with_store(Arc::clone(&store))).await;
    let turn = a.turn().clone();
    let failing = async { Err::<u32, Failed>(Failed("the card network said no".into())) };
    let call = execute(call_of(&CHARGE, &turn, 500), Codec::ok_only(), failing);
    let read = a.model_tool_call("charge", &500, call).await;
    assert_eq!(read, Err(Failed("the card network said no".into())));
    let (next, asked) = next_step(&a, 1, &read).await;
    assert!(
        next.is_ok() && asked,
        "one run, no overlap: step 1 {next:?}"
    );
}

/// One run (in-flight wait 300 ms), on a store whose `release` takes 100 ms. After step 0 the
/// model asks for `notify` and a charge. The notify is cut off mid-body by its caller (its key
/// is given back in the background) and the model reads that; the application asks step 1
/// (its model takes 600 ms) and runs the charge alongside, in the background (as
/// `a_lone_runs_background_call_alongside_its_own_next_step_is_not_refused`), but the charge
/// claims its key while step 1 still waits for notify's key to come back — before the step
/// reads notify's key. The step is this run's own from its claim on: the charge runs at once.
#[tokio::test]
async fn a_lone_runs_call_alongside_its_next_step_waiting_for_a_release_is_not_refused() {
    let store = net(Release::Slow(Duration::from_millis(100)));
    let turn = Turn::new(ID)
        .with_store(Arc::clone(&store))
        .with_in_flight_wait(Duration::from_millis(300));
    let a = stepped_on(turn).await;
    let turn = a.turn().clone();
    let cut_off = async {
        let slow = async {
            tokio::time::sleep(Duration::from_secs(5)).await;
            Ok::<u32, Failed>(1)
        };
        let call = execute(call_of(&NOTIFY, &turn, 500), Codec::ok_only(), slow);
        match tokio::time::timeout(Duration::from_millis(20), call).await {
            Ok(sent) => sent,
            Err(_) => Err(Failed("notify timed out".into())),
        }
    };
    let read = a.model_tool_call("notify", &500, cut_off).await;
    assert!(read.is_err());
    let ok = AtomicU32::new(0);
    let slow_step = a.step("step 1", async {
        tokio::time::sleep(Duration::from_millis(600)).await;
        model(1).await
    });
    let background = async {
        tokio::time::sleep(Duration::from_millis(10)).await; // step 1 waits for the release
        let charge = execute(call_of(&CHARGE, &turn, 700), Codec::ok_only(), async {
            ok.fetch_add(1, Ordering::SeqCst);
            Ok::<u32, Failed>(700)
        });
        a.model_tool_call("charge", &700, charge).await
    };
    let (next, charged) = tokio::join!(slow_step, background);
    assert!(next.is_ok(), "step 1: {next:?}");
    assert_eq!(
        charged,
        Ok(700),
        "one run, no overlap: the charge was refused"
    );
}

/// Runs A and B of one turn on one store. A asks step 0 live; B replays it. A asks step 1 (its
/// model takes 300 ms) and runs the charge step 0 asked for alongside, in the background (the
/// step is this run's own, so it runs at once): the charge fails, its key is given back, and the
/// model will read that failure with step 2. B's charge (after step 0, replayed) claims the key,
/// waits for A's step 1, which records no failure of it, runs, and goes through. A asks step 2
/// with the failure its model read: it checks the key given back alongside step 1, finds B's
/// charge, and stops.
#[tokio::test]
async fn a_failure_read_alongside_the_runs_own_step_is_seen_by_the_step_after() {
    let store: Arc<dyn Store> = Arc::new(MemoryStore::new());
    let a = stepped_on(Turn::new(ID).with_store(Arc::clone(&store))).await;
    let b = Turn::new(ID)
        .with_store(Arc::clone(&store))
        .conversation("assistant");
    b.step("step 0", model(0)).await.expect("b replays step 0");
    let ok = AtomicU32::new(0);
    let (turn_a, turn_b) = (a.turn().clone(), b.turn().clone());
    let slow_step = a.step("step 1", async {
        tokio::time::sleep(Duration::from_millis(300)).await;
        model(1).await
    });
    let a_charges = async {
        tokio::time::sleep(Duration::from_millis(20)).await; // step 1 is being asked
        let failing = execute(call_of(&CHARGE, &turn_a, 500), Codec::ok_only(), async {
            Err::<u32, Failed>(Failed("the card network timed out".into()))
        });
        a.model_tool_call("charge", &500, failing).await
    };
    let b_charges = async {
        tokio::time::sleep(Duration::from_millis(100)).await; // A's charge failed
        let charge = execute(call_of(&CHARGE, &turn_b, 500), Codec::ok_only(), async {
            ok.fetch_add(1, Ordering::SeqCst);
            Ok::<u32, Failed>(500)
        });
        b.model_tool_call("charge", &500, charge).await
    };
    let (step_1, read_a, read_b) = tokio::join!(slow_step, a_charges, b_charges);
    step_1.expect("A's step 1");
    assert!(read_a.is_err(), "A's charge: {read_a:?}");
    assert_eq!(read_b, Ok(500), "B's charge went through");
    assert_eq!(ok.load(Ordering::SeqCst), 1);
    let (next, asked) = next_step(&a, 2, &read_a).await;
    assert!(
        !asked,
        "A's model was asked (step 2: {next:?}) reading {read_a:?}, while B charged"
    );
}

/// One run (in-flight wait 1 s), on a `MemoryStore` whose `release` answers after 100 ms (a
/// network hop). After step 0 the model asks for a charge; its body fails, the key is given
/// back (the call waits for the release) and the model reads the failure. The application
/// then asks step 1 and, alongside it, retries the same charge itself (same key: its own
/// retry, e.g. a second conversation of the run or the app's retry loop).
///
/// Schedule: t=0 step 1 claims the step; `outdated` checks `made_again(charge)` — no claim
/// since, so it goes on — and sends `release(old lease)`, which takes 100 ms. t=20 ms the
/// retry claims the key (a fresh token: the old release does not touch it) and runs 300 ms.
/// t=100 ms the release answers (lease lost, ignored); the step reads the key: in progress,
/// this turn — `RunOverlap`. One run, no overlap: the step must go on. Before the release was
/// added, `made_again` and the read were back to back (no await between them on this store).
#[tokio::test]
async fn a_lone_runs_retry_claimed_while_its_step_gives_back_the_old_claim_is_not_another_run() {
    let store = net(Release::Slow(Duration::from_millis(100)));
    let turn = Turn::new(ID)
        .with_store(Arc::clone(&store))
        .with_in_flight_wait(Duration::from_secs(1));
    let a = stepped_on(turn).await;
    let turn = a.turn().clone();
    let failing = async { Err::<u32, Failed>(Failed("the card network said no".into())) };
    let call = execute(call_of(&CHARGE, &turn, 500), Codec::ok_only(), failing);
    let read = a.model_tool_call("charge", &500, call).await;
    assert_eq!(read, Err(Failed("the card network said no".into())));
    let ok = AtomicU32::new(0);
    let step = next_step(&a, 1, &read);
    let retry = async {
        tokio::time::sleep(Duration::from_millis(20)).await; // step 1 is giving back
        execute(call_of(&CHARGE, &turn, 500), Codec::ok_only(), async {
            ok.fetch_add(1, Ordering::SeqCst);
            tokio::time::sleep(Duration::from_millis(300)).await;
            Ok::<u32, Failed>(500)
        })
        .await
    };
    let ((next, asked), charged) = tokio::join!(step, retry);
    assert_eq!(charged, Ok(500));
    assert_eq!(ok.load(Ordering::SeqCst), 1);
    assert!(
        next.is_ok() && asked,
        "one run, no overlap: step 1 {next:?}"
    );
}

//! Clock steps: the store's wall clock (a `ManualClock`) jumps forward or back by more than a
//! lease while the engine's monotonic timers keep going. `MemoryStore::new()` reads a
//! `MonotonicClock` and cannot step; these tests show what a store on a stepping clock does.

use idem_tools_runtime::Codec;
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Duration;

use idem_tools_runtime::clock::{Clock, ManualClock};
use idem_tools_runtime::store::{MemoryStore, Store};
use idem_tools_runtime::{Call, Error, ToolInfo, Turn, execute};

use crate::calls::key_of;
use crate::schedule::Tool;

/// A tool with a 300 ms lease (renewed every 100 ms) and a 1 s TTL.
static STEPPED: ToolInfo = ToolInfo::idempotent("fs_plain")
    .with_lease(Duration::from_millis(300))
    .with_ttl(Duration::from_secs(1));

const LEASE: Duration = Duration::from_millis(300);

/// Side effects performed, and the id each execution returns.
#[derive(Default)]
struct Effects(AtomicU64);

/// Calls the tool: the body performs its side effect after `before`, returns after `after`.
async fn call(
    store: &Arc<dyn Store>,
    effects: &Arc<Effects>,
    before: Duration,
    after: Duration,
) -> Result<u64, Error> {
    let turn = Turn::new("clock").with_store(Arc::clone(store));
    let (key, fingerprint) = key_of(&turn, Tool::Plain, 0);
    let effects = Arc::clone(effects);
    execute(
        Call::new(&STEPPED, &turn, key, fingerprint),
        Codec::ok_only(),
        async move {
            tokio::time::sleep(before).await;
            let id = effects.0.fetch_add(1, Ordering::SeqCst) + 1;
            tokio::time::sleep(after).await;
            Ok(id)
        },
    )
    .await
}

fn paused(test: impl Future<Output = ()>) {
    let _serial = crate::serial();
    tokio::runtime::Builder::new_current_thread()
        .enable_time()
        .start_paused(true)
        .build()
        .expect("a current-thread runtime builds")
        .block_on(test);
}

fn stores() -> (ManualClock, Arc<dyn Store>, Arc<Effects>) {
    let clock = ManualClock::new(1_700_000_000_000);
    let store: Arc<dyn Store> = Arc::new(MemoryStore::with_clock(Arc::new(clock.clone())));
    (clock, store, Arc::default())
}

/// Forward by more than the lease while the holder runs: the store frees the key, a second
/// caller runs the tool (the documented exception: a holder whose lease ran out), and the
/// first holder is stopped at its next renewal — within a quarter of the lease — with
/// `LeaseLost` instead of an `Ok`. Only the second result is recorded and replayed.
#[test]
fn a_forward_step_past_the_lease_stops_the_holder_at_its_next_renewal() {
    paused(async {
        let (clock, store, effects) = stores();
        let holder = tokio::spawn({
            let (store, effects) = (Arc::clone(&store), Arc::clone(&effects));
            async move { call(&store, &effects, Duration::ZERO, Duration::from_millis(250)).await }
        });
        tokio::time::sleep(Duration::from_millis(10)).await;
        clock.advance(LEASE * 4);
        let second = call(&store, &effects, Duration::ZERO, Duration::ZERO).await;
        assert_eq!(
            second.ok(),
            Some(2),
            "the store freed the key: the second caller ran"
        );
        let stopped_at = tokio::time::Instant::now();
        let first = holder.await.expect("the holder does not panic");
        assert!(
            matches!(first, Err(Error::LeaseLost { .. })),
            "the holder must not report success: {first:?}"
        );
        assert!(tokio::time::Instant::now() - stopped_at <= LEASE / 3);
        let again = call(&store, &effects, Duration::ZERO, Duration::ZERO).await;
        assert_eq!(again.ok(), Some(2), "the recorded result is the second one");
        assert_eq!(effects.0.load(Ordering::SeqCst), 2);
    });
}

/// Back by more than the lease: a held lease only looks longer, the holder keeps it, a
/// concurrent caller waits, and the result is recorded once and replayed.
#[test]
fn a_backward_step_keeps_the_key_held_and_the_result_replayed() {
    paused(async {
        let (clock, store, effects) = stores();
        let holder = tokio::spawn({
            let (store, effects) = (Arc::clone(&store), Arc::clone(&effects));
            async move { call(&store, &effects, Duration::ZERO, Duration::from_millis(250)).await }
        });
        tokio::time::sleep(Duration::from_millis(10)).await;
        clock.set(clock.now_ms() - 4 * 300);
        let waiting = call(&store, &effects, Duration::ZERO, Duration::ZERO).await;
        let first = holder.await.expect("the holder does not panic");
        assert_eq!(first.ok(), Some(1));
        assert_eq!(
            waiting.ok(),
            Some(1),
            "the concurrent caller got the first result"
        );
        clock.set(clock.now_ms() - 4 * 300);
        let later = call(&store, &effects, Duration::ZERO, Duration::ZERO).await;
        assert_eq!(later.ok(), Some(1));
        assert_eq!(effects.0.load(Ordering::SeqCst), 1, "the tool ran once");
    });
}

/// Forward by more than the TTL after completion: the record is gone, and a new call runs the
/// tool again (exactly once per key per TTL, as documented); by less, it replays.
#[test]
fn a_forward_step_past_the_ttl_ends_the_record() {
    paused(async {
        let (clock, store, effects) = stores();
        let first = call(&store, &effects, Duration::ZERO, Duration::ZERO).await;
        clock.advance(Duration::from_millis(900));
        let replayed = call(&store, &effects, Duration::ZERO, Duration::ZERO).await;
        clock.advance(Duration::from_millis(200));
        let rerun = call(&store, &effects, Duration::ZERO, Duration::ZERO).await;
        assert_eq!(
            (first.ok(), replayed.ok(), rerun.ok()),
            (Some(1), Some(1), Some(2))
        );
    });
}

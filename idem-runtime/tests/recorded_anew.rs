//! A body that ran past its claim — it blocked its thread past its lease — ran all the same: its
//! result is recorded under a new claim, so that a retry replays it instead of running the tool
//! again. Also when the caller stops waiting while the result is being recorded (the record
//! then goes on in the background), and on the last attempt the turn's budget allows (recording
//! a result that exists is not a new attempt).

#[path = "fault_store/mod.rs"]
mod fault_store;

use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::Duration;

use crate::fault_store::{Fault, FaultStore, Op};
use idem_tools_runtime::key::ArgsDigest;
use idem_tools_runtime::store::{MemoryStore, Store};
use idem_tools_runtime::{Call, Codec, Error, ToolInfo, Turn, execute};

static CHARGE: ToolInfo =
    ToolInfo::idempotent("anew_charge").with_lease(Duration::from_millis(100));

fn call(turn: &Turn) -> Call {
    let mut args = ArgsDigest::new(CHARGE.name);
    args.arg("cents", &500u64).unwrap();
    let (key, fingerprint) = args.finish(turn.namespace(), turn.id(), CHARGE.name, CHARGE.version);
    Call::new(&CHARGE, turn, key, fingerprint)
}

/// A charge whose body blocks its thread three times its lease, then counts itself in `runs`.
async fn charge(turn: &Turn, runs: &AtomicUsize) -> Result<usize, Error> {
    execute(call(turn), Codec::ok_only(), async {
        std::thread::sleep(Duration::from_millis(300)); // no `.await` for that long
        Ok::<_, Error>(runs.fetch_add(1, Ordering::SeqCst) + 1)
    })
    .await
}

/// A memory store whose `complete` answers after `delay`, as a store over a network does.
fn slow_to_record(delay: Duration) -> Arc<dyn Store> {
    Arc::new(FaultStore::new(
        Arc::new(MemoryStore::new()),
        move |op| match op {
            Op::Complete => Fault::Delay(delay),
            _ => Fault::None,
        },
    ))
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_caller_that_stops_waiting_while_the_result_is_recorded_does_not_make_it_run_again() {
    static RUNS: AtomicUsize = AtomicUsize::new(0);
    let store = slow_to_record(Duration::from_millis(50));
    let turn = Turn::new("anew-timeout").with_store(Arc::clone(&store));
    // The caller's timeout elapses while the body blocks; it fires once the body returned, while
    // its result is on its way to the store under the claim that ended meanwhile.
    let first = tokio::time::timeout(Duration::from_millis(200), charge(&turn, &RUNS)).await;
    assert!(first.is_err(), "the caller stopped waiting: {first:?}");
    assert_eq!(RUNS.load(Ordering::SeqCst), 1);
    // The background records the result under a new claim; retries replay it.
    let mut retry = None;
    for _ in 0..100 {
        tokio::time::sleep(Duration::from_millis(20)).await;
        let record = store
            .get(turn.namespace(), &call(&turn).key())
            .await
            .unwrap();
        if record.is_some_and(|record| record.result.is_some()) {
            retry = Some(charge(&turn, &RUNS).await);
            break;
        }
    }
    let retry = retry.expect("the result was recorded in the background");
    assert_eq!(
        retry.unwrap(),
        1,
        "the retry replays the first run's result"
    );
    assert_eq!(RUNS.load(Ordering::SeqCst), 1, "the tool ran once");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_result_past_its_lease_is_recorded_on_the_last_attempt_the_budget_allows() {
    static RUNS: AtomicUsize = AtomicUsize::new(0);
    let turn = Turn::new("anew-budget")
        .with_store(Arc::new(MemoryStore::new()))
        .with_max_attempts_per_key(1);
    assert_eq!(charge(&turn, &RUNS).await.unwrap(), 1);
    // Recording the result under a new claim is not a second attempt: the retry replays.
    assert_eq!(charge(&turn, &RUNS).await.unwrap(), 1);
    assert_eq!(RUNS.load(Ordering::SeqCst), 1);
}

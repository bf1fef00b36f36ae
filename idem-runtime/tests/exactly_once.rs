//! "Twice is safe" when the caller gives up, the store fails or a reply is lost: each case a
//! schedule that used to run a tool twice, lose a result, strand a key or hang.

#[path = "fault_store/mod.rs"]
mod fault_store;

use idem_tools_runtime::Codec;
use std::collections::BTreeMap;
use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::Duration;

use crate::fault_store::{Fault, FaultStore, Op};
use idem_tools_runtime::key::{ArgsDigest, Fingerprint};
use idem_tools_runtime::store::{MemoryStore, RecordState, Store};
use idem_tools_runtime::{Call, Error, Key, ToolInfo, Turn, execute, execute_detached};
use serde::{Deserialize, Serialize};

const SEND: ToolInfo = ToolInfo::idempotent("send_message");

fn digest(tool: &'static ToolInfo, turn: &Turn, to: &str) -> (Key, Fingerprint) {
    let mut args = ArgsDigest::new(tool.name);
    args.arg("to", to).unwrap();
    args.finish(turn.namespace(), turn.id(), tool.name, tool.version)
}

fn memory() -> Arc<dyn Store> {
    Arc::new(MemoryStore::new())
}

/// Side effects of the tool under test: started and completed separately, so a body cut in the
/// middle shows.
#[derive(Default)]
struct World {
    started: AtomicUsize,
    completed: AtomicUsize,
}

/// The seed's scenario: the tool does its work, awaits a slow downstream reply, and returns.
async fn send_slowly(world: Arc<World>, reply_after: Duration) -> Result<usize, Error> {
    world.started.fetch_add(1, Ordering::SeqCst);
    tokio::time::sleep(reply_after).await;
    Ok(world.completed.fetch_add(1, Ordering::SeqCst) + 1)
}

async fn detached_send(
    turn: &Turn,
    world: &Arc<World>,
    reply_after: Duration,
) -> Result<usize, Error> {
    let (key, fp) = digest(&SEND, turn, "ada");
    execute_detached(
        Call::new(&SEND, turn, key, fp),
        Codec::ok_only(),
        send_slowly(Arc::clone(world), reply_after),
    )
    .await
}

async fn wait_until(what: &str, mut done: impl FnMut() -> bool) {
    tokio::time::timeout(Duration::from_secs(5), async {
        while !done() {
            tokio::time::sleep(Duration::from_millis(5)).await;
        }
    })
    .await
    .unwrap_or_else(|_| panic!("timed out waiting until {what}"));
}

#[tokio::test]
async fn a_caller_timeout_mid_tool_then_a_retry_runs_the_tool_once() {
    let turn = Turn::new("t").with_store(memory());
    let world = Arc::new(World::default());
    let first = tokio::time::timeout(
        Duration::from_millis(50),
        detached_send(&turn, &world, Duration::from_millis(200)),
    )
    .await;
    assert!(first.is_err(), "the caller should have timed out");
    // The retry arrives while the first execution still runs: it joins it.
    let retry = detached_send(&turn, &world, Duration::ZERO).await.unwrap();
    assert_eq!(retry, 1, "the retry gets the first result");
    // And a later retry replays it.
    assert_eq!(
        detached_send(&turn, &world, Duration::ZERO).await.unwrap(),
        1
    );
    assert_eq!(
        world.started.load(Ordering::SeqCst),
        1,
        "side effect started twice"
    );
    assert_eq!(world.completed.load(Ordering::SeqCst), 1);
}

#[tokio::test]
async fn a_select_that_abandons_the_tool_then_a_retry_runs_the_tool_once() {
    let turn = Turn::new("t").with_store(memory());
    let world = Arc::new(World::default());
    tokio::select! {
        _ = detached_send(&turn, &world, Duration::from_millis(100)) => panic!("the tool won"),
        () = tokio::time::sleep(Duration::from_millis(20)) => {}
    }
    // The retry comes after the first execution finished: it replays.
    wait_until("the first execution completes", || {
        world.completed.load(Ordering::SeqCst) == 1
    })
    .await;
    tokio::time::sleep(Duration::from_millis(20)).await;
    assert_eq!(
        detached_send(&turn, &world, Duration::ZERO).await.unwrap(),
        1
    );
    assert_eq!(world.started.load(Ordering::SeqCst), 1);
    assert_eq!(turn.stats().replayed, 1, "{:?}", turn.stats());
}

#[tokio::test]
async fn a_detached_body_cancelled_before_its_side_effect_still_runs_exactly_once() {
    let turn = Turn::new("t").with_store(memory());
    let world = Arc::new(World::default());
    let slow_start = {
        let world = Arc::clone(&world);
        async move {
            tokio::time::sleep(Duration::from_millis(60)).await; // before any side effect
            send_slowly(world, Duration::ZERO).await
        }
    };
    let (key, fp) = digest(&SEND, &turn, "ada");
    let first = tokio::time::timeout(
        Duration::from_millis(10),
        execute_detached(
            Call::new(&SEND, &turn, key, fp),
            Codec::ok_only(),
            slow_start,
        ),
    )
    .await;
    assert!(first.is_err());
    assert_eq!(world.started.load(Ordering::SeqCst), 0);
    wait_until("the detached body finishes", || {
        world.completed.load(Ordering::SeqCst) == 1
    })
    .await;
    assert_eq!(
        detached_send(&turn, &world, Duration::ZERO).await.unwrap(),
        1
    );
    assert_eq!(world.started.load(Ordering::SeqCst), 1);
}

#[tokio::test]
async fn a_detached_tool_sees_its_turn_and_key_and_its_panic_reaches_the_caller() {
    let turn = Turn::new("t-detached").with_store(memory());
    let (key, fp) = digest(&SEND, &turn, "ada");
    let seen = execute_detached(Call::new(&SEND, &turn, key, fp), Codec::ok_only(), async {
        let turn = Turn::current().map(|t| t.id().to_owned());
        Ok::<_, Error>((turn, idem_tools_runtime::current_key().map(|k| k.to_hex())))
    })
    .await
    .unwrap();
    assert_eq!(seen, (Some("t-detached".to_owned()), Some(key.to_hex())));

    let (key, fp) = digest(&SEND, &turn, "grace");
    let panicked = tokio::spawn({
        let turn = turn.clone();
        async move {
            execute_detached(Call::new(&SEND, &turn, key, fp), Codec::ok_only(), async {
                panic!("tool blew up");
                #[allow(unreachable_code)]
                Ok::<u8, Error>(1)
            })
            .await
        }
    })
    .await
    .unwrap_err();
    assert!(panicked.is_panic());
    assert_eq!(turn.stats().panicked, 1);
    // The panic released the key: a retry runs.
    let retry = execute_detached(Call::new(&SEND, &turn, key, fp), Codec::ok_only(), async {
        Ok::<u8, Error>(2)
    });
    assert_eq!(retry.await.unwrap(), 2);
}

/// A result whose `Serialize` fails: it cannot be recorded at all.
#[derive(Debug, PartialEq, Deserialize)]
struct Unrecordable(u8);

impl Serialize for Unrecordable {
    fn serialize<S: serde::Serializer>(&self, _: S) -> Result<S::Ok, S::Error> {
        Err(serde::ser::Error::custom(
            "this type refuses to be serialized",
        ))
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_result_that_cannot_be_recorded_never_makes_the_tool_run_again() {
    let turn = Turn::new("t").with_store(memory());
    let runs = Arc::new(AtomicUsize::new(0));
    let call = || {
        let (turn, runs) = (turn.clone(), Arc::clone(&runs));
        async move {
            let (key, fp) = digest(&SEND, &turn, "ada");
            execute_detached(
                Call::new(&SEND, &turn, key, fp),
                Codec::ok_only(),
                async move {
                    tokio::time::sleep(Duration::from_millis(30)).await;
                    runs.fetch_add(1, Ordering::SeqCst);
                    Ok::<_, Error>(Unrecordable(7))
                },
            )
            .await
        }
    };
    let concurrent: Vec<_> = (0..3).map(|_| tokio::spawn(call())).collect();
    let mut answers = Vec::new();
    for task in concurrent {
        answers.push(task.await.unwrap());
    }
    answers.push(call().await);
    assert_eq!(
        runs.load(Ordering::SeqCst),
        1,
        "the tool ran again: {answers:?}"
    );
    let ok = answers.iter().filter(|a| a.is_ok()).count();
    assert_eq!(
        ok, 1,
        "the one execution hands its own result back: {answers:?}"
    );
    for answer in answers.iter().filter(|a| a.is_err()) {
        let Err(Error::NotReplayable { message, .. }) = answer else {
            panic!("a caller must be told the tool already ran: {answer:?}");
        };
        assert!(message.contains("refuses to be serialized"), "{message}");
    }
}

#[tokio::test]
async fn a_result_that_does_not_decode_back_is_detected_before_recording() {
    // JSON writes NaN as `null`, which does not decode as `f64`: recording it would turn every
    // retry into a decode error, or a second run. It must never re-run.
    let turn = Turn::new("t").with_store(memory());
    let runs = AtomicUsize::new(0);
    let call = || {
        let (key, fp) = digest(&SEND, &turn, "ada");
        execute(Call::new(&SEND, &turn, key, fp), Codec::ok_only(), async {
            runs.fetch_add(1, Ordering::SeqCst);
            Ok::<_, Error>(BTreeMap::from([(1u8, f64::NAN)]))
        })
    };
    assert!(
        call().await.unwrap()[&1].is_nan(),
        "the leader gets its own result"
    );
    match call().await {
        Ok(replayed) => assert!(replayed[&1].is_nan(), "replayed {replayed:?}"),
        Err(error) => assert!(matches!(error, Error::NotReplayable { .. }), "{error:?}"),
    }
    assert_eq!(runs.load(Ordering::SeqCst), 1);
}

#[tokio::test]
async fn a_begin_whose_reply_is_lost_leaves_no_orphaned_claim() {
    let lost = Arc::new(AtomicUsize::new(1));
    let once = Arc::clone(&lost);
    let store = Arc::new(FaultStore::new(memory(), move |op| match op {
        Op::Begin if once.swap(0, Ordering::SeqCst) == 1 => Fault::FailAfter,
        _ => Fault::None,
    }));
    let turn = Turn::new("t")
        .with_store(store.clone())
        .with_in_flight_wait(Duration::from_millis(100));
    let world = Arc::new(World::default());
    let first = detached_send(&turn, &world, Duration::ZERO).await;
    assert!(matches!(first, Err(Error::Store { .. })), "{first:?}");
    // The claim landed before the reply was lost, and was given back: the retry runs at once.
    assert_eq!(
        detached_send(&turn, &world, Duration::ZERO).await.unwrap(),
        1
    );
    assert_eq!(world.started.load(Ordering::SeqCst), 1);
}

#[tokio::test]
async fn a_caller_cancelled_during_begin_leaves_no_orphaned_claim() {
    let hung = Arc::new(AtomicUsize::new(1));
    let once = Arc::clone(&hung);
    let store = Arc::new(FaultStore::new(memory(), move |op| match op {
        Op::Begin if once.swap(0, Ordering::SeqCst) == 1 => Fault::HangAfter,
        _ => Fault::None,
    }));
    let turn = Turn::new("t")
        .with_store(store.clone())
        .with_in_flight_wait(Duration::from_millis(100));
    let world = Arc::new(World::default());
    let first = tokio::time::timeout(
        Duration::from_millis(20),
        detached_send(&turn, &world, Duration::ZERO),
    )
    .await;
    assert!(first.is_err(), "the caller gave up while begin hung");
    assert_eq!(
        detached_send(&turn, &world, Duration::ZERO).await.unwrap(),
        1
    );
    assert_eq!(world.started.load(Ordering::SeqCst), 1);
    assert!(
        store.calls(Op::Release) >= 1,
        "the abandoned claim was given back"
    );
}

#[tokio::test]
async fn a_tool_that_cannot_renew_its_lease_is_stopped_before_another_caller_can_take_over() {
    const SHORT: ToolInfo = ToolInfo::idempotent("export").with_lease(Duration::from_millis(150));
    let store: Arc<dyn Store> = Arc::new(FaultStore::new(memory(), |op| match op {
        Op::Renew => Fault::FailBefore,
        _ => Fault::None,
    }));
    let turn = Turn::new("t").with_store(Arc::clone(&store));
    let (key, fp) = digest(&SHORT, &turn, "ada");
    let world = Arc::new(World::default());
    let started = std::time::Instant::now();
    let result = execute(
        Call::new(&SHORT, &turn, key, fp),
        Codec::ok_only(),
        send_slowly(Arc::clone(&world), Duration::from_secs(5)),
    )
    .await;
    assert!(matches!(result, Err(Error::LeaseLost { .. })), "{result:?}");
    assert!(
        started.elapsed() < Duration::from_secs(1),
        "stopped at the lease's end, not at the tool's"
    );
    assert_eq!(
        world.completed.load(Ordering::SeqCst),
        0,
        "the body was stopped"
    );
}

#[tokio::test]
async fn a_lease_outside_the_bounds_is_refused() {
    const TINY: ToolInfo = ToolInfo::idempotent("t").with_lease(Duration::from_micros(500));
    let turn = Turn::new("t").with_store(memory());
    let (key, fp) = digest(&TINY, &turn, "ada");
    let result = execute(Call::new(&TINY, &turn, key, fp), Codec::ok_only(), async {
        Ok::<_, Error>(1)
    })
    .await;
    assert!(matches!(result, Err(Error::Config(_))), "{result:?}");
    assert_eq!(turn.stats().config_error, 1);
}

const OUTER: ToolInfo = ToolInfo::idempotent("outer");
const INNER: ToolInfo = ToolInfo::idempotent("inner");

fn outer_call(
    turn: Turn,
    depth: u8,
) -> std::pin::Pin<Box<dyn std::future::Future<Output = Result<u8, Error>> + Send>> {
    Box::pin(async move {
        let (key, fp) = digest(&OUTER, &turn, "x");
        let inner_turn = turn.clone();
        execute(
            Call::new(&OUTER, &turn, key, fp),
            Codec::ok_only(),
            async move {
                let (key, fp) = digest(&INNER, &inner_turn, "x");
                let again = inner_turn.clone();
                execute(
                    Call::new(&INNER, &inner_turn, key, fp),
                    Codec::ok_only(),
                    async move {
                        if depth == 0 {
                            outer_call(again, 1).await // outer → inner → outer, same key
                        } else {
                            Ok(9)
                        }
                    },
                )
                .await
            },
        )
        .await
    })
}

#[tokio::test]
async fn a_call_cycle_through_other_tools_is_reentrant_not_a_hang() {
    let turn = Turn::new("t").with_store(memory());
    let result = tokio::time::timeout(Duration::from_secs(5), outer_call(turn.clone(), 0))
        .await
        .expect("the cycle hung");
    assert!(
        matches!(result, Err(Error::Reentrant { tool: "outer", .. })),
        "{result:?}"
    );
    assert_eq!(turn.stats().reentrant, 1);
}

#[tokio::test]
async fn a_follower_of_a_leader_that_is_never_polled_again_gives_up_in_bounded_time() {
    let turn = Turn::new("t")
        .with_store(memory())
        .with_in_flight_wait(Duration::from_millis(50));
    let world = Arc::new(World::default());
    let (key, fp) = digest(&SEND, &turn, "ada");
    let mut stalled = Box::pin(execute(
        Call::new(&SEND, &turn, key, fp),
        Codec::ok_only(),
        send_slowly(Arc::clone(&world), Duration::from_secs(60)),
    ));
    // Poll the leader once (it claims and starts), then keep it without polling.
    assert!(futures_poll_once(stalled.as_mut()).await.is_none());
    let follower = tokio::time::timeout(Duration::from_secs(5), async {
        let (key, fp) = digest(&SEND, &turn, "ada");
        execute(Call::new(&SEND, &turn, key, fp), Codec::ok_only(), async {
            Ok::<_, Error>(0)
        })
        .await
    })
    .await
    .expect("the follower waited without bound");
    assert!(
        matches!(follower, Err(Error::InFlight { .. })),
        "{follower:?}"
    );
    drop(stalled);
}

/// Polls a future once; `Some` if it finished.
async fn futures_poll_once<F: std::future::Future + Unpin>(f: F) -> Option<F::Output> {
    let mut f = f;
    std::future::poll_fn(|cx| {
        std::task::Poll::Ready(match std::pin::Pin::new(&mut f).poll(cx) {
            std::task::Poll::Ready(v) => Some(v),
            std::task::Poll::Pending => None,
        })
    })
    .await
}

#[tokio::test]
async fn every_call_is_one_outcome() {
    let turn = Turn::new("t").with_store(memory());
    let world = Arc::new(World::default());
    let mut calls = 0;
    for _ in 0..3 {
        drop(detached_send(&turn, &world, Duration::ZERO).await);
        calls += 1;
    }
    drop(
        tokio::time::timeout(
            Duration::from_millis(5),
            detached_send(
                &turn,
                &Arc::new(World::default()),
                Duration::from_millis(50),
            ),
        )
        .await,
    );
    calls += 1;
    let (key, fp) = digest(&SEND, &turn, "unrecordable");
    drop(
        execute(Call::new(&SEND, &turn, key, fp), Codec::ok_only(), async {
            Ok::<_, Error>(Unrecordable(1))
        })
        .await,
    );
    calls += 1;
    tokio::time::sleep(Duration::from_millis(100)).await;
    assert_eq!(turn.stats().total(), calls, "{:?}", turn.stats());
}

#[derive(Debug, PartialEq, Serialize, Deserialize)]
enum Declined {
    Card,
    Idem(String),
}

impl From<Error> for Declined {
    fn from(error: Error) -> Self {
        Declined::Idem(error.to_string())
    }
}

#[tokio::test]
async fn a_detached_tool_caching_errors_replays_its_error() {
    const CHARGE: ToolInfo = ToolInfo::idempotent("charge").with_cache_errors();
    let turn = Turn::new("t").with_store(memory());
    let runs = Arc::new(AtomicUsize::new(0));
    for _ in 0..2 {
        let (key, fp) = digest(&CHARGE, &turn, "ada");
        let runs = Arc::clone(&runs);
        let result = execute_detached(
            Call::new(&CHARGE, &turn, key, fp),
            Codec::ok_and_err(),
            async move {
                runs.fetch_add(1, Ordering::SeqCst);
                Err::<u8, _>(Declined::Card)
            },
        )
        .await;
        assert_eq!(result, Err(Declined::Card));
    }
    assert_eq!(runs.load(Ordering::SeqCst), 1);
}

#[tokio::test]
async fn an_interrupted_key_is_visible_to_operators_and_removable() {
    let store = memory();
    let turn = Turn::new("t").with_store(Arc::clone(&store));
    let (key, fp) = digest(&SEND, &turn, "ada");
    let world = Arc::new(World::default());
    let cut = tokio::time::timeout(
        Duration::from_millis(10),
        execute(
            Call::new(&SEND, &turn, key, fp),
            Codec::ok_only(),
            send_slowly(Arc::clone(&world), Duration::from_secs(60)),
        ),
    )
    .await;
    assert!(cut.is_err());
    let record = store.get("", &key).await.unwrap().expect("kept");
    assert_eq!(
        record.state,
        RecordState::Completed,
        "an interrupted key is settled, not in flight"
    );
    // An operator who checked that the action did not happen removes the key; the agent retries.
    assert!(store.remove("", &key).await.unwrap());
    let retry = execute(
        Call::new(&SEND, &turn, key, fp),
        Codec::ok_only(),
        send_slowly(Arc::clone(&world), Duration::ZERO),
    );
    assert_eq!(retry.await.unwrap(), 1);
}

#[test]
fn a_failed_call_has_given_its_key_back_when_it_returns() {
    // A process that exits right after a failed call (an orchestrator restarting the run) must
    // not leave the key claimed for a whole lease: the release is done before the call returns.
    let memory: Arc<dyn Store> = Arc::new(MemoryStore::new());
    let store: Arc<dyn Store> = Arc::new(FaultStore::new(Arc::clone(&memory), |op| match op {
        Op::Release => Fault::Delay(Duration::from_millis(20)),
        _ => Fault::None,
    }));
    let turn = Turn::new("t").with_store(store);
    let (key, fp) = digest(&SEND, &turn, "ada");
    let runtime = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .unwrap();
    let failed = runtime.block_on(execute(
        Call::new(&SEND, &turn, key, fp),
        Codec::ok_only(),
        async { Err::<u8, _>(Error::Config("upstream down".to_owned())) },
    ));
    assert!(matches!(failed, Err(Error::Config(_))), "{failed:?}");
    drop(runtime); // the process goes away
    let check = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .unwrap();
    let left = check.block_on(memory.get("", &key)).unwrap();
    assert_eq!(
        left, None,
        "the key is still claimed after the call returned"
    );
}

/// A result whose `Serialize` panics (`Serialize`) or whose `Deserialize` does (`Deserialize`,
/// on the fidelity check's decode): a bug in the result type, met after the body ran.
#[derive(Debug, Deserialize)]
struct PanicsOnSerialize;

impl Serialize for PanicsOnSerialize {
    fn serialize<S: serde::Serializer>(&self, _: S) -> Result<S::Ok, S::Error> {
        panic!("this type panics when serialized")
    }
}

#[derive(Debug, Serialize)]
struct PanicsOnDeserialize(String);

impl<'de> Deserialize<'de> for PanicsOnDeserialize {
    fn deserialize<D: serde::Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        let id = String::deserialize(d)?;
        assert!(id.starts_with("T-"), "ticket ids start with T-");
        Ok(PanicsOnDeserialize(id))
    }
}

/// Calls a tool returning what `make` makes three times, attached or detached, recorded by
/// `codec`; returns the answers and how many times the body ran.
async fn thrice<T, F>(
    detached: bool,
    codec: Codec<T, Error>,
    make: F,
) -> (Vec<Result<T, Error>>, usize)
where
    T: Serialize + serde::de::DeserializeOwned + Send + 'static,
    F: Fn() -> T + Send + Sync + 'static,
{
    let turn = Turn::new("t").with_store(memory());
    let runs = Arc::new(AtomicUsize::new(0));
    let make = Arc::new(make);
    let mut answers = Vec::new();
    for _ in 0..3 {
        let (key, fp) = digest(&SEND, &turn, "ada");
        let call = Call::new(&SEND, &turn, key, fp);
        let (runs, make) = (Arc::clone(&runs), Arc::clone(&make));
        let body = async move {
            runs.fetch_add(1, Ordering::SeqCst);
            Ok::<_, Error>(make())
        };
        let answer = if detached {
            execute_detached(call, codec, body).await
        } else {
            execute(call, codec, body).await
        };
        answers.push(answer);
    }
    (answers, runs.load(Ordering::SeqCst))
}

fn told_it_ran<T: std::fmt::Debug>(answers: &[Result<T, Error>]) {
    assert!(
        answers[0].is_ok(),
        "the execution hands its own result back: {answers:?}"
    );
    for answer in &answers[1..] {
        let Err(Error::NotReplayable { message, .. }) = answer else {
            panic!("a retry must be told the tool already ran: {answer:?}");
        };
        assert!(message.contains("panicked"), "{message}");
    }
}

#[tokio::test]
async fn a_result_whose_serialize_panics_never_makes_the_tool_run_again() {
    // The panic is caught where the result is recorded: before, it unwound out of the body as
    // the body's own, the key was given back, and every retry ran the tool again.
    for detached in [false, true] {
        let (answers, runs) = thrice(detached, Codec::ok_only(), || PanicsOnSerialize).await;
        assert_eq!(
            runs, 1,
            "detached {detached}: the tool ran again: {answers:?}"
        );
        told_it_ran(&answers);
    }
}

#[tokio::test]
async fn a_result_whose_deserialize_panics_never_makes_the_tool_run_again() {
    for detached in [false, true] {
        let (answers, runs) = thrice(detached, Codec::ok_only(), || {
            PanicsOnDeserialize("X-1".to_owned())
        })
        .await;
        assert_eq!(
            runs, 1,
            "detached {detached}: the tool ran again: {answers:?}"
        );
        told_it_ran(&answers);
    }
}

#[tokio::test]
async fn a_not_recording_check_that_panics_never_makes_the_tool_run_again() {
    // The check (an in-band failure, such as MCP's `isError`) runs after the body did: its
    // panic was taken for the body's, the key given back, and a retry ran the tool again
    // (found by a schedule-hunting helper).
    let codec = Codec::<u64, Error>::ok_only().not_recording(|_| panic!("the check has a bug"));
    for detached in [false, true] {
        let (answers, runs) = thrice(detached, codec, || 7).await;
        assert_eq!(
            runs, 1,
            "detached {detached}: the tool ran again: {answers:?}"
        );
        told_it_ran(&answers);
    }
}

/// Whether [`Ticket`]'s `Deserialize` checks its id, as a later version of the tool would.
static STRICT_TICKETS: std::sync::atomic::AtomicBool = std::sync::atomic::AtomicBool::new(false);

#[derive(Debug, Serialize)]
struct Ticket(String);

impl<'de> Deserialize<'de> for Ticket {
    fn deserialize<D: serde::Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        let id = String::deserialize(d)?;
        if STRICT_TICKETS.load(Ordering::SeqCst) {
            assert!(id.starts_with("T-"), "ticket ids start with T-");
        }
        Ok(Ticket(id))
    }
}

#[tokio::test]
async fn a_record_whose_deserialize_panics_on_replay_is_a_decode_error() {
    // Recorded by a version that took any id; replayed by one whose `Deserialize` panics on it.
    // The panic is the caller's no more: every retry is answered a decode error (the action
    // ran), and the tool never runs again.
    let turn = Turn::new("t").with_store(memory());
    let runs = AtomicUsize::new(0);
    let call = || {
        let (key, fp) = digest(&SEND, &turn, "ada");
        execute(Call::new(&SEND, &turn, key, fp), Codec::ok_only(), async {
            runs.fetch_add(1, Ordering::SeqCst);
            Ok::<_, Error>(Ticket("X-1".to_owned()))
        })
    };
    assert!(call().await.is_ok());
    STRICT_TICKETS.store(true, Ordering::SeqCst);
    for _ in 0..2 {
        let Err(Error::Decode { message, .. }) = call().await else {
            panic!("a retry must be answered a decode error");
        };
        assert!(message.contains("panicked"), "{message}");
    }
    assert_eq!(runs.load(Ordering::SeqCst), 1);
}

//! The engine's guarantees, each with a test that fails without it.

#[path = "fault_store/mod.rs"]
mod fault_store;

use idem_tools_runtime::Codec;
use idem_tools_runtime::store::Charge;
use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::Duration;

use crate::fault_store::{Fault, FaultStore, Op};
use idem_tools_runtime::clock::ManualClock;
use idem_tools_runtime::key::ArgsDigest;
use idem_tools_runtime::key::Fingerprint;
use idem_tools_runtime::store::{Begin, BeginRequest, Lease, LeaseToken, MemoryStore, Store};
use idem_tools_runtime::{Call, Error, Key, ToolInfo, Turn, current_key, execute};
use serde::{Deserialize, Serialize};

const SEND: ToolInfo = ToolInfo::idempotent("send_message");
const CACHING: ToolInfo = ToolInfo::idempotent("open_ticket").with_cache_errors();

fn digest(tool: &'static ToolInfo, turn: &Turn, to: &str, body: &str) -> (Key, Fingerprint) {
    let mut args = ArgsDigest::new(tool.name);
    args.arg("to", to).unwrap();
    args.arg("body", body).unwrap();
    args.finish(turn.namespace(), turn.id(), tool.name, tool.version)
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
struct Receipt {
    id: usize,
}

/// The tool under test: sends a message (counts it) and returns a receipt.
async fn send(sent: &AtomicUsize) -> Result<Receipt, Error> {
    let id = sent.fetch_add(1, Ordering::SeqCst) + 1;
    Ok(Receipt { id })
}

async fn send_message(turn: &Turn, sent: &AtomicUsize, to: &str) -> Result<Receipt, Error> {
    let (key, fp) = digest(&SEND, turn, to, "hello");
    execute(
        Call::new(&SEND, turn, key, fp),
        Codec::ok_only(),
        send(sent),
    )
    .await
}

fn turn(id: &str, store: &Arc<dyn Store>) -> Turn {
    Turn::new(id).with_store(Arc::clone(store))
}

fn memory() -> Arc<dyn Store> {
    Arc::new(MemoryStore::new())
}

fn request<'a>(key: &'a Key, fp: &'a Fingerprint, lease: Duration) -> BeginRequest<'a> {
    BeginRequest {
        namespace: "",
        key,
        tool: SEND.name,
        turn: "t",
        fingerprint: fp,
        lease,
        ttl: Duration::from_secs(60),
        token: LeaseToken::generate(),
        charge: Charge::unlimited(),
    }
}

/// What another process does to claim `key` directly in the store: its lease.
async fn claim_elsewhere(store: &Arc<dyn Store>, key: &Key, fp: &Fingerprint) -> Lease {
    let request = request(key, fp, Duration::from_secs(30));
    let lease = Lease {
        namespace: Arc::from(""),
        key: *key,
        token: request.token,
    };
    match store.begin(request).await.unwrap() {
        Begin::Claimed => lease,
        other => panic!("the key should have been free, got {other:?}"),
    }
}

/// A memory store with `plan` injecting faults.
fn faulty(plan: impl Fn(Op) -> Fault + Send + Sync + 'static) -> Arc<FaultStore> {
    Arc::new(FaultStore::new(memory(), plan))
}

#[tokio::test]
async fn a_retry_after_a_lost_response_replays_the_first_result() {
    let store = memory();
    let turn = turn("conv-1/turn-1", &store);
    let sent = AtomicUsize::new(0);
    // The transport loses the response after the work is done: the agent never sees it.
    let lost = send_message(&turn, &sent, "ada").await;
    drop(lost);
    let retry = send_message(&turn, &sent, "ada").await.unwrap();
    assert_eq!(retry, Receipt { id: 1 });
    assert_eq!(sent.load(Ordering::SeqCst), 1, "the message went out twice");
    assert_eq!(turn.stats().executed, 1);
    assert_eq!(turn.stats().replayed, 1);
}

#[tokio::test]
async fn a_new_action_gets_a_new_key_and_runs() {
    let store = memory();
    let turn = turn("t", &store);
    let sent = AtomicUsize::new(0);
    send_message(&turn, &sent, "ada").await.unwrap();
    send_message(&turn, &sent, "grace").await.unwrap();
    let next_turn = self::turn("t2", &store);
    send_message(&next_turn, &sent, "ada").await.unwrap();
    assert_eq!(sent.load(Ordering::SeqCst), 3);
}

#[tokio::test]
async fn a_caller_dropped_while_the_result_is_recorded_still_gets_it_recorded() {
    let store: Arc<dyn Store> = faulty(|op| match op {
        Op::Complete => Fault::Delay(Duration::from_millis(50)),
        _ => Fault::None,
    });
    let turn = turn("t", &store);
    let sent = AtomicUsize::new(0);
    // The caller times out after the tool ran but before the store confirmed the record.
    let first =
        tokio::time::timeout(Duration::from_millis(10), send_message(&turn, &sent, "ada")).await;
    assert!(first.is_err(), "the caller should have timed out");
    assert_eq!(sent.load(Ordering::SeqCst), 1);
    let retry = send_message(&turn, &sent, "ada").await.unwrap();
    assert_eq!(retry, Receipt { id: 1 });
    assert_eq!(
        sent.load(Ordering::SeqCst),
        1,
        "the retry ran the tool again"
    );
}

#[tokio::test]
async fn an_unreachable_store_fails_closed_without_running_the_tool() {
    let store: Arc<dyn Store> = faulty(|op| match op {
        Op::Begin => Fault::FailBefore,
        _ => Fault::None,
    });
    let turn = turn("t", &store);
    let sent = AtomicUsize::new(0);
    let refused = send_message(&turn, &sent, "ada").await;
    assert!(
        matches!(
            refused,
            Err(Error::Store {
                operation: "begin",
                ..
            })
        ),
        "{refused:?}"
    );
    assert_eq!(
        sent.load(Ordering::SeqCst),
        0,
        "the tool ran without a lock"
    );
    assert_eq!(turn.stats().store_error, 1);
}

#[tokio::test]
async fn a_result_that_cannot_be_recorded_yet_is_returned_shared_and_recorded_later() {
    // The store goes down between the side effect and recording it, and comes back.
    let failures = Arc::new(AtomicUsize::new(3));
    let down = Arc::clone(&failures);
    let store = faulty(move |op| match op {
        Op::Complete
            if down
                .fetch_update(Ordering::SeqCst, Ordering::SeqCst, |n| n.checked_sub(1))
                .is_ok() =>
        {
            Fault::FailBefore
        }
        _ => Fault::None,
    });
    let dyn_store: Arc<dyn Store> = store.clone();
    let turn = turn("t", &dyn_store);
    let sent = AtomicUsize::new(0);
    // The work is done: the caller gets its receipt rather than an error inviting a retry.
    let receipt = send_message(&turn, &sent, "ada").await.unwrap();
    assert_eq!(receipt, Receipt { id: 1 });
    assert_eq!(turn.stats().executed, 1, "the outcome says the tool ran");
    // Meanwhile, a retry in this process gets the same result without running the tool.
    let joined = send_message(&turn, &sent, "ada").await.unwrap();
    assert_eq!(joined, Receipt { id: 1 });
    // The completion is retried in the background, holding the key, until it lands.
    tokio::time::timeout(Duration::from_secs(5), async {
        let (key, _) = digest(&SEND, &turn, "ada", "hello");
        while store
            .inner()
            .get("", &key)
            .await
            .unwrap()
            .is_none_or(|r| r.result.is_none())
        {
            tokio::time::sleep(Duration::from_millis(10)).await;
        }
    })
    .await
    .expect("the result was never recorded");
    assert_eq!(failures.load(Ordering::SeqCst), 0);
    let replayed = send_message(&turn, &sent, "ada").await.unwrap();
    assert_eq!(replayed, Receipt { id: 1 });
    assert_eq!(sent.load(Ordering::SeqCst), 1, "the tool ran again");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_thousand_concurrent_identical_calls_execute_once() {
    let store = memory();
    // The default budget: duplicates that join one execution are one attempt.
    let turn = turn("t", &store);
    let sent = Arc::new(AtomicUsize::new(0));
    let mut tasks = Vec::new();
    for _ in 0..1000 {
        let (turn, sent) = (turn.clone(), Arc::clone(&sent));
        tasks.push(tokio::spawn(async move {
            let (key, fp) = digest(&SEND, &turn, "ada", "hello");
            execute(Call::new(&SEND, &turn, key, fp), Codec::ok_only(), async {
                tokio::time::sleep(Duration::from_millis(300)).await;
                send(&sent).await
            })
            .await
        }));
    }
    for task in tasks {
        assert_eq!(task.await.unwrap().unwrap(), Receipt { id: 1 });
    }
    assert_eq!(sent.load(Ordering::SeqCst), 1);
    let stats = turn.stats();
    assert_eq!(stats.executed, 1);
    assert_eq!(stats.joined, 999, "{stats:?}");
    assert!(
        stats.joined > 0,
        "identical calls in one process must join the first: {stats:?}"
    );
}

/// A body that returns `Pending` once (`yield_now`): a second identical call polled while it
/// is pending must find it in flight and join it, not replay a result recorded in the same
/// poll that started it.
#[tokio::test]
async fn a_call_polled_while_the_first_yields_joins_it() {
    let store = memory();
    let turn = turn("t", &store);
    let sent = AtomicUsize::new(0);
    let call = || {
        let (key, fp) = digest(&SEND, &turn, "ada", "hello");
        execute(Call::new(&SEND, &turn, key, fp), Codec::ok_only(), async {
            tokio::task::yield_now().await;
            send(&sent).await
        })
    };
    let (first, second) = tokio::join!(call(), call());
    assert_eq!(first.unwrap(), Receipt { id: 1 });
    assert_eq!(second.unwrap(), Receipt { id: 1 });
    let stats = turn.stats();
    assert_eq!(
        (stats.executed, stats.joined, stats.replayed),
        (1, 1, 0),
        "{stats:?}"
    );
}

/// A pending body is polled again only once it is woken: the engine does not poll it twice in
/// a row when it starts watching its lease.
#[tokio::test]
async fn a_pending_body_is_not_polled_again_until_it_is_woken() {
    let store = memory();
    let turn = turn("t", &store);
    let polls = AtomicUsize::new(0);
    let (tx, mut rx) = tokio::sync::oneshot::channel::<()>();
    let (key, fp) = digest(&SEND, &turn, "ada", "hello");
    let body = std::future::poll_fn(|cx| {
        polls.fetch_add(1, Ordering::SeqCst);
        match std::future::Future::poll(std::pin::Pin::new(&mut rx), cx) {
            std::task::Poll::Ready(_) => std::task::Poll::Ready(Ok::<_, Error>(Receipt { id: 1 })),
            std::task::Poll::Pending => std::task::Poll::Pending,
        }
    });
    let mut call = std::pin::pin!(execute(
        Call::new(&SEND, &turn, key, fp),
        Codec::ok_only(),
        body
    ));
    let first = std::future::poll_fn(|cx| {
        std::task::Poll::Ready(std::future::Future::poll(call.as_mut(), cx))
    })
    .await;
    assert!(first.is_pending());
    assert_eq!(
        polls.load(Ordering::SeqCst),
        1,
        "polled twice before any wake-up"
    );
    tx.send(()).unwrap();
    assert_eq!(call.await.unwrap(), Receipt { id: 1 });
    assert_eq!(polls.load(Ordering::SeqCst), 2);
}

#[tokio::test]
async fn an_err_releases_the_key_and_the_retry_runs_again() {
    let store = memory();
    let turn = turn("t", &store);
    let runs = AtomicUsize::new(0);
    let call = || {
        let (key, fp) = digest(&SEND, &turn, "ada", "hello");
        execute(Call::new(&SEND, &turn, key, fp), Codec::ok_only(), async {
            let n = runs.fetch_add(1, Ordering::SeqCst);
            if n == 0 {
                Err(Error::Config("upstream 503".into()))
            } else {
                Ok(n)
            }
        })
    };
    assert!(matches!(call().await, Err(Error::Config(_))));
    assert_eq!(call().await.unwrap(), 1);
    assert_eq!(call().await.unwrap(), 1, "the success is replayed");
    assert_eq!(runs.load(Ordering::SeqCst), 2);
    assert_eq!(turn.stats().failed, 1);
}

#[derive(Debug, PartialEq, Serialize, Deserialize)]
enum TicketError {
    Rejected(String),
    Idem(String),
}

impl From<Error> for TicketError {
    fn from(e: Error) -> Self {
        TicketError::Idem(e.to_string())
    }
}

#[tokio::test]
async fn with_cache_errors_an_err_is_replayed() {
    let store = memory();
    let turn = turn("t", &store);
    let runs = AtomicUsize::new(0);
    let call = || {
        let (key, fp) = digest(&CACHING, &turn, "ada", "hello");
        execute(
            Call::new(&CACHING, &turn, key, fp),
            Codec::ok_and_err(),
            async {
                runs.fetch_add(1, Ordering::SeqCst);
                Err::<u32, _>(TicketError::Rejected("card declined".into()))
            },
        )
    };
    assert_eq!(
        call().await,
        Err(TicketError::Rejected("card declined".into()))
    );
    assert_eq!(
        call().await,
        Err(TicketError::Rejected("card declined".into()))
    );
    assert_eq!(runs.load(Ordering::SeqCst), 1);
    assert_eq!(turn.stats().replayed, 1);
}

#[tokio::test]
async fn a_call_cancelled_mid_run_is_kept_as_interrupted_not_run_again() {
    let store = memory();
    let turn = turn("t", &store);
    let runs = AtomicUsize::new(0);
    let call = |hang: bool| {
        let (key, fp) = digest(&SEND, &turn, "ada", "hello");
        let runs = &runs;
        execute(
            Call::new(&SEND, &turn, key, fp),
            Codec::ok_only(),
            async move {
                runs.fetch_add(1, Ordering::SeqCst);
                if hang {
                    std::future::pending::<()>().await;
                }
                Ok::<_, Error>("sent".to_owned())
            },
        )
    };
    let cancelled = tokio::time::timeout(Duration::from_millis(20), call(true)).await;
    assert!(cancelled.is_err());
    let retry = call(false).await;
    assert!(
        matches!(
            retry,
            Err(Error::Interrupted {
                tool: "send_message",
                ..
            })
        ),
        "{retry:?}"
    );
    assert_eq!(
        runs.load(Ordering::SeqCst),
        1,
        "the retry ran a maybe-done action again"
    );
    assert_eq!(turn.stats().interrupted, 1);
}

#[tokio::test]
async fn with_release_on_cancel_a_call_cancelled_mid_run_releases_the_key() {
    const RELEASING: ToolInfo = ToolInfo::idempotent("send_message").with_release_on_cancel();
    let store = memory();
    let turn = turn("t", &store);
    let runs = AtomicUsize::new(0);
    let call = |hang: bool| {
        let (key, fp) = digest(&RELEASING, &turn, "ada", "hello");
        let runs = &runs;
        execute(
            Call::new(&RELEASING, &turn, key, fp),
            Codec::ok_only(),
            async move {
                runs.fetch_add(1, Ordering::SeqCst);
                if hang {
                    std::future::pending::<()>().await;
                }
                Ok::<_, Error>("sent".to_owned())
            },
        )
    };
    let cancelled = tokio::time::timeout(Duration::from_millis(20), call(true)).await;
    assert!(cancelled.is_err());
    assert_eq!(call(false).await.unwrap(), "sent");
    assert_eq!(
        runs.load(Ordering::SeqCst),
        2,
        "the retry must run after a release"
    );
    assert_eq!(turn.stats().cancelled, 1);
}

/// A call of `send_message` whose body counts its runs in `runs` (its side effect), then does
/// `rest`, and answers "sent".
fn counted_send<F>(
    turn: &Turn,
    runs: &Arc<AtomicUsize>,
    rest: F,
) -> impl Future<Output = Result<String, Error>> + Send + 'static
where
    F: Future<Output = ()> + Send + 'static,
{
    let (turn, runs) = (turn.clone(), Arc::clone(runs));
    async move {
        let (key, fp) = digest(&SEND, &turn, "ada", "hello");
        execute(
            Call::new(&SEND, &turn, key, fp),
            Codec::ok_only(),
            async move {
                runs.fetch_add(1, Ordering::SeqCst);
                rest.await;
                Ok::<_, Error>("sent".to_owned())
            },
        )
        .await
    }
}

#[tokio::test]
async fn a_panicking_tool_releases_the_key_and_the_panic_propagates() {
    let store = memory();
    let turn = turn("t", &store);
    let runs = Arc::new(AtomicUsize::new(0));
    let call = |panic: bool| {
        counted_send(&turn, &runs, async move {
            assert!(!panic, "tool blew up");
        })
    };
    let panicked = tokio::spawn(call(true)).await.unwrap_err();
    assert!(panicked.is_panic());
    let message = panicked.into_panic();
    assert_eq!(message.downcast_ref::<&str>(), Some(&"tool blew up"));
    assert_eq!(call(false).await.unwrap(), "sent");
    assert_eq!(runs.load(Ordering::SeqCst), 2);
    assert_eq!(turn.stats().panicked, 1);
}

/// A call dropped while it waits by a panic of its caller's (here a sibling in a `join!`) is
/// `cancelled`, once — the tool did not panic — and the call it waited on goes on and executes.
#[tokio::test]
async fn a_call_dropped_by_a_panic_of_its_callers_while_it_waits_is_cancelled() {
    let store = memory();
    let turn = turn("t", &store);
    let (key, fp) = digest(&SEND, &turn, "ada", "hello");
    let running = Arc::new(tokio::sync::Notify::new());
    let (finish, finished) = tokio::sync::oneshot::channel::<()>();
    let leader = tokio::spawn(execute(
        Call::new(&SEND, &turn, key, fp),
        Codec::ok_only(),
        {
            let running = Arc::clone(&running);
            async move {
                running.notify_one();
                let _ = finished.await;
                Ok::<_, Error>("sent".to_owned())
            }
        },
    ));
    running.notified().await;
    let follower = tokio::spawn({
        let turn = turn.clone();
        async move {
            let call = execute(Call::new(&SEND, &turn, key, fp), Codec::ok_only(), async {
                Ok::<_, Error>("sent again".to_owned())
            });
            let sibling = async {
                tokio::task::yield_now().await;
                panic!("the caller blew up");
            };
            let _: (Result<String, Error>, ()) = tokio::join!(call, sibling);
        }
    });
    assert!(follower.await.unwrap_err().is_panic());
    let stats = turn.stats();
    assert_eq!((stats.cancelled, stats.panicked), (1, 0));
    finish.send(()).unwrap();
    assert_eq!(leader.await.unwrap().unwrap(), "sent");
    let stats = turn.stats();
    assert_eq!((stats.executed, stats.cancelled, stats.panicked), (1, 1, 0));
}

/// A tool whose body runs when a panic elsewhere in its caller's task (parallel tool calls in a
/// `join!`, one of them buggy) drops it is interrupted, not given back: it may have done its
/// work, so a retry is told the outcome is unknown and does not run it again. (Its own panic
/// gives the key back: `a_panicking_tool_releases_the_key_and_the_panic_propagates`.)
#[tokio::test]
async fn a_panic_beside_a_running_tool_interrupts_it_and_a_retry_does_not_run_it_again() {
    let store = memory();
    let turn = turn("t", &store);
    let runs = Arc::new(AtomicUsize::new(0));
    let send = || counted_send(&turn, &runs, tokio::time::sleep(Duration::from_millis(50)));
    let buggy = async {
        tokio::time::sleep(Duration::from_millis(10)).await;
        panic!("a bug in another tool");
    };
    let task = tokio::spawn({
        let send = send();
        async move {
            let _: (Result<String, Error>, ()) = tokio::join!(send, buggy);
        }
    });
    assert!(task.await.unwrap_err().is_panic());
    let retry = send().await;
    assert!(matches!(retry, Err(Error::Interrupted { .. })), "{retry:?}");
    assert_eq!(runs.load(Ordering::SeqCst), 1, "the body ran once");
    let stats = turn.stats();
    assert_eq!((stats.interrupted, stats.panicked), (1, 0));
}

#[tokio::test]
async fn a_completed_record_expires_after_its_ttl() {
    let clock = ManualClock::new(1_000_000);
    let store: Arc<dyn Store> = Arc::new(MemoryStore::with_clock(Arc::new(clock.clone())));
    let turn = turn("t", &store);
    let sent = AtomicUsize::new(0);
    send_message(&turn, &sent, "ada").await.unwrap();
    clock.advance(Duration::from_secs(23 * 3600));
    send_message(&turn, &sent, "ada").await.unwrap();
    assert_eq!(
        sent.load(Ordering::SeqCst),
        1,
        "replayed within the default day"
    );
    clock.advance(Duration::from_secs(3600));
    send_message(&turn, &sent, "ada").await.unwrap();
    assert_eq!(
        sent.load(Ordering::SeqCst),
        2,
        "runs again once the day is over"
    );
}

#[tokio::test]
async fn a_tool_ttl_overrides_the_default() {
    const SHORT: ToolInfo = ToolInfo::idempotent("send_message").with_ttl(Duration::from_secs(60));
    let clock = ManualClock::new(1_000_000);
    let store: Arc<dyn Store> = Arc::new(MemoryStore::with_clock(Arc::new(clock.clone())));
    let turn = turn("t", &store);
    let runs = AtomicUsize::new(0);
    let call = || {
        let (key, fp) = digest(&SHORT, &turn, "ada", "hello");
        execute(Call::new(&SHORT, &turn, key, fp), Codec::ok_only(), async {
            Ok::<_, Error>(runs.fetch_add(1, Ordering::SeqCst))
        })
    };
    call().await.unwrap();
    clock.advance(Duration::from_secs(59));
    call().await.unwrap();
    assert_eq!(runs.load(Ordering::SeqCst), 1);
    clock.advance(Duration::from_secs(1));
    call().await.unwrap();
    assert_eq!(runs.load(Ordering::SeqCst), 2);
}

#[tokio::test]
async fn a_ttl_of_duration_max_is_kept_a_century_even_when_recorded_in_the_background() {
    // `Duration::MAX` overflowed `Instant::now() + ttl` where a result the store could not
    // take yet is recorded in the background: the caller panicked and the result was lost.
    const FOREVER: ToolInfo = ToolInfo::idempotent("send_message").with_ttl(Duration::MAX);
    let first_fails = AtomicUsize::new(0);
    let store = faulty(move |op| match op {
        Op::Complete if first_fails.fetch_add(1, Ordering::SeqCst) == 0 => Fault::FailBefore,
        _ => Fault::None,
    });
    let dyn_store: Arc<dyn Store> = store.clone();
    let turn = turn("t", &dyn_store);
    let runs = AtomicUsize::new(0);
    let call = || {
        let (key, fp) = digest(&FOREVER, &turn, "ada", "hello");
        execute(
            Call::new(&FOREVER, &turn, key, fp),
            Codec::ok_only(),
            async { Ok::<_, Error>(runs.fetch_add(1, Ordering::SeqCst) + 7) },
        )
    };
    assert_eq!(call().await.unwrap(), 7);
    let (key, _) = digest(&FOREVER, &turn, "ada", "hello");
    let record = tokio::time::timeout(Duration::from_secs(5), async {
        loop {
            match store.inner().get("", &key).await.unwrap() {
                Some(record) if record.result.is_some() => break record,
                _ => tokio::time::sleep(Duration::from_millis(10)).await,
            }
        }
    })
    .await
    .expect("the result was never recorded");
    // Kept for `MAX_DURATION` from when it was recorded (after the claim).
    let kept = record.expires_at_ms - record.created_at_ms;
    let century = u64::try_from(idem_tools_runtime::store::MAX_DURATION.as_millis()).unwrap();
    assert!((century..century + 60_000).contains(&kept), "{kept} ms");
    assert_eq!(call().await.unwrap(), 7, "replayed");
    assert_eq!(runs.load(Ordering::SeqCst), 1);
}

#[tokio::test]
async fn a_crashed_holder_blocks_the_key_until_its_lease_expires() {
    let clock = ManualClock::new(1_000_000);
    let store: Arc<dyn Store> = Arc::new(MemoryStore::with_clock(Arc::new(clock.clone())));
    let turn = turn("t", &store).with_in_flight_wait(Duration::from_millis(30));
    let (key, fp) = digest(&SEND, &turn, "ada", "hello");
    // Another process claimed the key and died without completing or releasing it.
    claim_elsewhere(&store, &key, &fp).await;

    let sent = AtomicUsize::new(0);
    let blocked = send_message(&turn, &sent, "ada").await;
    assert!(
        matches!(blocked, Err(Error::InFlight { .. })),
        "{blocked:?}"
    );
    assert_eq!(sent.load(Ordering::SeqCst), 0);

    clock.advance(Duration::from_secs(30));
    send_message(&turn, &sent, "ada").await.unwrap();
    assert_eq!(
        sent.load(Ordering::SeqCst),
        1,
        "the key is claimable after the lease"
    );
}

#[tokio::test]
async fn a_call_waits_for_the_same_key_running_in_another_process() {
    let store = memory();
    let turn = turn("t", &store);
    let (key, fp) = digest(&SEND, &turn, "ada", "hello");
    let token = claim_elsewhere(&store, &key, &fp).await;
    let other = Arc::clone(&store);
    let other_process = tokio::spawn(async move {
        tokio::time::sleep(Duration::from_millis(40)).await;
        let mut bytes = Vec::new();
        idem_tools_runtime::replay::bench::encode(&Receipt { id: 41 }, &mut bytes).unwrap();
        other
            .complete(&token, &bytes, Duration::from_secs(60))
            .await
            .unwrap();
    });
    let sent = AtomicUsize::new(0);
    let receipt = send_message(&turn, &sent, "ada").await.unwrap();
    assert_eq!(receipt, Receipt { id: 41 });
    assert_eq!(sent.load(Ordering::SeqCst), 0);
    other_process.await.unwrap();
}

#[tokio::test]
async fn a_long_tool_keeps_its_lease() {
    const SLOW: ToolInfo = ToolInfo::idempotent("export").with_lease(Duration::from_millis(300));
    let store = memory();
    let turn = turn("t", &store);
    let (key, fp) = digest(&SLOW, &turn, "ada", "hello");
    let running = execute(Call::new(&SLOW, &turn, key, fp), Codec::ok_only(), async {
        tokio::time::sleep(Duration::from_millis(1200)).await;
        Ok::<_, Error>(())
    });
    let prober = async {
        // Meanwhile another process keeps trying to claim the key.
        for _ in 0..10 {
            tokio::time::sleep(Duration::from_millis(100)).await;
            let begin = store
                .begin(request(&key, &fp, Duration::from_millis(90)))
                .await
                .unwrap();
            assert!(
                matches!(begin, Begin::InFlight { .. }),
                "lease lapsed while the tool ran: {begin:?}"
            );
        }
    };
    let (result, ()) = tokio::join!(running, prober);
    result.unwrap();
}

#[tokio::test]
async fn the_budget_stops_the_fourth_attempt_and_a_new_turn_starts_fresh() {
    let store = memory();
    let turn1 = turn("t1", &store);
    let runs = AtomicUsize::new(0);
    let call = |turn: &Turn| {
        let (key, fp) = digest(&SEND, turn, "ada", "hello");
        let (turn, runs) = (turn.clone(), &runs);
        async move {
            execute(Call::new(&SEND, &turn, key, fp), Codec::ok_only(), async {
                runs.fetch_add(1, Ordering::SeqCst);
                Err::<(), _>(Error::Config("timeout".into()))
            })
            .await
        }
    };
    for _ in 0..3 {
        assert!(matches!(call(&turn1).await, Err(Error::Config(_))));
    }
    let stuck = call(&turn1).await;
    match stuck {
        Err(Error::BudgetExhausted {
            tool,
            attempts,
            limit,
            ..
        }) => {
            assert_eq!((tool, attempts, limit), ("send_message", 3, 3));
        }
        other => panic!("expected BudgetExhausted, got {other:?}"),
    }
    assert_eq!(
        runs.load(Ordering::SeqCst),
        3,
        "the exhausted attempt must not run"
    );
    let (key, _) = digest(&SEND, &turn1, "ada", "hello");
    assert_eq!(
        store.get("", &key).await.unwrap(),
        None,
        "the exhausted attempt must not touch the store (a claim would be left behind)"
    );
    assert_eq!(turn1.stats().budget_exhausted, 1);
    let turn2 = turn("t2", &store);
    assert!(matches!(call(&turn2).await, Err(Error::Config(_))));
    assert_eq!(runs.load(Ordering::SeqCst), 4);
}

#[tokio::test]
async fn past_the_budget_a_succeeded_action_still_replays() {
    let store = memory();
    let turn = turn("t", &store).with_max_attempts_per_key(1);
    let sent = AtomicUsize::new(0);
    let first = send_message(&turn, &sent, "ada").await.unwrap();
    for _ in 0..5 {
        assert_eq!(send_message(&turn, &sent, "ada").await.unwrap(), first);
    }
    assert_eq!(sent.load(Ordering::SeqCst), 1);
    let stats = turn.stats();
    assert_eq!((stats.executed, stats.replayed), (1, 5));
}

#[tokio::test]
async fn the_turn_cap_limits_all_state_changing_calls() {
    let store = memory();
    let turn = turn("t", &store).with_max_calls(2);
    let sent = AtomicUsize::new(0);
    send_message(&turn, &sent, "a").await.unwrap();
    send_message(&turn, &sent, "b").await.unwrap();
    let third = send_message(&turn, &sent, "c").await;
    assert!(
        matches!(
            third,
            Err(Error::TurnBudgetExhausted {
                calls: 2,
                limit: 2,
                ..
            })
        ),
        "{third:?}"
    );
    assert_eq!(sent.load(Ordering::SeqCst), 2);
}

#[tokio::test]
async fn a_key_reused_with_other_arguments_is_a_payload_mismatch() {
    let store = memory();
    let turn = turn("t", &store);
    let call = |body: &'static str| {
        let mut args = ArgsDigest::new(SEND.name);
        args.caller_key("order-1234");
        args.arg("body", body).unwrap();
        let (key, fp) = args.finish(turn.namespace(), turn.id(), SEND.name, SEND.version);
        execute(
            Call::new(&SEND, &turn, key, fp),
            Codec::ok_only(),
            async move { Ok::<_, Error>(body.to_owned()) },
        )
    };
    assert_eq!(call("first").await.unwrap(), "first");
    let reused = call("second").await;
    assert!(
        matches!(
            reused,
            Err(Error::PayloadMismatch {
                tool: "send_message",
                ..
            })
        ),
        "{reused:?}"
    );
    assert_eq!(turn.stats().payload_mismatch, 1);
}

/// A model that loops on a refused call — rewording an argument the key leaves out, as a run
/// restarted from the top does once it lost the earlier value — is told to stop from the second
/// refusal of the key on, in every run of the turn in this process (a new `Turn` value each
/// time, as an MCP server makes one per call); each key counts its own, and another turn's
/// key is another key. (Found by a trial adoption: a rewording loop was refused forever and
/// never told to stop, 656,000 calls in 30 s.)
#[tokio::test]
async fn a_key_refused_again_is_told_to_stop() {
    let store = memory();
    let run = |order: &'static str, body: &'static str, turn: &Turn| {
        let mut args = ArgsDigest::new(SEND.name);
        args.caller_key(order);
        args.arg("body", body).unwrap();
        let (key, fp) = args.finish(turn.namespace(), turn.id(), SEND.name, SEND.version);
        execute(
            Call::new(&SEND, turn, key, fp),
            Codec::ok_only(),
            async move { Ok::<_, Error>(body.to_owned()) },
        )
    };
    let refused = |answer: Result<String, Error>| match answer {
        Err(error @ Error::PayloadMismatch { refused, .. }) => (refused, error.model_text()),
        other => panic!("{other:?}"),
    };
    let first_run = turn("t", &store);
    run("order-1", "first", &first_run).await.unwrap();
    run("order-2", "first", &first_run).await.unwrap();
    let (once, text) = refused(run("order-1", "reworded", &first_run).await);
    assert_eq!(once, 1);
    assert!(!text.contains("stop repeating"), "{text}");
    for n in 2..=4 {
        let (count, text) = refused(run("order-1", "reworded again", &first_run).await);
        assert_eq!(count, n);
        assert!(text.contains("stop repeating it"), "{text}");
    }
    let (other_key, _) = refused(run("order-2", "reworded", &first_run).await);
    assert_eq!(other_key, 1, "each key counts its own");
    let restarted = turn("t", &store);
    let (again, _) = refused(run("order-1", "reworded", &restarted).await);
    assert_eq!(again, 5, "a new run of the turn goes on counting");
    assert_eq!(run("order-1", "first", &restarted).await.unwrap(), "first");
    let next_turn = turn("t2", &store);
    // A caller's key spans turns: the same arguments replay in the next.
    assert_eq!(run("order-1", "first", &next_turn).await.unwrap(), "first");
    let other = turn("t3", &store).with_namespace("other");
    run("order-1", "first", &other).await.unwrap();
    let (anew, _) = refused(run("order-1", "reworded", &other).await);
    assert_eq!(anew, 1, "another namespace's key counts its own");
}

#[tokio::test]
async fn a_corrupt_record_is_a_decode_error_not_a_panic() {
    let store = memory();
    let turn = turn("t", &store);
    let (key, fp) = digest(&SEND, &turn, "ada", "hello");
    let token = claim_elsewhere(&store, &key, &fp).await;
    store
        .complete(&token, b"\xff{not json", Duration::from_secs(60))
        .await
        .unwrap();
    let sent = AtomicUsize::new(0);
    let replay = send_message(&turn, &sent, "ada").await;
    match replay {
        Err(Error::Decode {
            tool, key: short, ..
        }) => {
            assert_eq!(tool, "send_message");
            assert_eq!(short, key.short());
        }
        other => panic!("expected Decode, got {other:?}"),
    }
    assert_eq!(
        sent.load(Ordering::SeqCst),
        0,
        "a corrupt record must not re-run the tool"
    );
}

#[tokio::test]
async fn a_changed_result_type_is_a_decode_error() {
    let store = memory();
    let turn = turn("t", &store);
    let (key, fp) = digest(&SEND, &turn, "ada", "hello");
    execute(Call::new(&SEND, &turn, key, fp), Codec::ok_only(), async {
        Ok::<_, Error>("text".to_owned())
    })
    .await
    .unwrap();
    let replay = execute(Call::new(&SEND, &turn, key, fp), Codec::ok_only(), async {
        Ok::<_, Error>(Receipt { id: 1 })
    })
    .await;
    assert!(matches!(replay, Err(Error::Decode { .. })), "{replay:?}");
    assert_eq!(turn.stats().decode_error, 1);
}

#[tokio::test]
async fn the_running_tool_can_read_its_key() {
    let store = memory();
    let turn = turn("t", &store);
    let (key, fp) = digest(&SEND, &turn, "ada", "hello");
    assert_eq!(current_key(), None);
    let seen = execute(Call::new(&SEND, &turn, key, fp), Codec::ok_only(), async {
        Ok::<_, Error>(current_key().map(|k| k.to_hex()))
    })
    .await
    .unwrap();
    assert_eq!(seen, Some(key.to_hex()));
}

#[test]
fn the_engine_future_is_send_so_tools_can_be_spawned() {
    fn assert_send<T: Send>(_: &T) {}
    let turn = Turn::new("t");
    let (key, fp) = digest(&SEND, &turn, "ada", "hello");
    let call = execute(Call::new(&SEND, &turn, key, fp), Codec::ok_only(), async {
        Ok::<_, Error>(1u8)
    });
    assert_send(&call);
}

#[tokio::test]
async fn a_tool_calling_itself_with_its_own_key_fails_instead_of_deadlocking() {
    let store = memory();
    let turn = turn("t", &store);
    let (key, fp) = digest(&SEND, &turn, "ada", "hello");
    let outer = execute(Call::new(&SEND, &turn, key, fp), Codec::ok_only(), async {
        let inner = execute(Call::new(&SEND, &turn, key, fp), Codec::ok_only(), async {
            Ok::<_, Error>(1u8)
        })
        .await;
        assert!(
            matches!(
                inner,
                Err(Error::Reentrant {
                    tool: "send_message",
                    ..
                })
            ),
            "{inner:?}"
        );
        Ok::<_, Error>(2u8)
    });
    let outer = tokio::time::timeout(Duration::from_secs(5), outer).await;
    assert_eq!(outer.expect("deadlocked").unwrap(), 2);
}

/// A call dropped outside any Tokio runtime (after its runtime shut down) gives up its
/// clean-up — the lease's end frees the key — without panicking, and without aborting the
/// process when it is dropped while another panic unwinds.
#[test]
fn a_call_dropped_outside_a_runtime_neither_panics_nor_aborts() {
    for during_a_panic in [false, true] {
        let runtime = tokio::runtime::Builder::new_current_thread()
            .enable_time()
            .build()
            .unwrap();
        let store = memory();
        let turn = turn("t", &store);
        let (key, fp) = digest(&SEND, &turn, "ada", "outside a runtime");
        let mut call = Box::pin(execute(
            Call::new(&SEND, &turn, key, fp),
            Codec::ok_only(),
            async {
                tokio::time::sleep(Duration::from_secs(3600)).await;
                Ok::<_, Error>(1u8)
            },
        ));
        runtime.block_on(async {
            // The body runs, then the caller stops waiting (the call is kept, not dropped).
            let waited = tokio::time::timeout(Duration::from_millis(10), &mut call).await;
            assert!(waited.is_err());
        });
        drop(runtime);
        if during_a_panic {
            let unwound = std::panic::catch_unwind(std::panic::AssertUnwindSafe(move || {
                let _call = call;
                panic!("another panic");
            }));
            assert!(unwound.is_err());
        } else {
            drop(call);
        }
    }
}

#[tokio::test]
async fn a_turn_id_or_namespace_longer_than_a_store_keeps_is_refused_on_every_store() {
    use idem_tools_runtime::turn::{MAX_NAMESPACE_LEN, MAX_TURN_ID_LEN};
    // PostgreSQL indexes both (a longer one failed every call there with an index error); the
    // limit is the same on every store, so that stores stay interchangeable.
    let store = memory();
    let sent = AtomicUsize::new(0);
    let longest = turn(&"é".repeat(MAX_TURN_ID_LEN / 2), &store)
        .with_namespace("n".repeat(MAX_NAMESPACE_LEN));
    assert!(send_message(&longest, &sent, "ada").await.is_ok());
    let long_id = turn(&"x".repeat(MAX_TURN_ID_LEN + 1), &store);
    let long_namespace = turn("t", &store).with_namespace("é".repeat(MAX_NAMESPACE_LEN / 2 + 1));
    for (what, turn) in [("id", &long_id), ("namespace", &long_namespace)] {
        let Err(Error::Config(message)) = send_message(turn, &sent, "ada").await else {
            panic!("a turn {what} too long must be refused");
        };
        assert!(message.contains(what), "{message}");
    }
    assert_eq!(
        sent.load(Ordering::SeqCst),
        1,
        "nothing ran for the refused calls"
    );
}

#[tokio::test]
async fn an_in_flight_wait_of_duration_max_waits_the_longest_and_does_not_panic() {
    use idem_tools_runtime::turn::MAX_IN_FLIGHT_WAIT;
    // `Duration::MAX` is the natural way to say "wait as long as it takes": it overflowed the
    // deadline (`Instant + Duration`) and panicked.
    let turn = turn("forever", &memory()).with_in_flight_wait(Duration::MAX);
    assert_eq!(turn.in_flight_wait(), MAX_IN_FLIGHT_WAIT);
    let sent = AtomicUsize::new(0);
    assert!(send_message(&turn, &sent, "ada").await.is_ok());
    assert!(send_message(&turn, &sent, "ada").await.is_ok());
    assert_eq!(sent.load(Ordering::SeqCst), 1);
}

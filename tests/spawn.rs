//! `idem_tools::spawn`: work a tool hands to a task of its own keeps the turn and the chain of
//! held keys, so a tool reaching itself from there fails at once instead of waiting for itself.

use std::time::{Duration, Instant};

use idem_tools::key::Fingerprint;
use idem_tools::{Call, Codec, Error, ToolInfo, Turn, current_key, execute, idempotent};

/// The call `ship` makes of itself, as its own key (a recursive `async fn` cannot be `Send`).
static SHIP_AGAIN: ToolInfo = ToolInfo::idempotent("ship");

#[idempotent]
async fn ship(order: u32) -> Result<String, Error> {
    let key = current_key();
    // The same call, from a task of its own: the same key, held by the task that spawned it.
    let inner = idem_tools::spawn(async move {
        let seen = (Turn::current().map(|t| t.id().to_owned()), current_key());
        let turn = Turn::current().expect("the turn followed the task");
        let key = current_key().expect("the key followed the task");
        let again = Call::new(&SHIP_AGAIN, &turn, key, Fingerprint::from_bytes([0; 32]));
        let again = execute(again, Codec::ok_only(), async move {
            Ok::<_, Error>(format!("inner {order}"))
        })
        .await;
        (seen, again)
    })
    .await
    .expect("the task ran");
    let ((turn, held), again) = inner;
    assert_eq!(
        turn.as_deref(),
        Some("spawned"),
        "the turn follows the task"
    );
    assert_eq!(held, key, "the held key follows the task");
    match again {
        Err(Error::Reentrant { .. }) => Ok(format!("shipped {order}")),
        other => panic!("the same key from a spawned task must be re-entrant: {other:?}"),
    }
}

#[tokio::test]
async fn a_tool_reaching_itself_from_a_spawned_task_fails_at_once() {
    let started = Instant::now();
    let shipped = Turn::new("spawned").scope(ship(7)).await.unwrap();
    assert_eq!(shipped, "shipped 7");
    assert!(
        started.elapsed() < Duration::from_secs(5),
        "it waited for itself: {:?}",
        started.elapsed()
    );
}

#[tokio::test]
async fn outside_a_tool_spawn_carries_the_turn() {
    let turn = Turn::new("outer")
        .scope(async {
            idem_tools::spawn(async { Turn::current().map(|t| t.id().to_owned()) }).await
        })
        .await
        .unwrap();
    assert_eq!(turn.as_deref(), Some("outer"));
    let none = idem_tools::spawn(async { (Turn::current().is_none(), current_key()) })
        .await
        .unwrap();
    assert_eq!(none, (true, None));
}

static NOTIFY_RUNS: std::sync::atomic::AtomicUsize = std::sync::atomic::AtomicUsize::new(0);
static FOLLOW_UP: std::sync::Mutex<Option<tokio::task::JoinHandle<Result<u32, Error>>>> =
    std::sync::Mutex::new(None);

/// Hands a follow-up to a task of its own that outlives the call: once the call is over, the
/// task calls the tool again with the same arguments.
#[idempotent]
async fn notify(to: String) -> Result<u32, Error> {
    NOTIFY_RUNS.fetch_add(1, std::sync::atomic::Ordering::SeqCst);
    let again = to.clone();
    let follow_up = idem_tools::spawn(async move {
        tokio::time::sleep(Duration::from_millis(100)).await;
        call_notify(again).await
    });
    *FOLLOW_UP.lock().unwrap() = Some(follow_up);
    Ok(7)
}

/// `notify`, boxed: a tool reaching itself needs its future's type named.
fn call_notify(
    to: String,
) -> std::pin::Pin<Box<dyn std::future::Future<Output = Result<u32, Error>> + Send>> {
    Box::pin(notify(to))
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_spawned_task_that_outlives_its_tool_no_longer_holds_its_key() {
    let turn = Turn::new("outlived");
    assert_eq!(turn.scope(notify("ada".into())).await.unwrap(), 7);
    let follow_up = FOLLOW_UP
        .lock()
        .unwrap()
        .take()
        .expect("the tool spawned its follow-up");
    // The tool is over and its result recorded: the task's call replays it, as any retry would,
    // instead of being told the tool is calling itself.
    assert_eq!(follow_up.await.unwrap().unwrap(), 7);
    assert_eq!(NOTIFY_RUNS.load(std::sync::atomic::Ordering::SeqCst), 1);
}

/// A task started with `tokio::spawn` does not inherit the turn: the error says to use
/// `idem_tools::spawn`.
#[tokio::test]
async fn a_tool_called_from_a_plain_tokio_task_is_told_to_use_idem_spawn() {
    let error = Turn::new("plain-spawn")
        .scope(async { tokio::spawn(call_notify("ada".into())).await.unwrap() })
        .await
        .unwrap_err();
    assert!(matches!(error, Error::NoTurn { .. }), "{error:?}");
    assert!(error.to_string().contains("idem_tools::spawn"), "{error}");
}

static LATER_KEY: std::sync::Mutex<Option<tokio::task::JoinHandle<Option<idem_tools::Key>>>> =
    std::sync::Mutex::new(None);

/// Hands a task of its own a request to send once the tool is over (a follow-up notice): the
/// task reads the key an `Idempotency-Key` header would carry when it sends it.
#[idempotent]
async fn charge_then_notify(cents: u64) -> Result<u64, Error> {
    let later = idem_tools::spawn(async move {
        tokio::time::sleep(Duration::from_millis(100)).await;
        current_key()
    });
    *LATER_KEY.lock().unwrap() = Some(later);
    Ok(cents)
}

/// `current_key()` is "the key of the `#[idempotent]` tool running in this task": a task the
/// tool spawned that outlives it runs no tool, and a request it sends then is another request
/// than the tool's. Handed the finished tool's key, the `IdempotencyKey` middleware sends it
/// as that request's `Idempotency-Key`, and an API that deduplicates by the key answers the
/// new request with the tool's response.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_spawned_task_that_outlives_its_tool_has_no_current_key() {
    let turn = Turn::new("outlived-key");
    assert_eq!(turn.scope(charge_then_notify(500)).await.unwrap(), 500);
    let later = LATER_KEY
        .lock()
        .unwrap()
        .take()
        .expect("the tool spawned its follow-up");
    assert_eq!(
        later.await.unwrap(),
        None,
        "the tool is over: no tool runs in the task"
    );
}

static NESTED_LATER: std::sync::Mutex<Option<tokio::task::JoinHandle<Option<idem_tools::Key>>>> =
    std::sync::Mutex::new(None);

/// Called by `place_order`: hands a task of its own a request to send once it is over.
#[idempotent]
async fn charge_in_order(cents: u64) -> Result<u64, Error> {
    let later = idem_tools::spawn(async move {
        tokio::time::sleep(Duration::from_millis(100)).await;
        current_key()
    });
    *NESTED_LATER.lock().unwrap() = Some(later);
    Ok(cents)
}

/// Calls `charge_in_order`, and is still running when the task that tool spawned sends its
/// request.
#[idempotent]
async fn place_order(cents: u64) -> Result<(u64, String, Option<String>), Error> {
    let own = current_key().expect("the outer tool has its key").to_hex();
    let charged = charge_in_order(cents).await?;
    let later = NESTED_LATER
        .lock()
        .unwrap()
        .take()
        .expect("the inner tool spawned its follow-up");
    let seen = later.await.expect("the task ran");
    Ok((charged, own, seen.map(|key| key.to_hex())))
}

/// The same, one tool deeper: a task the inner tool spawned that outlives it runs no tool
/// either, though the outer tool still runs. It must not report the outer tool's key: the
/// outer tool sends its own requests with it, and an API that deduplicates by the key alone
/// would answer the task's request with the outer tool's response (and a retry of the outer
/// tool replays the inner one, so the task's request is never sent again: the key closes no
/// window for it).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_task_that_outlives_a_nested_tool_has_no_current_key() {
    let turn = Turn::new("outlived-nested-key");
    let (charged, outer, seen) = turn.scope(place_order(500)).await.unwrap();
    assert_eq!(charged, 500);
    assert_eq!(
        seen, None,
        "the inner tool is over: no tool runs in the task it spawned (the outer tool's key is \
         {outer})"
    );
}

//! An `#[idempotent]` function whose arguments are all owned returns its call's future (one
//! future per tool instead of two nested ones: half the code to compile) and behaves as the
//! `async fn` it was written as: nothing runs until it is polled, the turn is the one in scope
//! then, every parameter lives until the body ends, and the future is `Send + 'static`.

use std::future::Future;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};

use idem_tools::{Error, MemoryStore, Turn, idempotent};

static SENT: AtomicUsize = AtomicUsize::new(0);

#[idempotent]
async fn send(to: String) -> Result<String, Error> {
    SENT.fetch_add(1, Ordering::SeqCst);
    Ok(format!("sent to {to}"))
}

fn is_send_static<F: Future + Send + 'static>(future: F) -> F {
    future
}

#[tokio::test]
async fn a_future_made_outside_the_turn_runs_in_the_turn_it_is_awaited_in() {
    let turn = Turn::new("owned-1").with_store(Arc::new(MemoryStore::new()));
    // Made with no turn in scope: nothing has run, and no turn was looked for yet.
    let first = is_send_static(send("ada".into()));
    let again = send("ada".into());
    assert_eq!(
        SENT.load(Ordering::SeqCst),
        0,
        "nothing runs before it is polled"
    );
    let (first, again) = turn.scope(async { (first.await, again.await) }).await;
    assert_eq!(first.ok().as_deref(), Some("sent to ada"));
    assert_eq!(
        again.ok().as_deref(),
        Some("sent to ada"),
        "the retry replays"
    );
    assert_eq!(SENT.load(Ordering::SeqCst), 1);
    // Outside any turn, awaited: refused, as an `async fn`'s would be.
    let outside = send("bob".into()).await;
    assert!(matches!(outside, Err(Error::NoTurn { .. })), "{outside:?}");
}

/// Set when dropped.
struct Guard(Arc<AtomicBool>);

impl Drop for Guard {
    fn drop(&mut self) {
        self.0.store(true, Ordering::SeqCst);
    }
}

/// `guard` is unused by the body, but skipped (in the fingerprint): the tool uses it.
#[idempotent(skip(guard, go))]
async fn hold(n: u32, guard: Guard, go: tokio::sync::oneshot::Receiver<()>) -> Result<u32, Error> {
    let _ = go.await;
    Ok(n)
}

#[tokio::test]
async fn a_parameter_the_body_does_not_use_lives_until_the_body_ends() {
    let turn = Turn::new("owned-2").with_store(Arc::new(MemoryStore::new()));
    let dropped = Arc::new(AtomicBool::new(false));
    let (tx, rx) = tokio::sync::oneshot::channel();
    let call = hold(7, Guard(Arc::clone(&dropped)), rx);
    assert!(!dropped.load(Ordering::SeqCst), "kept in the future");
    let task = tokio::spawn(turn.scope(call));
    tokio::task::yield_now().await;
    assert!(!dropped.load(Ordering::SeqCst), "kept while the body runs");
    tx.send(()).ok();
    let answer = task.await.ok().and_then(Result::ok);
    assert_eq!(answer, Some(7));
    assert!(
        dropped.load(Ordering::SeqCst),
        "dropped when the body ended"
    );
}

/// The shapes a detached function's parameters and body take, rewritten alike: `mut` and
/// pattern parameters, an ignored `_`, an early `return` and `?`, a function of an `impl`
/// block that names `Self`.
#[idempotent]
async fn shapes(mut n: u32, (a, b): (u32, u32), _: String) -> Result<u32, Error> {
    n += a;
    if n > 1000 {
        return Ok(0);
    }
    let parsed: u32 = "2"
        .parse()
        .map_err(|_| Error::Config("not a number".into()))?;
    Ok(n + b + parsed)
}

struct Ledger;

impl Ledger {
    fn base() -> u32 {
        100
    }

    #[idempotent]
    pub async fn post(amount: u32) -> Result<u32, Error> {
        Ok(Self::base() + amount)
    }
}

#[tokio::test]
async fn parameters_and_bodies_of_every_shape_run_as_written() {
    let turn = Turn::new("owned-3").with_store(Arc::new(MemoryStore::new()));
    let (shaped, early, posted) = turn
        .scope(async {
            (
                shapes(1, (2, 3), "x".into()).await,
                shapes(2000, (0, 0), "x".into()).await,
                Ledger::post(5).await,
            )
        })
        .await;
    assert_eq!(
        (shaped.ok(), early.ok(), posted.ok()),
        (Some(8), Some(0), Some(105))
    );
}

#[idempotent(name = "owned_future_shared_name")]
async fn first_of_the_name(x: u32) -> Result<u32, Error> {
    Ok(x)
}

#[idempotent(name = "owned_future_shared_name")]
async fn second_of_the_name(x: u32) -> Result<u32, Error> {
    Ok(x + 100)
}

#[tokio::test]
async fn a_future_dropped_unpolled_registers_nothing() {
    let turn = Turn::new("owned-4").with_store(Arc::new(MemoryStore::new()));
    // Made and dropped: like an `async fn`'s, it did nothing, so it does not take the name.
    drop(second_of_the_name(1));
    let first = turn.clone().scope(first_of_the_name(1)).await;
    assert_eq!(first.ok(), Some(1));
    let second = turn.scope(second_of_the_name(1)).await;
    assert!(
        matches!(second, Err(Error::DuplicateTool { .. })),
        "{second:?}"
    );
}

//! The options that shape how a tool runs: `ttl` syntax, `lease`, `attached` and
//! `release_on_cancel`, and which tools run detached.

use std::rc::Rc;
use std::sync::Arc;
use std::time::Duration;

use idem_tools::{Error, MemoryStore, Turn, idempotent};

/// `ttl` is parsed by humantime: `"1 hour"` (with a space) is the same as `"1h"`. Intended:
/// the value stays readable and is still checked at compile time.
#[idempotent(ttl = "1 hour", lease = "90s")]
async fn spaced_ttl(n: u32) -> Result<u32, Error> {
    Ok(n)
}

/// The bounds of `lease` are inclusive.
#[idempotent(lease = "10ms")]
async fn shortest_lease(n: u32) -> Result<u32, Error> {
    Ok(n)
}

#[idempotent(lease = "24h")]
async fn longest_lease(n: u32) -> Result<u32, Error> {
    Ok(n)
}

/// `attached`: the body runs in the caller's task, even though it could be detached.
#[idempotent(attached, release_on_cancel)]
async fn attached_with_rc(n: u32) -> Result<u32, Error> {
    // An `Rc` may live between `.await`s, not across one: bodies are `Send`.
    let n = {
        let shared = Rc::new(n);
        *shared
    };
    tokio::task::yield_now().await;
    Ok(n)
}

/// A borrowed parameter makes a tool attached by itself: no option needed.
#[idempotent]
async fn borrowing(name: &str) -> Result<usize, Error> {
    tokio::task::yield_now().await;
    Ok(name.len())
}

#[tokio::test]
async fn descriptors_carry_ttl_lease_and_release_on_cancel() {
    let spaced = spaced_ttl__needs_idempotent_or_read_only;
    assert_eq!(spaced.ttl, Some(Duration::from_secs(3600)));
    assert_eq!(spaced.lease, Some(Duration::from_secs(90)));
    assert!(!spaced.release_on_cancel);
    assert_eq!(
        shortest_lease__needs_idempotent_or_read_only.lease,
        Some(Duration::from_millis(10))
    );
    assert_eq!(
        longest_lease__needs_idempotent_or_read_only.lease,
        Some(Duration::from_secs(24 * 3600))
    );
    let (attached, borrows) = (
        attached_with_rc__needs_idempotent_or_read_only,
        borrowing__needs_idempotent_or_read_only,
    );
    assert!(attached.release_on_cancel);
    assert!(!borrows.release_on_cancel);
    Turn::new("options-1")
        .with_store(Arc::new(MemoryStore::new()))
        .scope(async {
            assert_eq!(spaced_ttl(1).await.unwrap(), 1);
            assert_eq!(shortest_lease(2).await.unwrap(), 2);
            assert_eq!(longest_lease(3).await.unwrap(), 3);
            assert_eq!(attached_with_rc(4).await.unwrap(), 4);
            assert_eq!(borrowing("abc").await.unwrap(), 3);
        })
        .await;
}

/// A tool started as a new action again and again in one turn (each call a new key, as a model
/// rewording its arguments) is stopped past the default cap, named from the facade.
#[idempotent]
async fn reworded(memo: String) -> Result<String, Error> {
    Ok(memo)
}

#[tokio::test]
async fn the_defaults_of_a_turn_are_named_from_the_facade() {
    use idem_tools::turn::{DEFAULT_ACTIONS_PER_TOOL, DEFAULT_ATTEMPTS_PER_KEY};
    let turn = Turn::new("defaults").with_store(Arc::new(MemoryStore::new()));
    let result = turn
        .scope(async {
            for n in 0..DEFAULT_ACTIONS_PER_TOOL {
                reworded(format!("memo {n}")).await?;
            }
            reworded("one more".to_owned()).await
        })
        .await;
    assert!(
        matches!(result, Err(Error::ToolBudgetExhausted { limit, .. }) if limit == DEFAULT_ACTIONS_PER_TOOL),
        "{result:?}"
    );
    assert_eq!(DEFAULT_ATTEMPTS_PER_KEY, 3);
    assert_eq!(idem_tools::turn::DEFAULT_MODEL_STEPS, 50);
    assert_eq!(
        idem_tools::conversation::DEFAULT_STEP_LEASE,
        Duration::from_secs(5)
    );
}

/// A TTL of two centuries compiles, and the record is kept `store::MAX_DURATION` (named from the
/// facade, as docs/options.md does).
#[idempotent(ttl = "200years")]
async fn kept_for_centuries(n: u32) -> Result<u32, Error> {
    Ok(n)
}

#[tokio::test]
async fn a_ttl_past_the_longest_is_kept_max_duration() {
    use idem_tools::store::{MAX_DURATION, Store as _};
    let store = Arc::new(MemoryStore::new());
    Turn::new("centuries")
        .with_store(store.clone())
        .scope(async { kept_for_centuries(1).await.unwrap() })
        .await;
    let records = store.list(None, 10).await.unwrap();
    let [record] = &records[..] else {
        panic!("one record: {records:?}")
    };
    // The expiry counts from the completion, the creation from the claim: the body's time, a
    // millisecond or so on a busy machine, is between them.
    let kept = Duration::from_millis(record.expires_at_ms - record.created_at_ms);
    let minute = Duration::from_secs(60);
    assert!(
        kept <= MAX_DURATION + minute && kept + minute >= MAX_DURATION,
        "{kept:?}"
    );
}

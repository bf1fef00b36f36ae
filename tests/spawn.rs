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

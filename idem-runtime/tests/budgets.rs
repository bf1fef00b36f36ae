//! Retry budgets follow the turn's identity, not a `Turn` value; concurrent duplicates that join
//! one execution are one attempt; past the cap, a succeeded action says so.

use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::Duration;

use idem_tools_runtime::key::{ArgsDigest, Fingerprint};
use idem_tools_runtime::store::{MemoryStore, Store};
use idem_tools_runtime::{Call, Error, Key, ToolInfo, Turn, execute};

const SEND: ToolInfo = ToolInfo::idempotent("send_message");

fn digest(turn: &Turn, to: &str) -> (Key, Fingerprint) {
    let mut args = ArgsDigest::new(SEND.name);
    args.arg("to", to).unwrap();
    args.finish(turn.namespace(), turn.id(), SEND.name, SEND.version)
}

async fn always_fails(turn: &Turn, runs: &AtomicUsize, to: &str) -> Result<(), Error> {
    let (key, fp) = digest(turn, to);
    execute(Call::new(&SEND, turn, key, fp), async {
        runs.fetch_add(1, Ordering::SeqCst);
        Err(Error::Config("upstream timeout".into()))
    })
    .await
}

async fn succeeds(turn: &Turn, runs: &AtomicUsize, to: &str) -> Result<usize, Error> {
    let (key, fp) = digest(turn, to);
    execute(Call::new(&SEND, turn, key, fp), async {
        Ok(runs.fetch_add(1, Ordering::SeqCst) + 1)
    })
    .await
}

#[tokio::test]
async fn a_server_building_a_turn_per_request_still_hits_the_budget() {
    let store: Arc<dyn Store> = Arc::new(MemoryStore::new());
    let runs = AtomicUsize::new(0);
    let mut answers = Vec::new();
    for _ in 0..10 {
        // Each retry arrives as a new request, which builds its own `Turn` with the same id.
        let turn = Turn::new("conv-9/turn-2").with_store(Arc::clone(&store));
        answers.push(always_fails(&turn, &runs, "ada").await);
    }
    assert_eq!(runs.load(Ordering::SeqCst), 3, "{answers:?}");
    let stuck = answers[3].as_ref().unwrap_err();
    assert!(
        matches!(
            stuck,
            Error::BudgetExhausted {
                attempts: 4,
                limit: 3,
                ..
            }
        ),
        "{stuck:?}"
    );
    assert!(stuck.to_string().contains("stuck"), "{stuck}");
}

#[tokio::test]
async fn the_fourth_call_of_a_succeeded_tool_says_it_already_succeeded() {
    let turn = Turn::new("t").with_store(Arc::new(MemoryStore::new()));
    let runs = AtomicUsize::new(0);
    for _ in 0..3 {
        assert_eq!(succeeds(&turn, &runs, "ada").await.unwrap(), 1);
    }
    let fourth = succeeds(&turn, &runs, "ada").await.unwrap_err();
    assert!(
        matches!(fourth, Error::AlreadySucceeded { .. }),
        "{fourth:?}"
    );
    let text = fourth.to_string();
    assert!(
        text.contains("already succeeded") && text.contains("Do not call it again"),
        "{text}"
    );
    assert!(
        !text.contains("failure"),
        "a success must never be reported as a failure: {text}"
    );
    assert_eq!(runs.load(Ordering::SeqCst), 1);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_thousand_wide_fan_out_with_the_default_budget_is_one_attempt() {
    let turn = Turn::new("t").with_store(Arc::new(MemoryStore::new()));
    let runs = Arc::new(AtomicUsize::new(0));
    let tasks: Vec<_> = (0..1000)
        .map(|_| {
            let (turn, runs) = (turn.clone(), Arc::clone(&runs));
            tokio::spawn(async move {
                let (key, fp) = digest(&turn, "ada");
                execute(Call::new(&SEND, &turn, key, fp), async {
                    tokio::time::sleep(Duration::from_millis(300)).await;
                    Ok::<_, Error>(runs.fetch_add(1, Ordering::SeqCst) + 1)
                })
                .await
            })
        })
        .collect();
    for task in tasks {
        assert_eq!(task.await.unwrap().unwrap(), 1);
    }
    // Joins were not attempts: two more sequential calls are still within the budget.
    let runs2 = AtomicUsize::new(0);
    assert_eq!(succeeds(&turn, &runs2, "ada").await.unwrap(), 1);
    assert_eq!(succeeds(&turn, &runs2, "ada").await.unwrap(), 1);
    assert_eq!(
        runs.load(Ordering::SeqCst) + runs2.load(Ordering::SeqCst),
        1
    );
}

#[tokio::test]
async fn changing_a_turns_settings_never_resets_its_budget() {
    let store: Arc<dyn Store> = Arc::new(MemoryStore::new());
    let runs = AtomicUsize::new(0);
    Turn::new("t")
        .with_store(Arc::clone(&store))
        .scope(async {
            for _ in 0..3 {
                let _ = always_fails(&Turn::current().unwrap(), &runs, "ada").await;
            }
            // A tool (or middleware) tightening the turn's cap gets the same budget, not a new one.
            let tightened = Turn::current().unwrap().with_max_calls(100);
            let stuck = always_fails(&tightened, &runs, "ada").await;
            assert!(
                matches!(stuck, Err(Error::BudgetExhausted { .. })),
                "{stuck:?}"
            );
        })
        .await;
    assert_eq!(runs.load(Ordering::SeqCst), 3);
}

#[tokio::test]
async fn the_turn_cap_counts_calls_per_turn_identity_and_not_per_key_refusals() {
    let store: Arc<dyn Store> = Arc::new(MemoryStore::new());
    let turn = || {
        Turn::new("t")
            .with_store(Arc::clone(&store))
            .with_max_calls(4)
            .with_max_attempts_per_key(1)
    };
    let runs = AtomicUsize::new(0);
    assert!(always_fails(&turn(), &runs, "a").await.is_err());
    for _ in 0..5 {
        // Refused by the per-key budget: not a call against the turn's cap.
        let refused = always_fails(&turn(), &runs, "a").await;
        assert!(
            matches!(refused, Err(Error::BudgetExhausted { .. })),
            "{refused:?}"
        );
    }
    for to in ["b", "c", "d"] {
        succeeds(&turn(), &runs, to).await.unwrap();
    }
    let capped = succeeds(&turn(), &runs, "e").await;
    assert!(
        matches!(
            capped,
            Err(Error::TurnBudgetExhausted {
                calls: 5,
                limit: 4,
                ..
            })
        ),
        "{capped:?}"
    );
    assert_eq!(runs.load(Ordering::SeqCst), 4);
}

#[tokio::test]
async fn namespaces_and_turns_have_separate_budgets() {
    let store: Arc<dyn Store> = Arc::new(MemoryStore::new());
    let runs = AtomicUsize::new(0);
    for turn in [
        Turn::new("t"),
        Turn::new("t").with_namespace("tenant-b"),
        Turn::new("t2"),
    ] {
        let turn = turn
            .with_store(Arc::clone(&store))
            .with_max_attempts_per_key(1);
        assert!(matches!(
            always_fails(&turn, &runs, "ada").await,
            Err(Error::Config(_))
        ));
    }
    assert_eq!(runs.load(Ordering::SeqCst), 3);
}

#[tokio::test]
async fn a_tools_own_budget_takes_precedence() {
    const ONCE: ToolInfo = ToolInfo::idempotent("send_message").with_budget(1);
    let turn = Turn::new("t").with_store(Arc::new(MemoryStore::new()));
    let (key, fp) = digest(&turn, "ada");
    let call = || {
        execute(Call::new(&ONCE, &turn, key, fp), async {
            Ok::<_, Error>(1)
        })
    };
    call().await.unwrap();
    assert!(matches!(
        call().await,
        Err(Error::AlreadySucceeded { attempts: 2, .. })
    ));
}

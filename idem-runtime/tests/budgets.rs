//! Retry budgets stop work that fails or keeps running, and never withhold a result: they follow
//! the turn's identity, not a `Turn` value; only executions count (a replay, a join, a wait
//! cost nothing); a refusal says only what is known.

use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::Duration;

use idem_tools_runtime::key::{ArgsDigest, Fingerprint};
use idem_tools_runtime::store::{MemoryStore, Store};
use idem_tools_runtime::{Call, Codec, Error, Key, ToolInfo, Turn, execute};

const SEND: ToolInfo = ToolInfo::idempotent("send_message");

fn digest(turn: &Turn, to: &str) -> (Key, Fingerprint) {
    let mut args = ArgsDigest::new(SEND.name);
    args.arg("to", to).unwrap();
    args.finish(turn.namespace(), turn.id(), SEND.name, SEND.version)
}

async fn always_fails(turn: &Turn, runs: &AtomicUsize, to: &str) -> Result<(), Error> {
    let (key, fp) = digest(turn, to);
    execute(Call::new(&SEND, turn, key, fp), Codec::ok_only(), async {
        runs.fetch_add(1, Ordering::SeqCst);
        Err(Error::Config("upstream timeout".into()))
    })
    .await
}

async fn succeeds(turn: &Turn, runs: &AtomicUsize, to: &str) -> Result<usize, Error> {
    let (key, fp) = digest(turn, to);
    execute(Call::new(&SEND, turn, key, fp), Codec::ok_only(), async {
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
    for stuck in &answers[3..] {
        let stuck = stuck.as_ref().unwrap_err();
        assert!(
            matches!(
                stuck,
                Error::BudgetExhausted {
                    attempts: 3,
                    limit: 3,
                    ..
                }
            ),
            "refusals say how often it ran, and do not count themselves: {stuck:?}"
        );
        assert!(stuck.to_string().contains("stuck"), "{stuck}");
    }
}

/// A retry of an action that succeeded gets its result, however often it is asked: a restarted
/// orchestrator replaying a turn from the top recovers every result.
#[tokio::test]
async fn a_succeeded_action_replays_its_result_every_time() {
    let store: Arc<dyn Store> = Arc::new(MemoryStore::new());
    let runs = AtomicUsize::new(0);
    for _ in 0..20 {
        // Each a new `Turn` value with the same identity, as after a restart.
        let turn = Turn::new("conv-1/turn-1").with_store(Arc::clone(&store));
        assert_eq!(succeeds(&turn, &runs, "ada").await.unwrap(), 1);
    }
    assert_eq!(runs.load(Ordering::SeqCst), 1);
}

/// A recorded result ends a run of failures: the action's count starts again afterwards.
#[tokio::test]
async fn a_recorded_result_resets_the_attempt_count() {
    const SHORT: ToolInfo = ToolInfo::idempotent("send_message").with_ttl(Duration::from_secs(1));
    let store: Arc<dyn Store> = Arc::new(MemoryStore::new());
    let turn = Turn::new("t").with_store(Arc::clone(&store));
    let (key, fp) = digest(&turn, "ada");
    let outcomes = [false, false, true];
    for ok in outcomes {
        let result = execute(Call::new(&SHORT, &turn, key, fp), Codec::ok_only(), async {
            if ok {
                Ok(1)
            } else {
                Err(Error::Config("flaky".into()))
            }
        })
        .await;
        assert_eq!(result.is_ok(), ok);
    }
    let record = store.get("", &key).await.unwrap().unwrap();
    assert_eq!(record.attempts, 0, "the recorded result reset the count");
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
                execute(Call::new(&SEND, &turn, key, fp), Codec::ok_only(), async {
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
    assert_eq!(runs.load(Ordering::SeqCst), 1);
}

/// Waiting for a holder in another process charges nothing: three waiters and the holder, with
/// a budget of one, all get the one result.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn waiting_for_another_holder_is_not_an_attempt() {
    // One store, four "processes": single-flight is per store handle, so each caller gets a
    // handle of its own on the same memory store and waits for the holder through the store.
    let shared = Arc::new(MemoryStore::new());
    let handles: Vec<Arc<dyn Store>> = (0..4)
        .map(|_| Arc::new(Handle(Arc::clone(&shared))) as Arc<dyn Store>)
        .collect();
    let runs = Arc::new(AtomicUsize::new(0));
    let tasks: Vec<_> = handles
        .into_iter()
        .map(|handle| {
            let runs = Arc::clone(&runs);
            tokio::spawn(async move {
                let turn = Turn::new("t")
                    .with_store(handle)
                    .with_max_attempts_per_key(1);
                let (key, fp) = digest(&turn, "ada");
                execute(Call::new(&SEND, &turn, key, fp), Codec::ok_only(), async {
                    tokio::time::sleep(Duration::from_millis(500)).await;
                    Ok::<_, Error>(runs.fetch_add(1, Ordering::SeqCst) + 1)
                })
                .await
            })
        })
        .collect();
    for task in tasks {
        assert_eq!(
            task.await.unwrap().unwrap(),
            1,
            "every caller gets the one result"
        );
    }
    assert_eq!(runs.load(Ordering::SeqCst), 1);
}

/// A store handle of its own over a shared store: another "process".
struct Handle(Arc<MemoryStore>);

impl Store for Handle {
    fn begin<'a>(
        &'a self,
        req: idem_tools_runtime::store::BeginRequest<'a>,
    ) -> idem_tools_runtime::store::StoreFuture<'a, idem_tools_runtime::store::Begin> {
        self.0.begin(req)
    }
    fn renew<'a>(
        &'a self,
        lease: &'a idem_tools_runtime::store::Lease,
        duration: Duration,
    ) -> idem_tools_runtime::store::StoreFuture<'a, ()> {
        self.0.renew(lease, duration)
    }
    fn complete<'a>(
        &'a self,
        lease: &'a idem_tools_runtime::store::Lease,
        result: &'a [u8],
        ttl: Duration,
    ) -> idem_tools_runtime::store::StoreFuture<'a, ()> {
        self.0.complete(lease, result, ttl)
    }
    fn release<'a>(
        &'a self,
        lease: &'a idem_tools_runtime::store::Lease,
    ) -> idem_tools_runtime::store::StoreFuture<'a, ()> {
        self.0.release(lease)
    }
    fn get<'a>(
        &'a self,
        namespace: &'a str,
        key: &'a Key,
    ) -> idem_tools_runtime::store::StoreFuture<'a, Option<idem_tools_runtime::store::Record>> {
        self.0.get(namespace, key)
    }
    fn purge_expired(&self) -> idem_tools_runtime::store::StoreFuture<'_, u64> {
        self.0.purge_expired()
    }
    fn list<'a>(
        &'a self,
        namespace: Option<&'a str>,
        limit: usize,
    ) -> idem_tools_runtime::store::StoreFuture<'a, Vec<idem_tools_runtime::store::Record>> {
        self.0.list(namespace, limit)
    }
    fn remove<'a>(
        &'a self,
        namespace: &'a str,
        key: &'a Key,
    ) -> idem_tools_runtime::store::StoreFuture<'a, bool> {
        self.0.remove(namespace, key)
    }
    fn remove_shown<'a>(
        &'a self,
        shown: &'a idem_tools_runtime::store::Record,
    ) -> idem_tools_runtime::store::StoreFuture<'a, idem_tools_runtime::store::Removed> {
        self.0.remove_shown(shown)
    }
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

/// The turn-wide cap counts the actions the turn started: past it a new action is refused,
/// saying how many were started, while the actions already made still replay; a call refused
/// by its per-key budget is not counted.
#[tokio::test]
async fn the_turn_cap_counts_started_actions_and_still_replays_them() {
    let store: Arc<dyn Store> = Arc::new(MemoryStore::new());
    let turn = || {
        Turn::new("t")
            .with_store(Arc::clone(&store))
            .with_max_calls(3)
            .with_max_attempts_per_key(1)
    };
    let runs = AtomicUsize::new(0);
    assert!(always_fails(&turn(), &runs, "a").await.is_err());
    for _ in 0..5 {
        // Refused by the per-key budget: not an action against the turn's cap.
        let refused = always_fails(&turn(), &runs, "a").await;
        assert!(
            matches!(refused, Err(Error::BudgetExhausted { attempts: 1, .. })),
            "{refused:?}"
        );
    }
    for to in ["b", "c"] {
        succeeds(&turn(), &runs, to).await.unwrap();
        // A retry of a succeeded action is a replay: it starts nothing.
        succeeds(&turn(), &runs, to).await.unwrap();
    }
    let capped = succeeds(&turn(), &runs, "e").await;
    assert!(
        matches!(
            capped,
            Err(Error::TurnBudgetExhausted {
                calls: 3,
                limit: 3,
                ..
            })
        ),
        "{capped:?}"
    );
    let text = capped.unwrap_err().to_string();
    assert!(text.contains("already started 3 actions"), "{text}");
    // Past the cap, the actions the turn made still replay their results.
    assert_eq!(succeeds(&turn(), &runs, "b").await.unwrap(), 2);
    assert_eq!(succeeds(&turn(), &runs, "c").await.unwrap(), 3);
    assert_eq!(runs.load(Ordering::SeqCst), 3);
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
        execute(Call::new(&ONCE, &turn, key, fp), Codec::ok_only(), async {
            Err::<u32, _>(Error::Config("down".into()))
        })
    };
    assert!(matches!(call().await, Err(Error::Config(_))));
    assert!(matches!(
        call().await,
        Err(Error::BudgetExhausted {
            attempts: 1,
            limit: 1,
            ..
        })
    ));
}

/// An operator's `remove` leaves the key runnable: it deletes the record and the key's count.
#[tokio::test]
async fn removing_a_key_resets_its_budget() {
    let store: Arc<dyn Store> = Arc::new(MemoryStore::new());
    let turn = Turn::new("t")
        .with_store(Arc::clone(&store))
        .with_max_attempts_per_key(1);
    let runs = AtomicUsize::new(0);
    assert!(always_fails(&turn, &runs, "ada").await.is_err());
    assert!(matches!(
        always_fails(&turn, &runs, "ada").await,
        Err(Error::BudgetExhausted { .. })
    ));
    let (key, _) = digest(&turn, "ada");
    store.remove("", &key).await.unwrap();
    assert_eq!(succeeds(&turn, &runs, "ada").await.unwrap(), 2);
}

//! New actions and retries: each tool may start a few new actions per turn (a model looping on a
//! tool with reworded arguments is stopped and told it is stuck), the turn's cap counts actions
//! too, a retry of an action already started is never refused by either, and a caller-supplied
//! key's failures stay in their turn.

use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};

use idem_tools_runtime::key::{ArgsDigest, Fingerprint};
use idem_tools_runtime::store::{MemoryStore, Store};
use idem_tools_runtime::turn::DEFAULT_ACTIONS_PER_TOOL;
use idem_tools_runtime::{Call, Codec, Error, Key, Outcome, ToolInfo, Turn, execute};

static CHARGE: ToolInfo = ToolInfo::idempotent("charge");
static REFUND: ToolInfo = ToolInfo::idempotent("refund");

/// The key and fingerprint of `tool(memo)` in `turn`: every memo a new action.
fn digest(tool: &ToolInfo, turn: &Turn, memo: &str) -> (Key, Fingerprint) {
    let mut args = ArgsDigest::new(tool.name);
    args.arg("memo", memo).unwrap();
    args.finish(turn.namespace(), turn.id(), tool.name, tool.version)
}

/// Calls `tool(memo)` with the key `key` (derived, or the caller's); the body succeeds or fails.
async fn call_with(
    tool: &'static ToolInfo,
    turn: &Turn,
    key: Key,
    fp: Fingerprint,
    runs: &AtomicUsize,
    fails: bool,
) -> Result<usize, Error> {
    execute(Call::new(tool, turn, key, fp), Codec::ok_only(), async {
        let run = runs.fetch_add(1, Ordering::SeqCst) + 1;
        if fails {
            Err(Error::Config("card declined".into()))
        } else {
            Ok(run)
        }
    })
    .await
}

async fn call(
    tool: &'static ToolInfo,
    turn: &Turn,
    memo: &str,
    runs: &AtomicUsize,
    fails: bool,
) -> Result<usize, Error> {
    let (key, fp) = digest(tool, turn, memo);
    call_with(tool, turn, key, fp, runs, fails).await
}

/// Ten `charge` calls in one turn whose memos differ only in wording: five run, and the rest are
/// refused with words that tell the model it is stuck; the five still replay, another tool and
/// another turn still run. Each call builds its own `Turn` value, as a server does per request:
/// the count is the turn's, in the store.
#[tokio::test]
async fn ten_reworded_charges_stop_at_the_default_cap() {
    let store: Arc<dyn Store> = Arc::new(MemoryStore::new());
    let turn = |id: &str| Turn::new(id).with_store(Arc::clone(&store));
    let runs = AtomicUsize::new(0);
    let memos = [
        "Refund order 7",
        "refund order 7",
        "Refund order #7",
        "Refund order 7.",
        "refund for order 7",
        "Refund: order 7",
        "REFUND ORDER 7",
        "Refund order seven",
        "refund order 7!",
        "Refund order 7 please",
    ];
    let mut answers = Vec::new();
    for memo in memos {
        answers.push(call(&CHARGE, &turn("conv-1/turn-1"), memo, &runs, false).await);
    }
    assert_eq!(DEFAULT_ACTIONS_PER_TOOL, 5);
    assert_eq!(runs.load(Ordering::SeqCst), 5, "{answers:?}");
    for refused in &answers[5..] {
        let refused = refused.as_ref().unwrap_err();
        assert!(
            matches!(
                refused,
                Error::ToolBudgetExhausted { tool: "charge", calls: 5, limit: 5, turn }
                    if turn == "conv-1/turn-1"
            ),
            "{refused:?}"
        );
        assert!(refused.is_for_model());
        assert_eq!(refused.code(), "tool_budget_exhausted");
        let text = refused.model_text();
        assert!(
            text.contains("already started 5 actions in this turn, the most it may"),
            "{text}"
        );
        assert!(text.contains("this new action was not started"), "{text}");
        assert!(text.contains("stuck"), "{text}");
    }
    let stats = turn("conv-1/turn-1");
    // The actions it started still replay; another tool and another turn are counted apart.
    assert_eq!(
        call(&CHARGE, &stats, memos[0], &runs, false).await.unwrap(),
        1
    );
    assert_eq!(stats.stats().get(Outcome::Replayed), 1);
    assert_eq!(
        call(&REFUND, &stats, memos[0], &runs, false).await.unwrap(),
        6
    );
    assert_eq!(
        call(&CHARGE, &turn("conv-1/turn-2"), memos[9], &runs, false)
            .await
            .unwrap(),
        7
    );
    let refused = call(&CHARGE, &stats, "yet another memo", &runs, false).await;
    assert!(matches!(refused, Err(Error::ToolBudgetExhausted { .. })));
    assert_eq!(stats.stats().get(Outcome::BudgetExhausted), 1);
}

/// Under a turn cap of 2 and a tool cap of 1, an action that failed twice is tried a third time
/// (a retry, within its key's budget of 3): the caps count actions, never retries. A second
/// action of the same tool is refused by the tool's cap, a new action of another tool by the
/// turn's once two actions were started, and each refusal's words are true.
#[tokio::test]
async fn the_caps_count_actions_never_retries() {
    let store: Arc<dyn Store> = Arc::new(MemoryStore::new());
    let turn = Turn::new("t")
        .with_store(Arc::clone(&store))
        .with_max_calls(2)
        .with_actions_per_tool(1);
    let runs = AtomicUsize::new(0);
    for attempt in 1..=3 {
        let failed = call(&CHARGE, &turn, "a", &runs, true).await;
        assert!(
            matches!(failed, Err(Error::Config(_))),
            "attempt {attempt} of the action ran: {failed:?}"
        );
    }
    assert_eq!(runs.load(Ordering::SeqCst), 3);
    let stuck = call(&CHARGE, &turn, "a", &runs, true).await.unwrap_err();
    assert!(
        matches!(stuck, Error::BudgetExhausted { attempts: 3, .. }),
        "{stuck:?}"
    );
    let second = call(&CHARGE, &turn, "b", &runs, false).await.unwrap_err();
    assert!(
        matches!(
            second,
            Error::ToolBudgetExhausted {
                calls: 1,
                limit: 1,
                ..
            }
        ),
        "{second:?}"
    );
    assert_eq!(call(&REFUND, &turn, "c", &runs, false).await.unwrap(), 4);
    let capped = call(&REFUND, &turn, "d", &runs, false).await.unwrap_err();
    assert!(
        matches!(
            capped,
            Error::TurnBudgetExhausted {
                calls: 2,
                limit: 2,
                ..
            }
        ),
        "{capped:?}"
    );
    let text = capped.model_text();
    assert!(text.contains("this new action was not started"), "{text}");
    assert!(text.contains("tries it again if it failed"), "{text}");
    assert!(capped.to_string().contains("this new action"), "{capped}");
    assert_eq!(runs.load(Ordering::SeqCst), 4);
}

/// A key the caller supplies (an MCP client's `idempotencyKey`) is the same in every turn: its
/// failures count in the turn that made them, and in the next turn it runs again — what the
/// refusal says ("will not be tried again in this turn") is what happens.
#[tokio::test]
async fn a_caller_keys_failures_stay_in_their_turn() {
    let store: Arc<dyn Store> = Arc::new(MemoryStore::new());
    let key = Key::from_bytes(*blake3::hash(b"client key 42").as_bytes());
    let fp = Fingerprint::from_bytes(*blake3::hash(b"the arguments").as_bytes());
    let runs = AtomicUsize::new(0);
    let first = Turn::new("turn-1").with_store(Arc::clone(&store));
    for _ in 0..3 {
        let failed = call_with(&CHARGE, &first, key, fp, &runs, true).await;
        assert!(matches!(failed, Err(Error::Config(_))), "{failed:?}");
    }
    let stuck = call_with(&CHARGE, &first, key, fp, &runs, true)
        .await
        .unwrap_err();
    assert!(matches!(stuck, Error::BudgetExhausted { attempts: 3, .. }));
    assert!(
        stuck
            .model_text()
            .contains("it will not be tried again in this turn")
    );
    let next = Turn::new("turn-2").with_store(Arc::clone(&store));
    assert_eq!(
        call_with(&CHARGE, &next, key, fp, &runs, false)
            .await
            .unwrap(),
        4,
        "the next turn runs the key again"
    );
    let record = store.get("", &key).await.unwrap().expect("recorded");
    assert_eq!(record.turn, "turn-2");
}

/// A tool's own `actions_per_turn` wins over the turn's setting, as `budget` does.
#[tokio::test]
async fn a_tools_own_cap_wins_over_the_turns() {
    static TWICE: ToolInfo = ToolInfo::idempotent("charge").with_actions_per_turn(2);
    let store: Arc<dyn Store> = Arc::new(MemoryStore::new());
    let runs = AtomicUsize::new(0);
    let generous = Turn::new("t1")
        .with_store(Arc::clone(&store))
        .with_actions_per_tool(10);
    for memo in ["a", "b"] {
        call(&TWICE, &generous, memo, &runs, false).await.unwrap();
    }
    let refused = call(&TWICE, &generous, "c", &runs, false).await;
    assert!(
        matches!(refused, Err(Error::ToolBudgetExhausted { limit: 2, .. })),
        "{refused:?}"
    );
    let strict = Turn::new("t2")
        .with_store(Arc::clone(&store))
        .with_actions_per_tool(1);
    call(&REFUND, &strict, "a", &runs, false).await.unwrap();
    let refused = call(&REFUND, &strict, "b", &runs, false).await;
    assert!(
        matches!(refused, Err(Error::ToolBudgetExhausted { limit: 1, .. })),
        "{refused:?}"
    );
    for memo in ["a", "b"] {
        call(&TWICE, &strict, memo, &runs, false).await.unwrap();
    }
}

//! Conversation scopes with the `#[idempotent]` macro: a retried key's sub-agent runs its own
//! steps, whether the tool runs attached or detached (its body in a task of its own).

use std::sync::Arc;
use std::sync::atomic::{AtomicU32, Ordering};

use idem_tools::{Error, Turn, idempotent};
use idem_tools::{MemoryStore, store::Store};
use serde::{Deserialize, Serialize};

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
struct Failed(String);

impl From<Error> for Failed {
    fn from(error: Error) -> Self {
        Failed(error.model_text())
    }
}

impl std::fmt::Display for Failed {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(&self.0)
    }
}

static LOOKUP_UP: AtomicU32 = AtomicU32::new(0);
static LOOKUPS: AtomicU32 = AtomicU32::new(0);

async fn step_of(turn: &Turn, label: &str, request: &str) -> Result<String, Error> {
    let answer = async { Ok::<_, Error>(format!("{label}: answer to {request}")) };
    turn.conversation(label).step(request, answer).await
}

async fn research_body(q: String) -> Result<String, Failed> {
    let turn = Turn::current().expect("a turn");
    step_of(&turn, "default", &format!("research {q}")).await?;
    let lookup = async {
        LOOKUPS.fetch_add(1, Ordering::SeqCst);
        if LOOKUP_UP.load(Ordering::SeqCst) == 1 {
            Ok::<u32, Failed>(1)
        } else {
            Err(Failed("not found".into()))
        }
    };
    let read = turn.model_tool_call("lookup", &q, lookup).await;
    step_of(&turn, "default", &format!("after {read:?}")).await?;
    read.map(|n| format!("found {n}"))
}

/// Detached (a free `async fn` with owned arguments).
#[idempotent]
async fn research(q: String) -> Result<String, Failed> {
    research_body(q).await
}

#[idempotent(attached)]
async fn research_attached(q: String) -> Result<String, Failed> {
    research_body(q).await
}

async fn script(detached: bool) -> (Result<String, Failed>, u32) {
    let store: Arc<dyn Store> = Arc::new(MemoryStore::new());
    let id = if detached { "m/detached" } else { "m/attached" };
    let call = move |q: &str| {
        let q = q.to_owned();
        async move {
            if detached {
                research(q).await
            } else {
                research_attached(q).await
            }
        }
    };
    let before = LOOKUPS.load(Ordering::SeqCst);
    LOOKUP_UP.store(0, Ordering::SeqCst);
    {
        let turn = Turn::new(id).with_store(Arc::clone(&store));
        let t = turn.clone();
        turn.scope(async move {
            step_of(&t, "default", "go").await.unwrap();
            let first = t.model_tool_call("research", "ada", call("ada")).await;
            assert!(first.is_err());
            step_of(&t, "default", &format!("after {first:?}"))
                .await
                .unwrap();
            // The process dies here.
        })
        .await;
    }
    LOOKUP_UP.store(1, Ordering::SeqCst);
    let turn = Turn::new(id).with_store(Arc::clone(&store));
    let t = turn.clone();
    let second = turn
        .scope(async move {
            step_of(&t, "default", "go").await.unwrap();
            let first = t.model_tool_call("research", "ada", call("ada")).await;
            assert!(first.is_err(), "{first:?}");
            step_of(&t, "default", &format!("after {first:?}"))
                .await
                .unwrap();
            t.model_tool_call("research", "ada", call("ada")).await
        })
        .await;
    (second, LOOKUPS.load(Ordering::SeqCst) - before)
}

/// One test (the statics are shared): the lookup is down in the first run, up in the restart.
#[tokio::test]
async fn a_retried_key_after_a_crash_runs_its_own_sub_agent_attached_and_detached() {
    let attached = script(false).await;
    let detached = script(true).await;
    assert_eq!(
        (attached, detached),
        ((Ok("found 1".to_owned()), 2), (Ok("found 1".to_owned()), 2))
    );
}

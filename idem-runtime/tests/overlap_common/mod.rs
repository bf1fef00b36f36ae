//! What the tests of two runs of one turn at once (`overlapping_run*.rs`) share: a failure a
//! model reads, a scripted model, and the `charge` tool's calls. Each includes it
//! (`#[path] mod overlap_common`).
#![allow(dead_code)] // each test uses a part of it

use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicU32, Ordering};

use idem_tools_runtime::engine::{Call, Codec, execute};
use idem_tools_runtime::key::ArgsDigest;
use idem_tools_runtime::store::Store;
use idem_tools_runtime::{Conversation, Error, ToolInfo, Turn};
use serde::{Deserialize, Serialize};

/// What the model reads of a failed call.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Failed(pub String);

impl From<Error> for Failed {
    fn from(error: Error) -> Self {
        Failed(error.model_text())
    }
}

/// The tool the runs call.
pub static CHARGE: ToolInfo = ToolInfo::idempotent("charge");

/// The turn every run resumes.
pub const ID: &str = "conv-1/turn-1";

/// A call of `tool` for `cents` in `turn`.
pub fn call_of(tool: &'static ToolInfo, turn: &Turn, cents: u32) -> Call {
    let mut args = ArgsDigest::new(tool.name);
    args.arg("cents", &cents).expect("encodes");
    let (key, fingerprint) = args.finish(turn.namespace(), turn.id(), tool.name, tool.version);
    Call::new(tool, turn, key, fingerprint)
}

/// What a scripted model answers at step `step`.
pub async fn model(step: u32) -> Result<String, Error> {
    Ok(format!("step {step}: charge 500"))
}

/// A run of the turn on `store` (a new `Turn` value: a new run).
pub fn turn_on(store: &Arc<dyn Store>) -> Turn {
    Turn::new(ID).with_store(Arc::clone(store))
}

/// `call` (a charge of 500) whose body fails if `fail`, and counts its successes in `ok`.
pub async fn charge_call(call: Call, ok: &AtomicU32, fail: bool) -> Result<u32, Failed> {
    execute(call, Codec::ok_only(), async {
        if fail {
            Err(Failed("the card network timed out".into()))
        } else {
            ok.fetch_add(1, Ordering::SeqCst);
            Ok(500)
        }
    })
    .await
}

/// [`charge_call`] of `charge` for 500 in `turn`.
pub async fn charge(turn: &Turn, ok: &AtomicU32, fail: bool) -> Result<u32, Failed> {
    charge_call(call_of(&CHARGE, turn, 500), ok, fail).await
}

/// A run of `turn` whose step 0 is answered (live, or replayed).
pub async fn stepped_on(turn: Turn) -> Conversation {
    let chat = turn.conversation("assistant");
    chat.step("step 0", model(0)).await.expect("step 0");
    chat
}

/// Step `n` of `a`, asked after `read`, with whether its model was asked.
pub async fn next_step(
    a: &Conversation,
    n: u32,
    read: &impl std::fmt::Debug,
) -> (Result<String, Error>, bool) {
    let asked = AtomicBool::new(false);
    let answer = async {
        asked.store(true, Ordering::SeqCst);
        model(n).await
    };
    let next = a.step(&format!("after {read:?}"), answer).await;
    (next, asked.load(Ordering::SeqCst))
}

//! What the tests of two runs of one turn at once (`overlapping_run*.rs`) share: a failure a
//! model reads, a scripted model, and the `charge` tool's calls. Each includes it
//! (`#[path] mod overlap_common`).
#![allow(dead_code)] // each test uses a part of it

use std::sync::Arc;

use idem_tools_runtime::engine::Call;
use idem_tools_runtime::key::ArgsDigest;
use idem_tools_runtime::store::Store;
use idem_tools_runtime::{Error, ToolInfo, Turn};
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

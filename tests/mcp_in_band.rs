//! An rmcp tool that reports a failure in-band, `Ok(CallToolResult::error(..))`, is retried, not
//! replayed, however its return type is written: `Result<CallToolResult, _>`, an alias of it, a
//! `macro_rules!` type fragment, with `anyhow::Result`, detached or attached.

use std::sync::atomic::{AtomicUsize, Ordering};

use idem_tools::{Turn, idempotent, tool_impl};
use rmcp::ErrorData;
use rmcp::model::{CallToolResult, ContentBlock};

/// The runs of each tool: the first fails in-band, the others succeed.
static RUNS: [AtomicUsize; 5] = [const { AtomicUsize::new(0) }; 5];

fn answer(tool: usize) -> CallToolResult {
    if RUNS[tool].fetch_add(1, Ordering::SeqCst) == 0 {
        CallToolResult::error(vec![ContentBlock::text("try again")])
    } else {
        CallToolResult::success(vec![ContentBlock::text("done")])
    }
}

#[idempotent]
async fn written(id: u64) -> Result<CallToolResult, ErrorData> {
    let _ = id;
    Ok(answer(0))
}

type ToolOut = Result<CallToolResult, ErrorData>;

#[idempotent]
async fn aliased(id: u64) -> ToolOut {
    let _ = id;
    Ok(answer(1))
}

macro_rules! tool_returning {
    ($name:ident, $ret:ty, $slot:expr) => {
        #[idempotent]
        async fn $name(id: u64) -> $ret {
            let _ = id;
            Ok(answer($slot))
        }
    };
}

tool_returning!(from_a_macro, Result<CallToolResult, ErrorData>, 2);

#[idempotent]
async fn with_anyhow(id: &u64) -> anyhow::Result<CallToolResult> {
    let _ = id;
    Ok(answer(3))
}

struct Desk;

#[tool_impl(same_service)]
impl Desk {
    #[idempotent]
    async fn attached(&self, id: &u64) -> ToolOut {
        let _ = id;
        Ok(answer(4))
    }
}

fn failed(result: &CallToolResult) -> bool {
    result.is_error == Some(true)
}

#[tokio::test]
async fn an_in_band_failure_is_retried_whatever_the_return_type_is_written_as() {
    Turn::new("in-band")
        .scope(async {
            let desk = Desk;
            for round in 0..3 {
                let results = [
                    written(1).await.unwrap(),
                    aliased(1).await.unwrap(),
                    from_a_macro(1).await.unwrap(),
                    with_anyhow(&1).await.unwrap(),
                    desk.attached(&1).await.unwrap(),
                ];
                for (tool, result) in results.iter().enumerate() {
                    // The failure is not recorded: the retry runs, and its success replays.
                    assert_eq!(failed(result), round == 0, "tool {tool}, round {round}");
                    assert_eq!(RUNS[tool].load(Ordering::SeqCst), 2.min(round + 1));
                }
            }
        })
        .await;
}

//! One call of a schedule: the tool body, the engine entry point it goes through, and the
//! caller that gives up on it as planned.

use idem_tools_runtime::Codec;
use std::future::Future;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::Duration;

use idem_tools_runtime::key::{ArgsDigest, Fingerprint};
use idem_tools_runtime::store::{DEFAULT_TTL, Store};
use idem_tools_runtime::{Call, Error, Key, Turn, execute, execute_detached};
use serde::{Deserialize, Serialize};

use crate::ledger::{Ledger, Val};
use crate::run::{CallRecord, Ctx, lock, ms};
use crate::schedule::{Attempt, Cancel, End, Tool};

/// A call bound: a call still running this long after it started hangs.
const HANG_BOUND: Duration = Duration::from_secs(120);
/// How long a caller waits for the same key elsewhere.
const IN_FLIGHT_WAIT: Duration = Duration::from_millis(300);

/// The tool's error type: its own error (carrying the execution id) or the engine's.
#[derive(Debug, Serialize, Deserialize)]
pub enum ToolError {
    /// The tool failed.
    Tool(u64),
    /// The engine answered with an error (its variant name).
    Idem(String),
}

impl From<Error> for ToolError {
    fn from(error: Error) -> Self {
        let debug = format!("{error:?}");
        let name = debug.split([' ', '(', '{']).next().unwrap_or_default();
        ToolError::Idem(name.to_owned())
    }
}

/// The payload of a tool's own panic.
#[derive(Debug)]
pub struct ToolPanic;

/// Silences the tool's own panics (expected by the hundred); others print as usual.
pub fn quiet_tool_panics() {
    static ONCE: std::sync::Once = std::sync::Once::new();
    ONCE.call_once(|| {
        let default = std::panic::take_hook();
        std::panic::set_hook(Box::new(move |info| {
            if info.payload().downcast_ref::<ToolPanic>().is_none() {
                default(info);
            }
        }));
    });
}

/// The cap of new actions per tool and turn of a schedule whose per-key budget is `limit`
/// (2–4): 1 to 3, so that a tool's second argument in a turn (two per tool and turn) is refused
/// in some schedules.
pub fn actions_per_tool(limit: u32) -> u32 {
    limit.saturating_sub(1).max(1)
}

/// The key and fingerprint of an attempt.
pub fn key_of(turn: &Turn, tool: Tool, arg: u8) -> (Key, Fingerprint) {
    let info = tool.info();
    let mut args = ArgsDigest::new(info.name);
    // A u8 always encodes.
    let _ = args.arg("arg", &arg);
    args.finish(turn.namespace(), turn.id(), info.name, info.version)
}

/// Makes one attempt: the call in its own task, given up on as the attempt says.
pub(crate) async fn attempt_once(ctx: &Arc<Ctx>, store: &Arc<dyn Store>, attempt: Attempt) {
    let turn = Turn::new(format!("t{}", attempt.turn))
        .with_namespace(ctx.namespace.clone())
        .with_store(Arc::clone(store))
        .with_max_attempts_per_key(ctx.limit)
        .with_actions_per_tool(actions_per_tool(ctx.limit))
        .with_in_flight_wait(IN_FLIGHT_WAIT);
    let (key, fingerprint) = key_of(&turn, attempt.tool, attempt.arg);
    let polled = Arc::new(AtomicBool::new(false));
    lock(&ctx.calls).push(CallRecord {
        turn: turn.clone(),
        key,
        polled: Arc::clone(&polled),
    });
    let call = Call::new(attempt.tool.info(), &turn, key, fingerprint);
    let engine = marking_polled(polled, engine_call(Arc::clone(&ctx.ledger), attempt, call));
    let task = tokio::spawn(async move {
        match attempt.cancel {
            Cancel::Timeout(after) => {
                let _ = tokio::time::timeout(ms(after), engine).await;
            }
            Cancel::Select(after) => {
                tokio::select! {
                    biased;
                    () = engine => {}
                    () = tokio::time::sleep(ms(after)) => {}
                }
            }
            Cancel::None | Cancel::Abort(_) => engine.await,
        }
    });
    let abort = task.abort_handle();
    let waited = tokio::time::timeout(HANG_BOUND, async move {
        let mut task = task;
        if let Cancel::Abort(after) = attempt.cancel {
            tokio::select! {
                biased;
                joined = &mut task => return joined,
                () = tokio::time::sleep(ms(after)) => task.abort(),
            }
        }
        task.await
    })
    .await;
    match waited {
        Err(_) => {
            abort.abort();
            ctx.ledger.problem(
                |c| c.hangs += 1,
                format!(
                    "hang: a call of key {} did not end within {HANG_BOUND:?}",
                    key.short()
                ),
            );
        }
        Ok(Err(error)) if error.is_panic() => {
            let panic = error.into_panic();
            if panic.downcast_ref::<ToolPanic>().is_none() {
                let text = panic
                    .downcast_ref::<String>()
                    .cloned()
                    .or_else(|| panic.downcast_ref::<&str>().map(|s| (*s).to_owned()))
                    .unwrap_or_default();
                ctx.ledger.problem(
                    |c| c.panics += 1,
                    format!("panic: a call of key {} panicked: {text}", key.short()),
                );
            }
        }
        Ok(_) => {}
    }
}

/// Sets `polled` when the engine future is first polled (a call never polled has no outcome).
async fn marking_polled<F: Future>(polled: Arc<AtomicBool>, future: F) -> F::Output {
    let mut future = std::pin::pin!(future);
    std::future::poll_fn(|cx| {
        polled.store(true, Ordering::SeqCst);
        future.as_mut().poll(cx)
    })
    .await
}

/// The call through the engine entry point of its tool; reports the answer to the ledger.
async fn engine_call(ledger: Arc<Ledger>, attempt: Attempt, call: Call) {
    let key = call.key();
    let tool = attempt.tool;
    let called = ledger.now();
    let body = tool_body(Arc::clone(&ledger), attempt, key);
    let result = match tool {
        Tool::Plain | Tool::Short | Tool::Release | Tool::Renewing => {
            execute(call, Codec::ok_only(), body).await
        }
        Tool::Caching => execute(call, Codec::ok_and_err(), body).await,
        Tool::Detached => execute_detached(call, Codec::ok_only(), body).await,
    };
    match result {
        Ok(exec) => ledger.answered(key, Val { exec, ok: true }),
        Err(ToolError::Tool(exec)) if tool.records_errors() => {
            ledger.answered(key, Val { exec, ok: false });
        }
        Err(ToolError::Idem(name)) => ledger.refused(key, &name, called),
        Err(ToolError::Tool(_)) => {}
    }
}

/// The tool body: waits, maybe performs its side effect, waits, ends as planned.
fn tool_body(
    ledger: Arc<Ledger>,
    attempt: Attempt,
    key: Key,
) -> impl Future<Output = Result<u64, ToolError>> + Send + 'static {
    let plan = attempt.body;
    let tool = attempt.tool;
    let ttl = tool.info().ttl.unwrap_or(DEFAULT_TTL);
    async move {
        let (exec, alive) = ledger.start(key);
        ledger.started_in(
            key,
            format!("tool {} of turn t{}", tool.info().name, attempt.turn),
        );
        tokio::time::sleep(ms(plan.before_ms)).await;
        if plan.effect {
            ledger.effect(key, exec);
        }
        tokio::time::sleep(ms(plan.after_ms)).await;
        let result = match plan.end {
            End::Ok => {
                ledger.finish(key, Val { exec, ok: true }, ttl);
                Ok(exec)
            }
            End::Err => {
                if tool.records_errors() {
                    ledger.finish(key, Val { exec, ok: false }, ttl);
                }
                Err(ToolError::Tool(exec))
            }
            End::Panic => std::panic::panic_any(ToolPanic),
        };
        drop(alive);
        result
    }
}

//! Shared by the benches: the arguments at three sizes, the tools compared (a bare `async fn`,
//! `#[read_only]`, `#[idempotent]`, the `cached` crate's `#[cached]`, a naive map) and the
//! floor. Everything goes through idem's public API only.
#![allow(dead_code)] // each bench target uses part of this module

pub mod floor;

use std::collections::HashMap;
use std::sync::{Arc, LazyLock, Mutex};
use std::time::Duration;

use idem_tools::{MemoryStore, Store, Turn, idempotent, read_only};
use serde::{Deserialize, Serialize};

/// The argument sizes: `small` (a 20-char string, a u64 and 3 short strings), then the same
/// struct with its first string 1 KiB and 64 KiB long.
pub const SIZES: [Size; 3] = [
    Size {
        name: "small",
        len: 20,
    },
    Size {
        name: "1KiB",
        len: 1024,
    },
    Size {
        name: "64KiB",
        len: 64 * 1024,
    },
];

/// One argument size.
#[derive(Debug, Clone, Copy)]
pub struct Size {
    /// The name in benchmark ids.
    pub name: &'static str,
    /// The length of the `to` string.
    pub len: usize,
}

/// The arguments of every tool.
#[derive(Debug, Clone, PartialEq, Eq, Hash, Serialize, Deserialize)]
pub struct Args {
    /// The sized field.
    pub to: String,
    /// Varied to get a fresh key.
    pub n: u64,
    /// Three short strings.
    pub subject: String,
    /// See `subject`.
    pub lang: String,
    /// See `subject`.
    pub priority: String,
}

impl Args {
    /// Arguments of the given size; `n` distinguishes keys.
    pub fn new(size: Size, n: u64) -> Args {
        let to: String = "abcdefghijklmnopqrstuvwxyz0123456789"
            .chars()
            .cycle()
            .take(size.len)
            .collect();
        Args {
            to,
            n,
            subject: "hello".to_owned(),
            lang: "en-GB".to_owned(),
            priority: "high".to_owned(),
        }
    }
}

/// What every tool returns.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Receipt {
    /// Echoes `Args::n`.
    pub id: u64,
    /// The length of `Args::to`.
    pub len: u64,
}

/// What the bench tools answer for `args`.
pub fn receipt(args: &Args) -> Receipt {
    Receipt {
        id: args.n,
        len: args.to.len() as u64,
    }
}

/// The baseline: a plain `async fn`.
pub async fn bare(args: &Args) -> Result<Receipt, idem_tools::Error> {
    Ok(receipt(args))
}

/// The same body, classified `#[read_only]` (no key, no store: should cost nothing).
#[read_only]
pub async fn lookup(args: &Args) -> Result<Receipt, idem_tools::Error> {
    Ok(receipt(args))
}

/// The same body under `#[idempotent]` (attached: it borrows its arguments, so no clone).
#[idempotent]
pub async fn send(args: &Args) -> Result<Receipt, idem_tools::Error> {
    Ok(receipt(args))
}

/// The same body under `#[idempotent]`, yielding once to the runtime first, so that concurrent
/// calls of the same key find it in flight and join it (the 32-way join).
#[idempotent]
pub async fn send_yielding(args: &Args) -> Result<Receipt, idem_tools::Error> {
    tokio::task::yield_now().await;
    Ok(receipt(args))
}

/// The same body under `#[idempotent]` with owned arguments: detached, the default for a tool
/// that owns what it uses. The caller clones the arguments for each call.
#[idempotent]
pub async fn send_owned(args: Args) -> Result<Receipt, idem_tools::Error> {
    Ok(receipt(&args))
}

/// How long the `note` of [`send_padded`]'s result is (the scale bench sets it to reach a
/// recorded result of a given size).
pub static PAD: std::sync::atomic::AtomicUsize = std::sync::atomic::AtomicUsize::new(0);

/// A receipt with a note, to record results of a chosen size.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Padded {
    /// Echoes `Args::n`.
    pub id: u64,
    /// [`PAD`] characters.
    pub note: String,
}

/// The body of [`send`] returning a [`Padded`] receipt.
#[idempotent]
pub async fn send_padded(args: &Args) -> Result<Padded, idem_tools::Error> {
    let pad = PAD.load(std::sync::atomic::Ordering::Relaxed);
    Ok(Padded {
        id: args.n,
        note: "x".repeat(pad),
    })
}

/// The same body under the `cached` crate's async `#[cached]` (unbounded, ahash; its key is
/// an owned clone of the arguments).
#[cached::macros::cached(key = "Args", convert = r#"{ args.clone() }"#)]
pub async fn cached_send(args: &Args) -> Result<Receipt, idem_tools::Error> {
    Ok(receipt(args))
}

/// The naive map: one `Mutex<HashMap<String, String>>`, key = the arguments' JSON, value =
/// the result's JSON.
static NAIVE: LazyLock<Mutex<HashMap<String, String>>> =
    LazyLock::new(|| Mutex::new(HashMap::new()));

/// The same body behind the naive map: serializes the arguments to the key, deserializes the
/// recorded value on a hit.
pub async fn naive_send(args: &Args) -> Result<Receipt, String> {
    let key = serde_json::to_string(args).map_err(bench_error)?;
    let hit = NAIVE
        .lock()
        .map_err(|_| bench_error("naive map poisoned"))?
        .get(&key)
        .cloned();
    if let Some(json) = hit {
        return serde_json::from_str(&json).map_err(bench_error);
    }
    let result = receipt(args);
    let json = serde_json::to_string(&result).map_err(bench_error)?;
    NAIVE
        .lock()
        .map_err(|_| bench_error("naive map poisoned"))?
        .insert(key, json);
    Ok(result)
}

fn bench_error(e: impl std::fmt::Display) -> String {
    format!("naive map: {e}")
}

/// A turn on `store` whose per-key budget never refuses a replay, and whose caps of a tool's new
/// actions and of model steps never refuse the benches' many first executions and steps (the
/// counts are still kept).
pub fn turn(id: &str, store: Arc<dyn Store>) -> Turn {
    Turn::new(id)
        .with_store(store)
        .with_max_attempts_per_key(u32::MAX)
        .with_actions_per_tool(u32::MAX)
        .with_max_model_steps(u32::MAX)
}

/// A fresh memory store.
pub fn memory_store() -> Arc<dyn Store> {
    Arc::new(MemoryStore::new())
}

/// A current-thread runtime with time enabled (leases and in-flight waits use timers).
pub fn current_thread() -> tokio::runtime::Runtime {
    tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .unwrap_or_else(|e| panic!("tokio runtime: {e}"))
}

/// A multi-thread runtime with `workers` workers.
pub fn multi_thread(workers: usize) -> tokio::runtime::Runtime {
    tokio::runtime::Builder::new_multi_thread()
        .worker_threads(workers)
        .enable_all()
        .build()
        .unwrap_or_else(|e| panic!("tokio runtime: {e}"))
}

/// Panics with a message naming `what` if a measured call failed: a benchmark of an error path
/// must not pass for one of the happy path.
pub fn ok<T, E: std::fmt::Display>(what: &str, result: Result<T, E>) -> T {
    result.unwrap_or_else(|e| panic!("{what}: {e}"))
}

/// The lease of the memory store; the scale bench advances its clock past it.
pub const LEASE: Duration = Duration::from_secs(30);

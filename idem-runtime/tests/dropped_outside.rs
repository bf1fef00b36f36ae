//! An attached call dropped mid-run on a thread outside any Tokio runtime — a future kept past
//! the `block_on` that polled it — still leaves its key interrupted, so a retry is told the
//! outcome is unknown instead of running the tool again: in place where the store answers at
//! once (the memory store; SQLite takes the write on its own thread), else on the runtime the
//! call was made on, if it still runs.

#[path = "fault_store/mod.rs"]
mod fault_store;

use std::future::Future;
use std::pin::Pin;
use std::sync::Arc;
use std::time::Duration;

use crate::fault_store::{Fault, FaultStore};
use idem_tools_runtime::key::ArgsDigest;
use idem_tools_runtime::replay::{RecordKind, kind};
use idem_tools_runtime::store::{MemoryStore, RecordState, Store};
use idem_tools_runtime::{Call, Codec, Error, Key, ToolInfo, Turn, execute};

static SEND: ToolInfo = ToolInfo::idempotent("send_outside");

fn call(store: &Arc<dyn Store>) -> (Call, Key) {
    let turn = Turn::new("dropped-outside").with_store(Arc::clone(store));
    let mut args = ArgsDigest::new(SEND.name);
    args.arg("to", "ada").unwrap();
    let (key, fingerprint) = args.finish(turn.namespace(), turn.id(), SEND.name, SEND.version);
    (Call::new(&SEND, &turn, key, fingerprint), key)
}

/// A call, unfinished.
type Unfinished = Pin<Box<dyn Future<Output = Result<u8, Error>> + Send>>;

/// Runs the call on `runtime` until its body has started, then hands it back unfinished.
fn started(runtime: &tokio::runtime::Runtime, store: &Arc<dyn Store>) -> (Unfinished, Key) {
    let (call, key) = call(store);
    let mut call: Unfinished = Box::pin(execute(call, Codec::ok_only(), async {
        tokio::time::sleep(Duration::from_secs(3600)).await;
        Ok::<_, Error>(1u8)
    }));
    runtime.block_on(async {
        let waited = tokio::time::timeout(Duration::from_millis(20), &mut call).await;
        assert!(waited.is_err(), "the body runs");
    });
    (call, key)
}

/// Whether the key's record is the interrupted marker.
fn interrupted(runtime: &tokio::runtime::Runtime, store: &Arc<dyn Store>, key: &Key) -> bool {
    runtime.block_on(async {
        match store.get("", key).await.unwrap() {
            Some(record) if record.state == RecordState::Completed => matches!(
                kind(record.result.as_deref().unwrap_or_default()),
                Ok(RecordKind::Interrupted)
            ),
            _ => false,
        }
    })
}

fn runtime() -> tokio::runtime::Runtime {
    tokio::runtime::Builder::new_current_thread()
        .enable_time()
        .build()
        .unwrap()
}

#[test]
fn on_the_memory_store_the_key_is_marked_in_place() {
    let runtime = runtime();
    let store: Arc<dyn Store> = Arc::new(MemoryStore::new());
    let (call, key) = started(&runtime, &store);
    // Dropped on another thread, which has no runtime.
    std::thread::spawn(move || drop(call)).join().unwrap();
    assert!(interrupted(&runtime, &store, &key), "marked at once");
}

#[test]
fn on_the_memory_store_the_key_is_marked_after_its_runtime_is_gone() {
    let store: Arc<dyn Store> = Arc::new(MemoryStore::new());
    let (call, key) = {
        let runtime = runtime();
        started(&runtime, &store)
    };
    drop(call);
    assert!(interrupted(&runtime(), &store, &key));
}

/// A store whose every answer needs a runtime (as a network store's does): the marking goes to
/// the runtime the call was made on, still running on another thread.
#[test]
fn a_store_that_needs_a_runtime_marks_the_key_on_the_calls_runtime() {
    let memory: Arc<dyn Store> = Arc::new(MemoryStore::new());
    let store: Arc<dyn Store> = Arc::new(FaultStore::new(Arc::clone(&memory), |_| {
        Fault::Delay(Duration::from_millis(1))
    }));
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(1)
        .enable_time()
        .build()
        .unwrap();
    let (call, key) = started(&runtime, &store);
    std::thread::spawn(move || drop(call)).join().unwrap();
    let marked = (0..200).any(|_| {
        std::thread::sleep(Duration::from_millis(5));
        interrupted(&runtime, &memory, &key)
    });
    assert!(marked, "marked by the call's runtime");
}

#[cfg(feature = "sqlite")]
#[test]
fn on_sqlite_the_key_is_marked_by_the_stores_thread() {
    let dir = idem_test_support::TempDir::new("dropped-outside");
    let store: Arc<dyn Store> =
        Arc::new(idem_tools_runtime::SqliteStore::open(dir.path("idem.db")).unwrap());
    let (call, key) = {
        let runtime = runtime();
        started(&runtime, &store)
    };
    // The runtime is gone: the write goes to the store's own thread.
    drop(call);
    let runtime = runtime();
    let marked = (0..200).any(|_| {
        std::thread::sleep(Duration::from_millis(5));
        interrupted(&runtime, &store, &key)
    });
    assert!(marked);
}

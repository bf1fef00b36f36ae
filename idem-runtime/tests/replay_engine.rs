//! Through the engine: results that JSON lost now replay as returned, and a stored record
//! renders for operators.

use idem_tools_runtime::Codec;
use std::collections::BTreeMap;
use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};

use idem_tools_runtime::key::ArgsDigest;
use idem_tools_runtime::replay::render;
use idem_tools_runtime::store::{MemoryStore, Store};
use idem_tools_runtime::{Call, Error, Key, ToolInfo, Turn, execute};
use serde::{Deserialize, Serialize};

const MEASURE: ToolInfo = ToolInfo::idempotent("measure");
const LOOKUP: ToolInfo = ToolInfo::idempotent("lookup").with_cache_errors();

fn turn(id: &str) -> (Turn, Arc<dyn Store>) {
    let store: Arc<dyn Store> = Arc::new(MemoryStore::new());
    (Turn::new(id).with_store(Arc::clone(&store)), store)
}

fn call(tool: &'static ToolInfo, turn: &Turn, arg: &str) -> Call {
    let mut args = ArgsDigest::new(tool.name);
    args.arg("arg", arg).expect("digest");
    let (key, fingerprint) = args.finish(turn.namespace(), turn.id(), tool.name, tool.version);
    Call::new(tool, turn, key, fingerprint)
}

/// Runs `value`'s tool twice with the same key: once executed, once replayed.
async fn run_twice<T>(turn: &Turn, arg: &str, value: T) -> (T, T, usize)
where
    T: Serialize + serde::de::DeserializeOwned + Clone + Send,
{
    let runs = AtomicUsize::new(0);
    let tool = |value: T| {
        let runs = &runs;
        async move {
            runs.fetch_add(1, Ordering::SeqCst);
            Ok::<T, Error>(value)
        }
    };
    let first = execute(
        call(&MEASURE, turn, arg),
        Codec::ok_only(),
        tool(value.clone()),
    )
    .await
    .expect("first call");
    let replayed = execute(call(&MEASURE, turn, arg), Codec::ok_only(), tool(value))
        .await
        .expect("replayed call");
    (first, replayed, runs.load(Ordering::SeqCst))
}

#[tokio::test]
async fn a_nan_result_replays_bit_exact() {
    let (turn, _) = turn("nan");
    let nan = f64::from_bits(0x7ff8_0000_0000_0abc);
    let (first, replayed, runs) = run_twice(&turn, "x", nan).await;
    assert_eq!(replayed.to_bits(), first.to_bits());
    assert_eq!(runs, 1);
    assert_eq!(turn.stats().replayed, 1);
}

#[tokio::test]
async fn some_none_replays_as_some_none() {
    let (turn, _) = turn("some-none");
    let (_, replayed, runs) = run_twice(&turn, "x", Some(None::<String>)).await;
    assert_eq!(replayed, Some(None));
    assert_eq!(runs, 1);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_tuple_keyed_map_is_recorded_so_duplicates_and_retries_run_once() {
    // With JSON this map could not be recorded: the key was released after each run, and three
    // concurrent calls plus a retry ran the tool four times.
    let (turn, _) = turn("grid");
    let runs = AtomicUsize::new(0);
    let grid: BTreeMap<(u8, u8), u32> = [((0, 1), 7), ((3, 2), 9)].into();
    let measure = || {
        let (runs, grid) = (&runs, grid.clone());
        async move {
            runs.fetch_add(1, Ordering::SeqCst);
            tokio::time::sleep(std::time::Duration::from_millis(20)).await;
            Ok::<_, Error>(grid)
        }
    };
    let (a, b, c) = tokio::join!(
        execute(call(&MEASURE, &turn, "g"), Codec::ok_only(), measure()),
        execute(call(&MEASURE, &turn, "g"), Codec::ok_only(), measure()),
        execute(call(&MEASURE, &turn, "g"), Codec::ok_only(), measure()),
    );
    let turn2 = Turn::new("grid").with_store(Arc::clone(turn.store().expect("store")));
    let retry = execute(call(&MEASURE, &turn2, "g"), Codec::ok_only(), measure()).await;
    for result in [a, b, c, retry] {
        assert_eq!(result.expect("call"), grid);
    }
    assert_eq!(
        runs.load(Ordering::SeqCst),
        1,
        "the tool ran more than once"
    );
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
enum LookupError {
    NotFound { id: u128 },
    Engine(String),
}

impl From<Error> for LookupError {
    fn from(e: Error) -> Self {
        LookupError::Engine(e.to_string())
    }
}

#[tokio::test]
async fn a_cached_error_replays_as_returned() {
    let (turn, _) = turn("cached");
    let runs = AtomicUsize::new(0);
    let lookup = || async {
        runs.fetch_add(1, Ordering::SeqCst);
        Err::<Option<Option<u8>>, _>(LookupError::NotFound { id: u128::MAX })
    };
    let first = execute(call(&LOOKUP, &turn, "k"), Codec::ok_and_err(), lookup()).await;
    let replayed = execute(call(&LOOKUP, &turn, "k"), Codec::ok_and_err(), lookup()).await;
    assert_eq!(first, replayed);
    assert_eq!(replayed, Err(LookupError::NotFound { id: u128::MAX }));
    assert_eq!(runs.load(Ordering::SeqCst), 1);
}

#[derive(Debug, Clone, Serialize, Deserialize)]
struct Reading {
    value: f64,
    unit: Option<Option<String>>,
}

#[tokio::test]
async fn a_stored_record_renders_for_operators() {
    let (turn, store) = turn("render");
    let reading = Reading {
        value: f64::NEG_INFINITY,
        unit: Some(None),
    };
    let (_, _, runs) = run_twice(&turn, "r", reading).await;
    assert_eq!(runs, 1);
    let key: Key = call(&MEASURE, &turn, "r").key();
    let record = store
        .get(turn.namespace(), &key)
        .await
        .expect("store")
        .expect("a record");
    let text = render(record.result.as_deref().expect("completed")).expect("render");
    assert_eq!(
        text, "Ok({\n  \"value\": -inf,\n  \"unit\": Some(null)\n})",
        "{text}"
    );
}

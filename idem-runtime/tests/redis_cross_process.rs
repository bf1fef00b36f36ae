//! Several OS processes, each with many tasks and two stores, race on the same keys through one
//! Redis server: every key's tool runs exactly once, and every caller gets that run's result.
//!
//! The parent test re-executes this test binary (`--exact cross_process_child`) with
//! `IDEM_XPROC_CHILD` set; without that variable the child test does nothing. The side effect is
//! an `INCR` on a counter key in Redis, so executions are counted across processes.
#![cfg(feature = "redis")]

mod redis_common;

use idem_tools_runtime::Codec;
use std::process::{Command, Stdio};
use std::sync::Arc;
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use idem_tools_runtime::key::ArgsDigest;
use idem_tools_runtime::store::{RedisStore, Store};
use idem_tools_runtime::{Call, Error, ToolInfo, Turn, execute};
use redis_common::{cleanup, raw, redis_url, unique_prefix};

const PROCESSES: usize = 4;
const TASKS_PER_PROCESS: usize = 8;
const KEYS: usize = 24;

const CHARGE: ToolInfo = ToolInfo::idempotent("charge").with_lease(Duration::from_secs(5));

fn now_ms() -> u64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map_or(0, |d| u64::try_from(d.as_millis()).unwrap_or(u64::MAX))
}

#[test]
fn every_key_runs_exactly_once_across_processes() {
    let Some(url) = redis_url("every_key_runs_exactly_once_across_processes") else {
        return;
    };
    let prefix = unique_prefix("xproc");
    let start_at = now_ms() + 2_000; // children start racing together
    let exe = std::env::current_exe().expect("the test binary");
    let children: Vec<_> = (0..PROCESSES)
        .map(|i| {
            Command::new(&exe)
                .args(["--exact", "cross_process_child", "--nocapture"])
                .env("IDEM_XPROC_CHILD", i.to_string())
                .env("IDEM_XPROC_PREFIX", &prefix)
                .env("IDEM_XPROC_START_AT", start_at.to_string())
                .env("IDEM_REDIS_URL", &url)
                .stdout(Stdio::piped())
                .stderr(Stdio::inherit())
                .spawn()
                .expect("spawn a child process")
        })
        .collect();
    let mut executed = 0;
    for child in children {
        let output = child.wait_with_output().expect("child output");
        let stdout = String::from_utf8_lossy(&output.stdout);
        assert!(output.status.success(), "a child failed:\n{stdout}");
        let line = stdout
            .lines()
            .find_map(|l| l.strip_prefix("XPROC executed="))
            .unwrap_or_else(|| panic!("no summary from a child:\n{stdout}"));
        executed += line.trim().parse::<usize>().expect("a count");
    }
    assert_eq!(executed, KEYS, "executions reported by the processes");

    let runtime = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .unwrap();
    runtime.block_on(async {
        let mut conn = raw(&url).await;
        for i in 0..KEYS {
            let runs: Option<u64> = redis::cmd("GET")
                .arg(format!("{prefix}:runs:{i}"))
                .query_async(&mut conn)
                .await
                .unwrap();
            assert_eq!(runs, Some(1), "key {i} ran {runs:?} times");
        }
        let store = RedisStore::connect(&url)
            .await
            .unwrap()
            .with_prefix(prefix.clone());
        assert_eq!(store.list(Some("xproc"), 1000).await.unwrap().len(), KEYS);
        cleanup(&url, &prefix).await;
    });
}

/// The worker process: does nothing unless started by the test above.
#[test]
fn cross_process_child() {
    let Ok(child) = std::env::var("IDEM_XPROC_CHILD") else {
        return;
    };
    let child: usize = child.parse().expect("a child index");
    let var = |name: &str| std::env::var(name).expect(name);
    let (url, prefix) = (var("IDEM_REDIS_URL"), var("IDEM_XPROC_PREFIX"));
    let start_at: u64 = var("IDEM_XPROC_START_AT").parse().unwrap();
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .unwrap();
    runtime.block_on(async move {
        // Two stores (two connection managers) per process, so calls race through Redis even
        // inside one process instead of only joining each other in memory.
        let mut stores: Vec<Arc<dyn Store>> = Vec::new();
        for _ in 0..2 {
            let store = RedisStore::connect(&url).await.unwrap();
            stores.push(Arc::new(store.with_prefix(prefix.clone())));
        }
        let side_effects = raw(&url).await;
        tokio::time::sleep(Duration::from_millis(start_at.saturating_sub(now_ms()))).await;

        let mut tasks = Vec::new();
        for task in 0..TASKS_PER_PROCESS {
            let store = Arc::clone(&stores[task % 2]);
            let (conn, prefix) = (side_effects.clone(), prefix.clone());
            let offset = (task * 7 + child * 5) % KEYS;
            tasks.push(tokio::spawn(async move {
                for step in 0..KEYS {
                    let i = (offset + step) % KEYS;
                    // Every process derives the same key: same turn id, namespace, arguments.
                    let turn = Turn::new("xproc-turn")
                        .with_namespace("xproc")
                        .with_in_flight_wait(Duration::from_secs(30))
                        // The budget is counted in Redis, across processes: every process
                        // calls every key on purpose.
                        .with_max_attempts_per_key(1_000)
                        .with_actions_per_tool(100_000)
                        .with_store(Arc::clone(&store));
                    let mut args = ArgsDigest::new(CHARGE.name);
                    args.arg("invoice", &i).unwrap();
                    let (k, fp) =
                        args.finish(turn.namespace(), turn.id(), CHARGE.name, CHARGE.version);
                    let mut conn = conn.clone();
                    let counter = format!("{prefix}:runs:{i}");
                    let run = execute(
                        Call::new(&CHARGE, &turn, k, fp),
                        Codec::ok_only(),
                        async move {
                            let runs: u64 = redis::cmd("INCR")
                                .arg(&counter)
                                .query_async(&mut conn)
                                .await
                                .map_err(|e| Error::store("side effect", e))?;
                            tokio::time::sleep(Duration::from_millis(5)).await;
                            Ok::<_, Error>(runs)
                        },
                    )
                    .await;
                    assert_eq!(run.unwrap(), 1, "key {i}: a caller saw a second run");
                }
            }));
        }
        for task in tasks {
            task.await.expect("a task failed");
        }
        println!("XPROC executed={}", idem_tools_runtime::stats().executed);
    });
}

//! Replay and first execution on the durable stores, through their public constructors and
//! `Turn::with_store` only: `sqlite/<what>/small`, `redis/<what>/small`. Included by the
//! `sqlite` and `redis` bench targets.
#![allow(dead_code)] // each of the two targets uses one of the entry points

use std::hint::black_box;
use std::sync::Arc;
use std::time::{Instant, SystemTime, UNIX_EPOCH};

use criterion::{BenchmarkId, Criterion};
use idem_tools::Store;
use tokio::runtime::Runtime;

use crate::support::{Args, SIZES, current_thread, ok, send, turn};

/// A turn id no earlier run used, so a first execution is one even on a reused database.
fn fresh_turn_id(what: &str) -> String {
    let nanos = SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map(|d| d.as_nanos())
        .unwrap_or_default();
    format!("bench/{what}/{}/{nanos}", std::process::id())
}

/// `<name>/replay/small` and `<name>/first/small` on `store`, driven by `rt`.
fn store_group(c: &mut Criterion, rt: &Runtime, name: &str, store: Arc<dyn Store>) {
    let mut group = c.benchmark_group(name);
    let size = SIZES[0];
    let args = Args::new(size, 0);

    let replays = turn(&fresh_turn_id("replay"), Arc::clone(&store));
    rt.block_on(replays.clone().scope(async {
        ok("replay setup", send(&args).await);
    }));
    group.bench_function(BenchmarkId::new("replay", size.name), |b| {
        b.iter_custom(|iters| {
            rt.block_on(replays.clone().scope(async {
                let start = Instant::now();
                for _ in 0..iters {
                    black_box(ok("replay", send(black_box(&args)).await));
                }
                start.elapsed()
            }))
        })
    });
    assert_eq!(
        replays.stats().executed,
        1,
        "{name} replay: the body ran again"
    );

    let firsts = turn(&fresh_turn_id("first"), store);
    let mut next = 0;
    group.bench_function(BenchmarkId::new("first", size.name), |b| {
        b.iter_custom(|iters| {
            let mut args = Args::new(size, 0);
            rt.block_on(firsts.clone().scope(async {
                let start = Instant::now();
                for _ in 0..iters {
                    args.n = next;
                    next += 1;
                    black_box(ok("first", send(black_box(&args)).await));
                }
                start.elapsed()
            }))
        })
    });
    assert_eq!(
        firsts.stats().executed,
        next,
        "{name} first: a call replayed"
    );
    group.finish();
}

/// The SQLite store on a file in a fresh temporary directory.
#[cfg(feature = "sqlite")]
pub fn sqlite(c: &mut Criterion) {
    let dir = std::env::temp_dir().join(fresh_turn_id("sqlite").replace('/', "-"));
    ok("sqlite dir", std::fs::create_dir_all(&dir));
    let store = ok(
        "sqlite",
        idem_tools::SqliteStore::open(dir.join("bench.db")),
    );
    store_group(c, &current_thread(), "sqlite", Arc::new(store));
    if let Err(e) = std::fs::remove_dir_all(&dir) {
        println!("sqlite: could not remove {}: {e}", dir.display());
    }
}

/// The Redis store at `IDEM_REDIS_URL`; skipped with a line when it is not set.
#[cfg(feature = "redis")]
pub fn redis(c: &mut Criterion) {
    let Ok(url) = std::env::var("IDEM_REDIS_URL") else {
        println!("redis: skipped (IDEM_REDIS_URL is not set)");
        return;
    };
    let rt = current_thread();
    let store = ok("redis", rt.block_on(idem_tools::RedisStore::connect(&url)));
    store_group(c, &rt, "redis", Arc::new(store));
}

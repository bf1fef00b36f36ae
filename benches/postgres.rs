//! Transactional tools on PostgreSQL (`--features postgres`, server at `IDEM_POSTGRES_URL`;
//! without it the bench prints a skip line), side by side with the same writes without idem:
//!
//! - `postgres/floor`: `BEGIN`, two updates and an insert, `COMMIT` (a sqlx transaction);
//! - `postgres/floor_claiming`: the floor written by hand to be idempotent: in the same
//!   transaction, the key claimed first (an `INSERT … ON CONFLICT DO NOTHING` into a table of
//!   keys) and the result recorded last (an `UPDATE` of the key's row);
//! - `postgres/transactional_first`: the same writes in an `#[idempotent]` tool with a
//!   `#[transaction]` parameter, a fresh key per call (charge, `BEGIN` + claim, the writes,
//!   record + `COMMIT`);
//! - `postgres/plain_first`: the same writes in their own transaction inside a plain
//!   `#[idempotent]` tool on the `PostgresStore` (claim → body → complete);
//! - `postgres/{transactional,plain}_replay`: a recorded key called again.

use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{Duration, Instant};

use std::hint::black_box;

use criterion::Criterion;
use idem_tools::PostgresStore;
use idem_tools::{Store, Turn, idempotent};
use sqlx::{PgConnection, PgPool};

#[derive(Debug)]
struct BenchError(#[allow(dead_code)] String);

impl From<idem_tools::Error> for BenchError {
    fn from(e: idem_tools::Error) -> Self {
        BenchError(e.to_string())
    }
}

impl From<sqlx::Error> for BenchError {
    fn from(e: sqlx::Error) -> Self {
        BenchError(e.to_string())
    }
}

/// The floor made idempotent by hand: claim the key, write, record the result, in one
/// transaction. (A key found claimed would replay its row's result; the bench's keys are
/// fresh.)
async fn claiming(pool: &PgPool, key: &[u8], n: u64) -> Result<i64, sqlx::Error> {
    let mut tx = pool.begin().await?;
    let claimed = sqlx::query(
        "INSERT INTO bench_keys (key, result) VALUES ($1, NULL) ON CONFLICT (key) DO NOTHING",
    )
    .bind(key)
    .execute(&mut *tx)
    .await?
    .rows_affected();
    assert_eq!(claimed, 1, "the bench's keys are fresh");
    let id = writes(&mut tx, n).await?;
    sqlx::query("UPDATE bench_keys SET result = $2 WHERE key = $1")
        .bind(key)
        .bind(id.to_le_bytes().as_slice())
        .execute(&mut *tx)
        .await?;
    tx.commit().await?;
    Ok(id)
}

async fn writes(conn: &mut PgConnection, n: u64) -> Result<i64, sqlx::Error> {
    sqlx::query("UPDATE bench_accounts SET cents = cents - 1 WHERE id = 1")
        .execute(&mut *conn)
        .await?;
    sqlx::query("UPDATE bench_accounts SET cents = cents + 1 WHERE id = 2")
        .execute(&mut *conn)
        .await?;
    sqlx::query_scalar("INSERT INTO bench_transfers (n) VALUES ($1) RETURNING id")
        .bind(i64::try_from(n).unwrap_or(i64::MAX))
        .fetch_one(&mut *conn)
        .await
}

#[idempotent]
async fn pay(turn: &Turn, #[transaction] tx: &mut PgConnection, n: u64) -> Result<i64, BenchError> {
    let _ = turn;
    Ok(writes(tx, n).await?)
}

#[idempotent(skip(pool))]
async fn pay_plain(turn: &Turn, pool: &PgPool, n: u64) -> Result<i64, BenchError> {
    let _ = turn;
    let mut tx = pool.begin().await?;
    let id = writes(&mut tx, n).await?;
    tx.commit().await?;
    Ok(id)
}

fn postgres(c: &mut Criterion) {
    let Some(url) = std::env::var("IDEM_POSTGRES_URL")
        .ok()
        .filter(|u| !u.is_empty())
    else {
        println!("postgres: skipped (IDEM_POSTGRES_URL is not set)");
        return;
    };
    let rt = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .expect("a runtime");
    let (pool, turn) = rt.block_on(async {
        let pool = sqlx::postgres::PgPoolOptions::new()
            .max_connections(4)
            .test_before_acquire(false)
            .connect(&url)
            .await
            .expect("connect");
        sqlx::raw_sql(
            "DROP TABLE IF EXISTS bench_accounts, bench_transfers, bench_keys;
             CREATE TABLE bench_accounts (id bigint PRIMARY KEY, cents bigint NOT NULL);
             INSERT INTO bench_accounts VALUES (1, 1000000000), (2, 0);
             CREATE TABLE bench_transfers (id bigserial PRIMARY KEY, n bigint NOT NULL);
             CREATE TABLE bench_keys (key bytea PRIMARY KEY, result bytea);",
        )
        .execute(&pool)
        .await
        .expect("create the tables");
        let store = PostgresStore::from_pool(pool.clone()).await.expect("open");
        let turn = Turn::new(format!("bench-{}", std::process::id()))
            .with_max_attempts_per_key(u32::MAX)
            .with_actions_per_tool(u32::MAX)
            .with_store(Arc::new(store) as Arc<dyn Store>);
        (pool, turn)
    });
    let fresh = AtomicU64::new(1 << 40);
    let next = || fresh.fetch_add(1, Ordering::Relaxed);
    let mut group = c.benchmark_group("postgres");
    group.bench_function("floor", |b| {
        b.iter_custom(|iters| {
            timed(&rt, iters, |_| async {
                let mut tx = pool.begin().await.expect("begin");
                black_box(writes(&mut tx, 0).await.expect("writes"));
                tx.commit().await.expect("commit");
            })
        });
    });
    group.bench_function("floor_claiming", |b| {
        b.iter_custom(|iters| {
            timed(&rt, iters, |_| async {
                let key = blake3::hash(&next().to_le_bytes());
                black_box(claiming(&pool, key.as_bytes(), 0).await.expect("writes"));
            })
        });
    });
    group.bench_function("transactional_first", |b| {
        b.iter_custom(|iters| {
            timed(&rt, iters, |_| async {
                black_box(pay(&turn, next()).await.expect("runs"));
            })
        });
    });
    group.bench_function("plain_first", |b| {
        b.iter_custom(|iters| {
            timed(&rt, iters, |_| async {
                black_box(pay_plain(&turn, &pool, next()).await.expect("runs"));
            })
        });
    });
    rt.block_on(async {
        pay(&turn, 7).await.expect("records");
        pay_plain(&turn, &pool, 7).await.expect("records");
    });
    group.bench_function("transactional_replay", |b| {
        b.iter_custom(|iters| {
            timed(&rt, iters, |_| async {
                black_box(pay(&turn, 7).await.expect("replays"));
            })
        });
    });
    group.bench_function("plain_replay", |b| {
        b.iter_custom(|iters| {
            timed(&rt, iters, |_| async {
                black_box(pay_plain(&turn, &pool, 7).await.expect("replays"));
            })
        });
    });
    group.finish();
}

/// `iters` calls of `f`, one after the other in one `block_on`.
fn timed<F, Fut>(rt: &tokio::runtime::Runtime, iters: u64, f: F) -> Duration
where
    F: Fn(u64) -> Fut,
    Fut: Future<Output = ()>,
{
    rt.block_on(async {
        let start = Instant::now();
        for i in 0..iters {
            f(i).await;
        }
        start.elapsed()
    })
}

criterion::criterion_group! {
    name = benches;
    config = Criterion::default()
        .warm_up_time(Duration::from_secs(1))
        .measurement_time(Duration::from_secs(3));
    targets = postgres
}
criterion::criterion_main!(benches);

//! The tools the processes call: `pay`, transactional, and `send`, plain; the store and the
//! application's ledger they share.

use std::sync::Arc;
use std::time::Duration;

use idem_tools_runtime::engine::transactional;
use idem_tools_runtime::key::ArgsDigest;
use idem_tools_runtime::store::PostgresStore;
use idem_tools_runtime::{Call, Codec, Error, ToolInfo, Turn};
use rand::Rng;
use sqlx::PgConnection;

use crate::postgres_common::Failure;

pub(crate) static PAY: ToolInfo = ToolInfo::idempotent("pay");
pub(crate) const TURN_ID: &str = "fault-turn";

/// The turn every process uses: same keys everywhere, and a budget no kill loop exhausts.
pub(crate) fn turn(store: &PostgresStore) -> Turn {
    Turn::new(TURN_ID)
        .with_max_attempts_per_key(1_000_000)
        .with_actions_per_tool(1_000_000)
        .with_in_flight_wait(Duration::from_secs(10))
        .with_store(Arc::new(store.clone()))
}

/// The transactional call of `pay(memo)`: two rows, with pauses of up to `pause` ms around
/// them; `phase` is told where the body is.
pub(crate) async fn pay(
    store: &PostgresStore,
    memo: &str,
    pause: u64,
    phase: impl Fn(&str),
) -> Result<i64, Failure> {
    let turn = turn(store);
    let mut args = ArgsDigest::new(PAY.name);
    args.arg("memo", memo).expect("encodes");
    let (key, fingerprint) = args.finish(turn.namespace(), turn.id(), PAY.name, 1);
    let call = Call::new(&PAY, &turn, key, fingerprint);
    let nap = |max: u64| {
        let ms = rand::rng().random_range(0..=max);
        tokio::time::sleep(Duration::from_millis(ms))
    };
    transactional::execute(
        call,
        Codec::ok_only(),
        async |conn: &mut PgConnection| -> Result<i64, Failure> {
            phase("before");
            nap(pause).await;
            let id: i64 =
                sqlx::query_scalar("INSERT INTO ledger (memo, part) VALUES ($1, 1) RETURNING id")
                    .bind(memo)
                    .fetch_one(&mut *conn)
                    .await?;
            phase("between");
            nap(pause).await;
            sqlx::query("INSERT INTO ledger (memo, part) VALUES ($1, 2)")
                .bind(memo)
                .execute(&mut *conn)
                .await?;
            phase("after");
            nap(pause).await;
            Ok(id)
        },
    )
    .await
}

/// How many attempts the crash-budget key may make in its turn.
pub(crate) const CRASH_BUDGET: u32 = 2;

/// A transactional call whose body writes its row, says `in body` and waits to be killed (the
/// process crashes mid-body every time), in a turn of [`CRASH_BUDGET`] attempts per key.
pub(crate) async fn crash_in_body(store: &PostgresStore) -> Result<i64, Failure> {
    let turn = Turn::new("crash-budget-turn")
        .with_max_attempts_per_key(CRASH_BUDGET)
        .with_store(Arc::new(store.clone()));
    let mut args = ArgsDigest::new(PAY.name);
    args.arg("memo", "crash-budget").expect("encodes");
    let (key, fingerprint) = args.finish(turn.namespace(), turn.id(), PAY.name, 1);
    let call = Call::new(&PAY, &turn, key, fingerprint);
    transactional::execute(
        call,
        Codec::ok_only(),
        async |conn: &mut PgConnection| -> Result<i64, Failure> {
            let id: i64 = sqlx::query_scalar(
                "INSERT INTO ledger (memo, part) VALUES ('crash-budget', 1) RETURNING id",
            )
            .fetch_one(&mut *conn)
            .await?;
            println!("in body");
            tokio::time::sleep(Duration::from_secs(60)).await;
            Ok(id)
        },
    )
    .await
}

/// Keys of the plain race.
pub(crate) const RACE_KEYS: usize = 50;

/// A plain tool with a 1 s lease (so that a killed holder frees its key quickly).
pub(crate) static SEND: ToolInfo = ToolInfo::idempotent("send").with_lease(Duration::from_secs(1));

/// A plain (not transactional) call of `send(memo)` on the store: its side effect, one row
/// written through the pool after `pause`, commits on its own.
pub(crate) async fn plain(
    store: &PostgresStore,
    memo: &str,
    pause: Duration,
) -> Result<i64, Error> {
    let turn = turn(store).with_in_flight_wait(Duration::from_millis(200));
    let mut args = ArgsDigest::new(SEND.name);
    args.arg("memo", memo).expect("encodes");
    let (key, fingerprint) = args.finish(turn.namespace(), turn.id(), SEND.name, 1);
    let call = Call::new(&SEND, &turn, key, fingerprint);
    let pool = store.pool().clone();
    idem_tools_runtime::execute(call, Codec::ok_only(), async move {
        if memo == "hang" {
            sqlx::query("INSERT INTO ledger (memo, part) VALUES ('hang', 0)")
                .execute(&pool)
                .await
                .map_err(|e| Error::store("test", e))?;
            println!("started");
        }
        tokio::time::sleep(pause).await;
        sqlx::query_scalar("INSERT INTO ledger (memo, part) VALUES ($1, 1) RETURNING id")
            .bind(memo)
            .fetch_one(&pool)
            .await
            .map_err(|e| Error::store("test", e))
    })
    .await
}

/// Creates the application's tables in `schema`: the ledger and a deferred trigger that
/// sleeps up to 10 ms at commit, so that kills land in `COMMIT` too.
pub(crate) async fn create_ledger(url: &str, schema: &str) {
    let pool = sqlx::PgPool::connect(url).await.expect("connect");
    sqlx::raw_sql(&format!(
        "CREATE SCHEMA IF NOT EXISTS {schema};
         CREATE TABLE {schema}.ledger (id bigserial PRIMARY KEY, memo text NOT NULL,
                                       part int NOT NULL);
         CREATE FUNCTION {schema}.slow_commit() RETURNS trigger LANGUAGE plpgsql AS $$
             BEGIN PERFORM pg_sleep(random() * 0.01); RETURN NULL; END $$;
         CREATE CONSTRAINT TRIGGER slow_commit AFTER INSERT ON {schema}.ledger
             DEFERRABLE INITIALLY DEFERRED FOR EACH ROW
             EXECUTE FUNCTION {schema}.slow_commit();"
    ))
    .execute(&pool)
    .await
    .expect("create the ledger");
    pool.close().await;
}

/// The store the processes share: idem's tables and the ledger in `schema`, found through the
/// search path; connections named so that the parent can terminate them.
pub(crate) async fn open(url: &str, schema: &str, name: &str) -> Result<PostgresStore, Error> {
    let options: sqlx::postgres::PgConnectOptions = url.parse().expect("a URL");
    let options = options
        .options([("search_path", schema)])
        .application_name(name);
    let pool = sqlx::postgres::PgPoolOptions::new()
        .max_connections(3)
        .acquire_timeout(Duration::from_secs(2))
        .test_before_acquire(false)
        .connect_lazy_with(options);
    PostgresStore::from_pool(pool).await
}

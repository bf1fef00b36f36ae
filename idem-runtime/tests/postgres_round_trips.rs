//! Round trips on the wire, counted by a proxy between the client and a real PostgreSQL server
//! (`IDEM_POSTGRES_URL`): a transactional first execution costs at most one round trip more
//! than the same writes in a transaction without idem, and a replay costs one.
//!
//! Every use of a `sqlx` pool connection ends with a ping when the connection goes back to the
//! pool; it is counted once, from a plain `SELECT 1`, and taken off every figure.
#![cfg(feature = "postgres")]

mod postgres_common;

use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Duration;

use idem_tools_runtime::engine::transactional;
use idem_tools_runtime::key::ArgsDigest;
use idem_tools_runtime::store::{PostgresStore, Store};
use idem_tools_runtime::{Call, Codec, Error, ToolInfo, Turn};
use postgres_common::{postgres_url, proxy, unique_schema};
use sqlx::{Connection, PgConnection};

static PAY: ToolInfo = ToolInfo::idempotent("pay");

/// The tool's writes: two updates and an insert, as a transfer makes.
async fn writes(conn: &mut PgConnection, n: i64) -> Result<i64, sqlx::Error> {
    sqlx::query("UPDATE accounts SET cents = cents - 1 WHERE id = 1")
        .execute(&mut *conn)
        .await?;
    sqlx::query("UPDATE accounts SET cents = cents + 1 WHERE id = 2")
        .execute(&mut *conn)
        .await?;
    sqlx::query_scalar("INSERT INTO transfers (n) VALUES ($1) RETURNING id")
        .bind(n)
        .fetch_one(&mut *conn)
        .await
}

/// Round trips made by `work`, and the pool's release pings after it.
async fn count<F: Future>(trips: &AtomicU64, work: F) -> u64 {
    tokio::time::sleep(Duration::from_millis(50)).await;
    let before = trips.load(Ordering::SeqCst);
    work.await;
    tokio::time::sleep(Duration::from_millis(50)).await;
    trips.load(Ordering::SeqCst) - before
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_transactional_call_costs_one_round_trip_more_than_its_writes() {
    let Some(url) = postgres_url("a_transactional_call_costs_one_round_trip_more_than_its_writes")
    else {
        return;
    };
    let schema = unique_schema("trips");
    let (options, trips) = proxy(&url, None).await;
    let options = options.options([("search_path", schema.as_str())]);
    let pool = sqlx::postgres::PgPoolOptions::new()
        .max_connections(1)
        .test_before_acquire(false)
        .connect_lazy_with(options);
    sqlx::raw_sql(&format!(
        "CREATE SCHEMA {schema};
         CREATE TABLE {schema}.accounts (id bigint PRIMARY KEY, cents bigint NOT NULL);
         INSERT INTO {schema}.accounts VALUES (1, 1000000), (2, 0);
         CREATE TABLE {schema}.transfers (id bigserial PRIMARY KEY, n bigint NOT NULL);"
    ))
    .execute(&pool)
    .await
    .expect("create the tables");
    let store = PostgresStore::from_pool(pool.clone()).await.expect("open");
    let shared: Arc<dyn Store> = Arc::new(store.clone());
    let turn = Turn::new("trips").with_store(Arc::clone(&shared));
    let call = |n: i64| {
        let mut args = ArgsDigest::new(PAY.name);
        args.arg("n", &n).expect("encodes");
        let (key, fingerprint) = args.finish(turn.namespace(), turn.id(), PAY.name, 1);
        Call::new(&PAY, &turn, key, fingerprint)
    };
    let floor = |n: i64| {
        let pool = pool.clone();
        async move {
            let mut tx = pool.begin().await.expect("begin");
            writes(&mut tx, n).await.expect("writes");
            tx.commit().await.expect("commit");
        }
    };
    let transactional = |n: i64| {
        let call = call(n);
        async move {
            transactional::execute(call, Codec::ok_only(), async |conn: &mut PgConnection| {
                writes(conn, n).await.map_err(|e| Error::store("writes", e))
            })
            .await
            .expect("runs")
        }
    };
    // Warm up: statements prepared, the connection open.
    floor(0).await;
    transactional(0).await;
    sqlx::query("SELECT 1")
        .execute(&pool)
        .await
        .expect("select");
    let ping = count(&trips, async {
        sqlx::query("SELECT 1")
            .execute(&pool)
            .await
            .expect("select");
    })
    .await
        - 1;
    let floor_trips = count(&trips, floor(1)).await - ping;
    let first = count(&trips, transactional(2)).await - ping;
    let replay = count(&trips, transactional(2)).await - ping;
    println!(
        "postgres round trips: floor={floor_trips} transactional_first={first} \
         transactional_replay={replay} (pool release ping: {ping})"
    );
    assert_eq!(floor_trips, 5, "BEGIN, three writes, COMMIT");
    assert!(first <= floor_trips + 1, "first execution: {first}");
    assert_eq!(replay, 1, "a replay is one round trip");
    let mut conn = pool.acquire().await.expect("acquire");
    sqlx::query(&format!("DROP SCHEMA {schema} CASCADE"))
        .execute(&mut *conn)
        .await
        .expect("drop");
    conn.close_on_drop();
    let _ = conn.ping().await;
}

/// A replay is answered by the plain read of the `begin` statement: `idem_begin`, the
/// PL/pgSQL function that claims, is not called for a live record (it costs about twice the
/// read). Shown by replacing the function with one that fails: replays still answer, a new
/// key fails.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_replay_is_a_plain_read_that_calls_no_function() {
    let Some(url) = postgres_url("a_replay_is_a_plain_read_that_calls_no_function") else {
        return;
    };
    let schema = unique_schema("read");
    let options: sqlx::postgres::PgConnectOptions = url.parse().expect("a URL");
    let pool = sqlx::postgres::PgPoolOptions::new()
        .max_connections(2)
        .connect_lazy_with(options.options([("search_path", schema.as_str())]));
    sqlx::raw_sql(&format!("CREATE SCHEMA {schema}"))
        .execute(&pool)
        .await
        .expect("create the schema");
    let store = PostgresStore::from_pool(pool.clone()).await.expect("open");
    let turn = Turn::new("read").with_store(Arc::new(store));
    let pay = |n: i64| {
        let mut args = ArgsDigest::new(PAY.name);
        args.arg("n", &n).expect("encodes");
        let (key, fingerprint) = args.finish(turn.namespace(), turn.id(), PAY.name, 1);
        let call = Call::new(&PAY, &turn, key, fingerprint);
        idem_tools_runtime::execute(
            call,
            Codec::ok_only(),
            async move { Ok::<_, Error>(n * 10) },
        )
    };
    assert_eq!(pay(1).await.expect("runs"), 10);
    sqlx::raw_sql(
        "CREATE OR REPLACE FUNCTION idem_begin(
             p_namespace text, p_key bytea, p_tool text, p_fingerprint bytea, p_lease_ms bigint,
             p_token bigint, p_max_attempts bigint, p_turn bytea, p_max_calls bigint,
             p_window_ms bigint, p_claim boolean, p_lock_timeout_ms bigint, p_turn_id text,
             p_tool_counter bytea, p_max_tool bigint, p_holder text)
         RETURNS TABLE (o_answer text, o_state text, o_fingerprint bytea, o_result bytea,
                        o_token bigint, o_n bigint, o_lim bigint, o_holder text)
         LANGUAGE plpgsql VOLATILE AS $$
         BEGIN RAISE EXCEPTION 'idem_begin was called'; END $$;",
    )
    .execute(&pool)
    .await
    .expect("replace idem_begin");
    for _ in 0..3 {
        assert_eq!(pay(1).await.expect("replays without idem_begin"), 10);
    }
    let fresh = pay(2).await;
    assert!(
        matches!(&fresh, Err(Error::Store { .. })) && format!("{fresh:?}").contains("was called"),
        "a new key needs idem_begin: {fresh:?}"
    );
    sqlx::query(&format!("DROP SCHEMA {schema} CASCADE"))
        .execute(&pool)
        .await
        .expect("drop");
}

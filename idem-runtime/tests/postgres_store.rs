//! `PostgresStore` behaviours beyond the conformance suite, on a real server
//! (`IDEM_POSTGRES_URL`).
#![cfg(feature = "postgres")]

mod postgres_common;

use std::time::Duration;

use idem_tools_runtime::key::{Fingerprint, Key};
use idem_tools_runtime::store::budget::TurnIdentity;
use idem_tools_runtime::store::{
    Begin, BeginRequest, Charge, Lease, LeaseToken, PostgresStore, Store,
};
use postgres_common::{cleanup, postgres_url, store};

/// Holds the turn's budget row of `turn` in an open transaction, so that a claim charging
/// that turn waits inside its statement until the transaction ends.
async fn hold_budget_row(
    store: &PostgresStore,
    turn: &TurnIdentity,
) -> sqlx::Transaction<'static, sqlx::Postgres> {
    let schema = store.schema().expect("a schema").to_owned();
    let mut holder = store.pool().begin().await.expect("begin");
    sqlx::query(&format!(
        "INSERT INTO \"{schema}\".idem_budgets (id, count, expires_at_ms) VALUES ($1, 0, \
         9000000000000) ON CONFLICT (id) DO UPDATE SET count = 0"
    ))
    .bind(turn.turn_counter().as_slice())
    .execute(&mut *holder)
    .await
    .expect("lock the budget row");
    holder
}

/// A store whose gone holders' claims end `grace` after they are found (its reply timeout).
async fn store_with_grace(url: &str, tag: &str, grace: Duration) -> PostgresStore {
    PostgresStore::builder()
        .schema(postgres_common::unique_schema(tag))
        .reply_timeout(grace)
        .connect(url)
        .await
        .expect("the test server is reachable")
}

/// A claim of `key` for `turn` with a turn-wide cap (so that it charges the held row).
fn claim_request<'a>(
    key: &'a Key,
    fingerprint: &'a Fingerprint,
    turn: TurnIdentity,
    token: LeaseToken,
) -> BeginRequest<'a> {
    BeginRequest {
        namespace: "ns",
        key,
        tool: "t",
        turn: "t",
        fingerprint,
        lease: Duration::from_secs(60),
        ttl: Duration::from_secs(60),
        token,
        charge: Charge {
            max_calls: Some(10),
            max_tool_actions: None,
            turn,
            ..Charge::unlimited()
        },
    }
}

/// Sends a `release` of `key` with `token` while the claim it gives back still waits for
/// `holder`, then lets the claim through: the release waits for it to land and gives it back,
/// leaving no orphan claim. Drops the store's schema.
async fn released_after_it_lands(
    store: &PostgresStore,
    key: Key,
    token: LeaseToken,
    holder: sqlx::Transaction<'static, sqlx::Postgres>,
) {
    let lease = Lease {
        namespace: "ns".into(),
        key,
        token,
    };
    let release = tokio::spawn({
        let store = store.clone();
        async move { store.release(&lease).await }
    });
    tokio::time::sleep(Duration::from_millis(150)).await;
    holder.commit().await.expect("let the claim through");
    let released = release.await.expect("joins");
    assert!(
        released.is_ok(),
        "the landed claim was given back: {released:?}"
    );
    assert_eq!(
        store.get("ns", &key).await.expect("get"),
        None,
        "no orphan claim"
    );
    cleanup(store).await;
}

/// A runtime of its own, for tests that drop things outside it.
fn runtime() -> tokio::runtime::Runtime {
    tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .expect("a runtime")
}

/// Polls `op` on `runtime` for 100 ms (it must still be waiting), then drops it on this
/// thread, outside the runtime; whether the drop did not panic.
fn drop_outside<T>(
    runtime: &tokio::runtime::Runtime,
    op: idem_tools_runtime::store::StoreFuture<'_, T>,
) -> bool {
    let op = drop_outside_later(runtime, op);
    std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| drop(op))).is_ok()
}

/// A `begin` polled on a runtime until its claim is in flight, then dropped on a thread outside
/// any runtime (a future kept past the `block_on` that polled it): no panic, and the claim
/// still lands on the runtime it started on, so a `release` with its token gives it back.
#[test]
fn a_begin_dropped_outside_its_runtime_lands_and_is_given_back() {
    let Some(url) = postgres_url("a_begin_dropped_outside_its_runtime_lands_and_is_given_back")
    else {
        return;
    };
    let runtime = runtime();
    let store = runtime.block_on(store(&url, "dropped_outside"));
    let turn = TurnIdentity::new("ns", "turn-dropped-outside");
    let (key, fingerprint) = (Key::from_bytes([9; 32]), Fingerprint::from_bytes([8; 32]));
    let holder = runtime.block_on(hold_budget_row(&store, &turn));
    let token = LeaseToken::generate();
    let begin = store.begin(claim_request(&key, &fingerprint, turn, token));
    let dropped = drop_outside(&runtime, begin);
    assert!(dropped, "dropping the begin outside a runtime panicked");
    runtime.block_on(released_after_it_lands(&store, key, token, holder));
}

/// A `begin` whose caller gave up while it waited is given back by a `release` with its
/// token, even though the claim lands after the release was sent: no key is left claimed by
/// nobody (connections of a pool keep no order between them).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_begin_given_up_midway_is_given_back_after_it_lands() {
    let Some(url) = postgres_url("a_begin_given_up_midway_is_given_back_after_it_lands") else {
        return;
    };
    let store = store(&url, "given_up").await;
    let turn = TurnIdentity::new("ns", "turn-given-up");
    let (key, fingerprint) = (Key::from_bytes([7; 32]), Fingerprint::from_bytes([8; 32]));
    let holder = hold_budget_row(&store, &turn).await;
    let token = LeaseToken::generate();
    let request = claim_request(&key, &fingerprint, turn, token);
    let gave_up = tokio::time::timeout(Duration::from_millis(50), store.begin(request)).await;
    assert!(gave_up.is_err(), "the claim was still waiting");
    released_after_it_lands(&store, key, token, holder).await;
}

/// Any operation dropped unfinished on a thread outside a runtime (here a `complete` waiting
/// for a row lock, polled on a runtime, kept past its `block_on`) drops its pooled connection
/// inside the runtime it was polled on: no panic.
#[test]
fn an_operation_dropped_outside_its_runtime_does_not_panic() {
    let Some(url) = postgres_url("an_operation_dropped_outside_its_runtime_does_not_panic") else {
        return;
    };
    let runtime = runtime();
    let store = runtime.block_on(store(&url, "op_dropped_outside"));
    let (key, fingerprint) = (Key::from_bytes([5; 32]), Fingerprint::from_bytes([8; 32]));
    let token = LeaseToken::generate();
    let turn = TurnIdentity::new("ns", "turn-op-dropped");
    let mut request = claim_request(&key, &fingerprint, turn, token);
    request.charge.max_calls = None;
    let claimed = runtime.block_on(store.begin(request)).expect("begin");
    assert_eq!(claimed, idem_tools_runtime::store::Begin::Claimed);
    // Lock the record's row, so that `complete` waits inside its statement.
    let schema = store.schema().expect("a schema").to_owned();
    let holder = runtime.block_on(async {
        let mut holder = store.pool().begin().await.expect("begin");
        sqlx::query(&format!(
            "SELECT 1 FROM \"{schema}\".idem_records WHERE key = $1 FOR UPDATE"
        ))
        .bind(key.as_bytes().as_slice())
        .execute(&mut *holder)
        .await
        .expect("lock the row");
        holder
    });
    let lease = Lease {
        namespace: "ns".into(),
        key,
        token,
    };
    let complete = store.complete(&lease, b"result", Duration::from_secs(60));
    let dropped = drop_outside(&runtime, complete);
    assert!(dropped, "dropping an operation outside a runtime panicked");
    runtime.block_on(async {
        holder.rollback().await.expect("rollback");
        cleanup(&store).await;
    });
}

/// Opening a store dropped unfinished on a thread outside any runtime — waiting for the
/// migration's advisory lock, which another process holds — drops its pooled connection inside
/// the runtime: no panic.
#[test]
fn opening_a_store_dropped_outside_its_runtime_does_not_panic() {
    let Some(url) = postgres_url("opening_a_store_dropped_outside_its_runtime_does_not_panic")
    else {
        return;
    };
    let runtime = runtime();
    let schema = postgres_common::unique_schema("open_dropped");
    let holder = runtime.block_on(async {
        let pool = sqlx::PgPool::connect(&url).await.expect("connect");
        let mut holder = pool.begin().await.expect("begin");
        sqlx::query("SELECT pg_advisory_xact_lock(hashtextextended('idem schema ' || $1, 0))")
            .bind(&schema)
            .execute(&mut *holder)
            .await
            .expect("take the migration's lock");
        holder
    });
    let opening = idem_tools_runtime::store::StoreFuture::new(
        PostgresStore::builder()
            .schema(schema.clone())
            .connect(&url),
    );
    let dropped = drop_outside(&runtime, opening);
    assert!(dropped, "dropping the opening outside a runtime panicked");
    runtime.block_on(async {
        holder.rollback().await.expect("rollback");
        let store = PostgresStore::builder()
            .schema(schema)
            .connect(&url)
            .await
            .expect("opens once the lock is gone");
        cleanup(&store).await;
    });
}

thread_local! {
    /// Where the child below leaves an operation for its thread's exit to drop.
    static LEFT: std::cell::RefCell<Option<idem_tools_runtime::store::StoreFuture<'static, Option<idem_tools_runtime::store::Record>>>> =
        const { std::cell::RefCell::new(None) };
}

/// The child of the test below (does nothing unless `IDEM_PG_TLS_CHILD` is set): leaves an
/// operation in flight in a thread-local whose destructor runs after Tokio's context is gone.
#[test]
fn thread_exit_child() {
    let Ok(url) = std::env::var("IDEM_PG_TLS_CHILD") else {
        return;
    };
    let runtime: &'static tokio::runtime::Runtime = Box::leak(Box::new(runtime()));
    let store: &'static PostgresStore = Box::leak(Box::new(runtime.block_on(store(&url, "tls"))));
    let key: &'static Key = Box::leak(Box::new(Key::from_bytes([3; 32])));
    let schema = store.schema().expect("a schema").to_owned();
    // Hold the table, so that `get` waits inside its statement.
    let holder = runtime.block_on(async move {
        let mut holder = store.pool().begin().await.expect("begin");
        sqlx::query(&format!(
            "LOCK TABLE \"{schema}\".idem_records IN ACCESS EXCLUSIVE MODE"
        ))
        .execute(&mut *holder)
        .await
        .expect("lock");
        holder
    });
    std::thread::spawn(move || {
        LEFT.with(|_| {}); // registered before Tokio's context: destroyed after it
        let op = drop_outside_later(runtime, store.get("ns", key));
        LEFT.with(|left| *left.borrow_mut() = Some(op));
    })
    .join()
    .expect("the thread exits cleanly");
    runtime.block_on(async move {
        holder.rollback().await.expect("rollback");
        cleanup(store).await;
    });
    println!("CHILD OK");
}

/// `op` polled on `runtime` for 100 ms (it must still be waiting), and handed back still in
/// flight.
fn drop_outside_later<'a, T>(
    runtime: &tokio::runtime::Runtime,
    mut op: idem_tools_runtime::store::StoreFuture<'a, T>,
) -> idem_tools_runtime::store::StoreFuture<'a, T> {
    runtime.block_on(async {
        let waited = tokio::time::timeout(
            Duration::from_millis(100),
            std::future::poll_fn(|cx| std::pin::Pin::new(&mut op).poll(cx)),
        )
        .await;
        assert!(waited.is_err(), "the operation was still waiting");
    });
    op
}

/// An operation in flight dropped by a thread-local's destructor at thread exit, after
/// Tokio's own context is gone (no runtime can be entered then): leaked, not a panic in a
/// destructor, which would abort the process. Run in a child process.
#[test]
fn an_operation_dropped_at_thread_exit_does_not_abort() {
    let Some(url) = postgres_url("an_operation_dropped_at_thread_exit_does_not_abort") else {
        return;
    };
    let mut child = idem_test_support::Kid::spawn(
        "thread_exit_child",
        [("IDEM_PG_TLS_CHILD", url)],
        Duration::from_secs(60),
    );
    assert_eq!(child.expect("CHILD"), "OK");
    child.finish();
}

/// A claim left by a process that is certainly gone (on this host) is claimed again a reply
/// timeout later (not at its lease's end); one
/// whose process still runs, or is stopped, waits for its lease. A version 2 schema (claims
/// without a holder) is migrated, and its claims keep their leases.
#[cfg(target_os = "linux")]
#[tokio::test]
async fn a_claim_whose_process_is_gone_is_claimed_again_at_once() {
    use idem_tools_runtime::store::Begin;
    use idem_tools_runtime::store::holder::Holder;

    let Some(url) = postgres_url("a_claim_whose_process_is_gone_is_claimed_again_at_once") else {
        return;
    };
    let grace = Duration::from_millis(500);
    let store = store_with_grace(&url, "holders", grace).await;
    let schema = store.schema().expect("a schema").to_owned();
    let turn = TurnIdentity::new("ns", "t");
    let begin = |key: Key, n: u8| {
        let store = store.clone();
        async move {
            let fingerprint = Fingerprint::from_bytes([n; 32]);
            let mut request = claim_request(&key, &fingerprint, turn, LeaseToken::generate());
            request.charge.max_calls = None;
            store.begin(request).await.expect("begin")
        }
    };
    let set_holder = |key: Key, holder: Option<String>| {
        let (pool, schema) = (store.pool().clone(), schema.clone());
        async move {
            sqlx::query(&format!(
                "UPDATE \"{schema}\".idem_records SET holder = $1 WHERE key = $2"
            ))
            .bind(holder)
            .bind(key.as_bytes().as_slice())
            .execute(&pool)
            .await
            .expect("set the holder");
        }
    };
    let processes =
        idem_test_support::HolderProcesses::start(|pid| Holder::of_pid(pid).map(|h| h.encode()));

    let mut cases = vec![
        ("a stopped process", Some(processes.stopped.clone()), false),
        (
            "this process",
            Holder::this_process_text().map(str::to_owned),
            false,
        ),
        ("no holder", None, false),
    ];
    if let Some(text) = processes.exited.clone() {
        cases.push(("an exited process", Some(text), true));
    }
    for (i, (case, holder, gone)) in cases.into_iter().enumerate() {
        let key = Key::from_bytes([i as u8 + 1; 32]);
        assert_eq!(begin(key, 1).await, Begin::Claimed, "{case}");
        set_holder(key, holder).await;
        let mut second = begin(key, 2).await;
        if gone {
            // Left a reply timeout, for a result it sent before it died to land; then free.
            assert!(
                matches!(second, Begin::InFlight { .. }),
                "{case}: {second:?}"
            );
            tokio::time::sleep(grace + Duration::from_millis(100)).await;
            second = begin(key, 2).await;
            assert_eq!(second, Begin::Claimed, "{case}");
            let record = store.get("ns", &key).await.unwrap().unwrap();
            assert_eq!(
                record.fingerprint,
                Fingerprint::from_bytes([2; 32]),
                "{case}"
            );
        } else {
            assert!(
                matches!(second, Begin::InFlight { fingerprint } if fingerprint == Fingerprint::from_bytes([1; 32])),
                "{case}: {second:?}"
            );
        }
    }
    drop(processes);

    // Version 2, as it was: no holder column, its idem_begin.
    let key = Key::from_bytes([99; 32]);
    assert_eq!(begin(key, 1).await, Begin::Claimed);
    sqlx::raw_sql(&format!(
        "SET search_path TO \"{schema}\"; ALTER TABLE idem_records DROP COLUMN holder; \
         UPDATE idem_schema SET version = 2;"
    ))
    .execute(store.pool())
    .await
    .expect("back to version 2");
    let reopened = PostgresStore::builder()
        .schema(schema.clone())
        .connect(&url)
        .await
        .expect("migrates");
    let version: i32 = sqlx::query_scalar(&format!("SELECT version FROM \"{schema}\".idem_schema"))
        .fetch_one(reopened.pool())
        .await
        .unwrap();
    assert_eq!(version, idem_tools_runtime::store::postgres::SCHEMA_VERSION);
    let fingerprint = Fingerprint::from_bytes([2; 32]);
    let mut request = claim_request(&key, &fingerprint, turn, LeaseToken::generate());
    request.charge.max_calls = None;
    assert!(matches!(
        reopened.begin(request).await.unwrap(),
        Begin::InFlight { .. }
    ));
    cleanup(&store).await;
}

/// A process that died right after sending its result: the result may land after another
/// process found the process gone. Its claim is left a reply timeout (the grace) before it is
/// free: a result that lands meanwhile is replayed, and the tool does not run again; without
/// one, the key is claimed once the grace is over.
#[cfg(target_os = "linux")]
#[tokio::test]
async fn a_result_its_gone_holder_sent_lands_before_the_claim_is_freed() {
    use idem_tools_runtime::store::holder::Holder;
    use idem_tools_runtime::store::{Begin, FirstResult};

    let Some(url) = postgres_url("a_result_its_gone_holder_sent_lands_before_the_claim_is_freed")
    else {
        return;
    };
    let grace = Duration::from_millis(800);
    let store = store_with_grace(&url, "late_result", grace).await;
    let schema = store.schema().expect("a schema").to_owned();
    let turn = TurnIdentity::new("ns", "t");
    let processes =
        idem_test_support::HolderProcesses::start(|pid| Holder::of_pid(pid).map(|h| h.encode()));
    let Some(exited) = processes.exited.clone() else {
        return; // no process could be named here: holders are off
    };
    let (first, second) = (
        Fingerprint::from_bytes([1; 32]),
        Fingerprint::from_bytes([2; 32]),
    );
    let held_by_the_gone_process = |n: u8| {
        let (store, schema, exited) = (store.clone(), schema.clone(), exited.clone());
        async move {
            let key = Key::from_bytes([n; 32]);
            let token = LeaseToken::generate();
            let claimed = store.begin(claim_request(&key, &first, turn, token)).await;
            assert_eq!(claimed.expect("begin"), Begin::Claimed);
            sqlx::query(&format!(
                "UPDATE \"{schema}\".idem_records SET holder = $1 WHERE key = $2"
            ))
            .bind(exited)
            .bind(key.as_bytes().as_slice())
            .execute(store.pool())
            .await
            .expect("set the holder");
            let lease = Lease {
                namespace: "ns".into(),
                key,
                token,
            };
            (key, lease)
        }
    };
    let retry = |key: Key| {
        let store = store.clone();
        async move {
            store
                .begin(claim_request(&key, &second, turn, LeaseToken::generate()))
                .await
                .expect("begin")
        }
    };

    // The result lands during the grace: replayed.
    let (key, lease) = held_by_the_gone_process(7).await;
    let early = retry(key).await;
    assert!(
        matches!(early, Begin::InFlight { fingerprint } if fingerprint == first),
        "{early:?}"
    );
    store
        .complete(&lease, b"sent before it died", Duration::from_secs(60))
        .await
        .expect("the late result is recorded");
    assert_eq!(
        retry(key).await,
        Begin::Completed(FirstResult {
            fingerprint: first,
            result: b"sent before it died".to_vec().into(),
        }),
        "replayed, not claimed again"
    );

    // No result: claimed once the grace is over, long before the lease's end (60 s).
    let (key, lease) = held_by_the_gone_process(8).await;
    assert!(matches!(retry(key).await, Begin::InFlight { .. }));
    tokio::time::sleep(grace + Duration::from_millis(100)).await;
    assert_eq!(retry(key).await, Begin::Claimed);
    let late = store
        .complete(&lease, b"too late", Duration::from_secs(60))
        .await;
    assert!(
        late.is_err(),
        "the gone process's claim is fenced off: {late:?}"
    );
    drop(processes);
    cleanup(&store).await;
}

/// The lookups of one key use the primary key even in a generic plan made while the table is
/// empty (as PostgreSQL makes for prepared statements and PL/pgSQL): no other index of the
/// records may start with the namespace, or such a plan scans the namespace's records (a
/// replay grew to 7× its floor over a few thousand records).
#[tokio::test]
async fn a_generic_plan_finds_a_key_by_its_primary_key() {
    let Some(url) = postgres_url("a_generic_plan_finds_a_key_by_its_primary_key") else {
        return;
    };
    let store = store(&url, "plans").await;
    let schema = store.schema().expect("a schema").to_owned();
    let mut conn = store.pool().acquire().await.expect("a connection");
    sqlx::raw_sql(&format!(
        "SET search_path TO \"{schema}\"; SET plan_cache_mode = force_generic_plan; \
         PREPARE one_key(text, bytea) AS SELECT state FROM idem_records \
         WHERE namespace = $1 AND key = $2 AND expires_at_ms > 0; \
         PREPARE one_key_for_update(text, bytea) AS SELECT * FROM idem_records \
         WHERE namespace = $1 AND key = $2 FOR UPDATE;"
    ))
    .execute(&mut *conn)
    .await
    .expect("prepare");
    for statement in ["one_key", "one_key_for_update"] {
        let plan: Vec<String> = sqlx::query_scalar(&format!(
            "EXPLAIN EXECUTE {statement}('ns', '\\x00'::bytea)"
        ))
        .fetch_all(&mut *conn)
        .await
        .expect("explain");
        let plan = plan.join("\n");
        assert!(plan.contains("idem_records_pkey"), "{statement}: {plan}");
    }
    sqlx::raw_sql("DEALLOCATE ALL; RESET plan_cache_mode; RESET search_path")
        .execute(&mut *conn)
        .await
        .expect("reset");
    drop(conn);
    cleanup(&store).await;
}

/// A transactional call of a process of the previous build (schema 3) that claimed its key
/// before the upgrade — in progress, inside its transaction — and records after it: the
/// result is recorded, not refused as if the tool had changed the claim.
#[tokio::test]
async fn a_transactional_claim_made_before_the_upgrade_to_schema_4_records_its_result() {
    use idem_tools_runtime::store::RecordState;
    let Some(url) = postgres_url("a_transactional_claim_made_before_the_upgrade") else {
        return;
    };
    let store = store(&url, "upgrade_tx").await;
    let schema = store.schema().expect("a schema").to_owned();
    let key = Key::from_bytes([4; 32]);
    let mut tx = store.pool().begin().await.expect("a transaction");
    // What schema 3's `idem_claim` wrote: a claim in progress, its lease the expiry.
    sqlx::query(&format!(
        "INSERT INTO \"{schema}\".idem_records (namespace, key, tool, turn, state, fingerprint, \
         result, created_at_ms, expires_at_ms, token, attempts, attempts_expire_ms) VALUES \
         ('ns', $1, 'pay', 't', 'in_progress', $2, NULL, \"{schema}\".idem_now_ms(), \
         \"{schema}\".idem_now_ms() + 30000, 77, 1, \"{schema}\".idem_now_ms() + 60000)"
    ))
    .bind(key.as_bytes().as_slice())
    .bind([1_u8; 32].as_slice())
    .execute(&mut *tx)
    .await
    .expect("a claim of schema 3");
    sqlx::query(&format!(
        "SELECT \"{schema}\".idem_record('ns', $1, 77, $2, 60000)"
    ))
    .bind(key.as_bytes().as_slice())
    .bind(b"the result".as_slice())
    .execute(&mut *tx)
    .await
    .expect("recorded");
    tx.commit().await.expect("commit");
    let record = store.get("ns", &key).await.expect("get").expect("a record");
    assert_eq!(record.state, RecordState::Completed);
    assert_eq!(record.result.as_deref(), Some(b"the result".as_slice()));
    assert_eq!(record.attempts, 0);
    cleanup(&store).await;
}

/// Timeouts of `Duration::MAX` are taken as the longest (`MAX_TIMEOUT`): the store connects,
/// claims, records and replays (an overflow panicked in `connect`, and a lock timeout past
/// PostgreSQL's `int` of milliseconds failed every claim).
#[tokio::test]
async fn the_longest_timeouts_are_taken() {
    let Some(url) = postgres_url("the_longest_timeouts_are_taken") else {
        return;
    };
    for (connect, lock, reply) in [
        (Duration::MAX, Duration::MAX, Duration::MAX),
        (
            Duration::from_secs(5),
            Duration::from_secs(30 * 24 * 3600),
            Duration::from_secs(5),
        ),
    ] {
        let store = PostgresStore::builder()
            .schema(postgres_common::unique_schema("longest"))
            .connect_timeout(connect)
            .lock_timeout(lock)
            .reply_timeout(reply)
            .connect(&url)
            .await
            .expect("connects");
        let (key, fingerprint) = (Key::from_bytes([9; 32]), Fingerprint::from_bytes([9; 32]));
        let turn = TurnIdentity::new("ns", "t");
        let request = claim_request(&key, &fingerprint, turn, LeaseToken(1));
        let lease = request.lease();
        let claimed = store.begin(request).await;
        assert!(matches!(claimed, Ok(Begin::Claimed)), "{claimed:?}");
        store
            .complete(&lease, b"done", Duration::from_secs(60))
            .await
            .expect("complete");
        let again = store
            .begin(claim_request(&key, &fingerprint, turn, LeaseToken(2)))
            .await;
        assert!(matches!(again, Ok(Begin::Completed(_))), "{again:?}");
        cleanup(&store).await;
    }
}

/// Schema names are identifiers of the user's choosing, whatever they hold: `$$` (which quotes
/// the bodies of idem's functions: a name holding it ended a body early, and the store could
/// not be opened), a tag of idem's own, quotes and backslashes. Each store opens, answers a
/// plain and a transactional call, and opens again (its migration done).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn schemas_named_with_dollar_quotes_and_quotes_open_and_serve_calls() {
    use std::sync::Arc;

    use idem_tools_runtime::engine::transactional;
    use idem_tools_runtime::{Codec, Turn};
    use postgres_common::Failure;
    use postgres_common::ledger::call;
    use sqlx::PgConnection;

    let Some(url) = postgres_url("odd_schema_names") else {
        return;
    };
    let unique = postgres_common::unique_schema("odd");
    for (i, odd) in ["a$$b", "$$", "$idem0$x$idem1$", "o'brien\\", "d\"q$x$"]
        .iter()
        .enumerate()
    {
        let name = format!("{odd}{unique}");
        let opened = PostgresStore::builder()
            .schema(name.as_str())
            .connect(&url)
            .await;
        let store = opened.unwrap_or_else(|e| panic!("schema {name:?}: {e}"));
        let quoted = format!("\"{}\"", name.replace('"', "\"\""));
        let table = format!("{quoted}.ledger");
        sqlx::raw_sql(&format!(
            "CREATE TABLE {table} (id bigserial PRIMARY KEY, memo text NOT NULL)"
        ))
        .execute(store.pool())
        .await
        .expect("create the ledger");
        let shared: Arc<dyn Store> = Arc::new(store.clone());
        let turn = Turn::new(format!("odd-{i}"));
        let pay = async || {
            transactional::execute(
                call(&turn, &shared, "odd"),
                Codec::ok_only(),
                async |conn: &mut PgConnection| -> Result<i64, Failure> {
                    Ok(sqlx::query_scalar(&format!(
                        "INSERT INTO {table} (memo) VALUES ('odd') RETURNING id"
                    ))
                    .fetch_one(&mut *conn)
                    .await?)
                },
            )
            .await
        };
        let first = pay()
            .await
            .unwrap_or_else(|e| panic!("schema {name:?}: {e:?}"));
        assert_eq!(pay().await.expect("replays"), first, "schema {name:?}");
        let plain =
            idem_tools_runtime::execute(call(&turn, &shared, "plain"), Codec::ok_only(), async {
                Ok::<i64, idem_tools_runtime::Error>(7)
            })
            .await;
        assert_eq!(plain.expect("a plain call"), 7, "schema {name:?}");
        PostgresStore::builder()
            .schema(name.as_str())
            .connect(&url)
            .await
            .unwrap_or_else(|e| panic!("schema {name:?} again: {e}"));
        sqlx::raw_sql(&format!("DROP SCHEMA {quoted} CASCADE"))
            .execute(store.pool())
            .await
            .expect("drop the schema");
    }
}

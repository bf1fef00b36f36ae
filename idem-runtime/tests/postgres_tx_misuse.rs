//! A transactional tool whose body ends the transaction idem opened for it (`COMMIT` or
//! `ROLLBACK` on its connection): nothing of the call is recorded, a claim it committed is kept
//! as interrupted rather than left to expire and run again — whether the body then returns,
//! overruns its lease, panics or is dropped — and the error names the misuse.
//! And what a call leaves in the pool: no connection idle in a transaction.
#![cfg(feature = "postgres")]

mod postgres_common;

use std::sync::Arc;
use std::time::Duration;

use idem_tools_runtime::engine::transactional;
use idem_tools_runtime::store::{PostgresStore, Store};
use idem_tools_runtime::{Codec, Error, KeyKept, Turn};
use postgres_common::ledger::{call, insert, ledger, rows, setup, transfer};
use postgres_common::{Failure, cleanup};
use sqlx::PgConnection;

/// What the body does after its insert.
#[derive(Clone, Copy)]
enum Ends {
    /// `ROLLBACK`, then returns `Ok`.
    RollbackThenOk,
    /// `ROLLBACK` and `BEGIN`, inserts again in that transaction of its own, returns `Ok`.
    RollbackThenWrite,
    /// `COMMIT` and `BEGIN`, inserts again in that transaction of its own, returns `Ok`.
    CommitThenWrite,
    /// As `CommitThenWrite`, setting idem's setting of the claim in its new transaction to a
    /// token of its own first.
    CommitThenForge,
    /// `COMMIT`, then returns `Err`.
    CommitThenErr,
    /// `COMMIT`, then returns `Ok`.
    CommitThenOk,
    /// `COMMIT`, then runs past the lease.
    CommitThenOverrun,
    /// `COMMIT`, then panics.
    CommitThenPanic,
    /// Runs past the lease in a statement, its transaction open (no misuse).
    Overrun,
}

/// The lease of the calls that overrun it.
const SHORT_LEASE: Duration = Duration::from_millis(300);

/// How long the statement of [`Ends::Overrun`] keeps its transaction, past the lease.
const STATEMENT: Duration = Duration::from_millis(1500);

async fn misuse(
    store: &PostgresStore,
    turn: &Turn,
    memo: &str,
    ends: Ends,
) -> Result<i64, Failure> {
    let shared: Arc<dyn Store> = Arc::new(store.clone());
    let table = ledger(store);
    transactional::execute(
        call(turn, &shared, memo).with_lease(SHORT_LEASE),
        Codec::ok_only(),
        async |conn: &mut PgConnection| -> Result<i64, Failure> {
            let id = insert(conn, &table, memo).await?;
            let end = match ends {
                Ends::RollbackThenOk => "ROLLBACK".to_owned(),
                Ends::RollbackThenWrite => "ROLLBACK; BEGIN".to_owned(),
                Ends::CommitThenWrite => "COMMIT; BEGIN".to_owned(),
                Ends::CommitThenForge => {
                    "COMMIT; BEGIN; SELECT set_config('idem.claim', '12345', true)".to_owned()
                }
                Ends::CommitThenErr
                | Ends::CommitThenOk
                | Ends::CommitThenOverrun
                | Ends::CommitThenPanic => "COMMIT".to_owned(),
                Ends::Overrun => format!("SELECT pg_sleep({})", STATEMENT.as_secs_f64()),
            };
            sqlx::raw_sql(&end).execute(&mut *conn).await?;
            match ends {
                Ends::RollbackThenWrite | Ends::CommitThenWrite | Ends::CommitThenForge => {
                    insert(conn, &table, memo).await?;
                    Ok(id)
                }
                Ends::CommitThenErr => Err(Failure::Tool("declined after its commit")),
                Ends::CommitThenOverrun => {
                    tokio::time::sleep(SHORT_LEASE * 2).await;
                    Ok(id)
                }
                Ends::CommitThenPanic => panic!("the tool panics after its commit"),
                Ends::RollbackThenOk | Ends::CommitThenOk | Ends::Overrun => Ok(id),
            }
        },
    )
    .await
}

/// The row the body committed for `memo` stands, and a retry is told the outcome is unknown
/// (`Interrupted`) instead of running the tool a second time.
async fn the_commit_stands_and_a_retry_is_refused(store: &PostgresStore, turn: &Turn, memo: &str) {
    assert_eq!(
        rows(store, memo).await,
        1,
        "{memo}: the body's commit kept its row"
    );
    let retry = transfer(store, turn, memo).await;
    assert!(
        matches!(retry, Err(Failure::Idem(Error::Interrupted { .. }))),
        "{memo}: {retry:?}"
    );
    assert_eq!(rows(store, memo).await, 1, "{memo}: no second payment");
}

/// Whether `result` says the tool ended its transaction, with its claim committed (`marked`)
/// or rolled back and the key marked interrupted afterwards.
fn ended(result: &Result<i64, Failure>, marked: bool) -> bool {
    let kept = if marked {
        KeyKept::Committed
    } else {
        KeyKept::MarkedAfter
    };
    matches!(result, Err(Failure::Idem(Error::TransactionEnded { kept: k, .. })) if *k == kept)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_body_that_rolls_back_then_returns_ok_records_nothing_and_is_interrupted() {
    let Some(store) = setup("tx_end_rollback").await else {
        return;
    };
    let turn = Turn::new("turn-rollback");
    let result = misuse(&store, &turn, "r", Ends::RollbackThenOk).await;
    assert!(ended(&result, false), "{result:?}");
    assert_eq!(rows(&store, "r").await, 0, "its row was rolled back");
    // Its claim rolled back, but idem cannot know what the body ran after ending the
    // transaction (outside any, committed on its own): the key is kept interrupted.
    let retry = transfer(&store, &turn, "r").await;
    assert!(
        matches!(retry, Err(Failure::Idem(Error::Interrupted { .. }))),
        "{retry:?}"
    );
    assert_eq!(rows(&store, "r").await, 0);
    cleanup(&store).await;
}

/// `sqlx` rolls back the whole transaction, not the savepoint, when a savepoint the body began
/// (`conn.begin()`) fails — here after a statement error the body ignored — and the body's
/// later writes then commit on their own: the key is kept interrupted, so a retry does not
/// write them a second time (it did: the key was left free).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_savepoint_that_fails_after_an_ignored_error_leaves_the_key_interrupted() {
    use sqlx::Connection as _;
    let Some(store) = setup("tx_failed_savepoint").await else {
        return;
    };
    let turn = Turn::new("turn-failed-savepoint");
    let shared: Arc<dyn Store> = Arc::new(store.clone());
    let table = ledger(&store);
    let result = transactional::execute(
        call(&turn, &shared, "s"),
        Codec::ok_only(),
        async |conn: &mut PgConnection| -> Result<i64, Failure> {
            let ignored = sqlx::query("SELECT 1/0").execute(&mut *conn).await;
            assert!(ignored.is_err());
            if let Ok(savepoint) = conn.begin().await {
                savepoint.commit().await?;
            }
            insert(conn, &table, "s").await
        },
    )
    .await;
    assert!(ended(&result, false), "{result:?}");
    assert_eq!(
        rows(&store, "s").await,
        1,
        "the insert committed on its own"
    );
    for _ in 0..2 {
        let retry = transfer(&store, &turn, "s").await;
        assert!(
            matches!(retry, Err(Failure::Idem(Error::Interrupted { .. }))),
            "{retry:?}"
        );
    }
    assert_eq!(rows(&store, "s").await, 1, "no second payment");
    cleanup(&store).await;
}

/// What a body writes in a transaction it began itself after ending idem's is not committed by
/// idem's `COMMIT` (it was, with the key left free: a retry wrote the row a second time).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn what_a_body_writes_after_ending_the_transaction_is_not_committed_by_idem() {
    let Some(store) = setup("tx_end_then_write").await else {
        return;
    };
    let turn = Turn::new("turn-then-write");
    let result = misuse(&store, &turn, "rw", Ends::RollbackThenWrite).await;
    assert!(ended(&result, false), "{result:?}");
    assert_eq!(rows(&store, "rw").await, 0, "both inserts rolled back");
    let retry = transfer(&store, &turn, "rw").await;
    assert!(
        matches!(retry, Err(Failure::Idem(Error::Interrupted { .. }))),
        "the key is kept interrupted: {retry:?}"
    );
    let result = misuse(&store, &turn, "cw", Ends::CommitThenWrite).await;
    assert!(ended(&result, true), "{result:?}");
    // The insert before the body's `COMMIT` stands; the one after it does not.
    the_commit_stands_and_a_retry_is_refused(&store, &turn, "cw").await;
    // Not even when the body sets idem's setting of the claim to another token (it did: the
    // record matched no row, and idem's `COMMIT` ran).
    let result = misuse(&store, &turn, "cf", Ends::CommitThenForge).await;
    assert!(ended(&result, true), "{result:?}");
    the_commit_stands_and_a_retry_is_refused(&store, &turn, "cf").await;
    cleanup(&store).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_body_that_commits_then_fails_leaves_its_key_interrupted_not_claimed() {
    let Some(store) = setup("tx_end_commit_err").await else {
        return;
    };
    let turn = Turn::new("turn-commit-err");
    let result = misuse(&store, &turn, "c", Ends::CommitThenErr).await;
    assert!(ended(&result, true), "{result:?}");
    the_commit_stands_and_a_retry_is_refused(&store, &turn, "c").await;
    cleanup(&store).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_body_that_commits_then_returns_ok_records_nothing_and_is_interrupted() {
    let Some(store) = setup("tx_end_commit_ok").await else {
        return;
    };
    let turn = Turn::new("turn-commit-ok");
    let result = misuse(&store, &turn, "k", Ends::CommitThenOk).await;
    assert!(ended(&result, true), "{result:?}");
    let Err(Failure::Idem(error)) = &result else {
        unreachable!()
    };
    assert!(
        error.to_string().contains("COMMIT or ROLLBACK"),
        "the error names the misuse: {error}"
    );
    the_commit_stands_and_a_retry_is_refused(&store, &turn, "k").await;
    cleanup(&store).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_body_that_commits_then_overruns_its_lease_leaves_its_key_interrupted() {
    let Some(store) = setup("tx_end_commit_overrun").await else {
        return;
    };
    let turn = Turn::new("turn-commit-overrun");
    let result = misuse(&store, &turn, "o", Ends::CommitThenOverrun).await;
    assert!(ended(&result, true), "{result:?}");
    // The lease has ended, but the key is marked.
    the_commit_stands_and_a_retry_is_refused(&store, &turn, "o").await;
    cleanup(&store).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_body_that_commits_then_panics_or_is_dropped_leaves_its_key_interrupted() {
    let Some(store) = setup("tx_end_commit_gone").await else {
        return;
    };
    let turn = Turn::new("turn-commit-gone");
    // The panic caught around the call's poll, as a task's is.
    let mut call = std::pin::pin!(misuse(&store, &turn, "p", Ends::CommitThenPanic));
    let panicked = std::future::poll_fn(|cx| {
        match std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| call.as_mut().poll(cx))) {
            Ok(std::task::Poll::Pending) => std::task::Poll::Pending,
            Ok(std::task::Poll::Ready(answer)) => std::task::Poll::Ready(Ok(answer)),
            Err(panic) => std::task::Poll::Ready(Err(panic)),
        }
    })
    .await;
    assert!(panicked.is_err(), "the body panics");
    // Its caller gives up while the body, committed, still runs.
    let dropped = tokio::time::timeout(
        SHORT_LEASE / 3,
        misuse(&store, &turn, "d", Ends::CommitThenOverrun),
    )
    .await;
    assert!(dropped.is_err(), "{dropped:?}");
    // Marked in the background: the retry waits for the mark at most.
    for memo in ["p", "d"] {
        the_commit_stands_and_a_retry_is_refused(&store, &turn, memo).await;
    }
    cleanup(&store).await;
}

/// The same overrun without the misuse: the transaction, still open in a statement, rolls back;
/// its claim is not marked, and the call does not wait for the statement to end.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_body_that_overruns_its_lease_in_its_transaction_is_rolled_back_not_marked() {
    let Some(store) = setup("tx_overrun").await else {
        return;
    };
    let turn = Turn::new("turn-overrun");
    let started = tokio::time::Instant::now();
    let result = misuse(&store, &turn, "v", Ends::Overrun).await;
    assert!(
        matches!(result, Err(Failure::Idem(Error::LeaseLost { .. }))),
        "{result:?}"
    );
    assert!(
        started.elapsed() < STATEMENT - SHORT_LEASE,
        "the mark waited for the statement's transaction: {:?}",
        started.elapsed()
    );
    // Once the server has rolled the statement's transaction back, a retry runs.
    tokio::time::sleep(STATEMENT).await;
    transfer(&store, &turn, "v").await.expect("the retry runs");
    assert_eq!(
        rows(&store, "v").await,
        1,
        "the overrun's row was rolled back"
    );
    cleanup(&store).await;
}

/// A body that rolled the transaction back and wrote on its own, returning `Ok` on the last
/// attempt its turn's budget allows: marking the key is not an attempt, so it is marked, and
/// the error says so.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_body_that_rolls_back_on_its_last_attempt_still_has_its_key_marked() {
    let Some(store) = setup("tx_rollback_budget").await else {
        return;
    };
    let turn = Turn::new("turn-rollback-budget").with_max_attempts_per_key(1);
    let result = misuse(&store, &turn, "rb", Ends::RollbackThenOk).await;
    assert!(ended(&result, false), "{result:?}");
    let Err(Failure::Idem(error)) = result else {
        unreachable!("checked above")
    };
    let message = error.to_string();
    assert!(
        message.contains("so its key is kept as interrupted"),
        "{message}"
    );
    let retry = transfer(&store, &turn, "rb").await;
    assert!(
        matches!(retry, Err(Failure::Idem(Error::Interrupted { .. }))),
        "{retry:?}"
    );
    cleanup(&store).await;
}

/// After a successful call, the connection goes back to the pool with no transaction open: the
/// empty transaction the record-and-commit leaves for `sqlx` to roll back is rolled back before
/// the pool takes the connection again (its check on release sends the `ROLLBACK`).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_successful_call_leaves_no_pooled_connection_idle_in_a_transaction() {
    let Some(store) = setup("tx_idle").await else {
        return;
    };
    let turn = Turn::new("turn-idle");
    for memo in ["i1", "i2", "i3"] {
        transfer(&store, &turn, memo).await.expect("runs");
    }
    // Every connection of the pool idle again, as the pool sees it.
    let pool = store.pool();
    let deadline = tokio::time::Instant::now() + Duration::from_secs(5);
    while pool.num_idle() < pool.size() as usize && tokio::time::Instant::now() < deadline {
        tokio::time::sleep(Duration::from_millis(5)).await;
    }
    let mut conn = pool.acquire().await.expect("a connection");
    let idle_in_tx: i64 = sqlx::query_scalar(
        "SELECT count(*) FROM pg_stat_activity WHERE datname = current_database() \
         AND state LIKE 'idle in transaction%' AND pid <> pg_backend_pid()",
    )
    .fetch_one(&mut *conn)
    .await
    .expect("pg_stat_activity");
    assert_eq!(idle_in_tx, 0);
    drop(conn);
    cleanup(&store).await;
}

// Schedules around the body's own `COMMIT`: still running when the call ends, answered to
// nobody, on a pool with no connection to spare. Each leaves the interrupted call's record the
// claim committed as, and a retry after the lease is refused rather than run.

/// A deferred trigger that makes the `COMMIT` of a transaction that inserted a `slow…` row take
/// `secs` (it runs at commit time, while the transaction still holds its row locks).
async fn slow_commits(store: &PostgresStore, secs: f64) {
    let schema = store.schema().expect("a schema");
    sqlx::raw_sql(&format!(
        "CREATE FUNCTION \"{schema}\".slow() RETURNS trigger LANGUAGE plpgsql AS \
         $$ BEGIN PERFORM pg_sleep({secs}); RETURN NULL; END $$; \
         CREATE CONSTRAINT TRIGGER slow_commit AFTER INSERT ON \"{schema}\".ledger \
         DEFERRABLE INITIALLY DEFERRED FOR EACH ROW WHEN (NEW.memo LIKE 'slow%') \
         EXECUTE FUNCTION \"{schema}\".slow();"
    ))
    .execute(store.pool())
    .await
    .expect("the trigger");
}

/// A call whose body inserts `memo`, waits `before_commit`, commits and returns `Ok`, or the
/// `Err` given.
async fn commit_then(
    store: &PostgresStore,
    turn: &Turn,
    memo: &str,
    lease: Duration,
    before_commit: Duration,
    then: Result<(), Failure>,
) -> Result<i64, Failure> {
    let shared: Arc<dyn Store> = Arc::new(store.clone());
    let table = ledger(store);
    transactional::execute(
        call(turn, &shared, memo).with_lease(lease),
        Codec::ok_only(),
        async |conn: &mut PgConnection| -> Result<i64, Failure> {
            let id = insert(conn, &table, memo).await?;
            tokio::time::sleep(before_commit).await;
            // A commit that lands after the call ended: the server must not end it when the
            // call closes its connection (as it ends a body's statement then).
            sqlx::raw_sql(
                "SELECT set_config('client_connection_check_interval', '0', true) \
                 WHERE current_setting('server_version_num')::int >= 140000; COMMIT",
            )
            .execute(&mut *conn)
            .await?;
            then.map(|()| id)
        },
    )
    .await
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_call_dropped_while_its_bodys_commit_runs_leaves_its_key_interrupted() {
    let Some(store) = setup("tx_end_drop_in_commit").await else {
        return;
    };
    slow_commits(&store, 1.0).await;
    let turn = Turn::new("turn-drop-in-commit");
    let lease = Duration::from_secs(2);
    let call = commit_then(&store, &turn, "slow-d", lease, Duration::ZERO, Ok(()));
    let dropped = tokio::time::timeout(Duration::from_millis(400), call).await;
    assert!(dropped.is_err(), "the caller gave up: {dropped:?}");
    tokio::time::sleep(lease + Duration::from_millis(500)).await; // the commit lands
    the_commit_stands_and_a_retry_is_refused(&store, &turn, "slow-d").await;
    cleanup(&store).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_lease_that_ends_while_the_bodys_commit_runs_leaves_its_key_interrupted() {
    let Some(store) = setup("tx_end_overrun_in_commit").await else {
        return;
    };
    slow_commits(&store, 1.0).await;
    let turn = Turn::new("turn-overrun-in-commit");
    let lease = Duration::from_millis(600);
    let before = Duration::from_millis(300);
    let result = commit_then(&store, &turn, "slow-o", lease, before, Ok(())).await;
    assert!(result.is_err(), "{result:?}");
    tokio::time::sleep(Duration::from_millis(1500)).await; // the commit lands
    the_commit_stands_and_a_retry_is_refused(&store, &turn, "slow-o").await;
    cleanup(&store).await;
}

/// The body's `COMMIT` commits, its answer is lost (the connection drops): the body returns
/// the driver's error, and the connection cannot be asked what happened.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_bodys_commit_whose_answer_is_lost_leaves_its_key_interrupted() {
    use postgres_common::{Cut, postgres_url, proxy};
    let Some(store) = setup("tx_end_commit_lost").await else {
        return;
    };
    let url = postgres_url("tx_end_commit_lost").expect("a server");
    let (options, _proxy) = proxy(&url, Some(Cut::AfterCommit)).await;
    let pool = sqlx::postgres::PgPoolOptions::new()
        .max_connections(2)
        .connect_lazy_with(options);
    let cut = PostgresStore::builder()
        .schema(store.schema().expect("a schema"))
        .from_pool(pool)
        .await
        .expect("open through the proxy");
    let turn = Turn::new("turn-commit-lost");
    let lease = Duration::from_secs(1);
    let first = commit_then(&cut, &turn, "lost", lease, Duration::ZERO, Ok(())).await;
    assert!(first.is_err(), "{first:?}");
    tokio::time::sleep(lease + Duration::from_millis(500)).await;
    the_commit_stands_and_a_retry_is_refused(&store, &turn, "lost").await;
    cleanup(&store).await;
}

/// On a pool of one connection, which the call's transaction holds: nothing else is needed to
/// keep the key.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_body_that_commits_then_fails_on_a_pool_of_one_leaves_its_key_interrupted() {
    let Some(store) = setup("tx_end_pool_of_one").await else {
        return;
    };
    let url = postgres_common::postgres_url("tx_end_pool_of_one").expect("a server");
    let one = PostgresStore::builder()
        .schema(store.schema().expect("a schema"))
        .max_connections(1)
        .connect_timeout(Duration::from_secs(1))
        .connect(&url)
        .await
        .expect("connect");
    let turn = Turn::new("turn-pool-of-one");
    let lease = Duration::from_secs(2);
    let declined = Err(Failure::Tool("declined after its commit"));
    let first = commit_then(&one, &turn, "p1", lease, Duration::ZERO, declined).await;
    assert!(matches!(first, Err(Failure::Idem(_))), "{first:?}");
    tokio::time::sleep(lease).await;
    the_commit_stands_and_a_retry_is_refused(&store, &turn, "p1").await;
    cleanup(&store).await;
}

/// On a pool of one connection, a body that commits and then returns `Ok`, `Err`, or overruns
/// its lease is told what happened — its claim committed (`KeyKept::Committed`) — at once: the
/// call's own connection, which it closes anyway, is not kept while it asks whether the claim
/// committed (it waited for the pool's only connection twice, a reply timeout each, then said
/// the claim was rolled back and the key not kept — or, for the overrun, `LeaseLost` — though
/// the claim had committed and every retry is refused).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_body_that_commits_on_a_pool_of_one_is_told_its_claim_committed() {
    let Some(store) = setup("tx_end_pool_of_one_told").await else {
        return;
    };
    let url = postgres_common::postgres_url("tx_end_pool_of_one_told").expect("a server");
    let one = PostgresStore::builder()
        .schema(store.schema().expect("a schema"))
        .max_connections(1)
        .connect_timeout(Duration::from_secs(1))
        .connect(&url)
        .await
        .expect("connect");
    let turn = Turn::new("turn-pool-of-one-told");
    for (memo, ends) in [
        ("t-ok", Ends::CommitThenOk),
        ("t-err", Ends::CommitThenErr),
        ("t-overrun", Ends::CommitThenOverrun),
    ] {
        let started = tokio::time::Instant::now();
        let result = misuse(&one, &turn, memo, ends).await;
        let took = started.elapsed();
        assert!(ended(&result, true), "{memo}: {result:?}");
        assert!(took < Duration::from_secs(3), "{memo}: took {took:?}");
        the_commit_stands_and_a_retry_is_refused(&store, &turn, memo).await;
    }
    cleanup(&store).await;
}

/// The server ends the session (an operator's `pg_terminate_backend`, a shutdown) while the
/// record-and-commit runs: a `FATAL` error, which can come after the `COMMIT` as well as
/// before, so the call says the outcome is unknown — not that nothing was committed — and a
/// retry finds out (here the commit had not happened: the tool runs, once).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_session_ended_by_the_server_during_the_commit_is_an_unknown_outcome() {
    let Some(store) = setup("tx_commit_fatal").await else {
        return;
    };
    slow_commits(&store, 30.0).await;
    let turn = Turn::new("turn-commit-fatal");
    let call = tokio::spawn({
        let (store, turn) = (store.clone(), turn.clone());
        async move { transfer(&store, &turn, "slow-f").await }
    });
    // The record-and-commit, held in the deferred trigger: end its session.
    let record = format!("%\"{}\".idem_record(%", store.schema().expect("a schema"));
    let mut ended = false;
    for _ in 0..200 {
        ended = sqlx::query_scalar(
            "SELECT coalesce(bool_or(pg_terminate_backend(pid)), false) FROM pg_stat_activity \
             WHERE state = 'active' AND query LIKE $1 AND wait_event = 'PgSleep' \
             AND pid <> pg_backend_pid()",
        )
        .bind(&record)
        .fetch_one(store.pool())
        .await
        .expect("terminate");
        if ended {
            break;
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    assert!(
        ended,
        "the record-and-commit was not seen waiting in its commit"
    );
    let answer = tokio::time::timeout(Duration::from_secs(10), call)
        .await
        .expect("the call ends")
        .expect("its task");
    let Err(Failure::Idem(Error::CommitFailed { message, .. })) = &answer else {
        panic!("{answer:?}");
    };
    assert!(
        message.contains("whether it committed is unknown") && !message.contains("nothing was"),
        "{message}"
    );
    sqlx::raw_sql(&format!("DROP TRIGGER slow_commit ON {}", ledger(&store)))
        .execute(store.pool())
        .await
        .expect("drop the trigger");
    let retry = transfer(&store, &turn, "slow-f").await;
    assert!(retry.is_ok(), "{retry:?}");
    assert_eq!(rows(&store, "slow-f").await, 1, "ran once in all");
    cleanup(&store).await;
}

/// A statement of the body that waits for a lock held elsewhere past the tool's lease: the call
/// ends at the lease (`LeaseLost`) and closes its connection, and the server ends the waiting
/// statement within about a second (it checks that its client is still there) instead of
/// keeping the key's row locked for as long as the other session holds the lock — when a retry
/// was told the key is in flight.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_statement_waiting_on_a_lock_past_the_lease_is_ended_with_its_call() {
    use sqlx::Connection as _;
    let Some(store) = setup("tx_lock_wait").await else {
        return;
    };
    let table = ledger(&store);
    let url = postgres_common::postgres_url("tx_lock_wait").expect("a server");
    // A lock of this test's own, held by a session that is not in a transaction.
    let lock = i64::from(std::process::id()) << 20 | 0x10c;
    let mut holder = PgConnection::connect(&url).await.expect("connect");
    sqlx::query("SELECT pg_advisory_lock($1)")
        .bind(lock)
        .execute(&mut holder)
        .await
        .expect("hold the lock");
    let turn = Turn::new("turn-lock-wait");
    let shared: Arc<dyn Store> = Arc::new(store.clone());
    let result = transactional::execute(
        call(&turn, &shared, "w").with_lease(Duration::from_secs(1)),
        Codec::ok_only(),
        async |conn: &mut PgConnection| -> Result<i64, Failure> {
            let id = insert(conn, &table, "w").await?;
            sqlx::query("SELECT pg_advisory_xact_lock($1)") // waits for `holder`
                .bind(lock)
                .execute(&mut *conn)
                .await?;
            Ok(id)
        },
    )
    .await;
    assert!(
        matches!(result, Err(Failure::Idem(Error::LeaseLost { .. }))),
        "{result:?}"
    );
    // Within a few seconds, the abandoned statement is gone.
    let mut left: i64 = -1;
    for _ in 0..40 {
        left = sqlx::query_scalar(
            "SELECT count(*) FROM pg_locks WHERE locktype = 'advisory' AND NOT granted \
             AND objid = ($1 & 4294967295)::oid",
        )
        .bind(lock)
        .fetch_one(&mut holder)
        .await
        .expect("read the locks");
        if left == 0 {
            break;
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    assert_eq!(
        left, 0,
        "the abandoned statement still waits, holding the key"
    );
    // The key is free while `holder` still holds the lock: a retry (that does not wait for
    // it) runs, once.
    let retry = tokio::time::timeout(Duration::from_secs(5), transfer(&store, &turn, "w"))
        .await
        .expect("the retry ends");
    assert!(retry.is_ok(), "{retry:?}");
    assert_eq!(rows(&store, "w").await, 1);
    drop(holder);
    cleanup(&store).await;
}

/// A body that resets every setting of its session (`RESET ALL`, legal inside a transaction)
/// ends nothing: its call commits and replays; and one that does so and then fails rolls back
/// with its key free, so a retry runs. (`RESET ALL` clears idem's setting of the claim too: the
/// call was taken for one whose body ended the transaction, nothing was recorded and the key
/// was kept interrupted, every retry refused, though the body's rows were rolled back.)
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_body_that_resets_its_settings_ends_nothing() {
    let Some(store) = setup("tx_reset_all").await else {
        return;
    };
    let shared: Arc<dyn Store> = Arc::new(store.clone());
    let table = ledger(&store);
    let reset_then = async |turn: &Turn, memo: &str, fail: bool| -> Result<i64, Failure> {
        transactional::execute(
            call(turn, &shared, memo),
            Codec::ok_only(),
            async |conn: &mut PgConnection| -> Result<i64, Failure> {
                let id = insert(conn, &table, memo).await?;
                sqlx::raw_sql("RESET ALL").execute(&mut *conn).await?;
                if fail {
                    return Err(Failure::Tool("declined after RESET ALL"));
                }
                Ok(id)
            },
        )
        .await
    };
    let turn = Turn::new("turn-reset-all");
    let first = reset_then(&turn, "ok", false).await;
    let id = first.expect("the call commits");
    assert_eq!(reset_then(&turn, "ok", false).await.expect("replays"), id);
    assert_eq!(transfer(&store, &turn, "ok").await.expect("replays"), id);
    assert_eq!(rows(&store, "ok").await, 1);

    let failed = reset_then(&turn, "err", true).await;
    assert!(matches!(failed, Err(Failure::Tool(_))), "{failed:?}");
    assert_eq!(rows(&store, "err").await, 0, "rolled back");
    let retry = transfer(&store, &turn, "err").await;
    assert!(retry.is_ok(), "the key was left free: {retry:?}");
    assert_eq!(rows(&store, "err").await, 1);
    cleanup(&store).await;
}

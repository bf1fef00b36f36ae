//! A transactional tool whose body ends the transaction idem opened for it (`COMMIT` or
//! `ROLLBACK` on its connection): nothing of the call is recorded, a claim it committed is kept
//! as interrupted rather than left to expire and run again, and the error names the misuse.
//! And what a call leaves in the pool: no connection idle in a transaction.
#![cfg(feature = "postgres")]

mod postgres_common;

use std::sync::Arc;
use std::time::Duration;

use idem_tools_runtime::engine::transactional;
use idem_tools_runtime::store::{PostgresStore, RecordState, Store};
use idem_tools_runtime::{Codec, Error, Turn};
use postgres_common::ledger::{call, insert, ledger, record_state, rows, setup, transfer};
use postgres_common::{Failure, cleanup};
use sqlx::PgConnection;

/// What the body does after its insert.
#[derive(Clone, Copy)]
enum Ends {
    /// `ROLLBACK`, then returns `Ok`.
    RollbackThenOk,
    /// `COMMIT`, then returns `Err`.
    CommitThenErr,
    /// `COMMIT`, then returns `Ok`.
    CommitThenOk,
}

async fn misuse(
    store: &PostgresStore,
    turn: &Turn,
    memo: &str,
    ends: Ends,
) -> Result<i64, Failure> {
    let shared: Arc<dyn Store> = Arc::new(store.clone());
    let table = ledger(store);
    transactional::execute(
        call(turn, &shared, memo),
        Codec::ok_only(),
        async |conn: &mut PgConnection| -> Result<i64, Failure> {
            let id = insert(conn, &table, memo).await?;
            let end = match ends {
                Ends::RollbackThenOk => "ROLLBACK",
                Ends::CommitThenErr | Ends::CommitThenOk => "COMMIT",
            };
            sqlx::raw_sql(end).execute(&mut *conn).await?;
            match ends {
                Ends::CommitThenErr => Err(Failure::Tool("declined after its commit")),
                Ends::RollbackThenOk | Ends::CommitThenOk => Ok(id),
            }
        },
    )
    .await
}

fn ended(result: &Result<i64, Failure>, marked: bool) -> bool {
    matches!(result, Err(Failure::Idem(Error::TransactionEnded { marked: m, .. })) if *m == marked)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_body_that_rolls_back_then_returns_ok_records_nothing() {
    let Some(store) = setup("tx_end_rollback").await else {
        return;
    };
    let turn = Turn::new("turn-rollback");
    let result = misuse(&store, &turn, "r", Ends::RollbackThenOk).await;
    assert!(ended(&result, false), "{result:?}");
    assert_eq!(rows(&store, "r").await, 0, "its row was rolled back");
    assert_ne!(
        record_state(&store, &turn, "r").await,
        Some(RecordState::Completed),
        "no receipt recorded for a payment that does not exist"
    );
    // Nothing committed: the key is not held, and a retry (without the misuse) runs.
    tokio::time::sleep(Duration::from_millis(10)).await;
    transfer(&store, &turn, "r").await.expect("the retry runs");
    assert_eq!(rows(&store, "r").await, 1);
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
    assert_eq!(rows(&store, "c").await, 1, "the body's commit kept its row");
    // The retry is told the outcome is unknown at once: it neither waits for the lease nor
    // runs the tool a second time.
    let retry = transfer(&store, &turn, "c").await;
    assert!(
        matches!(retry, Err(Failure::Idem(Error::Interrupted { .. }))),
        "{retry:?}"
    );
    assert_eq!(rows(&store, "c").await, 1, "no second payment");
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
    assert_eq!(rows(&store, "k").await, 1);
    let retry = transfer(&store, &turn, "k").await;
    assert!(matches!(
        retry,
        Err(Failure::Idem(Error::Interrupted { .. }))
    ));
    assert_eq!(rows(&store, "k").await, 1);
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

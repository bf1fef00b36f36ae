//! Exactly once for database writes: a transfer whose rows, claim and recorded result commit
//! in one PostgreSQL transaction.
//!
//! ```console
//! $ scripts/transactional-example.sh        # a throwaway local PostgreSQL, then this example
//! $ IDEM_POSTGRES_URL=postgres://app@127.0.0.1/app cargo run --example transactional --features postgres
//! ```
//!
//! It checks its own claims and exits non-zero if one fails: the first call moves the money,
//! a retry replays the receipt without moving it again, a call cut off by its caller's timeout
//! leaves nothing behind (and its retry runs, instead of being told "it may or may not have
//! happened"), and a concurrent duplicate waits for the first transaction and gets its receipt.

use std::sync::Arc;
use std::time::Duration;

use idem_tools::PostgresStore;
use idem_tools::{Store, Turn, current_key, idempotent};
use serde::{Deserialize, Serialize};
use sqlx::PgConnection;

#[derive(Debug, Serialize, Deserialize, PartialEq)]
struct Receipt {
    transfer_id: i64,
    cents: i64,
}

#[derive(Debug)]
#[allow(dead_code)] // shown through `Debug`
enum AppError {
    Idem(idem_tools::Error),
    Db(sqlx::Error),
    InsufficientFunds,
}

impl From<idem_tools::Error> for AppError {
    fn from(e: idem_tools::Error) -> Self {
        AppError::Idem(e)
    }
}

impl From<sqlx::Error> for AppError {
    fn from(e: sqlx::Error) -> Self {
        AppError::Db(e)
    }
}

/// Moves `cents` between two accounts. Callers call `transfer(&turn, from, to, cents)`: the
/// engine opens the transaction, claims the key in it, runs this body with its connection,
/// records the receipt and commits — once.
#[idempotent]
async fn transfer(
    turn: &Turn,
    #[transaction] tx: &mut PgConnection,
    from: i64,
    to: i64,
    cents: i64,
) -> Result<Receipt, AppError> {
    let _ = turn;
    let balance: i64 = sqlx::query_scalar("SELECT cents FROM accounts WHERE id = $1 FOR UPDATE")
        .bind(from)
        .fetch_one(&mut *tx)
        .await?;
    if balance < cents {
        return Err(AppError::InsufficientFunds); // rolls back: nothing recorded, nothing moved
    }
    sqlx::query("UPDATE accounts SET cents = cents - $1 WHERE id = $2")
        .bind(cents)
        .bind(from)
        .execute(&mut *tx)
        .await?;
    sqlx::query("UPDATE accounts SET cents = cents + $1 WHERE id = $2")
        .bind(cents)
        .bind(to)
        .execute(&mut *tx)
        .await?;
    // A call to the outside world here (an HTTP API, an email) is NOT covered by the
    // transaction: forward the key so that the other side deduplicates a second call.
    let key = current_key().map(|k| k.to_hex()).unwrap_or_default();
    let transfer_id = sqlx::query_scalar(
        "INSERT INTO transfers (cents, idempotency_key) VALUES ($1, $2) RETURNING id",
    )
    .bind(cents)
    .bind(key)
    .fetch_one(&mut *tx)
    .await?;
    // Slow enough for the example's timeout and duplicate to catch it in the middle.
    tokio::time::sleep(Duration::from_millis(300)).await;
    Ok(Receipt { transfer_id, cents })
}

async fn balances(store: &PostgresStore) -> Result<(i64, i64, i64), sqlx::Error> {
    let a = sqlx::query_scalar("SELECT cents FROM accounts WHERE id = 1")
        .fetch_one(store.pool())
        .await?;
    let b = sqlx::query_scalar("SELECT cents FROM accounts WHERE id = 2")
        .fetch_one(store.pool())
        .await?;
    let n = sqlx::query_scalar("SELECT count(*) FROM transfers")
        .fetch_one(store.pool())
        .await?;
    Ok((a, b, n))
}

fn check(ok: bool, claim: &str, failures: &mut u32) {
    println!("{} {claim}", if ok { "ok  " } else { "FAIL" });
    if !ok {
        *failures += 1;
    }
}

#[tokio::main]
async fn main() -> Result<(), Box<dyn std::error::Error>> {
    let url = std::env::var("IDEM_POSTGRES_URL").map_err(|_| {
        "set IDEM_POSTGRES_URL=postgres://user@host/db, or run scripts/transactional-example.sh"
    })?;
    // The application's pool: idem's tables and the application's live in one database.
    let pool = sqlx::postgres::PgPoolOptions::new()
        .max_connections(5)
        .connect(&url)
        .await?;
    sqlx::raw_sql(
        "DROP TABLE IF EXISTS accounts, transfers;
         CREATE TABLE accounts (id bigint PRIMARY KEY, cents bigint NOT NULL);
         INSERT INTO accounts VALUES (1, 10000), (2, 0);
         CREATE TABLE transfers (id bigserial PRIMARY KEY, cents bigint NOT NULL,
                                 idempotency_key text NOT NULL);",
    )
    .execute(&pool)
    .await?;
    let store = PostgresStore::from_pool(pool).await?;
    let shared: Arc<dyn Store> = Arc::new(store.clone());
    let turn_id = format!("example-{}", std::process::id());
    let turn = Turn::new(&turn_id).with_store(Arc::clone(&shared));
    let mut failures = 0;

    let first = transfer(&turn, 1, 2, 2500)
        .await
        .map_err(|e| format!("{e:?}"))?;
    let retry = transfer(&turn, 1, 2, 2500)
        .await
        .map_err(|e| format!("{e:?}"))?;
    check(
        retry == first,
        "a retry replays the first receipt",
        &mut failures,
    );
    check(
        balances(&store).await? == (7500, 2500, 1),
        "the money moved once",
        &mut failures,
    );

    // A caller that gives up mid-transfer: everything rolls back, and the retry runs.
    let cut = tokio::time::timeout(Duration::from_millis(100), transfer(&turn, 1, 2, 100)).await;
    check(
        cut.is_err(),
        "the caller timed out mid-transfer",
        &mut failures,
    );
    check(
        balances(&store).await? == (7500, 2500, 1),
        "the cut-off transfer left nothing behind",
        &mut failures,
    );
    let again = transfer(&turn, 1, 2, 100).await;
    check(
        again.is_ok(),
        "its retry ran (not \"interrupted, check first\")",
        &mut failures,
    );

    // Two processes' duplicates (two store handles): the second waits for the first's
    // transaction, then replays its receipt.
    let other = Turn::new(&turn_id).with_store(Arc::new(store.clone()) as Arc<dyn Store>);
    let (a, b) = tokio::join!(transfer(&turn, 1, 2, 300), async {
        tokio::time::sleep(Duration::from_millis(50)).await;
        transfer(&other, 1, 2, 300).await
    });
    let same = matches!((&a, &b), (Ok(a), Ok(b)) if a == b);
    check(
        same,
        "a concurrent duplicate got the first receipt",
        &mut failures,
    );
    check(
        balances(&store).await? == (7100, 2900, 3),
        "three transfers in all, each once",
        &mut failures,
    );
    if failures > 0 {
        return Err(format!("{failures} claims failed").into());
    }
    println!("every claim holds");
    Ok(())
}

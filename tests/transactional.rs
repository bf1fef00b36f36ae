//! `#[idempotent]` tools with a `#[transaction]` parameter, on a real PostgreSQL server
//! (`IDEM_POSTGRES_URL`, skipped without it unless `IDEM_REQUIRE_POSTGRES` is set): the
//! parameter leaves the signature callers see, the body gets the transaction's connection, and
//! the tool's rows commit with its record or not at all.
#![cfg(feature = "postgres")]

use std::sync::Arc;
use std::time::Duration;

use idem_tools::PostgresStore;
use idem_tools::{Outcome, Store, Turn, idempotent, tool_impl};
use sqlx::PgConnection;

#[derive(Debug)]
#[allow(dead_code)] // read through `Debug`
enum AppError {
    Idem(idem_tools::Error),
    Sql(sqlx::Error),
}

impl From<idem_tools::Error> for AppError {
    fn from(e: idem_tools::Error) -> Self {
        AppError::Idem(e)
    }
}

impl From<sqlx::Error> for AppError {
    fn from(e: sqlx::Error) -> Self {
        AppError::Sql(e)
    }
}

/// Moves `cents` from one account to another, and returns the transfer's id.
#[idempotent]
async fn transfer(
    turn: &Turn,
    #[transaction] tx: &mut PgConnection,
    from: i64,
    to: i64,
    cents: i64,
) -> Result<i64, AppError> {
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
    let id = sqlx::query_scalar("INSERT INTO transfers (cents) VALUES ($1) RETURNING id")
        .bind(cents)
        .fetch_one(&mut *tx)
        .await?;
    let _ = turn;
    Ok(id)
}

/// The common shape: a `&self` method on a struct that holds the application's handles.
#[derive(Clone)]
struct Bank {
    fee: i64,
}

#[tool_impl(same_service)]
impl Bank {
    /// Charges the fee to `account`, slowly.
    #[idempotent]
    async fn charge_fee(
        &self,
        #[transaction] tx: &mut PgConnection,
        account: i64,
    ) -> Result<i64, AppError> {
        sqlx::query("UPDATE accounts SET cents = cents - $1 WHERE id = $2")
            .bind(self.fee)
            .bind(account)
            .execute(&mut *tx)
            .await?;
        tokio::time::sleep(Duration::from_millis(400)).await;
        Ok(self.fee)
    }
}

async fn setup(test: &str) -> Option<PostgresStore> {
    let url = match std::env::var("IDEM_POSTGRES_URL") {
        Ok(url) if !url.is_empty() => url,
        _ => {
            assert!(
                std::env::var_os("IDEM_REQUIRE_POSTGRES").is_none(),
                "{test}: IDEM_REQUIRE_POSTGRES is set but IDEM_POSTGRES_URL is not"
            );
            eprintln!("SKIPPED {test}: IDEM_POSTGRES_URL is not set");
            return None;
        }
    };
    let schema = format!("idem_facade_{test}_{}", std::process::id());
    // The application's tables and idem's in one schema, found through the search path.
    let options: sqlx::postgres::PgConnectOptions = url.parse().expect("a URL");
    let options = options.options([("search_path", schema.as_str())]);
    let admin = sqlx::PgPool::connect_with(options.clone())
        .await
        .expect("connect");
    sqlx::raw_sql(&format!(
        "DROP SCHEMA IF EXISTS {schema} CASCADE; CREATE SCHEMA {schema};
         CREATE TABLE {schema}.accounts (id bigint PRIMARY KEY, cents bigint NOT NULL);
         INSERT INTO {schema}.accounts VALUES (1, 10000), (2, 0);
         CREATE TABLE {schema}.transfers (id bigserial PRIMARY KEY, cents bigint NOT NULL);"
    ))
    .execute(&admin)
    .await
    .expect("create the application's tables");
    let pool = sqlx::postgres::PgPoolOptions::new()
        .test_before_acquire(false)
        .connect_with(options)
        .await
        .expect("connect");
    Some(
        PostgresStore::from_pool(pool)
            .await
            .expect("open the store"),
    )
}

async fn cents(store: &PostgresStore, account: i64) -> i64 {
    sqlx::query_scalar("SELECT cents FROM accounts WHERE id = $1")
        .bind(account)
        .fetch_one(store.pool())
        .await
        .expect("read")
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_transfer_runs_once_and_callers_do_not_pass_the_connection() {
    let Some(store) = setup("transfer").await else {
        return;
    };
    let turn = Turn::new("turn-1").with_store(Arc::new(store.clone()) as Arc<dyn Store>);
    let first = transfer(&turn, 1, 2, 2500).await.expect("runs");
    let retry = transfer(&turn, 1, 2, 2500).await.expect("replays");
    assert_eq!(first, retry);
    assert_eq!(
        (cents(&store, 1).await, cents(&store, 2).await),
        (7500, 2500)
    );
    assert_eq!(turn.stats().get(Outcome::Replayed), 1);
    // The call is `Send`: it can be spawned.
    let spawned = tokio::spawn({
        let turn = turn.clone();
        async move { transfer(&turn, 1, 2, 100).await }
    });
    spawned.await.expect("joins").expect("runs");
    assert_eq!(cents(&store, 2).await, 2600);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_method_cut_off_by_a_caller_timeout_rolls_back_and_a_retry_runs() {
    let Some(store) = setup("method").await else {
        return;
    };
    let turn = Turn::new("turn-2").with_store(Arc::new(store.clone()) as Arc<dyn Store>);
    let bank = Bank { fee: 300 };
    let cut = turn
        .clone()
        .scope(tokio::time::timeout(
            Duration::from_millis(100),
            bank.charge_fee(1),
        ))
        .await;
    assert!(cut.is_err(), "the caller timed out");
    assert_eq!(cents(&store, 1).await, 10000, "the fee was rolled back");
    assert_eq!(turn.stats().get(Outcome::Interrupted), 0);
    let charged = turn
        .clone()
        .scope(bank.charge_fee(1))
        .await
        .expect("the retry runs, not told \"interrupted\"");
    assert_eq!(charged, 300);
    assert_eq!(cents(&store, 1).await, 9700);
    let again = turn.scope(bank.charge_fee(1)).await.expect("replays");
    assert_eq!(again, 300);
    assert_eq!(cents(&store, 1).await, 9700);
}

/// A transactional tool of a generic block, compiled for two currencies: its second type's
/// call is refused (`Error::SharedAcrossTypes`) rather than replaying the first one's transfer.
trait Currency: Send + Sync + 'static {
    const ACCOUNT: i64;
}

struct Usd;
struct Eur;

impl Currency for Usd {
    const ACCOUNT: i64 = 1;
}

impl Currency for Eur {
    const ACCOUNT: i64 = 2;
}

struct Payout<C>(std::marker::PhantomData<C>);

#[tool_impl]
impl<C: Currency> Payout<C> {
    #[idempotent]
    async fn pay(#[transaction] tx: &mut PgConnection, cents: i64) -> Result<i64, AppError> {
        sqlx::query("UPDATE accounts SET cents = cents + $1 WHERE id = $2")
            .bind(cents)
            .bind(C::ACCOUNT)
            .execute(&mut *tx)
            .await?;
        Ok(C::ACCOUNT)
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_transactional_tool_of_a_generic_block_is_refused_for_a_second_type() {
    let Some(store) = setup("payout").await else {
        return;
    };
    let turn = Turn::new("turn-payout").with_store(Arc::new(store.clone()) as Arc<dyn Store>);
    let (usd, eur) = turn
        .scope(async { (Payout::<Usd>::pay(5).await, Payout::<Eur>::pay(5).await) })
        .await;
    assert_eq!(usd.expect("runs"), 1);
    assert!(
        matches!(
            eur,
            Err(AppError::Idem(idem_tools::Error::SharedAcrossTypes { .. }))
        ),
        "not the USD transfer's receipt: {eur:?}"
    );
    assert_eq!((cents(&store, 1).await, cents(&store, 2).await), (10005, 0));
}

/// A helper that is itself a tool: a row written on whatever connection the caller gives.
#[idempotent(skip(db))]
async fn log_transfer(db: &mut PgConnection, cents: i64) -> Result<i64, AppError> {
    Ok(
        sqlx::query_scalar("INSERT INTO transfers (cents) VALUES ($1) RETURNING id")
            .bind(cents)
            .fetch_one(&mut *db)
            .await?,
    )
}

/// A detached tool (owned arguments) that writes nothing of the transaction's.
#[idempotent]
async fn notify(cents: i64) -> Result<i64, AppError> {
    Ok(cents)
}

/// Calls a tool inside its transaction: on the transaction's connection, or a detached one.
#[idempotent]
async fn pay_and_log(
    #[transaction] tx: &mut PgConnection,
    cents: i64,
    detached: bool,
) -> Result<i64, AppError> {
    sqlx::query("UPDATE accounts SET cents = cents - $1 WHERE id = 1")
        .bind(cents)
        .execute(&mut *tx)
        .await?;
    if detached {
        notify(cents).await
    } else {
        log_transfer(&mut *tx, cents).await
    }
}

/// A tool called inside a transactional tool's body would record its result outside the
/// transaction: kept when the transaction rolls back, so a retry would replay it without its
/// work (a receipt for a row that was never committed). It is refused, and nothing commits.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_tool_called_inside_a_transactional_body_is_refused() {
    let Some(store) = setup("nested").await else {
        return;
    };
    let turn = Turn::new("turn-nested").with_store(Arc::new(store.clone()) as Arc<dyn Store>);
    for detached in [false, true] {
        let answer = turn.clone().scope(pay_and_log(300, detached)).await;
        match answer {
            Err(AppError::Idem(idem_tools::Error::Config(message))) => assert!(
                message.contains("inside the body of transactional tool `pay_and_log`"),
                "{message}"
            ),
            other => panic!("detached {detached}: {other:?}"),
        }
    }
    assert_eq!(cents(&store, 1).await, 10000, "rolled back");
    let logged: i64 = sqlx::query_scalar("SELECT count(*) FROM transfers")
        .fetch_one(store.pool())
        .await
        .expect("count");
    assert_eq!(logged, 0);
    assert!(
        store.list(None, 10).await.expect("list").is_empty(),
        "no record"
    );
    // Called on its own, the helper is a tool like any other.
    let mut conn = store.pool().acquire().await.expect("a connection");
    let id = turn.scope(log_transfer(&mut conn, 5)).await.expect("runs");
    assert!(id > 0);
}

/// What [`pay_then_notify`]'s body spawned.
static SPAWNED: std::sync::Mutex<Vec<tokio::task::JoinHandle<Result<i64, AppError>>>> =
    std::sync::Mutex::new(Vec::new());

/// Spawns a task (`idem_tools::spawn`, which carries the turn and the held keys) that calls a
/// tool once the transaction is over, and one that calls it at once, while it is open.
#[idempotent]
async fn pay_then_notify(
    #[transaction] tx: &mut PgConnection,
    cents: i64,
) -> Result<i64, AppError> {
    sqlx::query("UPDATE accounts SET cents = cents - $1 WHERE id = 1")
        .bind(cents)
        .execute(&mut *tx)
        .await?;
    let (now, later) = tokio::sync::oneshot::channel::<()>();
    let during = idem_tools::spawn(async move {
        let answer = notify(cents).await;
        let _ = now.send(());
        answer
    });
    let after = idem_tools::spawn(async move {
        tokio::time::sleep(Duration::from_millis(300)).await;
        notify(cents + 1).await
    });
    let _ = later.await;
    SPAWNED
        .lock()
        .expect("not poisoned")
        .extend([during, after]);
    Ok(cents)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_task_the_body_spawned_may_call_tools_once_the_transaction_is_over() {
    let Some(store) = setup("spawned").await else {
        return;
    };
    let turn = Turn::new("turn-spawned").with_store(Arc::new(store.clone()) as Arc<dyn Store>);
    let paid = turn.clone().scope(pay_then_notify(40)).await;
    assert_eq!(paid.expect("committed"), 40);
    let [during, after] = <[_; 2]>::try_from(std::mem::take(&mut *SPAWNED.lock().unwrap()))
        .unwrap_or_else(|_| panic!("two tasks"));
    let during = during.await.expect("no panic");
    assert!(
        matches!(&during, Err(AppError::Idem(idem_tools::Error::Config(m))) if m.contains("pay_then_notify")),
        "while the transaction is open: {during:?}"
    );
    assert_eq!(after.await.expect("no panic").expect("runs"), 41);
}

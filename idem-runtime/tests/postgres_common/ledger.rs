//! The application's side of the transactional tests: a `ledger` table in the store's schema
//! and a tool that inserts one row into it; rows are counted exactly, so a second execution or
//! a lost one shows.

use std::sync::Arc;

use idem_tools_runtime::engine::transactional;
use idem_tools_runtime::key::ArgsDigest;
use idem_tools_runtime::store::{PostgresStore, RecordState, Store};
use idem_tools_runtime::{Call, Codec, ToolInfo, Turn};
use sqlx::PgConnection;

use super::{Failure, postgres_url, store};

pub static TRANSFER: ToolInfo = ToolInfo::idempotent("transfer");

/// A store in a schema of its own, with the application's table next to idem's.
pub async fn setup(tag: &str) -> Option<PostgresStore> {
    let url = postgres_url(tag)?;
    let store = store(&url, tag).await;
    create_ledger(&store).await;
    Some(store)
}

/// Creates the application's table ([`ledger`]) next to idem's, in the store's schema.
pub async fn create_ledger(store: &PostgresStore) {
    sqlx::raw_sql(&format!(
        "CREATE TABLE {} (id bigserial PRIMARY KEY, memo text NOT NULL)",
        ledger(store)
    ))
    .execute(store.pool())
    .await
    .expect("create the ledger");
}

pub fn ledger(store: &PostgresStore) -> String {
    format!("\"{}\".ledger", store.schema().expect("a test schema"))
}

pub async fn rows(store: &PostgresStore, memo: &str) -> i64 {
    sqlx::query_scalar(&format!(
        "SELECT count(*) FROM {} WHERE memo = $1",
        ledger(store)
    ))
    .bind(memo)
    .fetch_one(store.pool())
    .await
    .expect("count rows")
}

pub fn call(turn: &Turn, store: &Arc<dyn Store>, memo: &str) -> Call {
    let mut args = ArgsDigest::new(TRANSFER.name);
    args.arg("memo", memo).expect("a string encodes");
    let (key, fingerprint) = args.finish(turn.namespace(), turn.id(), TRANSFER.name, 1);
    Call::new(&TRANSFER, turn, key, fingerprint).with_store(store)
}

/// Inserts the row of `memo` through the call's transaction and returns its id.
pub async fn insert(conn: &mut PgConnection, table: &str, memo: &str) -> Result<i64, Failure> {
    Ok(sqlx::query_scalar(&format!(
        "INSERT INTO {table} (memo) VALUES ($1) RETURNING id"
    ))
    .bind(memo)
    .fetch_one(&mut *conn)
    .await?)
}

/// A transactional call of the tool that inserts `memo`'s row and returns its id.
pub async fn transfer(store: &PostgresStore, turn: &Turn, memo: &str) -> Result<i64, Failure> {
    let shared: Arc<dyn Store> = Arc::new(store.clone());
    let table = ledger(store);
    transactional::execute(
        call(turn, &shared, memo),
        Codec::ok_only(),
        async |conn: &mut PgConnection| insert(conn, &table, memo).await,
    )
    .await
}

pub async fn record_state(store: &PostgresStore, turn: &Turn, memo: &str) -> Option<RecordState> {
    let shared: Arc<dyn Store> = Arc::new(store.clone());
    let key = call(turn, &shared, memo).key();
    store
        .get(turn.namespace(), &key)
        .await
        .expect("get")
        .map(|r| r.state)
}

//! `PostgresStore` passes the store conformance suite against a real server
//! (`IDEM_POSTGRES_URL`).
//!
//! Leases and TTLs run on the server's clock, so "time passes" is a real sleep, and the
//! suite's short duration is a few hundred milliseconds.
#![cfg(feature = "postgres")]

mod postgres_common;

use std::sync::Arc;
use std::time::Duration;

use idem_tools_runtime::Error;
use idem_tools_runtime::key::Key;
use idem_tools_runtime::store::conformance::{self, Harness};
use idem_tools_runtime::store::{PostgresStore, Store, StoreFuture};
use postgres_common::{cleanup, postgres_url, store, unique_schema};

struct Postgres {
    store: PostgresStore,
    shared: Arc<dyn Store>,
}

impl Harness for Postgres {
    fn store(&self) -> Arc<dyn Store> {
        Arc::clone(&self.shared)
    }

    fn short(&self) -> Duration {
        Duration::from_millis(400)
    }

    fn advance(&self, by: Duration) -> StoreFuture<'_, ()> {
        StoreFuture::new(async move {
            tokio::time::sleep(by).await;
            Ok(())
        })
    }

    fn corrupt<'a>(&'a self, namespace: &'a str, key: &'a Key) -> Option<StoreFuture<'a, ()>> {
        let sql = format!(
            "UPDATE {} SET fingerprint = '\\x00ff'::bytea WHERE namespace = $1 AND key = $2",
            self.store.records_table()
        );
        Some(StoreFuture::new(async move {
            sqlx::query(&sql)
                .bind(namespace)
                .bind(key.as_bytes().as_slice())
                .execute(self.store.pool())
                .await
                .map(|_| ())
                .map_err(|e| Error::store("corrupt", e))
        }))
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn postgres_store_conforms() {
    let Some(url) = postgres_url("postgres_store_conforms") else {
        return;
    };
    let store = store(&url, "conformance").await;
    let harness = Postgres {
        shared: Arc::new(store.clone()),
        store,
    };
    conformance::run_all(&harness).await;
    cleanup(&harness.store).await;
}

/// Tables written by a newer idem are refused, and the error's advice works: a schema of this
/// build's own, given with `PostgresStore::builder().schema(…)`.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn tables_of_a_newer_idem_are_refused_with_advice_that_works() {
    let Some(url) = postgres_url("tables_of_a_newer_idem_are_refused_with_advice_that_works")
    else {
        return;
    };
    let newer = store(&url, "newer").await;
    let schema = newer.schema().expect("a schema of its own").to_owned();
    sqlx::query(&format!(
        "UPDATE \"{schema}\".idem_schema SET version = version + 100"
    ))
    .execute(newer.pool())
    .await
    .unwrap();
    let refused = PostgresStore::builder().schema(&schema).connect(&url).await;
    let Err(Error::Config(message)) = refused else {
        panic!("refused: {:?}", refused.map(|_| ()));
    };
    assert!(message.contains("upgrade idem"), "{message}");
    assert!(
        message.contains("PostgresStore::builder().schema("),
        "{message}"
    );
    let own = PostgresStore::builder()
        .schema(unique_schema("own"))
        .connect(&url)
        .await
        .expect("a schema of its own works");
    cleanup(&own).await;
    cleanup(&newer).await;
}

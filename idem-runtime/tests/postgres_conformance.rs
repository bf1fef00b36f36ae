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
use postgres_common::{cleanup, postgres_url, store};

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

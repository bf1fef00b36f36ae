//! `RedisStore` passes the store conformance suite against a real server (`IDEM_REDIS_URL`).
//!
//! Redis expires keys on its own clock, so "time passes" is a real sleep, and the suite's short
//! duration is a few hundred milliseconds (long enough that a loaded machine's late wake-ups do
//! not eat the margins of the renewal check).
#![cfg(feature = "redis")]

mod redis_common;

use std::sync::Arc;
use std::time::Duration;

use idem_tools_runtime::Error;
use idem_tools_runtime::key::Key;
use idem_tools_runtime::store::conformance::{self, Harness};
use idem_tools_runtime::store::{RedisStore, Store, StoreFuture};
use redis::aio::MultiplexedConnection;
use redis_common::{cleanup, raw, redis_url, unique_prefix};

struct Redis {
    store: RedisStore,
    shared: Arc<dyn Store>,
    raw: MultiplexedConnection,
}

impl Harness for Redis {
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
        let redis_key = self.store.redis_key(namespace, key);
        let mut conn = self.raw.clone();
        Some(StoreFuture::new(async move {
            redis::cmd("SET")
                .arg(redis_key)
                .arg(b"\x00\xffnot a record".as_slice())
                .query_async::<()>(&mut conn)
                .await
                .map_err(|e| Error::store("corrupt", e))
        }))
    }

    fn expires_by_itself(&self) -> bool {
        true
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn redis_store_conforms() {
    let Some(url) = redis_url("redis_store_conforms") else {
        return;
    };
    let store = RedisStore::connect(&url)
        .await
        .expect("connect")
        .with_prefix(unique_prefix("conformance"));
    let harness = Redis {
        shared: Arc::new(store.clone()),
        raw: raw(&url).await,
        store,
    };
    conformance::run_all(&harness).await;
    cleanup(&url, harness.store.prefix()).await;
}

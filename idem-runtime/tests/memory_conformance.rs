//! MemoryStore passes the store conformance suite.

use std::sync::Arc;
use std::time::Duration;

use idem_runtime::clock::ManualClock;
use idem_runtime::key::Key;
use idem_runtime::store::conformance::{self, Harness};
use idem_runtime::store::{MemoryStore, Store, StoreFuture};

struct Memory {
    clock: ManualClock,
    store: Arc<dyn Store>,
}

impl Harness for Memory {
    fn store(&self) -> Arc<dyn Store> {
        Arc::clone(&self.store)
    }
    fn short(&self) -> Duration {
        Duration::from_secs(30)
    }
    fn advance(&self, by: Duration) -> StoreFuture<'_, ()> {
        self.clock.advance(by);
        Box::pin(async { Ok(()) })
    }
    fn corrupt<'a>(&'a self, _: &'a str, _: &'a Key) -> Option<StoreFuture<'a, ()>> {
        None
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn memory_store_conforms() {
    let clock = ManualClock::new(1_700_000_000_000);
    let store = Arc::new(MemoryStore::with_clock(Arc::new(clock.clone())));
    conformance::run_all(&Memory { clock, store }).await;
}

#[tokio::test]
async fn expired_records_are_reclaimed_without_a_purge() {
    let clock = ManualClock::new(1_000);
    let memory = MemoryStore::with_clock(Arc::new(clock.clone()));
    let fp = idem_runtime::Fingerprint::from_bytes([7; 32]);
    for i in 0..500u32 {
        let key = conformance::fresh_key(&i.to_string());
        let request = idem_runtime::store::BeginRequest {
            namespace: "",
            key: &key,
            tool: "t",
            fingerprint: &fp,
            lease: Duration::from_secs(1),
        };
        memory.begin(request).await.unwrap();
    }
    assert_eq!(memory.len(), 500);
    clock.advance(Duration::from_secs(2));
    // Touching the store reclaims the expired records of the shards it touches.
    for i in 0..2000u32 {
        let key = conformance::fresh_key(&format!("probe {i}"));
        memory.get("", &key).await.unwrap();
    }
    assert_eq!(
        memory.purge_expired().await.unwrap(),
        0,
        "touches reclaimed everything"
    );
}

//! MemoryStore passes the store conformance suite.

use std::sync::Arc;
use std::time::Duration;

use idem_tools_runtime::clock::ManualClock;
use idem_tools_runtime::key::Key;
use idem_tools_runtime::store::conformance::{self, Harness};
use idem_tools_runtime::store::{BeginRequest, LeaseToken, MemoryStore, Store, StoreFuture};

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
        StoreFuture::new(async { Ok(()) })
    }
    fn corrupt<'a>(&'a self, _: &'a str, _: &'a Key) -> Option<StoreFuture<'a, ()>> {
        None
    }
    fn exact_time(&self) -> bool {
        true
    }
}

fn request<'a>(key: &'a Key, fp: &'a idem_tools_runtime::Fingerprint) -> BeginRequest<'a> {
    BeginRequest {
        namespace: "",
        key,
        tool: "t",
        fingerprint: fp,
        lease: Duration::from_secs(1),
        token: LeaseToken::generate(),
        charge: None,
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
    let fp = idem_tools_runtime::Fingerprint::from_bytes([7; 32]);
    for i in 0..500u32 {
        let key = conformance::fresh_key(&i.to_string());
        memory.begin(request(&key, &fp)).await.unwrap();
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

#[tokio::test]
async fn expiry_work_is_bounded_per_call() {
    let clock = ManualClock::new(1_000);
    let memory = MemoryStore::with_clock(Arc::new(clock.clone()));
    let fp = idem_tools_runtime::Fingerprint::from_bytes([7; 32]);
    let mut keys = Vec::new();
    for i in 0..20_000u32 {
        let key = conformance::fresh_key(&i.to_string());
        memory.begin(request(&key, &fp)).await.unwrap();
        keys.push(key);
    }
    clock.advance(Duration::from_secs(2));
    let before = memory.footprint();
    // One call touches one shard and reclaims a bounded number of its expired entries, not
    // the ~600 that shard holds.
    memory.get("", &keys[0]).await.unwrap();
    let reclaimed = before - memory.footprint();
    assert!(
        (1..=64).contains(&reclaimed),
        "one call reclaimed {reclaimed} entries"
    );
    assert!(memory.purge_expired().await.unwrap() > 19_000);
    assert_eq!(memory.footprint(), 0, "purge reclaims everything expired");
}

#[tokio::test]
async fn memory_does_not_grow_with_the_number_of_calls() {
    use idem_tools_runtime::store::{Charge, KeyCounter};
    for (counter, most) in [(KeyCounter::Key, 3), (KeyCounter::TurnAndKey, 4)] {
        let clock = ManualClock::new(1_000);
        let memory = MemoryStore::with_clock(Arc::new(clock.clone()));
        let fp = idem_tools_runtime::Fingerprint::from_bytes([7; 32]);
        let key = conformance::fresh_key("hot");
        let charge = Charge {
            turn: idem_tools_runtime::store::budget::TurnIdentity::new("", "t"),
            counter,
            max_attempts: u32::MAX,
            max_calls: None,
            window: Duration::from_secs(3600),
        };
        for _ in 0..10_000 {
            let req = BeginRequest {
                charge: Some(charge),
                ..request(&key, &fp)
            };
            memory.begin(req).await.unwrap();
            clock.advance(Duration::from_millis(1));
        }
        // One record (in flight, then re-claimed as its lease lapses) with its count in the
        // same slot, or a slot of its own for a (turn, key) counter, and one heap entry for
        // each expiry: charges and renewals reschedule instead of pushing.
        let footprint = memory.footprint();
        assert!(footprint <= most, "{counter:?}: footprint {footprint}");
    }
}

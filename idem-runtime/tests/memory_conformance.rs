//! MemoryStore passes the store conformance suite, and keeps its memory bounded.

use std::sync::Arc;
use std::time::Duration;

use idem_tools_runtime::clock::ManualClock;
use idem_tools_runtime::key::Key;
use idem_tools_runtime::store::budget::TurnIdentity;
use idem_tools_runtime::store::conformance::{self, Harness};
use idem_tools_runtime::store::{
    Begin, BeginRequest, Charge, LeaseToken, MemoryStore, Store, StoreFuture,
};

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
        StoreFuture::ready(Ok(()))
    }
    fn corrupt<'a>(&'a self, _: &'a str, _: &'a Key) -> Option<StoreFuture<'a, ()>> {
        None
    }
    fn exact_time(&self) -> bool {
        true
    }
}

fn namespace() -> &'static str {
    ""
}

fn request<'a>(
    namespace: &'a str,
    key: &'a Key,
    fp: &'a idem_tools_runtime::Fingerprint,
) -> BeginRequest<'a> {
    BeginRequest {
        namespace,
        key,
        tool: "t",
        turn: "t",
        fingerprint: fp,
        lease: Duration::from_secs(1),
        ttl: Duration::from_secs(60),
        token: LeaseToken::generate(),
        charge: Charge {
            turn: TurnIdentity::new("", "t"),
            max_attempts: u32::MAX,
            max_calls: None,
            max_tool_actions: None,
            window: Duration::from_secs(1),
        },
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn memory_store_conforms() {
    let clock = ManualClock::new(1_700_000_000_000);
    let store = Arc::new(MemoryStore::with_clock(Arc::new(clock.clone())));
    conformance::run_all(&Memory { clock, store }).await;
}

/// Expired entries are swept as the store grows: memory stays within about twice what is live,
/// without a purge.
#[tokio::test]
async fn expired_entries_are_swept_as_the_store_grows() {
    let clock = ManualClock::new(1_000);
    let memory = MemoryStore::with_clock(Arc::new(clock.clone()));
    let (ns, fp) = (
        namespace(),
        idem_tools_runtime::Fingerprint::from_bytes([7; 32]),
    );
    let mut most = 0;
    for round in 0..20u32 {
        for i in 0..2_000u32 {
            let key = conformance::fresh_key(&format!("{round}/{i}"));
            memory.begin(request(ns, &key, &fp)).await.unwrap();
        }
        // Each round's records and counts expire before the next round.
        clock.advance(Duration::from_secs(2));
        most = most.max(memory.footprint());
    }
    assert!(
        most <= 3 * 2_000 + 32 * 32,
        "memory grew to {most} entries for 2,000 live ones"
    );
    assert_eq!(memory.len(), 0);
    memory.purge_expired().await.unwrap();
    assert_eq!(memory.footprint(), 0, "purge drops everything expired");
}

/// A key called over and over takes one entry.
#[tokio::test]
async fn memory_does_not_grow_with_the_number_of_calls() {
    let clock = ManualClock::new(1_000);
    let memory = MemoryStore::with_clock(Arc::new(clock.clone()));
    let (ns, fp) = (
        namespace(),
        idem_tools_runtime::Fingerprint::from_bytes([7; 32]),
    );
    let key = conformance::fresh_key("hot");
    for _ in 0..10_000 {
        let req = request(ns, &key, &fp);
        let lease = req.lease();
        if let Begin::Claimed = memory.begin(req).await.unwrap() {
            memory.release(&lease).await.unwrap();
        }
        clock.advance(Duration::from_millis(1));
    }
    assert_eq!(memory.footprint(), 1);
}

/// `len()` (which visits every shard) never deadlocks with calls that claim and give back keys
/// (it once locked a names table, then each shard, while `begin` locked a shard, then the
/// table).
#[test]
fn len_runs_alongside_claims_and_releases() {
    let memory = Arc::new(MemoryStore::new());
    let (done_tx, done_rx) = std::sync::mpsc::channel();
    let workers: Vec<_> = (0..2)
        .map(|w| {
            let (memory, done) = (Arc::clone(&memory), done_tx.clone());
            std::thread::spawn(move || {
                let runtime = tokio::runtime::Builder::new_current_thread()
                    .build()
                    .unwrap();
                let (ns, fp) = (
                    namespace(),
                    idem_tools_runtime::Fingerprint::from_bytes([1; 32]),
                );
                runtime.block_on(async {
                    for i in 0..20_000u32 {
                        let key = conformance::fresh_key(&format!("{w}/{i}"));
                        let req = request(ns, &key, &fp);
                        let lease = req.lease();
                        memory.begin(req).await.unwrap();
                        memory.release(&lease).await.unwrap();
                    }
                });
                done.send(()).unwrap();
            })
        })
        .collect();
    let lens = {
        let memory = Arc::clone(&memory);
        let done = done_tx.clone();
        std::thread::spawn(move || {
            for _ in 0..2_000 {
                let _ = memory.len();
            }
            done.send(()).unwrap();
        })
    };
    for _ in 0..3 {
        done_rx
            .recv_timeout(Duration::from_secs(60))
            .expect("a thread froze: len() deadlocked with begin/release");
    }
    for worker in workers {
        worker.join().unwrap();
    }
    lens.join().unwrap();
}

//! The soak: many turns of calls (some cancelled, some failing) on one memory store that fails
//! one operation in twenty-five (before or after it took effect), checking
//! that the single-flight registry and the store's memory stay bounded and return to zero.
//! `IDEM_FAULT_SOAK=1` runs 200,000 turns; by default a short run of 3,000.

use idem_tools_runtime::Codec;
use std::sync::Arc;
use std::time::Duration;

use crate::fault_store::{Fault, FaultStore};
use idem_tools_runtime::engine::flights_registered;
use idem_tools_runtime::store::{MemoryStore, Store};
use idem_tools_runtime::{Call, Error, Turn, execute};

use crate::calls::key_of;
use crate::schedule::Tool;
use crate::stores::TokioClock;
use rand::rngs::StdRng;
use rand::{Rng, SeedableRng};

/// The footprint a leak-free store never exceeds here: turns overlap within a TTL (40 ms) and
/// a budget window (100 ms) of about ten turns of at most six keys each, and each of the 32
/// shards sweeps what expired once it holds twice what it kept at its last sweep, at least 32
/// entries: at most about 32 × 32 expired entries wait for a sweep.
const FOOTPRINT_BOUND: usize = 2_000;

/// One turn: six concurrent calls over three keys; some time out, some fail.
async fn turn(store: &Arc<dyn Store>, id: u64, r: &mut StdRng) {
    let turn = Turn::new(format!("soak-{id}"))
        .with_store(Arc::clone(store))
        .with_budget_window(Duration::from_millis(100));
    let calls: Vec<_> = (0..6)
        .map(|i| {
            let (key, fingerprint) = key_of(&turn, Tool::Short, (i % 3) as u8);
            let call = Call::new(Tool::Short.info(), &turn, key, fingerprint);
            let (work, fails, patience) = (
                r.random_range(0..8),
                r.random_bool(0.2),
                r.random_range(1..=11),
            );
            tokio::spawn(async move {
                let body = async move {
                    tokio::time::sleep(Duration::from_millis(work)).await;
                    if fails {
                        Err(Error::Config("soak".into()))
                    } else {
                        Ok(work)
                    }
                };
                tokio::time::timeout(
                    Duration::from_millis(patience),
                    execute(call, Codec::ok_only(), body),
                )
                .await
            })
        })
        .collect();
    for call in calls {
        let _ = call.await;
    }
}

fn turns() -> u64 {
    if std::env::var_os("IDEM_FAULT_SOAK").is_some_and(|v| v == "1") {
        200_000
    } else {
        3_000
    }
}

#[test]
fn the_flight_registry_and_the_store_stay_bounded_over_many_turns() {
    let _serial = crate::serial();
    let runtime = tokio::runtime::Builder::new_current_thread()
        .enable_time()
        .start_paused(true)
        .build()
        .expect("a current-thread runtime builds");
    let turns = turns();
    let (max_footprint, max_flights, end_footprint, end_flights) = runtime.block_on(async {
        let memory = Arc::new(MemoryStore::with_clock(Arc::new(TokioClock::new())));
        let mut faults = StdRng::seed_from_u64(!turns);
        let faults = std::sync::Mutex::new(move || match faults.random_range(0..50) {
            0 => Fault::FailBefore,
            1 => Fault::FailAfter,
            _ => Fault::None,
        });
        let plan = move |_| {
            (faults
                .lock()
                .unwrap_or_else(std::sync::PoisonError::into_inner))()
        };
        let store: Arc<dyn Store> = Arc::new(FaultStore::new(memory.clone(), plan));
        let mut r = StdRng::seed_from_u64(turns);
        let (mut max_footprint, mut max_flights) = (0, 0);
        for id in 0..turns {
            turn(&store, id, &mut r).await;
            max_flights = max_flights.max(flights_registered());
            if id % 50 == 0 {
                max_footprint = max_footprint.max(memory.footprint());
            }
        }
        tokio::time::sleep(Duration::from_secs(120)).await;
        let _ = store.purge_expired().await;
        (
            max_footprint,
            max_flights,
            memory.footprint(),
            flights_registered(),
        )
    });
    eprintln!(
        "fault-suite soak: turns={turns} max_footprint={max_footprint} \
         max_flights_between_turns={max_flights} end_footprint={end_footprint} \
         end_flights={end_flights}"
    );
    assert!(max_footprint > 0, "the soak stored nothing");
    assert!(
        max_footprint <= FOOTPRINT_BOUND,
        "the store grew to {max_footprint} entries"
    );
    assert!(max_flights <= 3, "{max_flights} flights left between turns");
    assert_eq!(
        (end_footprint, end_flights),
        (0, 0),
        "memory left once every record expired"
    );
}

//! Single-flight: identical calls running at the same time in this process share one execution.

use std::collections::HashMap;
use std::sync::{Arc, LazyLock, Mutex};

use tokio::sync::watch;

use crate::key::{Fingerprint, Key};

const SHARDS: usize = 16;

/// What a finished leader hands its followers: the recorded result and the arguments'
/// fingerprint it was recorded under.
pub(crate) type Shared = Arc<(Fingerprint, Vec<u8>)>;

/// A key in flight: which store (by address) and which key.
type FlightId = (usize, Key);

type Slot = watch::Receiver<Option<Shared>>;

static FLIGHTS: LazyLock<[Mutex<HashMap<FlightId, Slot>>; SHARDS]> =
    LazyLock::new(|| std::array::from_fn(|_| Mutex::default()));

fn shard(id: &FlightId) -> std::sync::MutexGuard<'static, HashMap<FlightId, Slot>> {
    FLIGHTS[usize::from(id.1.as_bytes()[1]) % SHARDS]
        .lock()
        .unwrap_or_else(std::sync::PoisonError::into_inner)
}

/// This call's part in a flight.
pub(crate) enum Role {
    /// No identical call is running here: this one talks to the store.
    Leader(Leader),
    /// An identical call is running: wait for it.
    Follower(Follower),
}

/// Joins the flight for `key` in `store_id`, leading it if nobody does.
pub(crate) fn join(store_id: usize, key: Key) -> Role {
    let id = (store_id, key);
    let mut flights = shard(&id);
    if let Some(slot) = flights.get(&id) {
        return Role::Follower(Follower(slot.clone()));
    }
    let (sender, receiver) = watch::channel(None);
    flights.insert(id, receiver);
    Role::Leader(Leader { id, sender })
}

/// The call that talks to the store for everyone waiting on the same key. Dropping it without
/// [`Leader::publish`] sends the followers back to try again (one of them leads next).
pub(crate) struct Leader {
    id: FlightId,
    sender: watch::Sender<Option<Shared>>,
}

impl Leader {
    /// Hands the recorded result to every follower.
    pub(crate) fn publish(self, fingerprint: Fingerprint, bytes: Vec<u8>) {
        self.leave();
        if !self.sender.is_closed() {
            self.sender
                .send_replace(Some(Arc::new((fingerprint, bytes))));
        }
    }

    /// Whether any follower waits on this flight.
    pub(crate) fn has_followers(&self) -> bool {
        // The registry holds one receiver itself.
        self.sender.receiver_count() > 1
    }

    fn leave(&self) {
        let mut flights = shard(&self.id);
        if flights
            .get(&self.id)
            .is_some_and(|slot| slot.same_channel(&self.sender.subscribe()))
        {
            flights.remove(&self.id);
        }
    }
}

impl Drop for Leader {
    fn drop(&mut self) {
        self.leave();
    }
}

/// A call waiting for an identical call in this process.
pub(crate) struct Follower(Slot);

impl Follower {
    /// The leader's recorded result, or `None` if it finished without one (error, cancellation,
    /// panic, store failure): then try again.
    pub(crate) async fn wait(mut self) -> Option<Shared> {
        match self.0.wait_for(Option::is_some).await {
            Ok(shared) => shared.clone(),
            Err(_) => None,
        }
    }
}

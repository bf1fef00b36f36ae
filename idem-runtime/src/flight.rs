//! Single-flight: identical calls running at the same time in this process share one execution.
//! A call of a key in flight with other arguments (another fingerprint) does not wait for a
//! result it could not take: it asks the store itself, which answers it at once (the key held
//! by a call with other arguments, or recorded).
//!
//! The leader of a key registers a bare marker; the shared state (a [`Notify`] and the result
//! slot) is allocated only when a second caller arrives, so an uncontended call pays one map
//! insert and one remove.

use std::sync::{Arc, LazyLock, Mutex, MutexGuard};

use crossbeam_utils::CachePadded;
use hashbrown::HashMap;
use hashbrown::hash_map::Entry;
use tokio::sync::Notify;
use tokio::time::Instant;

use crate::key::{Fingerprint, Key};
use crate::store::FirstResult;

const SHARDS: usize = 16;

/// What a finished leader hands its followers: the recorded result and the arguments'
/// fingerprint it was recorded under (cloning it shares the bytes).
pub(crate) type Shared = FirstResult;

/// A key in flight: which store (by address) and which key.
type FlightId = (usize, Key);

enum Slot {
    /// Led by a call of these arguments, and nobody waits yet.
    Leading(Fingerprint),
    /// Led, with followers waiting on the flight.
    Watched(Arc<Flight>),
    /// Finished: the result stays here while it is recorded in the background.
    Lingering(Shared),
}

struct Flight {
    /// The leader's arguments.
    fingerprint: Fingerprint,
    state: Mutex<State>,
    notify: Notify,
}

enum State {
    Running,
    Done(Shared),
    Abandoned,
}

type Shard = CachePadded<Mutex<HashMap<FlightId, Slot>>>;

static FLIGHTS: LazyLock<[Shard; SHARDS]> =
    LazyLock::new(|| std::array::from_fn(|_| CachePadded::new(Mutex::new(HashMap::new()))));

fn lock<T>(mutex: &Mutex<T>) -> MutexGuard<'_, T> {
    mutex
        .lock()
        .unwrap_or_else(std::sync::PoisonError::into_inner)
}

fn shard(id: &FlightId) -> MutexGuard<'static, HashMap<FlightId, Slot>> {
    lock(&FLIGHTS[usize::from(id.1.as_bytes()[1]) % SHARDS])
}

/// This call's part in a flight.
pub(crate) enum Role {
    /// No identical call is running here: this one talks to the store.
    Leader(Leader),
    /// An identical call is running: wait for it.
    Follower(Follower),
    /// An identical call finished and its result is still being recorded: take it.
    Done(Shared),
}

/// Joins the flight for `key` in `store_id` as a call of the arguments `fingerprint`, leading
/// it if nobody does; a call of other arguments than the leader's leads apart
/// ([`Leader`] of no flight: it asks the store alone).
pub(crate) fn join(store_id: usize, key: Key, fingerprint: Fingerprint) -> Role {
    let id = (store_id, key);
    let mut flights = shard(&id);
    match flights.entry(id) {
        Entry::Vacant(vacant) => {
            vacant.insert(Slot::Leading(fingerprint));
            Role::Leader(Leader { flight: Some(id) })
        }
        Entry::Occupied(mut occupied) => match occupied.get_mut() {
            Slot::Lingering(shared) => Role::Done(shared.clone()),
            Slot::Watched(flight) if flight.fingerprint != fingerprint => {
                Role::Leader(Leader { flight: None })
            }
            Slot::Watched(flight) => Role::Follower(Follower(Arc::clone(flight))),
            Slot::Leading(led) if *led != fingerprint => Role::Leader(Leader { flight: None }),
            slot @ Slot::Leading(_) => {
                let flight = Arc::new(Flight {
                    fingerprint,
                    state: Mutex::new(State::Running),
                    notify: Notify::new(),
                });
                *slot = Slot::Watched(Arc::clone(&flight));
                Role::Follower(Follower(flight))
            }
        },
    }
}

/// The call that talks to the store for everyone waiting on the same key. Dropping it without
/// [`Leader::publish`] sends the followers back to try again (one of them leads next).
pub(crate) struct Leader {
    /// The flight it leads, until it ends it; none for a call apart (of other arguments than
    /// the flight's), whose publishing, lingering and dropping leave the flight alone.
    flight: Option<FlightId>,
}

impl Leader {
    /// Hands the recorded result to every follower and ends the flight (`result` is only
    /// called, to pack the result for sharing, when somebody waits).
    pub(crate) fn publish(mut self, result: impl FnOnce() -> Shared) {
        let Some(id) = self.flight.take() else { return };
        let slot = shard(&id).remove(&id);
        if let Some(Slot::Watched(flight)) = slot {
            *lock(&flight.state) = State::Done(result());
            flight.notify.notify_waiters();
        }
    }

    /// Hands the result to every follower, and keeps handing it to new callers until the
    /// returned [`Lingering`] is dropped (the result is being recorded in the background).
    pub(crate) fn linger(mut self, shared: Shared) -> Lingering {
        let id = self.flight.take();
        if let Some(id) = id {
            finish(id, State::Done(shared.clone()), Some(shared));
        }
        Lingering { id }
    }
}

/// Ends the flight `id` with `state` for its followers, its slot left to `linger` if given.
fn finish(id: FlightId, state: State, linger: Option<Shared>) {
    let mut flights = shard(&id);
    let slot = match linger {
        Some(shared) => flights.insert(id, Slot::Lingering(shared)),
        None => flights.remove(&id),
    };
    drop(flights);
    if let Some(Slot::Watched(flight)) = slot {
        *lock(&flight.state) = state;
        flight.notify.notify_waiters();
    }
}

impl Drop for Leader {
    fn drop(&mut self) {
        if let Some(id) = self.flight.take() {
            finish(id, State::Abandoned, None);
        }
    }
}

/// A finished flight whose result is still offered to new callers.
pub(crate) struct Lingering {
    /// The flight, if its leader led one.
    id: Option<FlightId>,
}

impl Drop for Lingering {
    fn drop(&mut self) {
        let Some(id) = self.id else { return };
        let mut flights = shard(&id);
        if matches!(flights.get(&id), Some(Slot::Lingering(_))) {
            flights.remove(&id);
        }
    }
}

/// A call waiting for an identical call in this process.
pub(crate) struct Follower(Arc<Flight>);

/// What a follower learns.
pub(crate) enum Waited {
    /// The leader's recorded result.
    Done(Shared),
    /// The leader finished without one (error, cancellation, panic, store failure): try again.
    Abandoned,
    /// The deadline passed first.
    TimedOut,
}

impl Follower {
    /// Waits for the leader, until `deadline` at most.
    pub(crate) async fn wait(self, deadline: Instant) -> Waited {
        loop {
            let notified = self.0.notify.notified();
            let mut notified = std::pin::pin!(notified);
            notified.as_mut().enable();
            match &*lock(&self.0.state) {
                State::Done(shared) => return Waited::Done(shared.clone()),
                State::Abandoned => return Waited::Abandoned,
                State::Running => {}
            }
            if tokio::time::timeout_at(deadline, notified).await.is_err() {
                return Waited::TimedOut;
            }
        }
    }
}

/// Flights registered right now (for soak tests that check the map stays bounded).
pub(crate) fn registered() -> usize {
    FLIGHTS.iter().map(|s| lock(s).len()).sum()
}

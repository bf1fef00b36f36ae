//! The embedded default store: a sharded in-memory map.

use std::cmp::Reverse;
use std::collections::BinaryHeap;
use std::fmt;
use std::sync::{Arc, Mutex, MutexGuard};
use std::time::Duration;

use super::budget::{self, Count, CounterId};
use super::{
    Begin, BeginRequest, Charge, Exhausted, Lease, Record, RecordState, Store, StoreFuture,
};
use crate::clock::{Clock, MonotonicClock, duration_ms};
use crate::digest_map::{DigestMap, digest_map};
use crate::key::Key;
use crate::{Error, Result};

const SHARDS: usize = 32;

/// How many expiry-heap entries one call may pop: expiry work is bounded per call, so a burst
/// of expirations never pauses a caller; [`Store::purge_expired`] does the rest at once.
const RECLAIM_PER_CALL: usize = 4;

/// An in-memory dedup store: fast, concurrent, and forgotten when the process exits.
///
/// Keys are spread over independently locked shards, so concurrent calls on different keys
/// rarely contend and no lock is held across an `.await`. Expired records are reclaimed from a
/// per-shard expiry heap as calls touch the shard (a bounded amount per call, never a scan of
/// all keys); [`Store::purge_expired`] reclaims the rest.
///
/// Time is read from a [`MonotonicClock`]: a wall-clock step (NTP, a VM resumed) cannot free a
/// live lease early or keep a dead one blocked.
///
/// **What it cannot survive:** a process restart. Everything it remembers lives in this
/// process's memory, so an orchestrator that restarts a run in a new process will execute tools
/// again, and separate worker processes do not see each other's keys or budgets. Use a durable
/// store (SQLite) or a shared one (Redis) for those.
///
/// ```
/// use std::sync::Arc;
/// use idem_runtime::store::{MemoryStore, Store};
///
/// let store: Arc<dyn Store> = Arc::new(MemoryStore::new());
/// # let _ = store;
/// ```
pub struct MemoryStore {
    shards: Box<[Mutex<Shard>]>,
    /// Turn-wide call counts (only used by turns with a call cap).
    turns: Mutex<TurnCounts>,
    clock: Arc<dyn Clock>,
}

/// What an expiry-heap entry points at.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
enum Expiring {
    Record(Key),
    Budget(CounterId),
}

/// Turn-wide counts, swept of expired ones whenever the map doubles since the last sweep
/// (amortised O(1) per charge, memory bounded by twice the live turns).
struct TurnCounts {
    counts: DigestMap<CounterId, Count>,
    sweep_at: usize,
}

impl Default for TurnCounts {
    fn default() -> Self {
        TurnCounts {
            counts: digest_map(),
            sweep_at: 1024,
        }
    }
}

impl TurnCounts {
    fn insert(&mut self, id: CounterId, count: Count, now: u64) {
        self.counts.insert(id, count);
        if self.counts.len() >= self.sweep_at {
            self.sweep(now);
        }
    }

    fn sweep(&mut self, now: u64) {
        self.counts.retain(|_, c| now < c.expires_at_ms);
        self.sweep_at = (self.counts.len() * 2).max(1024);
    }
}

#[derive(Default)]
struct Shard {
    records: DigestMap<Key, Entry>,
    /// Per-key attempt counts of the keys in this shard.
    budgets: DigestMap<CounterId, Count>,
    /// `(expires_at_ms, what)`, smallest first; an item is stale when the expiry moved.
    expiries: BinaryHeap<Reverse<(u64, Expiring)>>,
}

struct Entry {
    record: Record,
    /// The token of the claim that holds (or completed) the record.
    token: super::LeaseToken,
}

impl MemoryStore {
    /// An empty store on a [`MonotonicClock`].
    pub fn new() -> Self {
        Self::with_clock(Arc::new(MonotonicClock::new()))
    }

    /// An empty store reading time from `clock` (a [`ManualClock`](crate::clock::ManualClock)
    /// in tests).
    pub fn with_clock(clock: Arc<dyn Clock>) -> Self {
        MemoryStore {
            shards: (0..SHARDS).map(|_| Mutex::default()).collect(),
            turns: Mutex::default(),
            clock,
        }
    }

    /// Live records across all shards (for tests and inspection).
    pub fn len(&self) -> usize {
        let now = self.clock.now_ms();
        self.shards
            .iter()
            .map(|s| {
                lock(s)
                    .records
                    .values()
                    .filter(|e| now < e.record.expires_at_ms)
                    .count()
            })
            .sum()
    }

    /// Whether no live record is stored.
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// Entries held in memory, live or awaiting reclamation: records, budget counts and expiry
    /// bookkeeping (for soak tests that check memory stays bounded).
    pub fn footprint(&self) -> usize {
        let shards: usize = self
            .shards
            .iter()
            .map(|s| {
                let s = lock(s);
                s.records.len() + s.budgets.len() + s.expiries.len()
            })
            .sum();
        shards + lock(&self.turns).counts.len()
    }

    fn shard(&self, key: &Key, now: u64) -> MutexGuard<'_, Shard> {
        let index = usize::from(key.as_bytes()[0]) % SHARDS;
        let mut shard = lock(&self.shards[index]);
        shard.reclaim(now, RECLAIM_PER_CALL);
        shard
    }

    /// Charges `charge` for `key`; `Err` is the refusal to answer.
    fn charge(
        &self,
        shard: &mut Shard,
        key: &Key,
        charge: &Charge,
        now: u64,
    ) -> std::result::Result<(), Exhausted> {
        let expires_at_ms = now.saturating_add(duration_ms(charge.window));
        let key_id = charge.turn.key_counter(key);
        let completed = shard
            .live(key, now)
            .is_some_and(|e| e.record.state == RecordState::Completed);
        let attempts_before = budget::live(&shard.budgets, &key_id, now);
        let mut turns = charge.max_calls.map(|_| lock(&self.turns));
        let turn_id = charge.turn.turn_counter();
        let calls_before = turns
            .as_ref()
            .map(|t| budget::live(&t.counts, &turn_id, now));
        let decision = budget::decide(
            attempts_before,
            calls_before,
            charge.max_attempts,
            charge.max_calls,
            completed,
        );
        let (attempts, calls, refused) = match decision {
            Ok((attempts, calls)) => (attempts, calls, None),
            Err((refused, attempts)) => (attempts, None, Some(refused)),
        };
        let count = Count {
            n: attempts,
            expires_at_ms,
        };
        if shard.budgets.insert(key_id, count).is_none() {
            shard
                .expiries
                .push(Reverse((expires_at_ms, Expiring::Budget(key_id))));
        }
        if let (Some(turns), Some(n)) = (turns.as_mut(), calls) {
            turns.insert(turn_id, Count { n, expires_at_ms }, now);
        }
        refused.map_or(Ok(()), Err)
    }
}

impl Default for MemoryStore {
    fn default() -> Self {
        Self::new()
    }
}

impl fmt::Debug for MemoryStore {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("MemoryStore")
            .field("clock", &self.clock)
            .finish_non_exhaustive()
    }
}

/// Locks a mutex; a poisoned lock is still consistent (no user code runs under it).
fn lock<T>(mutex: &Mutex<T>) -> MutexGuard<'_, T> {
    mutex
        .lock()
        .unwrap_or_else(std::sync::PoisonError::into_inner)
}

impl Shard {
    /// Drops up to `most` expired entries, oldest first; returns how many records it dropped.
    ///
    /// The heap holds one entry per record and per counter, at the expiry it had when the
    /// entry was pushed. Renewals, completions and charges move expiries later without pushing:
    /// an entry found early is pushed again at the new expiry (lazy rescheduling), so the heap
    /// never grows with the number of calls.
    fn reclaim(&mut self, now: u64, most: usize) -> u64 {
        let mut removed = 0;
        for _ in 0..most {
            let Some(&Reverse((at, what))) = self.expiries.peek() else {
                break;
            };
            if at > now {
                break;
            }
            self.expiries.pop();
            let current = match what {
                Expiring::Record(key) => self.records.get(&key).map(|e| e.record.expires_at_ms),
                Expiring::Budget(id) => self.budgets.get(&id).map(|c| c.expires_at_ms),
            };
            match current {
                Some(later) if later > now => self.expiries.push(Reverse((later, what))),
                Some(_) => match what {
                    Expiring::Record(key) => {
                        self.records.remove(&key);
                        removed += 1;
                    }
                    Expiring::Budget(id) => {
                        self.budgets.remove(&id);
                    }
                },
                None => {}
            }
        }
        removed
    }

    /// A record's expiry moved from `was` to `at`: a later expiry is picked up lazily by
    /// `reclaim`, an earlier one needs its own heap entry.
    fn moved(&mut self, key: Key, was: u64, at: u64) {
        if at < was {
            self.expiries.push(Reverse((at, Expiring::Record(key))));
        }
    }

    /// The live entry for `key`, if any (reclamation is bounded, so an expired one may linger).
    fn live(&self, key: &Key, now: u64) -> Option<&Entry> {
        self.records
            .get(key)
            .filter(|e| now < e.record.expires_at_ms)
    }

    /// The entry for the lease's key if the lease holds it.
    fn held(&mut self, lease: &Lease, now: u64) -> Result<&mut Entry> {
        match self.records.get_mut(&lease.key) {
            Some(entry)
                if entry.token == lease.token
                    && entry.record.state == RecordState::InProgress
                    && now < entry.record.expires_at_ms =>
            {
                Ok(entry)
            }
            _ => Err(Error::LeaseLost {
                key: lease.key.short(),
            }),
        }
    }
}

fn ready<'a, T>(value: Result<T>) -> StoreFuture<'a, T> {
    StoreFuture::ready(value)
}

impl Store for MemoryStore {
    fn begin<'a>(&'a self, req: BeginRequest<'a>) -> StoreFuture<'a, Begin> {
        let now = self.clock.now_ms();
        let mut shard = self.shard(req.key, now);
        if let Some(charge) = &req.charge
            && let Err(refused) = self.charge(&mut shard, req.key, charge, now)
        {
            return ready(Ok(Begin::Exhausted(refused)));
        }
        if let Some(entry) = shard.live(req.key, now) {
            return ready(Begin::found(entry.record.clone()));
        }
        let expires_at_ms = now.saturating_add(duration_ms(req.lease));
        let replaced = shard.records.insert(
            *req.key,
            Entry {
                record: Record {
                    namespace: req.namespace.to_owned(),
                    key: *req.key,
                    tool: req.tool.to_owned(),
                    state: RecordState::InProgress,
                    fingerprint: *req.fingerprint,
                    result: None,
                    created_at_ms: now,
                    expires_at_ms,
                },
                token: req.token,
            },
        );
        // An expired entry still in the map already has its heap entry; it is rescheduled.
        if replaced.is_none() {
            shard
                .expiries
                .push(Reverse((expires_at_ms, Expiring::Record(*req.key))));
        }
        ready(Ok(Begin::Claimed))
    }

    fn renew<'a>(&'a self, lease: &'a Lease, duration: Duration) -> StoreFuture<'a, ()> {
        let now = self.clock.now_ms();
        let at = now.saturating_add(duration_ms(duration));
        let mut shard = self.shard(&lease.key, now);
        let result = shard
            .held(lease, now)
            .map(|entry| std::mem::replace(&mut entry.record.expires_at_ms, at));
        ready(result.map(|was| shard.moved(lease.key, was, at)))
    }

    fn complete<'a>(
        &'a self,
        lease: &'a Lease,
        result: &'a [u8],
        ttl: Duration,
    ) -> StoreFuture<'a, ()> {
        let now = self.clock.now_ms();
        let at = now.saturating_add(duration_ms(ttl));
        let mut shard = self.shard(&lease.key, now);
        if shard
            .live(&lease.key, now)
            .is_some_and(|e| e.token == lease.token && e.record.state == RecordState::Completed)
        {
            return ready(Ok(())); // completed by this lease already: a retried complete
        }
        let outcome = shard.held(lease, now).map(|entry| {
            entry.record.state = RecordState::Completed;
            entry.record.result = Some(result.to_vec());
            std::mem::replace(&mut entry.record.expires_at_ms, at)
        });
        ready(outcome.map(|was| shard.moved(lease.key, was, at)))
    }

    fn release<'a>(&'a self, lease: &'a Lease) -> StoreFuture<'a, ()> {
        let now = self.clock.now_ms();
        let mut shard = self.shard(&lease.key, now);
        let outcome = shard.held(lease, now).map(|_| ());
        if outcome.is_ok() {
            shard.records.remove(&lease.key);
        }
        ready(outcome)
    }

    fn get<'a>(&'a self, _namespace: &'a str, key: &'a Key) -> StoreFuture<'a, Option<Record>> {
        let now = self.clock.now_ms();
        let shard = self.shard(key, now);
        ready(Ok(shard.live(key, now).map(|e| e.record.clone())))
    }

    fn purge_expired(&self) -> StoreFuture<'_, u64> {
        let now = self.clock.now_ms();
        let removed = self
            .shards
            .iter()
            .map(|s| lock(s).reclaim(now, usize::MAX))
            .sum();
        lock(&self.turns).sweep(now);
        ready(Ok(removed))
    }

    fn list<'a>(
        &'a self,
        namespace: Option<&'a str>,
        limit: usize,
    ) -> StoreFuture<'a, Vec<Record>> {
        let now = self.clock.now_ms();
        let mut out = Vec::new();
        for shard in self.shards.iter() {
            let shard = lock(shard);
            let live =
                shard.records.values().map(|e| &e.record).filter(|r| {
                    now < r.expires_at_ms && namespace.is_none_or(|ns| r.namespace == ns)
                });
            out.extend(live.take(limit - out.len()).cloned());
            if out.len() >= limit {
                break;
            }
        }
        ready(Ok(out))
    }

    fn remove<'a>(&'a self, _namespace: &'a str, key: &'a Key) -> StoreFuture<'a, bool> {
        let now = self.clock.now_ms();
        let removed = self.shard(key, now).records.remove(key);
        ready(Ok(removed.is_some_and(|e| now < e.record.expires_at_ms)))
    }
}

//! The embedded default store: a sharded in-memory table.

mod names;
mod shard;

use std::fmt;
use std::sync::{Arc, Mutex, MutexGuard};
use std::time::Duration;

use super::budget::{self, Count, CounterId};
use super::{
    Begin, BeginRequest, Charge, Exhausted, FirstResult, KeyCounter, Lease, Record, Store,
    StoreFuture,
};
use crate::clock::{Clock, MonotonicClock, duration_ms};
use crate::digest_map::{DigestMap, digest_map};
use crate::key::Key;
use crate::padded::Padded;
use crate::{Error, Result};

use names::Names;
use shard::{Claim, RECLAIM_PER_CALL, Shard, State};

const SHARDS: usize = 32;

/// An in-memory dedup store: fast, concurrent, and forgotten when the process exits.
///
/// Keys are spread over independently locked shards, so concurrent calls on different keys
/// rarely contend and no lock is held across an `.await`; every answer is ready at once. A key
/// takes one slot of about 150 bytes: its record (small results inline) and the count of
/// attempts with it in its turn together. Expired records are reclaimed from a per-shard heap
/// of due times as calls touch the shard (a bounded amount per call, never a scan of all
/// keys); [`Store::purge_expired`] reclaims the rest.
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
/// use idem_tools_runtime::store::{MemoryStore, Store};
///
/// let store: Arc<dyn Store> = Arc::new(MemoryStore::new());
/// # let _ = store;
/// ```
pub struct MemoryStore {
    shards: Box<[Padded<Mutex<Shard>>]>,
    /// The tool names and namespaces of the records (locked after a shard, never before).
    names: Mutex<Names>,
    /// Turn-wide call counts (only used by turns with a call cap).
    turns: Mutex<TurnCounts>,
    clock: Arc<dyn Clock>,
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

/// The slot key of the counter of a (turn, key) pair: the counter id, then a marker that no
/// key derived by BLAKE3 ends with but by chance (2⁻¹²⁸).
fn pair_counter_key(id: CounterId) -> Key {
    let mut key = [0u8; 32];
    key[..16].copy_from_slice(&id);
    key[16..].copy_from_slice(b"idem turn+key ct");
    Key::from_bytes(key)
}

impl MemoryStore {
    /// An empty store on a [`MonotonicClock`].
    pub fn new() -> Self {
        Self::with_clock(Arc::new(MonotonicClock::new()))
    }

    /// An empty store reading time from `clock` (a [`ManualClock`](crate::clock::ManualClock)
    /// in tests).
    pub fn with_clock(clock: Arc<dyn Clock>) -> Self {
        let epoch = clock.now_ms();
        MemoryStore {
            shards: (0..SHARDS)
                .map(|_| Padded(Mutex::new(Shard::new(epoch))))
                .collect(),
            names: Mutex::default(),
            turns: Mutex::default(),
            clock,
        }
    }

    /// Live records across all shards (for tests and inspection).
    pub fn len(&self) -> usize {
        let now = self.clock.now_ms();
        let names = lock(&self.names);
        self.shards
            .iter()
            .map(|s| lock(&s.0).live_records(now, None, &names).count())
            .sum()
    }

    /// Whether no live record is stored.
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// Entries held in memory, live or awaiting reclamation: slots (records and counts) and
    /// expiry bookkeeping (for soak tests that check memory stays bounded).
    pub fn footprint(&self) -> usize {
        let shards: usize = self.shards.iter().map(|s| lock(&s.0).footprint()).sum();
        shards + lock(&self.turns).counts.len()
    }

    /// Locks the shard of `key`, reclaiming a bounded amount of what expired in it.
    fn shard(&self, key: &Key, now: u64) -> MutexGuard<'_, Shard> {
        let index = usize::from(key.as_bytes()[0]) % SHARDS;
        let mut shard = lock(&self.shards[index].0);
        if shard.has_due(now) {
            shard.reclaim(now, RECLAIM_PER_CALL, &mut lock(&self.names));
        }
        shard
    }

    /// Charges `charge` for `key` (whose slot is `record`, if any); `Err` is the refusal to
    /// answer.
    fn charge(
        &self,
        shard: &mut Shard,
        key: &Key,
        record: &mut Option<u32>,
        charge: &Charge,
        now: u64,
    ) -> std::result::Result<(), Exhausted> {
        let expires_at_ms = now.saturating_add(duration_ms(charge.window));
        let completed = record.is_some_and(|i| {
            shard.slot(i).live_record(now) && shard.slot(i).state == State::Completed
        });
        let counter = match charge.counter {
            KeyCounter::Key => *record.get_or_insert_with(|| shard.find_or_insert(key)),
            KeyCounter::TurnAndKey => {
                shard.find_or_insert(&pair_counter_key(charge.turn.key_counter(key)))
            }
        };
        let attempts_before = shard.slot(counter).live_attempts(now);
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
        let slot = shard.slot_mut(counter);
        slot.attempts = attempts;
        slot.attempts_expire_ms = expires_at_ms;
        shard.settle(counter);
        if shard.slot(counter).state == State::Free {
            // Nothing was counted on a new slot (a refusal by the turn's cap): it is gone.
            if *record == Some(counter) {
                *record = None;
            }
        }
        if let (Some(turns), Some(n)) = (turns.as_mut(), calls) {
            turns.insert(turn_id, Count { n, expires_at_ms }, now);
        }
        refused.map_or(Ok(()), Err)
    }

    /// The slot holding `lease`'s record if the lease holds it.
    fn held(shard: &Shard, lease: &Lease, now: u64) -> Result<u32> {
        match shard.find(&lease.key) {
            Some(i)
                if shard.slot(i).token == lease.token
                    && shard.slot(i).state == State::InProgress
                    && shard.slot(i).live_record(now) =>
            {
                Ok(i)
            }
            _ => Err(Error::LeaseLost {
                key: lease.key.short(),
            }),
        }
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

impl Store for MemoryStore {
    fn begin<'a>(&'a self, req: BeginRequest<'a>) -> StoreFuture<'a, Begin> {
        let now = self.clock.now_ms();
        let mut shard = self.shard(req.key, now);
        let mut record = shard.find(req.key);
        if let Some(charge) = &req.charge
            && let Err(refused) = self.charge(&mut shard, req.key, &mut record, charge, now)
        {
            return StoreFuture::ready(Ok(Begin::Exhausted(refused)));
        }
        if let Some(i) = record {
            let slot = shard.slot(i);
            if slot.live_record(now) {
                let fingerprint = slot.fingerprint;
                return StoreFuture::ready(Ok(match slot.state {
                    State::Completed => Begin::Completed(FirstResult {
                        fingerprint,
                        result: slot.result.clone(),
                    }),
                    _ => Begin::InFlight { fingerprint },
                }));
            }
        }
        let i = record.unwrap_or_else(|| shard.find_or_insert(req.key));
        let claim = Claim {
            tool: req.tool,
            namespace: req.namespace,
            fingerprint: req.fingerprint,
            token: req.token,
            now,
            expires_at_ms: now.saturating_add(duration_ms(req.lease)),
        };
        shard.claim(i, claim, &mut lock(&self.names));
        shard.settle(i);
        StoreFuture::ready(Ok(Begin::Claimed))
    }

    fn renew<'a>(&'a self, lease: &'a Lease, duration: Duration) -> StoreFuture<'a, ()> {
        let now = self.clock.now_ms();
        let mut shard = self.shard(&lease.key, now);
        let renewed = Self::held(&shard, lease, now).map(|i| {
            shard.slot_mut(i).expires_at_ms = now.saturating_add(duration_ms(duration));
            shard.settle(i);
        });
        StoreFuture::ready(renewed)
    }

    fn complete<'a>(
        &'a self,
        lease: &'a Lease,
        result: &'a [u8],
        ttl: Duration,
    ) -> StoreFuture<'a, ()> {
        let now = self.clock.now_ms();
        let mut shard = self.shard(&lease.key, now);
        if let Some(i) = shard.find(&lease.key) {
            let slot = shard.slot(i);
            if slot.live_record(now) && slot.token == lease.token && slot.state == State::Completed
            {
                return StoreFuture::ready(Ok(())); // completed by this lease already: a retry
            }
        }
        let completed = Self::held(&shard, lease, now).map(|i| {
            let slot = shard.slot_mut(i);
            slot.state = State::Completed;
            slot.result = result.into();
            slot.expires_at_ms = now.saturating_add(duration_ms(ttl));
            shard.settle(i);
        });
        StoreFuture::ready(completed)
    }

    fn release<'a>(&'a self, lease: &'a Lease) -> StoreFuture<'a, ()> {
        let now = self.clock.now_ms();
        let mut shard = self.shard(&lease.key, now);
        let released = Self::held(&shard, lease, now).map(|i| {
            shard.drop_record(i, &mut lock(&self.names));
            shard.settle(i);
        });
        StoreFuture::ready(released)
    }

    fn get<'a>(&'a self, _namespace: &'a str, key: &'a Key) -> StoreFuture<'a, Option<Record>> {
        let now = self.clock.now_ms();
        let shard = self.shard(key, now);
        let record = shard
            .find(key)
            .filter(|&i| shard.slot(i).live_record(now))
            .map(|i| shard.record(i, &lock(&self.names)));
        StoreFuture::ready(Ok(record))
    }

    fn purge_expired(&self) -> StoreFuture<'_, u64> {
        let now = self.clock.now_ms();
        let removed = self
            .shards
            .iter()
            .map(|s| lock(&s.0).purge(now, &mut lock(&self.names)))
            .sum();
        lock(&self.turns).sweep(now);
        StoreFuture::ready(Ok(removed))
    }

    fn list<'a>(
        &'a self,
        namespace: Option<&'a str>,
        limit: usize,
    ) -> StoreFuture<'a, Vec<Record>> {
        let now = self.clock.now_ms();
        let mut out = Vec::new();
        for shard in self.shards.iter() {
            let shard = lock(&shard.0);
            let names = lock(&self.names);
            let live: Vec<u32> = shard.live_records(now, namespace, &names).collect();
            out.extend(
                live.into_iter()
                    .take(limit - out.len())
                    .map(|i| shard.record(i, &names)),
            );
            if out.len() >= limit {
                break;
            }
        }
        StoreFuture::ready(Ok(out))
    }

    fn remove<'a>(&'a self, _namespace: &'a str, key: &'a Key) -> StoreFuture<'a, bool> {
        let now = self.clock.now_ms();
        let mut shard = self.shard(key, now);
        let removed = shard.find(key).is_some_and(|i| {
            let live = shard.slot(i).live_record(now);
            shard.drop_record(i, &mut lock(&self.names));
            shard.settle(i);
            live
        });
        StoreFuture::ready(Ok(removed))
    }

    fn answers_at_once(&self) -> bool {
        true
    }
}

//! The embedded default store: a sharded in-memory table.

mod names;
mod shard;

use std::fmt;
use std::sync::{Arc, Mutex, MutexGuard};
use std::time::Duration;

use crossbeam_utils::CachePadded;
use hashbrown::HashMap;

use super::budget::{self, CounterId};
use super::{Begin, BeginRequest, Lease, Record, Removed, Store, StoreFuture};
use crate::Error;
use crate::clock::{Clock, MonotonicClock, duration_ms};
use crate::key::Key;

use shard::{Claim, Shard};

const SHARDS: usize = 32;

/// An in-memory dedup store: fast, concurrent, and forgotten when the process exits.
///
/// Keys are spread over independently locked shards, so concurrent calls on different keys
/// rarely contend; every lock is held for one operation, never across an `.await`, and every
/// answer is ready when the method returns. A key takes one entry: its record and its attempt
/// count together. Turns' and tools' counts of started actions are sharded by turn, so a claim
/// locks its key's shard and, for a new action, its turn's. Expired entries are dropped when they are next touched, and each shard
/// sweeps out what expired whenever it has grown to twice its size after the last sweep, so
/// memory stays within twice what is live; [`Store::purge_expired`] sweeps everything.
///
/// **Memory:** under 200 bytes per live record at a million keys, for results of up to 64
/// bytes (kept inside the record; a larger result takes its own allocation besides). A record
/// is 168 bytes: key, fingerprint, token, times, attempt count, and an id for its namespace,
/// tool and turn, which each shard keeps once (a turn's records of one tool share it). A turn's budget window is kept for at most 49.7 days
/// (`u32::MAX` ms) here, which a store that lives as long as its process rarely reaches.
///
/// Time is read from a [`MonotonicClock`]: a wall-clock step (NTP, a VM resumed) cannot free a
/// live lease early or keep a dead one blocked.
///
/// **What it cannot survive:** a process restart. Everything it remembers lives in this
/// process's memory, so an orchestrator that restarts a run in a new process will execute tools
/// again, and separate worker processes do not see each other's keys or budgets. Use a durable
/// store (SQLite, PostgreSQL) or a shared one (Redis) for those.
///
/// ```
/// # extern crate idem_tools_runtime as idem_tools;
/// use std::sync::Arc;
/// use idem_tools::{MemoryStore, Store};
///
/// let store: Arc<dyn Store> = Arc::new(MemoryStore::new());
/// # let _ = store;
/// ```
pub struct MemoryStore {
    shards: Box<[CachePadded<Mutex<Shard>>]>,
    /// Turns' and tools' counts of started actions, for turns and tools with a cap, sharded by
    /// the turn's counter (a turn's counts share a shard). Locked while a key's shard is held,
    /// never the other way round.
    turns: Box<[CachePadded<Mutex<TurnCounts>>]>,
    clock: Arc<dyn Clock>,
}

/// A count and when it expires (ms).
#[derive(Debug, Clone, Copy)]
struct Count {
    n: u32,
    expires_at_ms: u64,
}

/// Turns' counts, swept of expired ones whenever the map doubles since the last sweep
/// (amortised O(1) per charge, memory bounded by twice the live turns).
struct TurnCounts {
    counts: HashMap<CounterId, Count>,
    sweep_at: usize,
}

/// A shard of counts sweeps once it holds this many, at the least (1024 across the shards).
const MIN_SWEEP: usize = 1024 / SHARDS;

impl TurnCounts {
    fn live(&self, id: &CounterId, now: u64) -> u32 {
        self.counts
            .get(id)
            .filter(|c| now < c.expires_at_ms)
            .map_or(0, |c| c.n)
    }

    fn set(&mut self, id: CounterId, count: Count, now: u64) {
        self.counts.insert(id, count);
        if self.counts.len() >= self.sweep_at {
            self.sweep(now);
        }
    }

    fn sweep(&mut self, now: u64) {
        self.counts.retain(|_, c| now < c.expires_at_ms);
        self.sweep_at = (self.counts.len() * 2).max(MIN_SWEEP);
    }
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
            shards: (0..SHARDS)
                .map(|_| CachePadded::new(Mutex::new(Shard::default())))
                .collect(),
            turns: (0..SHARDS)
                .map(|_| {
                    CachePadded::new(Mutex::new(TurnCounts {
                        counts: HashMap::new(),
                        sweep_at: MIN_SWEEP,
                    }))
                })
                .collect(),
            clock,
        }
    }

    /// Live records across all shards (for tests and inspection).
    pub fn len(&self) -> usize {
        let now = self.clock.now_ms();
        self.shards.iter().map(|s| lock(s).live(now)).sum()
    }

    /// Whether no live record is stored.
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// Entries held in memory, live or awaiting a sweep: keys (records and attempt counts) and
    /// turn and tool counts (for soak tests that check memory stays bounded).
    pub fn footprint(&self) -> usize {
        let keys: usize = self.shards.iter().map(|s| lock(s).entries()).sum();
        let counts: usize = self.turns.iter().map(|t| lock(t).counts.len()).sum();
        keys + counts
    }

    /// The counts of the turn whose counter is `turn`, locked.
    fn counts(&self, turn: &CounterId) -> MutexGuard<'_, TurnCounts> {
        lock(&self.turns[usize::from(turn[0]) % SHARDS])
    }

    /// The shard of `key`, locked.
    fn shard(&self, key: &Key) -> MutexGuard<'_, Shard> {
        lock(&self.shards[usize::from(key.as_bytes()[0]) % SHARDS])
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

fn lease_lost(key: &Key) -> Error {
    Error::LeaseLost { key: key.short() }
}

impl Store for MemoryStore {
    fn begin<'a>(&'a self, req: BeginRequest<'a>) -> StoreFuture<'a, Begin> {
        let now = self.clock.now_ms();
        let mut shard = self.shard(req.key);
        let entry = shard.find(req.key);
        if let Some(answer) = entry.and_then(|i| shard.answer(i, now)) {
            return StoreFuture::ready(Ok(answer));
        }
        // No live record: charge, then claim.
        let attempts = entry.map_or(0, |i| shard.attempts(i, req.turn, now));
        let charge = &req.charge;
        let window_ms = duration_ms(charge.window);
        let counted = budget::is_new_action(attempts)
            && (charge.max_calls.is_some() || charge.max_tool_actions.is_some());
        if counted {
            let turn_id = charge.turn.turn_counter();
            let tool_id = charge
                .max_tool_actions
                .map(|_| charge.turn.tool_counter(req.tool));
            let mut counts = self.counts(&turn_id);
            let calls = charge.max_calls.map_or(0, |_| counts.live(&turn_id, now));
            let tool_actions = tool_id.map_or(0, |id| counts.live(&id, now));
            let live = budget::Counts {
                attempts,
                calls,
                tool_actions,
            };
            if let Err(refused) = budget::charge(live, charge) {
                return StoreFuture::ready(Ok(Begin::Refused(refused)));
            }
            let expires_at_ms = now.saturating_add(window_ms);
            if charge.max_calls.is_some() {
                let count = Count {
                    n: calls + 1,
                    expires_at_ms,
                };
                counts.set(turn_id, count, now);
            }
            if let Some(tool_id) = tool_id {
                let count = Count {
                    n: tool_actions + 1,
                    expires_at_ms,
                };
                counts.set(tool_id, count, now);
            }
        } else if let Err(refused) = budget::charge(
            budget::Counts {
                attempts,
                ..Default::default()
            },
            charge,
        ) {
            return StoreFuture::ready(Ok(Begin::Refused(refused)));
        }
        shard.claim(&Claim {
            key: req.key,
            namespace: req.namespace,
            tool: req.tool,
            turn: req.turn,
            fingerprint: req.fingerprint,
            token: req.token,
            now,
            lease_end: now.saturating_add(duration_ms(req.lease)),
            attempts: attempts + 1,
            window_ms,
        });
        StoreFuture::ready(Ok(Begin::Claimed))
    }

    fn renew<'a>(&'a self, lease: &'a Lease, duration: Duration) -> StoreFuture<'a, ()> {
        let now = self.clock.now_ms();
        let mut shard = self.shard(&lease.key);
        let renewed = match shard.held(lease, now) {
            Some(i) => {
                shard.renew(i, now.saturating_add(duration_ms(duration)));
                Ok(())
            }
            None => Err(lease_lost(&lease.key)),
        };
        StoreFuture::ready(renewed)
    }

    fn complete<'a>(
        &'a self,
        lease: &'a Lease,
        result: &'a [u8],
        ttl: Duration,
    ) -> StoreFuture<'a, ()> {
        let now = self.clock.now_ms();
        let mut shard = self.shard(&lease.key);
        let completed = match shard.held(lease, now) {
            Some(i) => {
                shard.complete(i, result, now.saturating_add(duration_ms(ttl)));
                Ok(())
            }
            // Completed by this lease already: a retried `complete`.
            None if shard.completed_by(lease, now) => Ok(()),
            None => Err(lease_lost(&lease.key)),
        };
        StoreFuture::ready(completed)
    }

    fn release<'a>(&'a self, lease: &'a Lease) -> StoreFuture<'a, ()> {
        let now = self.clock.now_ms();
        let mut shard = self.shard(&lease.key);
        let released = match shard.held(lease, now) {
            Some(i) => {
                shard.release(i, now);
                Ok(())
            }
            None => Err(lease_lost(&lease.key)),
        };
        StoreFuture::ready(released)
    }

    fn get<'a>(&'a self, _namespace: &'a str, key: &'a Key) -> StoreFuture<'a, Option<Record>> {
        let now = self.clock.now_ms();
        let shard = self.shard(key);
        let record = shard.find(key).and_then(|i| shard.record(i, now));
        StoreFuture::ready(Ok(record))
    }

    fn purge_expired(&self) -> StoreFuture<'_, u64> {
        let now = self.clock.now_ms();
        let removed = self.shards.iter().map(|s| lock(s).sweep(now)).sum();
        for turns in self.turns.iter() {
            lock(turns).sweep(now);
        }
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
            if out.len() >= limit {
                break;
            }
            let shard = lock(shard);
            out.extend(shard.records(namespace, None, now).take(limit - out.len()));
        }
        StoreFuture::ready(Ok(out))
    }

    /// Every shard's records of the turn, then sorted: the memory store keeps no index by turn
    /// (a scan of memory, for an operator's question).
    fn list_turn<'a>(
        &'a self,
        namespace: &'a str,
        turn: &'a str,
        limit: usize,
    ) -> StoreFuture<'a, Vec<Record>> {
        let now = self.clock.now_ms();
        let mut out = Vec::new();
        for shard in self.shards.iter() {
            out.extend(lock(shard).records(Some(namespace), Some(turn), now));
        }
        StoreFuture::ready(Ok(super::in_claim_order(out, limit)))
    }

    fn remove<'a>(&'a self, _namespace: &'a str, key: &'a Key) -> StoreFuture<'a, bool> {
        let now = self.clock.now_ms();
        let removed = self.shard(key).remove_at(key, now).unwrap_or(false);
        StoreFuture::ready(Ok(removed))
    }

    fn remove_shown<'a>(&'a self, shown: &'a Record) -> StoreFuture<'a, Removed> {
        let now = self.clock.now_ms();
        StoreFuture::ready(Ok(self.shard(&shown.key).remove_shown(shown, now)))
    }
}

//! The embedded default store: a sharded in-memory map.

use std::cmp::Reverse;
use std::collections::{BinaryHeap, HashMap};
use std::fmt;
use std::sync::{Arc, Mutex, MutexGuard};
use std::time::Duration;

use super::{Begin, BeginRequest, LeaseToken, Record, RecordState, Store, StoreFuture};
use crate::clock::{Clock, SystemClock, duration_ms};
use crate::key::Key;
use crate::{Error, Result};

const SHARDS: usize = 32;

/// An in-memory dedup store: fast, concurrent, and forgotten when the process exits.
///
/// Keys are spread over independently locked shards, so concurrent calls on different keys
/// rarely contend and no lock is held across an `.await`. Expired records are reclaimed from a
/// per-shard expiry heap as calls touch the shard (amortised O(log n) per expired record, never a
/// scan of all keys); [`Store::purge_expired`] reclaims the rest.
///
/// **What it cannot survive:** a process restart. Everything it remembers lives in this
/// process's memory, so an orchestrator that restarts a run in a new process will execute tools
/// again, and separate worker processes do not see each other's keys. Use a durable store
/// (SQLite) or a shared one (Redis) for those.
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
    clock: Arc<dyn Clock>,
}

#[derive(Default)]
struct Shard {
    records: HashMap<Key, Entry>,
    /// `(expires_at_ms, key)`, smallest first; an item is stale when the record's expiry moved.
    expiries: BinaryHeap<Reverse<(u64, Key)>>,
}

struct Entry {
    record: Record,
    token: Option<LeaseToken>,
}

impl MemoryStore {
    /// An empty store on the system clock.
    pub fn new() -> Self {
        Self::with_clock(Arc::new(SystemClock))
    }

    /// An empty store reading time from `clock` (a [`ManualClock`](crate::clock::ManualClock)
    /// in tests).
    pub fn with_clock(clock: Arc<dyn Clock>) -> Self {
        MemoryStore {
            shards: (0..SHARDS).map(|_| Mutex::default()).collect(),
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
                    .filter(|e| e.record.expires_at_ms > now)
                    .count()
            })
            .sum()
    }

    /// Whether no live record is stored.
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    fn shard(&self, key: &Key) -> MutexGuard<'_, Shard> {
        let index = usize::from(key.as_bytes()[0]) % SHARDS;
        let mut shard = lock(&self.shards[index]);
        shard.reclaim(self.clock.now_ms());
        shard
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

/// Locks a shard; a poisoned lock is still consistent (no user code runs under it).
fn lock(shard: &Mutex<Shard>) -> MutexGuard<'_, Shard> {
    shard
        .lock()
        .unwrap_or_else(std::sync::PoisonError::into_inner)
}

impl Shard {
    /// Drops records whose expiry has passed, oldest first.
    fn reclaim(&mut self, now: u64) -> u64 {
        let mut removed = 0;
        while let Some(Reverse((at, key))) = self.expiries.peek().copied() {
            if at > now {
                break;
            }
            self.expiries.pop();
            if self
                .records
                .get(&key)
                .is_some_and(|e| e.record.expires_at_ms == at)
            {
                self.records.remove(&key);
                removed += 1;
            }
        }
        removed
    }

    fn set_expiry(&mut self, key: Key, at: u64) {
        self.expiries.push(Reverse((at, key)));
    }

    /// The entry for `key` if `token` holds its lease.
    fn held(&mut self, key: &Key, token: LeaseToken) -> Result<&mut Entry> {
        match self.records.get_mut(key) {
            Some(entry) if entry.token == Some(token) => Ok(entry),
            _ => Err(Error::LeaseLost { key: key.short() }),
        }
    }
}

fn ready<'a, T: Send + 'a>(value: Result<T>) -> StoreFuture<'a, T> {
    Box::pin(std::future::ready(value))
}

impl Store for MemoryStore {
    fn begin<'a>(&'a self, req: BeginRequest<'a>) -> StoreFuture<'a, Begin> {
        let now = self.clock.now_ms();
        let mut shard = self.shard(req.key);
        // `reclaim` ran in `shard()`, so any record still present is live.
        if let Some(entry) = shard.records.get(req.key) {
            let record = entry.record.clone();
            return ready(Ok(match record.state {
                RecordState::Completed => Begin::Completed(record),
                RecordState::InProgress => Begin::InFlight(record),
            }));
        }
        let token = LeaseToken::generate();
        let expires_at_ms = now.saturating_add(duration_ms(req.lease));
        shard.records.insert(
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
                token: Some(token),
            },
        );
        shard.set_expiry(*req.key, expires_at_ms);
        ready(Ok(Begin::Claimed(token)))
    }

    fn renew<'a>(
        &'a self,
        _namespace: &'a str,
        key: &'a Key,
        token: LeaseToken,
        lease: Duration,
    ) -> StoreFuture<'a, ()> {
        let at = self.clock.now_ms().saturating_add(duration_ms(lease));
        let mut shard = self.shard(key);
        let result = shard.held(key, token).map(|entry| {
            entry.record.expires_at_ms = at;
        });
        if result.is_ok() {
            shard.set_expiry(*key, at);
        }
        ready(result)
    }

    fn complete<'a>(
        &'a self,
        _namespace: &'a str,
        key: &'a Key,
        token: LeaseToken,
        result: &'a [u8],
        ttl: Duration,
    ) -> StoreFuture<'a, ()> {
        let at = self.clock.now_ms().saturating_add(duration_ms(ttl));
        let mut shard = self.shard(key);
        let outcome = shard.held(key, token).map(|entry| {
            entry.token = None;
            entry.record.state = RecordState::Completed;
            entry.record.result = Some(result.to_vec());
            entry.record.expires_at_ms = at;
        });
        if outcome.is_ok() {
            shard.set_expiry(*key, at);
        }
        ready(outcome)
    }

    fn release<'a>(
        &'a self,
        _namespace: &'a str,
        key: &'a Key,
        token: LeaseToken,
    ) -> StoreFuture<'a, ()> {
        let mut shard = self.shard(key);
        let outcome = shard.held(key, token).map(|_| ());
        if outcome.is_ok() {
            shard.records.remove(key);
        }
        ready(outcome)
    }

    fn get<'a>(&'a self, _namespace: &'a str, key: &'a Key) -> StoreFuture<'a, Option<Record>> {
        let shard = self.shard(key);
        ready(Ok(shard.records.get(key).map(|e| e.record.clone())))
    }

    fn purge_expired(&self) -> StoreFuture<'_, u64> {
        let now = self.clock.now_ms();
        let removed = self.shards.iter().map(|s| lock(s).reclaim(now)).sum();
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
                    r.expires_at_ms > now && namespace.is_none_or(|ns| r.namespace == ns)
                });
            out.extend(live.take(limit - out.len()).cloned());
            if out.len() >= limit {
                break;
            }
        }
        ready(Ok(out))
    }

    fn remove<'a>(&'a self, _namespace: &'a str, key: &'a Key) -> StoreFuture<'a, bool> {
        ready(Ok(self.shard(key).records.remove(key).is_some()))
    }
}

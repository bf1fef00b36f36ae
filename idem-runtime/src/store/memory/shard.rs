//! One shard of the memory store: entries in a slab, found through an index of slab positions
//! hashed by the key each entry holds (the key is stored once), and swept of what expired
//! whenever the shard has doubled since its last sweep.

use std::hash::BuildHasher;
use std::sync::Arc;

use hashbrown::{DefaultHashBuilder, HashTable};
use slab::Slab;

use crate::key::{Fingerprint, Key};
use crate::store::{Bytes, Lease, LeaseToken, Record, RecordState};

/// A shard sweeps once it holds this many entries, at the least.
const MIN_SWEEP: usize = 32;

/// What the store knows of one key: its record (live or not) and its attempt count.
pub(super) struct Entry {
    pub(super) key: Key,
    pub(super) record: Option<Stored>,
    /// Claims since the last recorded result, while `now < attempts_expire_ms`.
    pub(super) attempts: u32,
    pub(super) attempts_expire_ms: u64,
}

/// A record as the memory store keeps it.
pub(super) struct Stored {
    pub(super) state: RecordState,
    pub(super) fingerprint: Fingerprint,
    /// The encoded result, once completed.
    pub(super) result: Bytes,
    /// The token of the claim that holds (or completed) the record.
    pub(super) token: LeaseToken,
    pub(super) tool: &'static str,
    pub(super) namespace: Arc<str>,
    pub(super) created_at_ms: u64,
    /// The lease's end while in progress, the TTL's end once completed.
    pub(super) expires_at_ms: u64,
}

impl Entry {
    /// The record, if live at `now`.
    pub(super) fn live_record(&self, now: u64) -> Option<&Stored> {
        self.record.as_ref().filter(|r| now < r.expires_at_ms)
    }

    /// The attempt count live at `now` (0 if expired).
    pub(super) fn live_attempts(&self, now: u64) -> u32 {
        if now < self.attempts_expire_ms {
            self.attempts
        } else {
            0
        }
    }

    /// Whether the entry still holds anything at `now`.
    fn alive(&self, now: u64) -> bool {
        self.live_record(now).is_some() || self.live_attempts(now) > 0
    }

    /// The live record as the admin API shows it.
    pub(super) fn record(&self, now: u64) -> Option<Record> {
        let r = self.live_record(now)?;
        Some(Record {
            namespace: r.namespace.to_string(),
            key: self.key,
            tool: r.tool.to_owned(),
            state: r.state,
            fingerprint: r.fingerprint,
            result: (r.state == RecordState::Completed).then(|| r.result.to_vec()),
            attempts: self.live_attempts(now),
            created_at_ms: r.created_at_ms,
            expires_at_ms: r.expires_at_ms,
        })
    }
}

#[derive(Default)]
pub(super) struct Shard {
    index: HashTable<u32>,
    entries: Slab<Entry>,
    hasher: DefaultHashBuilder,
    /// The number of entries at which the next sweep happens.
    sweep_at: usize,
}

impl Shard {
    fn hash(&self, key: &Key) -> u64 {
        self.hasher.hash_one(key)
    }

    /// The position of `key`'s entry.
    pub(super) fn find(&self, key: &Key) -> Option<u32> {
        let entries = &self.entries;
        self.index
            .find(self.hash(key), |&i| {
                entries.get(i as usize).is_some_and(|e| e.key == *key)
            })
            .copied()
    }

    pub(super) fn get(&self, i: u32) -> &Entry {
        &self.entries[i as usize]
    }

    pub(super) fn get_mut(&mut self, i: u32) -> &mut Entry {
        &mut self.entries[i as usize]
    }

    /// The position of `key`'s entry, made (empty) if there is none. Sweeps first if the shard
    /// has doubled since its last sweep.
    pub(super) fn find_or_insert(&mut self, key: &Key, now: u64) -> u32 {
        if let Some(i) = self.find(key) {
            return i;
        }
        if self.entries.len() >= self.sweep_at.max(MIN_SWEEP) {
            self.sweep(now);
        }
        let i = self.entries.insert(Entry {
            key: *key,
            record: None,
            attempts: 0,
            attempts_expire_ms: 0,
        });
        let i = u32::try_from(i).unwrap_or(u32::MAX);
        let (entries, hasher) = (&self.entries, &self.hasher);
        self.index.insert_unique(self.hash(key), i, |&j| {
            hasher.hash_one(entries[j as usize].key)
        });
        i
    }

    /// The record `lease` holds: live, in progress, with the lease's token.
    pub(super) fn held(&mut self, lease: &Lease, now: u64) -> Option<&mut Stored> {
        let i = self.find(&lease.key)?;
        self.get_mut(i).record.as_mut().filter(|r| {
            now < r.expires_at_ms && r.token == lease.token && r.state == RecordState::InProgress
        })
    }

    /// Drops `key`'s record, and its entry if no count is left either.
    pub(super) fn drop_record(&mut self, key: &Key, now: u64) {
        if let Some(i) = self.find(key) {
            self.get_mut(i).record = None;
            if !self.get(i).alive(now) {
                self.remove(key);
            }
        }
    }

    /// Removes `key`'s entry.
    pub(super) fn remove(&mut self, key: &Key) -> Option<Entry> {
        let hash = self.hash(key);
        let entries = &self.entries;
        let found = self
            .index
            .find_entry(hash, |&i| {
                entries.get(i as usize).is_some_and(|e| e.key == *key)
            })
            .ok()?;
        let (i, _) = found.remove();
        Some(self.entries.remove(i as usize))
    }

    /// Drops what expired at `now`; returns how many records (live or not) it dropped.
    pub(super) fn sweep(&mut self, now: u64) -> u64 {
        let mut dropped = 0;
        let mut dead = Vec::new();
        for (_, entry) in &mut self.entries {
            if entry
                .record
                .as_ref()
                .is_some_and(|r| now >= r.expires_at_ms)
            {
                entry.record = None;
                dropped += 1;
            }
            if !entry.alive(now) {
                dead.push(entry.key);
            }
        }
        for key in dead {
            self.remove(&key);
        }
        self.sweep_at = self.entries.len() * 2;
        dropped
    }

    /// The entries with a live record.
    pub(super) fn live(&self, now: u64) -> impl Iterator<Item = &Entry> {
        self.entries
            .iter()
            .map(|(_, e)| e)
            .filter(move |e| e.live_record(now).is_some())
    }

    /// Entries held, live or awaiting a sweep.
    pub(super) fn entries(&self) -> usize {
        self.entries.len()
    }
}

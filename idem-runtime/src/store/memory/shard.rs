//! One shard of the memory store: entries in a slab, found through an index of slab positions
//! hashed by the key each entry holds (the key is stored once), and swept of what expired
//! whenever the shard has doubled since its last sweep.
//!
//! An entry is 168 bytes: the key, the fingerprint, the token, three times, the attempt count,
//! a names id (namespace, tool and turn, kept once per shard) and the body, which holds a result of up to [`INLINE`] bytes in place; larger
//! results live in the shard's `large` slab. With the index (about 10 bytes per entry at
//! 1M keys) and the slab's slack, a live record costs under 200 bytes.

use std::hash::BuildHasher;

use hashbrown::{DefaultHashBuilder, HashTable};
use slab::Slab;

use super::names::Names;
use crate::key::{Fingerprint, Key};
use crate::store::{Begin, Bytes, FirstResult, Lease, LeaseToken, Record, RecordState, Removed};

/// A shard sweeps once it holds this many entries, at the least.
const MIN_SWEEP: usize = 32;

/// Results up to this many bytes are kept inside their entry.
pub(super) const INLINE: usize = 64;

/// What the store knows of one key: its record (live or not) and its attempt count.
pub(super) struct Entry {
    key: Key,
    fingerprint: Fingerprint,
    /// The token of the claim that holds (or completed) the record.
    token: LeaseToken,
    /// When the key was last claimed; its attempt count expires `window_ms` later.
    created_at_ms: u64,
    /// The lease's end while in progress, the TTL's end once completed.
    expires_at_ms: u64,
    /// The budget window of the last claim, in ms (capped at `u32::MAX`, 49.7 days).
    window_ms: u32,
    /// Claims since the last recorded result, while `now < created_at_ms + window_ms`.
    attempts: u32,
    /// The record's namespace, tool and turn (the turn its attempt count belongs to), in the
    /// shard's [`Names`].
    name: u32,
    body: Body,
}

/// The record an entry holds, if any.
#[derive(Clone, Copy)]
enum Body {
    /// No record: a fresh entry, or a released claim whose attempt count is kept.
    Empty,
    /// A caller holds the key.
    InProgress,
    /// Completed with a result of `len` bytes, kept here.
    Small { len: u8, bytes: [u8; INLINE] },
    /// Completed with a result larger than [`INLINE`], at this position of the shard's `large`.
    Large(u32),
}

impl Entry {
    /// Whether the entry holds a record live at `now`.
    fn is_live(&self, now: u64) -> bool {
        !matches!(self.body, Body::Empty) && now < self.expires_at_ms
    }

    /// The attempt count live at `now` (0 if expired).
    pub(super) fn live_attempts(&self, now: u64) -> u32 {
        let window_end = self.created_at_ms.saturating_add(u64::from(self.window_ms));
        if now < window_end { self.attempts } else { 0 }
    }

    /// Whether the entry still holds anything at `now`.
    fn alive(&self, now: u64) -> bool {
        self.is_live(now) || self.live_attempts(now) > 0
    }

    fn state(&self) -> RecordState {
        match self.body {
            Body::Empty | Body::InProgress => RecordState::InProgress,
            Body::Small { .. } | Body::Large(_) => RecordState::Completed,
        }
    }
}

/// What a claim writes into its entry.
pub(super) struct Claim<'a> {
    pub(super) key: &'a Key,
    pub(super) namespace: &'a str,
    pub(super) tool: &'static str,
    pub(super) turn: &'a str,
    pub(super) fingerprint: &'a Fingerprint,
    pub(super) token: LeaseToken,
    pub(super) now: u64,
    pub(super) lease_end: u64,
    pub(super) attempts: u32,
    pub(super) window_ms: u64,
}

#[derive(Default)]
pub(super) struct Shard {
    index: HashTable<u32>,
    entries: Slab<Entry>,
    /// Results larger than [`INLINE`].
    large: Slab<Bytes>,
    names: Names,
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

    /// The attempt count of the entry at `i` live at `now`, if it belongs to `turn` (a count
    /// of another turn's claims is 0 for this one).
    pub(super) fn attempts(&self, i: u32, turn: &str, now: u64) -> u32 {
        let entry = self.get(i);
        match entry.live_attempts(now) {
            0 => 0,
            n if &**self.names.get(entry.name).turn == turn => n,
            _ => 0,
        }
    }

    /// The answer of `begin` for the record at `i`, if it is live: its result, or in flight.
    pub(super) fn answer(&self, i: u32, now: u64) -> Option<Begin> {
        let entry = self.get(i);
        if !entry.is_live(now) {
            return None;
        }
        let fingerprint = entry.fingerprint;
        let result = match entry.body {
            Body::Empty | Body::InProgress => return Some(Begin::InFlight { fingerprint }),
            Body::Small { len, bytes } => Bytes::copy_from_slice(&bytes[..usize::from(len)]),
            Body::Large(at) => self.large.get(at as usize).cloned().unwrap_or_default(),
        };
        Some(Begin::Completed(FirstResult {
            fingerprint,
            result,
        }))
    }

    /// Claims `claim.key`: its entry (made if there is none) holds an in-progress record and
    /// the new attempt count. Sweeps first if the shard has doubled since its last sweep.
    pub(super) fn claim(&mut self, claim: &Claim<'_>) {
        let i = match self.find(claim.key) {
            Some(i) => i,
            None => self.insert(claim.key, claim.now),
        };
        let name = self.names.id(claim.namespace, claim.tool, claim.turn);
        self.set_body(i, Body::InProgress);
        let entry = &mut self.entries[i as usize];
        entry.fingerprint = *claim.fingerprint;
        entry.token = claim.token;
        entry.created_at_ms = claim.now;
        entry.expires_at_ms = claim.lease_end;
        entry.window_ms = u32::try_from(claim.window_ms).unwrap_or(u32::MAX);
        entry.attempts = claim.attempts;
        entry.name = name;
    }

    fn insert(&mut self, key: &Key, now: u64) -> u32 {
        if self.entries.len() >= self.sweep_at.max(MIN_SWEEP) {
            self.sweep(now);
        }
        let i = self.entries.insert(Entry {
            key: *key,
            fingerprint: Fingerprint::from_bytes([0; 32]),
            token: LeaseToken(0),
            created_at_ms: 0,
            expires_at_ms: 0,
            window_ms: 0,
            attempts: 0,
            name: 0,
            body: Body::Empty,
        });
        // A shard's entries would fill memory long before 2^32 of them.
        let i = u32::try_from(i).unwrap_or(u32::MAX);
        let (entries, hasher) = (&self.entries, &self.hasher);
        self.index.insert_unique(self.hash(key), i, |&j| {
            hasher.hash_one(entries[j as usize].key)
        });
        i
    }

    /// Replaces the body at `i`, freeing a large result it held.
    fn set_body(&mut self, i: u32, body: Body) {
        let entry = &mut self.entries[i as usize];
        if let Body::Large(at) = std::mem::replace(&mut entry.body, body) {
            self.large.remove(at as usize);
        }
    }

    /// The position of the record `lease` holds: live, in progress, with the lease's token.
    pub(super) fn held(&self, lease: &Lease, now: u64) -> Option<u32> {
        let i = self.find(&lease.key)?;
        let entry = self.get(i);
        (entry.is_live(now) && matches!(entry.body, Body::InProgress) && entry.token == lease.token)
            .then_some(i)
    }

    /// Whether the live record of `lease`'s key was completed with its token.
    pub(super) fn completed_by(&self, lease: &Lease, now: u64) -> bool {
        self.find(&lease.key).is_some_and(|i| {
            let entry = self.get(i);
            entry.is_live(now)
                && entry.state() == RecordState::Completed
                && entry.token == lease.token
        })
    }

    /// Completes the held record at `i` with `result`, kept until `expires_at_ms`; resets the
    /// key's attempt count.
    pub(super) fn complete(&mut self, i: u32, result: &[u8], expires_at_ms: u64) {
        let body = match u8::try_from(result.len()) {
            Ok(len) if result.len() <= INLINE => {
                let mut bytes = [0; INLINE];
                bytes[..result.len()].copy_from_slice(result);
                Body::Small { len, bytes }
            }
            _ => {
                let at = self.large.insert(Bytes::copy_from_slice(result));
                Body::Large(u32::try_from(at).unwrap_or(u32::MAX))
            }
        };
        self.set_body(i, body);
        let entry = &mut self.entries[i as usize];
        entry.expires_at_ms = expires_at_ms;
        entry.attempts = 0;
    }

    /// Renews the held record at `i` until `expires_at_ms`.
    pub(super) fn renew(&mut self, i: u32, expires_at_ms: u64) {
        self.entries[i as usize].expires_at_ms = expires_at_ms;
    }

    /// Drops the record at `i` (its expiry 0: given back, not run out), and its entry if no
    /// count is left either.
    pub(super) fn release(&mut self, i: u32, now: u64) {
        self.set_body(i, Body::Empty);
        self.entries[i as usize].expires_at_ms = 0;
        if !self.get(i).alive(now) {
            let key = self.get(i).key;
            self.remove(&key);
        }
    }

    /// Removes `key`'s entry; returns whether it held a record live at `now`.
    pub(super) fn remove_at(&mut self, key: &Key, now: u64) -> Option<bool> {
        let i = self.find(key)?;
        let live = self.get(i).is_live(now);
        self.remove(key);
        Some(live)
    }

    /// Deletes the entry of `shown`'s key if it holds that record: the same claim in the same
    /// state ([`Store::remove_shown`](crate::store::Store::remove_shown)).
    pub(super) fn remove_shown(&mut self, shown: &Record, now: u64) -> Removed {
        let Some(i) = self.find(&shown.key) else {
            return Removed::Gone;
        };
        let entry = self.get(i);
        // Given back (the claim shown, or one made since): no record is left, only the
        // attempt count, which stays — as the other stores answer.
        if matches!(entry.body, Body::Empty) && entry.expires_at_ms == 0 {
            return Removed::Gone;
        }
        if entry.created_at_ms != shown.created_at_ms {
            return Removed::Changed;
        }
        match entry.body {
            // Run out and swept: what is left of the record shown.
            Body::Empty => {}
            _ if entry.state() != shown.state => return Removed::Changed,
            _ => {}
        }
        let live = entry.is_live(now);
        self.remove(&shown.key);
        Removed::Deleted { live }
    }

    fn remove(&mut self, key: &Key) {
        let hash = self.hash(key);
        let entries = &self.entries;
        let Ok(found) = self.index.find_entry(hash, |&i| {
            entries.get(i as usize).is_some_and(|e| e.key == *key)
        }) else {
            return;
        };
        let (i, _) = found.remove();
        if let Body::Large(at) = self.entries.remove(i as usize).body {
            self.large.remove(at as usize);
        }
    }

    /// Drops what expired at `now`, and recycles the names no entry uses any more; returns how
    /// many records (live or not) it dropped.
    pub(super) fn sweep(&mut self, now: u64) -> u64 {
        let mut dropped = 0;
        let mut dead = Vec::new();
        let mut expired = Vec::new();
        for (i, entry) in &self.entries {
            if !matches!(entry.body, Body::Empty) && now >= entry.expires_at_ms {
                expired.push(i);
                dropped += 1;
            }
        }
        for i in expired {
            let i = u32::try_from(i).unwrap_or(u32::MAX);
            self.set_body(i, Body::Empty);
        }
        // What an entry still holds (a live record, or a live count, which belongs to the
        // turn its name says) keeps its name.
        let mut used = vec![false; self.names.capacity()];
        for (_, entry) in &self.entries {
            if !entry.alive(now) {
                dead.push(entry.key);
            } else if let Some(used) = used.get_mut(entry.name as usize) {
                *used = true;
            }
        }
        for key in dead {
            self.remove(&key);
        }
        self.names.recycle(&used);
        self.sweep_at = self.entries.len() * 2;
        dropped
    }

    /// The record at `i` as the admin API shows it, if live at `now`.
    pub(super) fn record(&self, i: u32, now: u64) -> Option<Record> {
        let entry = self.get(i);
        if !entry.is_live(now) {
            return None;
        }
        let named = self.names.get(entry.name);
        let result = match self.answer(i, now) {
            Some(Begin::Completed(first)) => Some(first.result.to_vec()),
            _ => None,
        };
        Some(Record {
            namespace: named.namespace.to_string(),
            key: entry.key,
            tool: named.tool.to_owned(),
            turn: named.turn.to_string(),
            state: entry.state(),
            fingerprint: entry.fingerprint,
            result,
            attempts: entry.live_attempts(now),
            created_at_ms: entry.created_at_ms,
            expires_at_ms: entry.expires_at_ms,
            // A claim of this process's: its holder is here, or the store is gone with it.
            holder_gone: false,
        })
    }

    /// The records live at `now`, of `namespace` if given, and of `turn` if given.
    pub(super) fn records<'a>(
        &'a self,
        namespace: Option<&'a str>,
        turn: Option<&'a str>,
        now: u64,
    ) -> impl Iterator<Item = Record> + 'a {
        self.entries
            .iter()
            .filter(move |(_, e)| {
                let named = self.names.get(e.name);
                e.is_live(now)
                    && namespace.is_none_or(|ns| &**named.namespace == ns)
                    && turn.is_none_or(|turn| &**named.turn == turn)
            })
            .filter_map(move |(i, _)| self.record(u32::try_from(i).ok()?, now))
    }

    /// Live records.
    pub(super) fn live(&self, now: u64) -> usize {
        self.entries.iter().filter(|(_, e)| e.is_live(now)).count()
    }

    /// Entries held, live or awaiting a sweep.
    pub(super) fn entries(&self) -> usize {
        self.entries.len()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Memory per record is the point of this layout: keep it from growing by accident.
    #[test]
    fn an_entry_is_168_bytes_and_a_slab_slot_no_more() {
        assert_eq!(std::mem::size_of::<Entry>(), 168);
        // The shape of `slab`'s slots: a vacant slot fits in the niche of `Body`.
        #[allow(dead_code)]
        enum Slot {
            Vacant(usize),
            Occupied(Entry),
        }
        assert_eq!(std::mem::size_of::<Slot>(), 168);
    }
}

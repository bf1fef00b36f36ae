//! One shard of the memory store: slots in a slab, found through an index of slot numbers
//! hashed by the key each slot holds, and reclaimed through a heap of due times.
//!
//! A slot holds what the store knows of one key: its record (in progress or completed) and
//! the count of attempts with it in its turn (for a key that stands for one turn), or only a
//! count (the counter of a (turn, key) pair, under a key of its own). A slot is freed when
//! neither is left.
//!
//! The heap holds, per slot, one entry for the record's expiry and one for the count's, each
//! at the tick (16 ms, counted from the shard's epoch) by which it is due. Renewals, completions and
//! charges move expiries later without pushing: an entry found early is pushed again at the
//! new time (lazy rescheduling). An expiry moved earlier pushes an entry of its own; the one it
//! replaces is recognised as stale when it pops, because the slot no longer waits for it.

use std::cmp::Reverse;
use std::collections::BinaryHeap;
use std::hash::BuildHasher;

use hashbrown::HashTable;

use super::names::{NameId, Names};
use crate::digest_map::DigestState;
use crate::key::{Fingerprint, Key};
use crate::store::{LeaseToken, Record, RecordState, ResultBytes};

/// What a slot holds.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum State {
    /// Nothing: the slot is on the free list.
    Free,
    /// A count only.
    Counting,
    /// A record in progress (and maybe a count).
    InProgress,
    /// A completed record (and maybe a count).
    Completed,
}

/// What a slot knows of one key.
pub(super) struct Slot {
    pub(super) key: Key,
    pub(super) fingerprint: Fingerprint,
    /// The encoded result, once completed.
    pub(super) result: ResultBytes,
    pub(super) created_at_ms: u64,
    /// When the record stops counting (`now < expires_at_ms` while live).
    pub(super) expires_at_ms: u64,
    /// The token of the claim that holds (or completed) the record.
    pub(super) token: LeaseToken,
    /// When the count expires (`now < attempts_expire_ms` while live).
    pub(super) attempts_expire_ms: u64,
    /// Attempts counted; 0: no count.
    pub(super) attempts: u32,
    tool: NameId,
    namespace: NameId,
    /// Due tick of the heap entry the record waits for (0: none).
    record_due: u32,
    /// Due tick of the heap entry the count waits for (0: none).
    count_due: u32,
    pub(super) state: State,
}

impl Slot {
    fn empty(key: Key) -> Slot {
        Slot {
            key,
            fingerprint: Fingerprint::from_bytes([0; 32]),
            result: ResultBytes::new(),
            created_at_ms: 0,
            expires_at_ms: 0,
            token: LeaseToken(0),
            attempts_expire_ms: 0,
            attempts: 0,
            tool: 0,
            namespace: 0,
            record_due: 0,
            count_due: 0,
            state: State::Counting,
        }
    }

    /// Whether it holds a record, live or not.
    pub(super) fn has_record(&self) -> bool {
        matches!(self.state, State::InProgress | State::Completed)
    }

    /// Whether it holds a record that is live at `now`.
    pub(super) fn live_record(&self, now: u64) -> bool {
        self.has_record() && now < self.expires_at_ms
    }

    /// The count live at `now` (0 if none, or expired).
    pub(super) fn live_attempts(&self, now: u64) -> u32 {
        if now < self.attempts_expire_ms {
            self.attempts
        } else {
            0
        }
    }
}

/// Marks a heap entry as the count's (clear: the record's).
const COUNT: u32 = 1 << 31;

/// How many heap entries one call may pop: expiry work is bounded per call, so a burst of
/// expirations never pauses a caller; `purge_expired` does the rest at once.
pub(super) const RECLAIM_PER_CALL: usize = 4;

pub(super) struct Shard {
    index: HashTable<u32>,
    slots: Vec<Slot>,
    free: Vec<u32>,
    /// `(due tick, slot | COUNT?)`, earliest first.
    due: BinaryHeap<Reverse<(u32, u32)>>,
    /// When tick 0 began (ms).
    epoch: u64,
}

/// Milliseconds per tick of the heap's due times: expired entries are reclaimed at most this
/// late, and a `u32` of ticks spans two years.
const TICK_MS: u64 = 16;

/// Past this many ticks (a year) since its epoch, a shard starts a new epoch (a scan of the
/// shard, as `purge_expired` does) so that due times never reach `u32::MAX`.
const REBASE_AFTER: u32 = 1 << 31;

fn hash(key: &Key) -> u64 {
    DigestState.hash_one(key)
}

impl Shard {
    /// A shard whose ticks count from `epoch` (ms).
    pub(super) fn new(epoch: u64) -> Shard {
        Shard {
            index: HashTable::new(),
            slots: Vec::new(),
            free: Vec::new(),
            due: BinaryHeap::new(),
            epoch,
        }
    }

    /// The tick by which `at_ms` has passed (rounded up, at least 1).
    fn due(&self, at_ms: u64) -> u32 {
        let ms = at_ms.saturating_sub(self.epoch);
        u32::try_from(ms.div_ceil(TICK_MS))
            .unwrap_or(u32::MAX)
            .max(1)
    }

    /// The ticks fully elapsed at `now`.
    fn elapsed(&self, now: u64) -> u32 {
        u32::try_from(now.saturating_sub(self.epoch) / TICK_MS).unwrap_or(u32::MAX)
    }

    /// The slot holding `key`.
    pub(super) fn find(&self, key: &Key) -> Option<u32> {
        let slots = &self.slots;
        self.index
            .find(hash(key), |&i| {
                slots.get(i as usize).is_some_and(|s| s.key == *key)
            })
            .copied()
    }

    pub(super) fn slot(&self, i: u32) -> &Slot {
        &self.slots[i as usize]
    }

    pub(super) fn slot_mut(&mut self, i: u32) -> &mut Slot {
        &mut self.slots[i as usize]
    }

    /// The slot holding `key`, made (empty) if there is none.
    pub(super) fn find_or_insert(&mut self, key: &Key) -> u32 {
        if let Some(i) = self.find(key) {
            return i;
        }
        let i = match self.free.pop() {
            Some(i) => {
                self.slots[i as usize] = Slot::empty(*key);
                i
            }
            None => {
                self.slots.push(Slot::empty(*key));
                u32::try_from(self.slots.len() - 1).unwrap_or(u32::MAX)
            }
        };
        let slots = &self.slots;
        self.index
            .insert_unique(hash(key), i, |&j| hash(&slots[j as usize].key));
        i
    }

    /// Makes slot `i` hold a new record in progress, letting go of the one it held.
    pub(super) fn claim(&mut self, i: u32, claim: Claim<'_>, names: &mut Names) {
        self.drop_record(i, names);
        let (tool, namespace) = (names.hold(claim.tool), names.hold(claim.namespace));
        let slot = self.slot_mut(i);
        slot.fingerprint = *claim.fingerprint;
        slot.created_at_ms = claim.now;
        slot.expires_at_ms = claim.expires_at_ms;
        slot.token = claim.token;
        slot.tool = tool;
        slot.namespace = namespace;
        slot.state = State::InProgress;
    }

    /// Lets go of slot `i`'s record, if any; returns whether there was one.
    pub(super) fn drop_record(&mut self, i: u32, names: &mut Names) -> bool {
        let slot = self.slot_mut(i);
        if !slot.has_record() {
            return false;
        }
        slot.state = State::Counting;
        slot.result = ResultBytes::new();
        let (tool, namespace) = (slot.tool, slot.namespace);
        names.release(tool);
        names.release(namespace);
        true
    }

    /// After slot `i` changed: frees it if it holds nothing, else makes sure the heap wakes
    /// it by its expiries.
    pub(super) fn settle(&mut self, i: u32) {
        let slot = &self.slots[i as usize];
        if !slot.has_record() && slot.attempts == 0 {
            self.free_slot(i);
            return;
        }
        let count_at = (slot.attempts > 0).then(|| self.due(slot.attempts_expire_ms));
        if let Some(at) = count_at
            && (slot.count_due == 0 || at < slot.count_due)
        {
            self.due.push(Reverse((at, i | COUNT)));
            self.slots[i as usize].count_due = at;
        }
        // A record that expires no later than the slot's count needs no entry of its own: the
        // count's entry reclaims both. So a claim completed within its lease leaves nothing
        // due at the lease's end.
        let slot = &self.slots[i as usize];
        if slot.has_record() {
            let at = self.due(slot.expires_at_ms);
            let covered = count_at.is_some_and(|count_at| at <= count_at);
            if !covered && (slot.record_due == 0 || at < slot.record_due) {
                self.due.push(Reverse((at, i)));
                self.slots[i as usize].record_due = at;
            }
        }
    }

    fn free_slot(&mut self, i: u32) {
        let key = self.slots[i as usize].key;
        if let Ok(entry) = self.index.find_entry(hash(&key), |&j| j == i) {
            entry.remove();
        }
        let slot = &mut self.slots[i as usize];
        slot.state = State::Free;
        slot.result = ResultBytes::new();
        slot.attempts = 0;
        slot.record_due = 0;
        slot.count_due = 0;
        self.free.push(i);
    }

    /// Whether a heap entry is due at `now` (or the shard needs a new epoch).
    pub(super) fn has_due(&self, now: u64) -> bool {
        let elapsed = self.elapsed(now);
        elapsed >= REBASE_AFTER
            || self
                .due
                .peek()
                .is_some_and(|Reverse((at, _))| *at <= elapsed)
    }

    /// Handles up to `most` due heap entries: expired records and counts are dropped, slots
    /// left empty freed, entries found early pushed again. Returns how many records it dropped.
    pub(super) fn reclaim(&mut self, now: u64, most: usize, names: &mut Names) -> u64 {
        let elapsed = self.elapsed(now);
        if elapsed >= REBASE_AFTER {
            return self.purge(now, names);
        }
        let mut dropped = 0;
        for _ in 0..most {
            let Some(&Reverse((at, tagged))) = self.due.peek() else {
                break;
            };
            if at > elapsed {
                break;
            }
            self.due.pop();
            let (i, is_count) = (tagged & !COUNT, tagged & COUNT != 0);
            let Some(slot) = self.slots.get_mut(i as usize) else {
                continue;
            };
            if slot.state == State::Free {
                continue;
            }
            if is_count {
                if slot.count_due != at {
                    continue; // stale: the count waits for another entry
                }
                slot.count_due = 0;
            } else {
                if slot.record_due != at {
                    continue;
                }
                slot.record_due = 0;
            }
            // Whichever entry woke the slot, what expired goes.
            if slot.live_attempts(now) == 0 {
                slot.attempts = 0;
            }
            let expired_record = slot.has_record() && !slot.live_record(now);
            if expired_record && self.drop_record(i, names) {
                dropped += 1;
            }
            self.settle(i);
        }
        dropped
    }

    /// Drops every expired record and count now and frees the slots left empty (a scan of
    /// the shard), then rebuilds the heap for what is left, counting ticks from `now`.
    /// Returns how many records it dropped.
    pub(super) fn purge(&mut self, now: u64, names: &mut Names) -> u64 {
        let mut dropped = 0;
        self.due.clear();
        self.epoch = now;
        for i in 0..u32::try_from(self.slots.len()).unwrap_or(u32::MAX) {
            let slot = &mut self.slots[i as usize];
            if slot.state == State::Free {
                continue;
            }
            (slot.record_due, slot.count_due) = (0, 0);
            if slot.live_attempts(now) == 0 {
                slot.attempts = 0;
            }
            let expired_record = slot.has_record() && !slot.live_record(now);
            if expired_record && self.drop_record(i, names) {
                dropped += 1;
            }
            self.settle(i);
        }
        dropped
    }

    /// The record of slot `i`, as stores report records.
    pub(super) fn record(&self, i: u32, names: &Names) -> Record {
        let slot = self.slot(i);
        Record {
            namespace: names.get(slot.namespace).to_owned(),
            key: slot.key,
            tool: names.get(slot.tool).to_owned(),
            state: if slot.state == State::Completed {
                RecordState::Completed
            } else {
                RecordState::InProgress
            },
            fingerprint: slot.fingerprint,
            result: (slot.state == State::Completed).then(|| slot.result.to_vec()),
            created_at_ms: slot.created_at_ms,
            expires_at_ms: slot.expires_at_ms,
        }
    }

    /// The slots with a record live at `now`, in `namespace` if given.
    pub(super) fn live_records<'a>(
        &'a self,
        now: u64,
        namespace: Option<&'a str>,
        names: &'a Names,
    ) -> impl Iterator<Item = u32> + 'a {
        (0..u32::try_from(self.slots.len()).unwrap_or(u32::MAX)).filter(move |&i| {
            let slot = self.slot(i);
            slot.live_record(now) && namespace.is_none_or(|ns| names.get(slot.namespace) == ns)
        })
    }

    /// Slots in use and heap entries: what this shard holds in memory.
    pub(super) fn footprint(&self) -> usize {
        self.slots.len() - self.free.len() + self.due.len()
    }
}

/// A claim being written into a slot.
pub(super) struct Claim<'a> {
    pub(super) tool: &'a str,
    pub(super) namespace: &'a str,
    pub(super) fingerprint: &'a Fingerprint,
    pub(super) token: LeaseToken,
    pub(super) now: u64,
    pub(super) expires_at_ms: u64,
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_slot_stays_small() {
        assert!(
            std::mem::size_of::<Slot>() <= 144,
            "{}",
            std::mem::size_of::<Slot>()
        );
    }

    #[test]
    fn due_ticks_round_up_and_elapsed_ticks_down() {
        let shard = Shard::new(1_000);
        assert_eq!(shard.due(1_000), 1);
        assert_eq!(shard.due(1_001), 1);
        assert_eq!(shard.due(1_016), 1);
        assert_eq!(shard.due(1_017), 2);
        assert_eq!(shard.due(10), 1);
        assert_eq!(shard.due(u64::MAX), u32::MAX);
        assert_eq!((shard.elapsed(1_015), shard.elapsed(1_016)), (0, 1));
        assert_eq!(shard.elapsed(0), 0);
    }

    /// A key claimed, counted and completed as the engine does it for a replayable call.
    fn completed_with_count(shard: &mut Shard, names: &mut Names, key: Key, now: u64) -> u32 {
        let day = 86_400_000;
        let i = shard.find_or_insert(&key);
        shard.slot_mut(i).attempts = 1;
        shard.slot_mut(i).attempts_expire_ms = now + day;
        let claim = Claim {
            tool: "send",
            namespace: "",
            fingerprint: &Fingerprint::from_bytes([1; 32]),
            token: LeaseToken(7),
            now,
            expires_at_ms: now + 30_000,
        };
        shard.claim(i, claim, names);
        shard.settle(i);
        let slot = shard.slot_mut(i);
        slot.state = State::Completed;
        slot.result = ResultBytes::from(&b"ok"[..]);
        slot.expires_at_ms = now + day + 1_000; // completed a second after the charge
        shard.settle(i);
        i
    }

    #[test]
    fn a_claim_completed_within_its_lease_leaves_nothing_due_at_the_lease_end() {
        let mut names = Names::default();
        let mut shard = Shard::new(0);
        for k in 0..100u8 {
            completed_with_count(&mut shard, &mut names, Key::from_bytes([k; 32]), 1_000);
        }
        assert!(
            !shard.has_due(1_000 + 31_000),
            "nothing is due after the lease"
        );
        assert_eq!(
            shard.footprint(),
            100 + 200,
            "a slot, a count and a record entry each"
        );
        // A day on, the count goes first, then the record, then the slot (each reclaimed at
        // most a tick late).
        let day = 86_400_000;
        shard.reclaim(1_000 + day + 20, usize::MAX, &mut names);
        assert_eq!(
            shard
                .find(&Key::from_bytes([3; 32]))
                .map(|i| shard.slot(i).attempts),
            Some(0)
        );
        assert_eq!(
            shard.reclaim(1_000 + day + 1_020, usize::MAX, &mut names),
            100
        );
        assert_eq!(shard.footprint(), 0);
        assert_eq!(names.len(), 0, "the names were let go");
    }

    #[test]
    fn a_record_outliving_its_count_is_reclaimed_by_its_own_entry() {
        let mut names = Names::default();
        let mut shard = Shard::new(0);
        let key = Key::from_bytes([5; 32]);
        let i = completed_with_count(&mut shard, &mut names, key, 0);
        // The count expires in a minute, the record in a day.
        shard.slot_mut(i).attempts_expire_ms = 60_000;
        shard.settle(i);
        assert_eq!(shard.reclaim(61_000, usize::MAX, &mut names), 0);
        assert_eq!(shard.find(&key), Some(i), "the live record keeps its slot");
        assert!(shard.slot(i).live_record(61_000));
        assert_eq!(shard.reclaim(86_400_000 + 1_020, usize::MAX, &mut names), 1);
        assert_eq!(shard.find(&key), None);
    }

    #[test]
    fn a_shard_a_year_old_starts_a_new_epoch_and_keeps_its_slots() {
        let mut names = Names::default();
        let mut shard = Shard::new(0);
        let key = Key::from_bytes([9; 32]);
        let i = shard.find_or_insert(&key);
        let year = u64::from(REBASE_AFTER) * TICK_MS;
        shard.slot_mut(i).attempts = 1;
        shard.slot_mut(i).attempts_expire_ms = year + 60_000;
        shard.settle(i);
        assert!(shard.has_due(year), "a new epoch is due");
        assert_eq!(shard.reclaim(year, 4, &mut names), 0);
        assert_eq!(shard.epoch, year);
        assert_eq!(shard.find(&key), Some(i), "the live count is kept");
        assert!(!shard.has_due(year + 1));
        assert!(shard.has_due(year + 60_000));
        shard.reclaim(year + 60_000, 4, &mut names);
        assert_eq!(shard.find(&key), None, "then it expires as before");
        assert_eq!(shard.footprint(), 0);
    }
}

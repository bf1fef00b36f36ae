//! Which keys have an operation on its way through the store's thread, so that `begin` reads
//! a key on the caller's thread only when nothing sent earlier for that key is still on its
//! way (a call sees whatever was called on this store before it, as when every operation went
//! through the thread in order), and a write runs on the caller's thread only when nothing is
//! queued at all (while the thread has work, writes join its batches).

use std::sync::Arc;
use std::sync::atomic::{AtomicU32, Ordering};

use crate::key::Key;

/// Keys are spread over this many counters (keys are uniform digests).
const STRIPES: usize = 1024;

/// Operations on their way, counted by stripe of their key, and in all.
pub(super) struct Pending {
    stripes: Box<[AtomicU32]>,
    total: AtomicU32,
}

impl Pending {
    pub(super) fn new() -> Arc<Pending> {
        Arc::new(Pending {
            stripes: (0..STRIPES).map(|_| AtomicU32::new(0)).collect(),
            total: AtomicU32::new(0),
        })
    }

    fn stripe(key: &Key) -> usize {
        let bytes = key.as_bytes();
        usize::from(u16::from_le_bytes([bytes[0], bytes[1]])) % STRIPES
    }

    /// Counts an operation on `key` until the returned mark is dropped (once its answer is
    /// committed).
    pub(super) fn mark(self: &Arc<Self>, key: &Key) -> Marked {
        let stripe = Self::stripe(key);
        self.total.fetch_add(1, Ordering::SeqCst);
        self.stripes[stripe].fetch_add(1, Ordering::SeqCst);
        Marked {
            pending: Arc::clone(self),
            stripe,
        }
    }

    /// Whether no operation on `key` (or on a key of its stripe) is on its way.
    pub(super) fn is_clear(&self, key: &Key) -> bool {
        self.stripes[Self::stripe(key)].load(Ordering::SeqCst) == 0
    }

    /// Whether no operation at all is on its way.
    pub(super) fn is_idle(&self) -> bool {
        self.total.load(Ordering::SeqCst) == 0
    }
}

/// An operation on its way; dropping it counts it done.
pub(super) struct Marked {
    pending: Arc<Pending>,
    stripe: usize,
}

impl Drop for Marked {
    fn drop(&mut self) {
        self.pending.stripes[self.stripe].fetch_sub(1, Ordering::SeqCst);
        self.pending.total.fetch_sub(1, Ordering::SeqCst);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_key_is_clear_once_every_mark_is_dropped() {
        let pending = Pending::new();
        let (a, b) = (Key::from_bytes([1; 32]), Key::from_bytes([2; 32]));
        let first = pending.mark(&a);
        let second = pending.mark(&a);
        assert!(!pending.is_clear(&a));
        assert!(pending.is_clear(&b));
        assert!(!pending.is_idle());
        drop(first);
        assert!(!pending.is_clear(&a));
        drop(second);
        assert!(pending.is_clear(&a));
        assert!(pending.is_idle());
    }
}

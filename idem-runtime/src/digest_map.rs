//! Hash maps keyed by digests (keys, counter ids): the key is already a cryptographic hash, so
//! the map's own hashing only has to fold its bytes, not to mix them like SipHash does.
//!
//! The fold is keyed by a per-process random seed and is not a bijection on the low bits, so
//! that digests chosen to share a bucket (by grinding arguments until their keys do) in one
//! process share nothing in another.

use std::collections::HashMap;
use std::hash::{BuildHasher, Hasher};
use std::sync::LazyLock;

/// A `HashMap` keyed by digests.
pub(crate) type DigestMap<K, V> = HashMap<K, V, DigestState>;

/// An empty [`DigestMap`] (usable in a `static`).
pub(crate) const fn digest_map<K, V>() -> DigestMap<K, V> {
    HashMap::with_hasher(DigestState)
}

static SEED: LazyLock<[u64; 2]> = LazyLock::new(|| {
    let random = std::hash::RandomState::new();
    [random.hash_one(0x5EED_u64), random.hash_one(0xF01D_u64) | 1]
});

/// Builds [`DigestHasher`]s seeded from the process's seed.
#[derive(Clone, Copy, Debug, Default)]
pub(crate) struct DigestState;

impl BuildHasher for DigestState {
    type Hasher = DigestHasher;

    fn build_hasher(&self) -> DigestHasher {
        let [state, multiplier] = *SEED;
        DigestHasher { state, multiplier }
    }
}

/// Folds the bytes it is given, 8 at a time, with a seeded multiply.
pub(crate) struct DigestHasher {
    state: u64,
    multiplier: u64,
}

impl DigestHasher {
    #[inline]
    fn mix(&mut self, word: u64) {
        let product = u128::from(self.state ^ word) * u128::from(self.multiplier);
        self.state = (product as u64) ^ ((product >> 64) as u64);
    }
}

impl Hasher for DigestHasher {
    #[inline]
    fn write(&mut self, bytes: &[u8]) {
        let mut chunks = bytes.chunks_exact(8);
        for chunk in chunks.by_ref() {
            let mut word = [0u8; 8];
            word.copy_from_slice(chunk);
            self.mix(u64::from_le_bytes(word));
        }
        let rest = chunks.remainder();
        if !rest.is_empty() {
            let mut word = [0u8; 8];
            word[..rest.len()].copy_from_slice(rest);
            self.mix(u64::from_le_bytes(word) ^ ((rest.len() as u64) << 59));
        }
    }

    #[inline]
    fn write_u64(&mut self, n: u64) {
        self.mix(n);
    }

    #[inline]
    fn write_usize(&mut self, n: usize) {
        self.mix(n as u64);
    }

    #[inline]
    fn finish(&self) -> u64 {
        self.state
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn hash(bytes: &[u8]) -> u64 {
        DigestState.hash_one(bytes)
    }

    #[test]
    fn every_byte_counts_and_equal_input_hashes_equal() {
        let base = [7u8; 32];
        assert_eq!(hash(&base), hash(&[7u8; 32]));
        for i in 0..32 {
            let mut other = base;
            other[i] ^= 1;
            assert_ne!(hash(&base), hash(&other), "byte {i} ignored");
        }
        assert_ne!(hash(&[1, 2, 3]), hash(&[1, 2, 3, 0]));
    }

    #[test]
    fn low_bits_spread_for_keys_that_share_them() {
        // Keys whose first word differs only in the high bits still land in many buckets.
        let mut buckets = std::collections::HashSet::new();
        for i in 0u64..256 {
            let mut key = [0u8; 32];
            key[..8].copy_from_slice(&(i << 56).to_le_bytes());
            buckets.insert(hash(&key) & 0xFF);
        }
        assert!(buckets.len() > 128, "{} buckets", buckets.len());
    }

    #[test]
    fn a_map_works_as_a_map() {
        let mut map: DigestMap<[u8; 16], u32> = digest_map();
        for i in 0..1000u32 {
            let mut k = [0u8; 16];
            k[..4].copy_from_slice(&i.to_le_bytes());
            map.insert(k, i);
        }
        assert_eq!(map.len(), 1000);
        let mut k = [0u8; 16];
        k[..4].copy_from_slice(&777u32.to_le_bytes());
        assert_eq!(map.get(&k), Some(&777));
    }
}

//! The floor: the least a replay has to do — hash the arguments' bytes once with BLAKE3 and look
//! the digest up in a sharded concurrent map. No turn, budget, lease, fingerprint or codec.

use std::collections::HashMap;
use std::hash::{BuildHasherDefault, Hasher};
use std::sync::RwLock;

use serde::Serialize;

const SHARDS: usize = 16;

/// A hasher for keys that are already BLAKE3 digests: it takes their first 8 bytes.
#[derive(Default)]
pub struct DigestHasher(u64);

impl Hasher for DigestHasher {
    fn finish(&self) -> u64 {
        self.0
    }

    fn write(&mut self, bytes: &[u8]) {
        for (i, b) in bytes.iter().take(8).enumerate() {
            self.0 |= u64::from(*b) << (8 * i);
        }
    }
}

type Shard<V> = RwLock<HashMap<[u8; 32], V, BuildHasherDefault<DigestHasher>>>;

/// A sharded `RwLock<HashMap>` keyed by the BLAKE3 digest of the arguments' `serde_json` bytes.
pub struct Floor<V> {
    shards: Vec<Shard<V>>,
}

impl<V: Clone> Default for Floor<V> {
    fn default() -> Self {
        Floor {
            shards: (0..SHARDS).map(|_| RwLock::default()).collect(),
        }
    }
}

impl<V: Clone> Floor<V> {
    fn digest<A: Serialize>(args: &A) -> Result<[u8; 32], String> {
        let bytes = serde_json::to_vec(args).map_err(|e| format!("floor: {e}"))?;
        Ok(*blake3::hash(&bytes).as_bytes())
    }

    fn shard(&self, digest: &[u8; 32]) -> &Shard<V> {
        &self.shards[usize::from(digest[31]) % SHARDS]
    }

    /// Records `value` for `args`.
    pub fn insert<A: Serialize>(&self, args: &A, value: V) -> Result<(), String> {
        let digest = Self::digest(args)?;
        self.shard(&digest)
            .write()
            .map_err(|_| "floor: poisoned".to_owned())?
            .insert(digest, value);
        Ok(())
    }

    /// The value recorded for `args`, cloned: the floor of a replay.
    pub fn get<A: Serialize>(&self, args: &A) -> Result<Option<V>, String> {
        let digest = Self::digest(args)?;
        let shard = self
            .shard(&digest)
            .read()
            .map_err(|_| "floor: poisoned".to_owned())?;
        Ok(shard.get(&digest).cloned())
    }
}

//! The namespace, tool name and turn id of each record, stored once per shard: a record holds
//! a four-byte id instead of three strings.
//!
//! Ids are handed out by [`Names::id`] when a key is claimed, and recycled by
//! [`Names::recycle`] at the shard's sweep, which knows which ids live records still use.

use std::hash::BuildHasher;
use std::sync::Arc;

use hashbrown::{DefaultHashBuilder, HashTable};

/// One (namespace, tool, turn) triple.
struct Name {
    namespace: Arc<str>,
    tool: &'static str,
    turn: Arc<str>,
}

/// What a record's name says: its namespace, tool and turn.
pub(super) struct Named<'a> {
    pub(super) namespace: &'a Arc<str>,
    pub(super) tool: &'static str,
    pub(super) turn: &'a Arc<str>,
}

/// The (namespace, tool, turn) triples of a shard's records, by id.
#[derive(Default)]
pub(super) struct Names {
    /// `None`: a recycled id, free for the next new pair.
    names: Vec<Option<Name>>,
    free: Vec<u32>,
    /// Ids, found by the hash of their pair.
    index: HashTable<u32>,
    hasher: DefaultHashBuilder,
}

impl Names {
    fn hash(&self, namespace: &str, tool: &str, turn: &str) -> u64 {
        self.hasher.hash_one((namespace, tool, turn))
    }

    /// The id of `(namespace, tool, turn)`, made if it has none.
    pub(super) fn id(&mut self, namespace: &str, tool: &'static str, turn: &str) -> u32 {
        let hash = self.hash(namespace, tool, turn);
        let names = &self.names;
        let same = |&id: &u32| {
            names[id as usize]
                .as_ref()
                .is_some_and(|n| n.tool == tool && &*n.turn == turn && &*n.namespace == namespace)
        };
        if let Some(&id) = self.index.find(hash, same) {
            return id;
        }
        let name = Some(Name {
            namespace: Arc::from(namespace),
            tool,
            turn: Arc::from(turn),
        });
        let id = match self.free.pop() {
            Some(id) => {
                self.names[id as usize] = name;
                id
            }
            None => {
                // A shard's records would fill memory long before 2^32 pairs.
                let id = u32::try_from(self.names.len()).unwrap_or(u32::MAX);
                self.names.push(name);
                id
            }
        };
        let (names, hasher) = (&self.names, &self.hasher);
        self.index.insert_unique(hash, id, |&id| {
            names[id as usize]
                .as_ref()
                .map_or(0, |n| hasher.hash_one((&*n.namespace, n.tool, &*n.turn)))
        });
        id
    }

    /// The namespace, tool and turn of `id` (empty for an id that names nothing, which a live
    /// record never holds).
    pub(super) fn get(&self, id: u32) -> Named<'_> {
        static NONE: std::sync::LazyLock<Arc<str>> = std::sync::LazyLock::new(|| Arc::from(""));
        match self.names.get(id as usize).and_then(Option::as_ref) {
            Some(name) => Named {
                namespace: &name.namespace,
                tool: name.tool,
                turn: &name.turn,
            },
            None => Named {
                namespace: &NONE,
                tool: "",
                turn: &NONE,
            },
        }
    }

    /// Frees every id for which `used` says false (indexed by id).
    pub(super) fn recycle(&mut self, used: &[bool]) {
        for id in 0..self.names.len() {
            if used.get(id).copied().unwrap_or(false) {
                continue;
            }
            let Some(name) = self.names[id].take() else {
                continue;
            };
            let hash = self.hash(&name.namespace, name.tool, &name.turn);
            let id = u32::try_from(id).unwrap_or(u32::MAX);
            if let Ok(found) = self.index.find_entry(hash, |&other| other == id) {
                found.remove();
            }
            self.free.push(id);
        }
    }

    /// How many ids exist, used or free.
    pub(super) fn capacity(&self) -> usize {
        self.names.len()
    }

    /// How many pairs are named.
    #[cfg(test)]
    fn len(&self) -> usize {
        self.names.len() - self.free.len()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn triples_get_one_id_each_and_unused_ids_are_recycled() {
        let mut names = Names::default();
        let a = names.id("acme", "send", "t1");
        assert_eq!(names.id("acme", "send", "t1"), a);
        let b = names.id("acme", "refund", "t1");
        let c = names.id("", "send", "t1");
        let e = names.id("acme", "send", "t2");
        assert_eq!(names.len(), 4);
        let named = names.get(b);
        assert_eq!(
            (&**named.namespace, named.tool, &**named.turn),
            ("acme", "refund", "t1")
        );
        assert_eq!(&**names.get(e).turn, "t2");
        let mut used = vec![false; names.capacity()];
        used[a as usize] = true;
        names.recycle(&used);
        assert_eq!(names.len(), 1);
        assert_eq!(names.get(b).tool, "");
        assert_eq!(names.id("acme", "send", "t1"), a, "a used id is kept");
        let d = names.id("other", "tool", "t3");
        assert!(d == b || d == c || d == e, "a freed id is reused");
        let named = names.get(d);
        assert_eq!(
            (&**named.namespace, named.tool, &**named.turn),
            ("other", "tool", "t3")
        );
        assert_eq!(names.id("other", "tool", "t3"), d);
    }
}

//! The tool names and namespaces of a memory store's records, each kept once and counted, so
//! a record holds two small numbers instead of two strings.

use std::collections::HashMap;
use std::sync::Arc;

/// A name held by [`Names`].
pub(super) type NameId = u32;

/// Interned names, each with the number of records that hold it; a name nobody holds is
/// forgotten.
#[derive(Default)]
pub(super) struct Names {
    ids: HashMap<Arc<str>, NameId>,
    entries: Vec<Entry>,
    free: Vec<NameId>,
    /// The names held last, looked at before the map: a process calls few tools in few
    /// namespaces at a time.
    recent: [Option<NameId>; RECENT],
}

/// How many recently held names are compared before the map is consulted.
const RECENT: usize = 4;

struct Entry {
    name: Arc<str>,
    holders: u32,
}

impl Names {
    /// The id of `name`, held once more.
    pub(super) fn hold(&mut self, name: &str) -> NameId {
        let mut recent = self.recent.into_iter().flatten();
        let id = recent
            .find(|&id| {
                self.entries
                    .get(id as usize)
                    .is_some_and(|e| *e.name == *name)
            })
            .or_else(|| self.ids.get(name).copied());
        if let Some(id) = id
            && let Some(entry) = self.entries.get_mut(id as usize)
        {
            entry.holders += 1;
            self.remember(id);
            return id;
        }
        let name: Arc<str> = Arc::from(name);
        let entry = Entry {
            name: Arc::clone(&name),
            holders: 1,
        };
        let id = match self.free.pop() {
            Some(id) => {
                if let Some(slot) = self.entries.get_mut(id as usize) {
                    *slot = entry;
                }
                id
            }
            None => {
                self.entries.push(entry);
                NameId::try_from(self.entries.len() - 1).unwrap_or(NameId::MAX)
            }
        };
        self.ids.insert(name, id);
        self.remember(id);
        id
    }

    /// Puts `id` first among the recent names.
    fn remember(&mut self, id: NameId) {
        if self.recent[0] == Some(id) {
            return;
        }
        let at = self
            .recent
            .iter()
            .position(|&r| r == Some(id))
            .unwrap_or(RECENT - 1);
        self.recent.copy_within(0..at, 1);
        self.recent[0] = Some(id);
    }

    /// Lets go of one hold on `id`.
    pub(super) fn release(&mut self, id: NameId) {
        let Some(entry) = self.entries.get_mut(id as usize) else {
            return;
        };
        entry.holders = entry.holders.saturating_sub(1);
        if entry.holders == 0 {
            self.ids.remove(&entry.name);
            entry.name = Arc::from("");
            self.free.push(id);
            for recent in &mut self.recent {
                if *recent == Some(id) {
                    *recent = None;
                }
            }
        }
    }

    /// The name `id` stands for.
    pub(super) fn get(&self, id: NameId) -> &str {
        self.entries.get(id as usize).map_or("", |e| &e.name)
    }

    /// Names held right now.
    #[cfg(test)]
    pub(super) fn len(&self) -> usize {
        self.ids.len()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_name_is_kept_while_held_and_its_id_reused_after() {
        let mut names = Names::default();
        let a = names.hold("acme");
        assert_eq!(names.hold("acme"), a);
        let b = names.hold("send_email");
        assert_ne!(a, b);
        assert_eq!((names.get(a), names.get(b)), ("acme", "send_email"));
        names.release(a);
        assert_eq!(names.get(a), "acme", "still held once");
        names.release(a);
        assert_eq!(names.len(), 1);
        let c = names.hold("other");
        assert_eq!(c, a, "the freed id is reused");
        assert_eq!(names.get(c), "other");
        assert_eq!(names.hold("send_email"), b, "a recent name is found again");
    }

    #[test]
    fn many_names_are_found_beyond_the_recent_ones() {
        let mut names = Names::default();
        let ids: Vec<NameId> = (0..20).map(|i| names.hold(&format!("ns-{i}"))).collect();
        for (i, id) in ids.iter().enumerate() {
            assert_eq!(names.hold(&format!("ns-{i}")), *id);
            assert_eq!(names.get(*id), format!("ns-{i}"));
        }
        assert_eq!(names.len(), 20);
    }
}

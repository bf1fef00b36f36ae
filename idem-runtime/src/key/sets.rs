//! Which sequences are sets: shared by the key encoder (a set is encoded unordered) and the
//! record encoder (a set is marked as such, so the fidelity check may compare it unordered).
//!
//! A sequence is a set when it is the content of an [`Unordered`](super::Unordered) marker
//! ([`UNORDERED_MAGIC`]), or when `Serializer::collect_seq` is handed a `HashSet`, a `BTreeSet`
//! or a `hashbrown::HashSet`, owned or behind references — which is how serde serializes those
//! three (`collect_seq(self)`). `collect_seq` receives no more than a generic iterable without
//! `'static` bound, so the only way to tell is its [`std::any::type_name`]. Its text is not
//! stable across compiler releases, so nothing here is a hard-coded string: the recognised
//! prefixes are read at run time from `type_name` of the very types recognised (and of `&u8`
//! and `&mut u8` for references), so they match whatever the running compiler prints.

use std::any::type_name;
use std::collections::{BTreeSet, HashSet};
use std::hash::RandomState;
use std::sync::LazyLock;

pub(crate) use super::unordered::UNORDERED_MAGIC;

/// The type-name texts set recognition compares with, as this compiler prints them.
#[derive(Debug)]
pub(crate) struct SetNames {
    /// What the compiler prints before the generic arguments of `std::collections::HashSet`,
    /// `std::collections::BTreeSet` and `hashbrown::HashSet`, up to and including the `<`
    /// (today `std::collections::hash::set::HashSet<`); `None` if the
    /// printed name has no `<`, which would leave that type unrecognised (a test fails then).
    pub(crate) sets: [Option<&'static str>; 3],
    /// What the compiler prints before a referenced type for `&T` and `&mut T` (`&` and
    /// `&mut `), longest first.
    pub(crate) refs: [Option<&'static str>; 2],
}

/// `name` up to and including its first `<`.
fn generic_prefix(name: &'static str) -> Option<&'static str> {
    name.find('<').and_then(|i| name.get(..=i))
}

/// What `reference` (the name of `&T` or `&mut T`) prints before `inner` (the name of `T`).
fn reference_prefix(reference: &'static str, inner: &'static str) -> Option<&'static str> {
    reference.strip_suffix(inner).filter(|p| !p.is_empty())
}

/// The names, read once per process.
pub(crate) static SET_NAMES: LazyLock<SetNames> = LazyLock::new(|| {
    let mutable = reference_prefix(type_name::<&mut u8>(), type_name::<u8>());
    let shared = reference_prefix(type_name::<&u8>(), type_name::<u8>());
    SetNames {
        sets: [
            generic_prefix(type_name::<HashSet<u8>>()),
            generic_prefix(type_name::<BTreeSet<u8>>()),
            generic_prefix(type_name::<hashbrown::HashSet<u8, RandomState>>()),
        ],
        refs: [mutable, shared],
    }
});

/// Is `type_name` the name of a recognised set type, owned or behind references?
pub(crate) fn is_set_type_name(type_name: &str) -> bool {
    let names = &*SET_NAMES;
    let mut name = type_name;
    'strip: loop {
        for r in names.refs.iter().flatten() {
            if let Some(rest) = name.strip_prefix(r) {
                name = rest;
                continue 'strip;
            }
        }
        break;
    }
    names.sets.iter().flatten().any(|p| name.starts_with(p))
}

/// Is `I`, the iterable handed to `collect_seq`, a recognised set type?
#[inline]
pub(crate) fn iterable_is_set<I>() -> bool {
    is_set_type_name(type_name::<I>())
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A type named like a set in another module.
    mod elsewhere {
        #[allow(dead_code)]
        pub struct HashSet<T>(pub T);
    }

    #[test]
    fn every_name_is_derived() {
        let names = &*SET_NAMES;
        assert!(names.sets.iter().all(Option::is_some), "{names:?}");
        assert!(names.refs.iter().all(Option::is_some), "{names:?}");
        // Each prefix names a path (not a bare `HashSet<`, which a type of any crate could
        // share) and ends where the generic arguments begin.
        for p in names.sets.iter().flatten() {
            assert!(p.contains("::") && p.ends_with("Set<"), "{p}");
        }
    }

    #[test]
    fn the_three_set_types_are_recognised_owned_and_behind_references() {
        type Std = HashSet<String, RandomState>;
        type Brown = hashbrown::HashSet<(u8, Vec<u8>), RandomState>;
        assert!(iterable_is_set::<Std>());
        assert!(iterable_is_set::<&Std>());
        assert!(iterable_is_set::<&&mut Std>());
        assert!(iterable_is_set::<BTreeSet<Vec<u8>>>());
        assert!(iterable_is_set::<&BTreeSet<u8>>());
        assert!(iterable_is_set::<Brown>());
        assert!(iterable_is_set::<&Brown>());
    }

    #[test]
    fn nothing_else_is_a_set() {
        assert!(!iterable_is_set::<Vec<u8>>());
        assert!(!iterable_is_set::<&[u8]>());
        assert!(!iterable_is_set::<std::collections::hash_set::Iter<'_, u8>>());
        assert!(!iterable_is_set::<std::collections::btree_set::Iter<'_, u8>>());
        assert!(!iterable_is_set::<std::collections::BinaryHeap<u8>>());
        assert!(!iterable_is_set::<std::collections::HashMap<u8, u8>>());
        assert!(!iterable_is_set::<&elsewhere::HashSet<u8>>());
        assert!(!iterable_is_set::<Option<HashSet<u8>>>());
        assert!(!iterable_is_set::<Vec<HashSet<u8>>>());
    }
}

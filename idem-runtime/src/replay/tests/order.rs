//! Order in records: sets are marked (format version 2), and the fidelity check compares maps and
//! sets without order but sequences in order.

use std::collections::{BTreeSet, HashSet};
use std::hash::RandomState;

use serde::{Deserialize, Deserializer, Serialize, Serializer};

use super::{TOOL, assert_round_trip, key, ok_record};
use crate::Error;
use crate::key::Unordered;
use crate::replay::format::{VERSION, marker, tag};
use crate::replay::ser::encode_value;
use crate::replay::{OkOnly, Recorded, ResultCodec, render};

/// A sequence whose `Deserialize` reverses it: it does not replay as it was returned.
#[derive(Debug, Clone, PartialEq, Serialize)]
#[serde(transparent)]
struct Reversing(Vec<u32>);

impl<'de> Deserialize<'de> for Reversing {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        let mut v = Vec::<u32>::deserialize(d)?;
        v.reverse();
        Ok(Reversing(v))
    }
}

impl<'a> IntoIterator for &'a Reversing {
    type Item = &'a u32;
    type IntoIter = std::slice::Iter<'a, u32>;
    fn into_iter(self) -> Self::IntoIter {
        self.0.iter()
    }
}

#[test]
fn a_vec_that_replays_reversed_is_recorded_as_not_replayable() {
    let result: Result<Reversing, ()> = Ok(Reversing(vec![1, 2, 3]));
    let bytes = ok_record(Reversing(vec![1, 2, 3]));
    let verdict = <OkOnly as ResultCodec<Reversing, ()>>::verify(TOOL, &bytes);
    let Err(Error::Encode { message, .. }) = &verdict else {
        panic!("a reordered sequence passed the fidelity check: {verdict:?}");
    };
    assert!(message.contains("replays as"), "{message}");
    assert!(message.contains('3'), "{message}");
    let Some(Recorded::Unreplayable { bytes, .. }) = OkOnly::record(TOOL, &result) else {
        panic!("a reordered sequence was recorded as faithful");
    };
    let decoded = <OkOnly as ResultCodec<Reversing, ()>>::decode(TOOL, &key(), &bytes);
    assert!(
        matches!(decoded, Err(Error::NotReplayable { .. })),
        "{decoded:?}"
    );
    // A palindrome replays as it was: the check compares values, not types.
    let palindrome: Result<Reversing, ()> = Ok(Reversing(vec![1, 2, 1]));
    assert!(matches!(
        OkOnly::record(TOOL, &palindrome),
        Some(Recorded::Faithful(_))
    ));
    // Nested inside a map value or an option, the same.
    let nested: Result<Option<(u8, Reversing)>, ()> = Ok(Some((0, Reversing(vec![1, 2]))));
    assert!(matches!(
        OkOnly::record(TOOL, &nested),
        Some(Recorded::Unreplayable { .. })
    ));
}

#[test]
fn a_collection_declared_unordered_may_replay_in_another_order() {
    let result: Result<Unordered<Reversing>, ()> = Ok(Unordered(Reversing(vec![1, 2, 3])));
    assert!(matches!(
        OkOnly::record(TOOL, &result),
        Some(Recorded::Faithful(_))
    ));
}

#[test]
fn sets_are_marked_in_the_record_and_other_sequences_are_not() {
    let body = |bytes: Vec<u8>| {
        assert_eq!(bytes.get(..2), Some(&[VERSION, marker::OK][..]));
        bytes.get(2..).unwrap_or_default().to_vec()
    };
    let one = [tag::U8, 1];
    let set_of_one = [&[tag::SET, 1][..], &one].concat();
    let seq_of_one = [&[tag::SEQ, 1][..], &one].concat();
    assert_eq!(body(ok_record(HashSet::from([1u8]))), set_of_one);
    assert_eq!(body(ok_record(BTreeSet::from([1u8]))), set_of_one);
    let brown: hashbrown::HashSet<u8, RandomState> = [1u8].into_iter().collect();
    assert_eq!(body(ok_record(brown)), set_of_one);
    assert_eq!(body(ok_record(Unordered(vec![1u8]))), set_of_one);
    assert_eq!(body(ok_record(vec![1u8])), seq_of_one);
    assert_eq!(body(ok_record([1u8])), seq_of_one);
    assert_eq!(body(ok_record((1u8,))), seq_of_one);
    // The marker applies to the collection, not to its elements (as in keys).
    assert_eq!(
        body(ok_record(Unordered(vec![vec![1u8]]))),
        [&[tag::SET, 1][..], &seq_of_one].concat()
    );
    // Nor to a sequence after it.
    assert_eq!(
        body(ok_record((Unordered(Vec::<u8>::new()), vec![1u8]))),
        [&[tag::SEQ, 2, tag::SET, 0][..], &seq_of_one].concat()
    );
    // A set serialized through its iterator is not recognised: an ordered sequence.
    struct ByIter(BTreeSet<u8>);
    impl Serialize for ByIter {
        fn serialize<S: Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
            s.collect_seq(self.0.iter())
        }
    }
    let mut bytes = Vec::new();
    encode_value(&ByIter(BTreeSet::from([1u8])), &mut bytes).expect("encodes");
    assert_eq!(bytes, seq_of_one);
}

#[test]
fn sets_replay_in_any_order_and_render_as_arrays() {
    let set: HashSet<String> = (0..100).map(|i| format!("s{i}")).collect();
    assert_round_trip(set);
    let nested: Vec<HashSet<u16>> = (0..5).map(|i| (i..i + 50).collect()).collect();
    assert_round_trip(nested);
    let text = render(&ok_record(BTreeSet::from([1u8, 2]))).expect("render");
    assert_eq!(text, "Ok([\n  1,\n  2\n])");
}

#[test]
fn records_of_format_version_1_still_decode() {
    // Version 1 had no set tag: a `HashSet` was written as a sequence.
    let v1 = [1, marker::OK, tag::SEQ, 2, tag::U8, 2, tag::U8, 1];
    let set = <OkOnly as ResultCodec<HashSet<u8>, ()>>::decode(TOOL, &key(), &v1);
    assert_eq!(set.ok(), Some(Ok(HashSet::from([1, 2]))));
    let vec = <OkOnly as ResultCodec<Vec<u8>, ()>>::decode(TOOL, &key(), &v1);
    assert_eq!(vec.ok(), Some(Ok(vec![2, 1])));
    assert_eq!(
        render(&v1).expect("render"),
        "Ok([\n  2,\n  1\n])",
        "a version 1 record renders"
    );
    let v1_marker = [1, marker::INTERRUPTED, 1, b't'];
    let decoded = <OkOnly as ResultCodec<u8, ()>>::decode(TOOL, &key(), &v1_marker);
    assert!(
        matches!(decoded, Err(Error::Interrupted { .. })),
        "{decoded:?}"
    );
}

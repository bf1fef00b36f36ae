//! Unit tests of the record codec: fidelity, envelope, markers, verification, hostile input.

use std::collections::{BTreeMap, HashMap, HashSet};
use std::fmt::Debug;
use std::sync::Arc;

use serde::de::DeserializeOwned;
use serde::{Deserialize, Serialize};

use super::format::{VERSION, marker, tag};
use super::*;
use crate::key::Key;

mod as_json;
mod corrupt;
mod fidelity;
mod names;
mod order;
mod props;
mod rendering;
mod requests;

const TOOL: &str = "test_tool";

fn key() -> Key {
    Key::from_bytes([7; 32])
}

/// Encodes `value` as an `Ok` record, checks it verifies, decodes it back.
fn round_trip<T: Serialize + DeserializeOwned + Clone>(value: &T) -> T {
    let result: Result<T, ()> = Ok(value.clone());
    let bytes = match <OkOnly as ResultCodec<T, ()>>::encode(TOOL, &result) {
        Some(Ok(bytes)) => bytes,
        Some(Err(e)) => panic!("encode failed: {e}"),
        None => panic!("an Ok result was not recorded"),
    };
    if let Err(e) = <OkOnly as ResultCodec<T, ()>>::verify(TOOL, &bytes) {
        panic!("verify refused a faithful record: {e}");
    }
    match <OkOnly as ResultCodec<T, ()>>::decode(TOOL, &key(), &bytes) {
        Ok(Ok(back)) => back,
        Ok(Err(())) => panic!("an Ok record decoded as Err"),
        Err(e) => panic!(
            "decode failed: {e}\nrecord: {}",
            render(&bytes).unwrap_or_default()
        ),
    }
}

fn assert_round_trip<T: Serialize + DeserializeOwned + Clone + PartialEq + Debug>(value: T) {
    assert_eq!(round_trip(&value), value);
}

/// The record of `Ok(value)`.
fn ok_record<T: Serialize + DeserializeOwned>(value: T) -> Vec<u8> {
    let result: Result<T, ()> = Ok(value);
    match <OkOnly as ResultCodec<T, ()>>::encode(TOOL, &result) {
        Some(Ok(bytes)) => bytes,
        Some(Err(e)) => panic!("encode failed: {e}"),
        None => panic!("an Ok result was not recorded"),
    }
}

/// `f64` compared bit for bit.
#[derive(Debug, Clone, Copy, Serialize, Deserialize)]
#[serde(transparent)]
struct Bits(f64);

impl PartialEq for Bits {
    fn eq(&self, other: &Self) -> bool {
        self.0.to_bits() == other.0.to_bits()
    }
}

/// `f32` compared bit for bit.
#[derive(Debug, Clone, Copy, Serialize, Deserialize)]
#[serde(transparent)]
struct Bits32(f32);

impl PartialEq for Bits32 {
    fn eq(&self, other: &Self) -> bool {
        self.0.to_bits() == other.0.to_bits()
    }
}

#[test]
fn the_cases_json_lost_now_round_trip() {
    // JSON stored NaN as `null`: the leader got Ok(NaN), every retry a decode error.
    assert_round_trip(Bits(f64::NAN));
    // JSON replayed Ok(Some(None)) as Ok(None).
    assert_round_trip(Some(None::<u32>));
    assert_ne!(ok_record(Some(None::<u32>)), ok_record(None::<Option<u32>>));
    // JSON could not record a map with tuple keys, so the engine re-ran the tool.
    let grid: BTreeMap<(u8, u8), u32> = [((0, 1), 7), ((2, 3), 9)].into_iter().collect();
    assert_round_trip(grid);
}

#[test]
fn the_record_starts_with_the_version_and_the_envelope_marker() {
    let bytes = ok_record(5u8);
    assert_eq!(bytes, [VERSION, marker::OK, tag::U8, 5]);
    let result: Result<u8, String> = Err("no".to_owned());
    let Some(Ok(bytes)) = <OkAndErr as ResultCodec<u8, String>>::encode(TOOL, &result) else {
        panic!("encode");
    };
    assert_eq!(bytes, [VERSION, marker::ERR, tag::STR, 2, b'n', b'o']);
}

#[test]
fn cached_errors_round_trip_and_ok_only_refuses_them() {
    let result: Result<u8, (String, Option<Option<u8>>)> = Err(("denied".to_owned(), Some(None)));
    let Some(Ok(bytes)) = OkAndErr::encode(TOOL, &result) else {
        panic!("encode");
    };
    <OkAndErr as ResultCodec<u8, (String, Option<Option<u8>>)>>::verify(TOOL, &bytes)
        .expect("verify");
    let back: Result<u8, (String, Option<Option<u8>>)> =
        OkAndErr::decode(TOOL, &key(), &bytes).expect("decode");
    assert_eq!(back, result);
    let as_ok_only = <OkOnly as ResultCodec<u8, String>>::decode(TOOL, &key(), &bytes);
    assert!(
        matches!(&as_ok_only, Err(Error::Decode { tool: TOOL, message, .. }) if message.contains("records `Ok` results only")),
        "{as_ok_only:?}"
    );
    // An Err is not recorded by OkOnly.
    let err: Result<u8, String> = Err("x".to_owned());
    assert!(<OkOnly as ResultCodec<u8, String>>::encode(TOOL, &err).is_none());
}

#[test]
fn encode_into_reuses_and_replaces_the_buffer() {
    let mut buffer = Vec::with_capacity(256);
    buffer.extend_from_slice(b"stale contents");
    let capacity = buffer.capacity();
    let result: Result<String, ()> = Ok("fresh".to_owned());
    let outcome = <OkOnly as ResultCodec<String, ()>>::encode_into(TOOL, &result, &mut buffer);
    assert!(matches!(outcome, Some(Ok(_))));
    assert_eq!(buffer, ok_record("fresh".to_owned()));
    assert_eq!(buffer.capacity(), capacity, "the buffer was reallocated");
}

#[test]
fn a_not_replayable_record_tells_the_model_not_to_call_again() {
    let bytes = encode_unreplayable(TOOL, "the result type lost data");
    let decoded = <OkOnly as ResultCodec<u8, ()>>::decode(TOOL, &key(), &bytes);
    let Err(
        error @ Error::NotReplayable {
            tool,
            key: k,
            message,
        },
    ) = &decoded
    else {
        panic!("{decoded:?}");
    };
    assert_eq!(
        (*tool, *k, message.as_str()),
        (TOOL, key().short(), "the result type lost data")
    );
    let text = error.to_string();
    assert!(text.contains("already ran"), "{text}");
    assert!(text.contains("do not call it again"), "{text}");
    // Caching codecs see the same marker.
    let decoded = <OkAndErr as ResultCodec<u8, String>>::decode(TOOL, &key(), &bytes);
    assert!(matches!(decoded, Err(Error::NotReplayable { .. })));
    assert!(<OkOnly as ResultCodec<u8, ()>>::verify(TOOL, &bytes).is_ok());
}

#[test]
fn an_interrupted_record_tells_the_model_to_check_first() {
    let bytes = encode_interrupted(TOOL);
    let decoded = <OkAndErr as ResultCodec<u8, String>>::decode(TOOL, &key(), &bytes);
    let Err(error @ Error::Interrupted { tool, key: k }) = &decoded else {
        panic!("{decoded:?}");
    };
    assert_eq!((*tool, *k), (TOOL, key().short()));
    let text = error.to_string();
    assert!(text.contains("interrupted"), "{text}");
    assert!(text.contains("may or may not have taken effect"), "{text}");
    assert!(text.contains("check whether it happened"), "{text}");
    let decoded = <OkOnly as ResultCodec<u8, ()>>::decode(TOOL, &key(), &bytes);
    assert!(matches!(decoded, Err(Error::Interrupted { .. })));
}

/// An untagged enum whose first variant also accepts the second's values.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(untagged)]
enum Ambiguous {
    Small(u32),
    Big(u64),
}

/// A type whose `Deserialize` drops data its `Serialize` wrote.
#[derive(Debug, PartialEq, Serialize, Deserialize)]
struct Lossy {
    kept: u8,
    #[serde(skip_deserializing)]
    dropped: u8,
}

/// `u128` inside an untagged enum: serde buffers untagged content without 128-bit integers.
#[derive(Debug, PartialEq, Serialize, Deserialize)]
#[serde(untagged)]
enum Wide {
    Number(u128),
}

#[test]
fn verify_refuses_results_that_would_not_replay_as_returned() {
    let refused = |bytes: &[u8], verdict: Result<ser::Names, Error>| {
        let Err(Error::Encode { tool, message, .. }) = verdict else {
            panic!("verify accepted {}", render(bytes).unwrap_or_default());
        };
        assert_eq!(tool, TOOL);
        message
    };
    let bytes = ok_record(Ambiguous::Big(5));
    let message = refused(
        &bytes,
        <OkOnly as ResultCodec<Ambiguous, ()>>::verify(TOOL, &bytes),
    );
    assert!(message.contains("replays as"), "{message}");
    let bytes = ok_record(Lossy {
        kept: 1,
        dropped: 2,
    });
    refused(
        &bytes,
        <OkOnly as ResultCodec<Lossy, ()>>::verify(TOOL, &bytes),
    );
    let bytes = ok_record(Wide::Number(1));
    let message = refused(
        &bytes,
        <OkOnly as ResultCodec<Wide, ()>>::verify(TOOL, &bytes),
    );
    assert!(message.contains("would not replay"), "{message}");
}

#[test]
fn record_turns_an_unfaithful_result_into_a_not_replayable_marker() {
    let result: Result<Ambiguous, ()> = Ok(Ambiguous::Big(5));
    let Some(Recorded::Unreplayable { bytes, error }) = OkOnly::record(TOOL, &result) else {
        panic!("an unfaithful result was recorded as faithful");
    };
    assert!(matches!(error, Error::Encode { .. }));
    let decoded = <OkOnly as ResultCodec<Ambiguous, ()>>::decode(TOOL, &key(), &bytes);
    assert!(
        matches!(decoded, Err(Error::NotReplayable { .. })),
        "{decoded:?}"
    );
    let faithful: Result<Ambiguous, ()> = Ok(Ambiguous::Small(5));
    let Some(Recorded::Faithful(bytes)) = OkOnly::record(TOOL, &faithful) else {
        panic!("a faithful result was refused");
    };
    assert_eq!(bytes, ok_record(Ambiguous::Small(5)));
    let err: Result<Ambiguous, ()> = Err(());
    assert!(OkOnly::record(TOOL, &err).is_none());
}

/// Two receipts with the same fields.
#[derive(Debug, PartialEq, Serialize, Deserialize)]
struct SentReceipt {
    id: u64,
}

/// See [`SentReceipt`].
#[derive(Debug, PartialEq, Serialize, Deserialize)]
struct QueuedReceipt {
    id: u64,
}

/// An untagged enum whose variants hold types with the same fields: they encode alike, and
/// every record decodes into the first.
#[derive(Debug, PartialEq, Serialize, Deserialize)]
#[serde(untagged)]
enum Delivery {
    Sent(SentReceipt),
    Queued(QueuedReceipt),
}

#[test]
fn record_refuses_a_value_that_decodes_into_another_variant_encoding_alike() {
    let queued: Result<Delivery, ()> = Ok(Delivery::Queued(QueuedReceipt { id: 7 }));
    let Some(Recorded::Unreplayable { error, .. }) = OkOnly::record(TOOL, &queued) else {
        panic!("`Queued` was recorded, and would replay as `Sent`");
    };
    let Error::Encode { message, .. } = error else {
        panic!("{error:?}");
    };
    assert!(message.contains("another variant"), "{message}");
    let sent: Result<Delivery, ()> = Ok(Delivery::Sent(SentReceipt { id: 7 }));
    assert!(matches!(
        OkOnly::record(TOOL, &sent),
        Some(Recorded::Faithful(_))
    ));
    // The names are compared as a multiset: a map of named values decoded in another order
    // is still faithful.
    let map: HashMap<u32, Result<Delivery, u8>> = (0..64)
        .map(|i| match i % 2 {
            0 => (i, Ok(Delivery::Sent(SentReceipt { id: u64::from(i) }))),
            _ => (i, Err(1)),
        })
        .collect();
    let mixed: Result<_, ()> = Ok((
        map,
        Lossy {
            kept: 1,
            dropped: 0,
        },
        Some(Ambiguous::Small(1)),
    ));
    assert!(matches!(
        OkOnly::record(TOOL, &mixed),
        Some(Recorded::Faithful(_))
    ));
}

#[test]
fn verify_accepts_maps_and_sets_whose_order_changes() {
    // Decoded into a new `HashMap`/`HashSet`, the entries come out in another order.
    let map: HashMap<String, u32> = (0..200).map(|i| (format!("k{i}"), i)).collect();
    let set: HashSet<i64> = (0..200).collect();
    let nested: HashMap<u8, HashSet<u8>> = (0..20).map(|i| (i, (i..i + 20).collect())).collect();
    assert_round_trip(map);
    assert_round_trip(set);
    assert_round_trip(nested);
}

#[test]
fn shared_and_boxed_values_round_trip() {
    assert_round_trip(Arc::new(vec![1u8, 2]));
    let boxed: Box<str> = "boxed".into();
    assert_round_trip(boxed);
}

/// A result whose `Serialize` impl fails.
#[derive(Debug, Clone, Deserialize)]
struct Unserializable;

impl Serialize for Unserializable {
    fn serialize<S: serde::Serializer>(&self, _: S) -> Result<S::Ok, S::Error> {
        Err(serde::ser::Error::custom("cannot serialize this"))
    }
}

#[test]
fn a_result_that_fails_to_encode_is_recorded_as_not_replayable() {
    let result: Result<(u8, Unserializable), ()> = Ok((1, Unserializable));
    let mut out = b"stale".to_vec();
    let encoded = OkOnly::encode_into(TOOL, &result, &mut out);
    assert!(
        matches!(&encoded, Some(Err(Error::Encode { tool: TOOL, message, .. })) if message.contains("cannot serialize this")),
        "{encoded:?}"
    );
    assert!(out.is_empty(), "a partial record was left in the buffer");
    let Some(Recorded::Unreplayable { bytes, .. }) = OkOnly::record(TOOL, &result) else {
        panic!("a result that cannot be encoded must become a not-replayable marker");
    };
    let decoded = <OkOnly as ResultCodec<(u8, Unserializable), ()>>::decode(TOOL, &key(), &bytes);
    assert!(
        matches!(&decoded, Err(Error::NotReplayable { message, .. }) if message.contains("cannot serialize this")),
        "{decoded:?}"
    );
}

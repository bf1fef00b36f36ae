//! Corrupt, truncated and hostile records: an error naming tool and key, never a panic, never
//! an allocation larger than the input.

use std::collections::BTreeMap;

use serde::{Deserialize, Serialize};

use super::{Bits, TOOL, key, ok_record};
use crate::Error;
use crate::replay::format::{MAX_DEPTH, VERSION, marker, tag};
use crate::replay::{
    OkAndErr, OkOnly, ResultCodec, encode_interrupted, encode_unreplayable, render,
};

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
enum Shape {
    Dot,
    Circle(Bits),
    Rect(u16, u16),
    Poly { points: Vec<(i32, i32)> },
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
struct Sample {
    id: u64,
    name: String,
    score: Bits,
    maybe: Option<Option<i128>>,
    grid: BTreeMap<(u8, u8), u32>,
    shapes: Vec<Shape>,
    json: serde_json::Value,
    #[serde(with = "serde_bytes")]
    blob: Vec<u8>,
}

fn sample() -> Sample {
    Sample {
        id: 1 << 40,
        name: "ünïcødé".to_owned(),
        score: Bits(f64::NAN),
        maybe: Some(None),
        grid: [((0, 1), 7), ((200, 3), 70_000)].into(),
        shapes: vec![
            Shape::Dot,
            Shape::Circle(Bits(-0.0)),
            Shape::Rect(3, 4),
            Shape::Poly {
                points: vec![(-1, 1), (i32::MAX, i32::MIN)],
            },
        ],
        json: serde_json::json!({"a": [1, -2, 3.5, null, "x"]}),
        blob: vec![0, 1, 254, 255],
    }
}

/// Decodes `bytes` as a `Sample` with both codecs and renders them; panics are the failure.
fn decode_all(bytes: &[u8]) -> Result<Sample, Error> {
    let _ = render(bytes);
    let _ = <OkOnly as ResultCodec<Sample, ()>>::verify(TOOL, bytes);
    let _ = <OkAndErr as ResultCodec<Sample, String>>::decode(TOOL, &key(), bytes);
    let _ = <OkOnly as ResultCodec<serde_json::Value, ()>>::decode(TOOL, &key(), bytes);
    match <OkOnly as ResultCodec<Sample, ()>>::decode(TOOL, &key(), bytes) {
        Ok(Ok(sample)) => Ok(sample),
        Ok(Err(())) => unreachable!("OkOnly never decodes an Err"),
        Err(e) => Err(e),
    }
}

#[test]
fn the_sample_round_trips() {
    let bytes = ok_record(sample());
    assert_eq!(decode_all(&bytes).expect("decode"), sample());
}

#[test]
fn truncation_at_every_offset_is_a_decode_error_naming_tool_and_key() {
    let bytes = ok_record(sample());
    for cut in 0..bytes.len() {
        match decode_all(&bytes[..cut]) {
            Err(Error::Decode {
                tool,
                key: k,
                message,
            }) => {
                assert_eq!((tool, k), (TOOL, key().short()), "cut at {cut}: {message}");
            }
            other => panic!("cut at {cut}: {other:?}"),
        }
        assert!(
            matches!(render(&bytes[..cut]), Err(Error::UnreadableRecord { .. })),
            "cut at {cut}"
        );
    }
}

#[test]
fn every_single_byte_corruption_is_handled_without_panicking() {
    let bytes = ok_record(sample());
    let mut decoded_to_another_value = 0;
    for at in 0..bytes.len() {
        for flip in [0x01, 0x80, 0xff] {
            let mut corrupt = bytes.clone();
            corrupt[at] ^= flip;
            // Some flips give another valid record (a letter, a digit, `u64` read as `u128`).
            if decode_all(&corrupt).is_ok() {
                decoded_to_another_value += 1;
            }
        }
    }
    assert!(
        decoded_to_another_value < bytes.len() * 3,
        "corruption went unnoticed"
    );
}

#[test]
fn trailing_bytes_unknown_versions_and_kinds_are_refused() {
    let mut trailing = ok_record(5u8);
    trailing.push(0);
    let mut unknown_tag = ok_record(5u8);
    unknown_tag[2] = 0xee;
    let mut marker_trailing = encode_interrupted(TOOL);
    marker_trailing.push(1);
    let mut unreplayable_cut = encode_unreplayable(TOOL, "reason");
    unreplayable_cut.pop();
    for bad in [
        trailing,
        unknown_tag,
        marker_trailing,
        unreplayable_cut,
        vec![],
        vec![VERSION],
        vec![VERSION + 1, marker::OK, tag::U8, 5],
        vec![0, marker::OK, tag::U8, 5],
        vec![VERSION, 9, tag::U8, 5],
        b"{not json".to_vec(),
    ] {
        let decoded = <OkOnly as ResultCodec<u8, ()>>::decode(TOOL, &key(), &bad);
        assert!(
            matches!(decoded, Err(Error::Decode { .. })),
            "{bad:?}: {decoded:?}"
        );
        assert!(render(&bad).is_err(), "{bad:?}");
    }
    let newer = <OkOnly as ResultCodec<u8, ()>>::decode(TOOL, &key(), &[VERSION + 1, 0, 0]);
    assert!(
        matches!(&newer, Err(e) if e.to_string().contains("newer idem")),
        "{newer:?}"
    );
}

#[test]
fn a_huge_count_is_refused_before_allocating() {
    // A sequence, a map, a string and bytes claiming 2^62 elements, with a few bytes behind.
    for t in [tag::SEQ, tag::SET, tag::MAP, tag::STR, tag::BYTES] {
        let mut bad = vec![VERSION, marker::OK, t];
        bad.extend_from_slice(&[0x80, 0x80, 0x80, 0x80, 0x80, 0x80, 0x80, 0x80, 0x40]);
        bad.extend_from_slice(&[tag::U8, 1, tag::U8, 2]);
        let as_vec = <OkOnly as ResultCodec<Vec<u8>, ()>>::decode(TOOL, &key(), &bad);
        assert!(matches!(as_vec, Err(Error::Decode { .. })), "{as_vec:?}");
        let as_map = <OkOnly as ResultCodec<BTreeMap<u8, u8>, ()>>::decode(TOOL, &key(), &bad);
        assert!(matches!(as_map, Err(Error::Decode { .. })));
        let as_any = <OkOnly as ResultCodec<serde_json::Value, ()>>::decode(TOOL, &key(), &bad);
        assert!(matches!(as_any, Err(Error::Decode { .. })));
    }
}

#[test]
fn nesting_deeper_than_the_limit_is_refused() {
    fn nested(depth: usize, open: &[u8], leaf: &[u8]) -> Vec<u8> {
        let mut bytes = vec![VERSION, marker::OK];
        for _ in 0..depth {
            bytes.extend_from_slice(open);
        }
        bytes.extend_from_slice(leaf);
        bytes
    }
    // 100 000 levels of `Some`, of one-element sequences, of newtype variants.
    for (open, leaf) in [
        (&[tag::SOME][..], &[tag::NONE][..]),
        (&[tag::SEQ, 1][..], &[tag::SEQ, 0][..]),
        (&[tag::NEWTYPE_VARIANT, 1, b'A'][..], &[tag::UNIT][..]),
    ] {
        let deep = nested(100_000, open, leaf);
        let decoded = <OkOnly as ResultCodec<serde_json::Value, ()>>::decode(TOOL, &key(), &deep);
        assert!(
            matches!(&decoded, Err(Error::Decode { message, .. }) if message.contains("nest")),
            "{decoded:?}"
        );
        assert!(matches!(render(&deep), Err(Error::UnreadableRecord { .. })));
    }
    // Within the limit, deep values decode.
    let ok = nested(MAX_DEPTH - 1, &[tag::SEQ, 1], &[tag::SEQ, 0]);
    let decoded = <OkOnly as ResultCodec<serde_json::Value, ()>>::decode(TOOL, &key(), &ok);
    assert!(matches!(decoded, Ok(Ok(_))), "{decoded:?}");
    assert!(render(&ok).is_ok());
}

/// A type recursing through `Option` without consuming input when the record holds no `Some`.
#[derive(Debug, Serialize, Deserialize)]
struct Chain(#[allow(dead_code)] Option<Box<Chain>>);

#[test]
fn a_type_that_recurses_without_reading_is_stopped_by_the_depth_limit() {
    let bytes = ok_record(5u8);
    let decoded = <OkOnly as ResultCodec<Chain, ()>>::decode(TOOL, &key(), &bytes);
    assert!(matches!(decoded, Err(Error::Decode { .. })), "{decoded:?}");
}

#[test]
fn invalid_scalars_are_refused() {
    for value in [
        vec![tag::CHAR, 0x80, 0xb0, 0x03],            // 0xd800, a surrogate
        vec![tag::CHAR, 0x80, 0x80, 0x44],            // beyond char::MAX
        vec![tag::STR, 2, 0xc3, 0x28],                // invalid UTF-8
        vec![tag::U16, 0x80, 0x80, 0x04],             // 65536
        vec![tag::I32, 0x80, 0x80, 0x80, 0x80, 0x10], // 2^31
        vec![tag::F64, 0, 0, 0],
        vec![tag::TRUE, tag::FALSE],
    ] {
        let mut bytes = vec![VERSION, marker::OK];
        bytes.extend_from_slice(&value);
        let decoded = <OkOnly as ResultCodec<serde_json::Value, ()>>::decode(TOOL, &key(), &bytes);
        assert!(
            matches!(decoded, Err(Error::Decode { .. })),
            "{value:?}: {decoded:?}"
        );
        assert!(render(&bytes).is_err(), "{value:?}");
    }
}

#[test]
fn a_variant_of_the_wrong_kind_is_a_decode_error() {
    let bytes = ok_record(Shape::Rect(1, 2));
    #[derive(Debug, Serialize, Deserialize)]
    #[allow(dead_code)]
    enum Other {
        Rect { w: u16 },
    }
    let decoded = <OkOnly as ResultCodec<Other, ()>>::decode(TOOL, &key(), &bytes);
    assert!(
        matches!(&decoded, Err(Error::Decode { message, .. }) if message.contains("tuple variant")),
        "{decoded:?}"
    );
}

/// A record over the size idem records, found in a store, is refused naming the limit before
/// anything is decoded.
#[test]
fn a_record_over_the_limit_is_refused_naming_it() {
    let mut huge = vec![0u8; crate::replay::MAX_RECORD + 1];
    huge[0] = 2; // a version this idem reads
    let error = crate::replay::kind(&huge).expect_err("too large");
    assert!(error.to_string().contains("64 MiB"), "{error}");
    let decoded = <crate::replay::OkOnly as crate::replay::ResultCodec<u8, crate::Error>>::decode(
        "t",
        &crate::Key::from_bytes([1; 32]),
        &huge,
    );
    assert!(
        matches!(&decoded, Err(crate::Error::Decode { message, .. }) if message.contains("64 MiB")),
        "{decoded:?}"
    );
}

/// A type that reads a map's first key and stops (a hand-written `Deserialize`).
#[derive(Debug, Serialize)]
struct FirstKey(String);

impl<'de> Deserialize<'de> for FirstKey {
    fn deserialize<D: serde::Deserializer<'de>>(deserializer: D) -> Result<Self, D::Error> {
        struct KeyOnly;
        impl<'de> serde::de::Visitor<'de> for KeyOnly {
            type Value = FirstKey;
            fn expecting(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
                f.write_str("a map")
            }
            fn visit_map<A: serde::de::MapAccess<'de>>(
                self,
                mut map: A,
            ) -> Result<FirstKey, A::Error> {
                let key: Option<String> = map.next_key()?;
                Ok(FirstKey(key.unwrap_or_default()))
            }
        }
        deserializer.deserialize_map(KeyOnly)
    }
}

/// Entries a type leaves unread are refused, not dropped: a map's, and the content of a
/// variant read as a one-entry map (its key read, its value not).
#[test]
fn entries_a_type_does_not_read_are_a_decode_error() {
    let map = ok_record(BTreeMap::from([("a".to_owned(), 1u8), ("b".to_owned(), 2)]));
    let decoded = <OkOnly as ResultCodec<FirstKey, ()>>::decode(TOOL, &key(), &map);
    assert!(
        matches!(&decoded, Err(Error::Decode { message, .. }) if message.contains("1 more entries")),
        "{decoded:?}"
    );
    let variant = ok_record(Shape::Rect(1, 2));
    let decoded = <OkOnly as ResultCodec<FirstKey, ()>>::decode(TOOL, &key(), &variant);
    assert!(
        matches!(&decoded, Err(Error::Decode { message, .. }) if message.contains("content of a variant was not read")),
        "{decoded:?}"
    );
}

/// A type that fails partway through a map or a sequence leaves the rest unread because of its
/// error: that error is the one answered, not the entries or elements it did not reach.
#[test]
fn a_type_error_is_answered_before_what_it_left_unread() {
    #[derive(Debug, Serialize, Deserialize)]
    struct Pair {
        a: u8,
        b: u8,
    }
    let map = ok_record(BTreeMap::from([
        ("a".to_owned(), "x".to_owned()),
        ("b".to_owned(), "y".to_owned()),
    ]));
    let decoded = <OkOnly as ResultCodec<Pair, ()>>::decode(TOOL, &key(), &map);
    assert!(
        matches!(&decoded, Err(Error::Decode { message, .. }) if message.contains("invalid type") && !message.contains("more entries")),
        "{decoded:?}"
    );
    let seq = ok_record(vec!["x".to_owned(), "y".to_owned()]);
    let decoded = <OkOnly as ResultCodec<Vec<u8>, ()>>::decode(TOOL, &key(), &seq);
    assert!(
        matches!(&decoded, Err(Error::Decode { message, .. }) if message.contains("invalid type") && !message.contains("more elements")),
        "{decoded:?}"
    );
}

/// A field that reads nothing of its value (a `deserialize_with` that ignores its input).
#[derive(Debug, Serialize, Deserialize)]
struct ReadsNothing {
    #[serde(rename = "T", deserialize_with = "read_nothing")]
    #[allow(dead_code)]
    t: u8,
}

fn read_nothing<'de, D: serde::Deserializer<'de>>(_: D) -> Result<u8, D::Error> {
    Ok(0)
}

/// The body of a variant a type did not read stays in the input, where the next read meets it
/// (and the record is refused): it is not offered again as if it were the next value.
#[test]
fn a_variant_body_left_unread_is_not_offered_to_the_next_read() {
    #[derive(Serialize, Deserialize)]
    enum T {
        T(u8, u8),
    }
    let bytes = ok_record(vec![T::T(1, 2), T::T(3, 4)]);
    let decoded = <OkOnly as ResultCodec<Vec<ReadsNothing>, ()>>::decode(TOOL, &key(), &bytes);
    match &decoded {
        Err(Error::Decode { message, .. }) => assert!(
            !message.contains("more elements than the type reads"),
            "the first body was read as the second element: {message}"
        ),
        other => panic!("{other:?}"),
    }
}

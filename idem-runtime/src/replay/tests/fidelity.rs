//! Every kind of value a tool may return replays equal to what it returned.

use std::collections::BTreeMap;

use serde::{Deserialize, Serialize, Serializer};
use serde_json::json;

use super::{Bits, Bits32, TOOL, assert_round_trip, key, ok_record, round_trip};
use crate::replay::format::marker;
use crate::replay::{OkOnly, ResultCodec, encode_record, render};

#[test]
fn floats_are_bit_exact() {
    let payload_nan = f64::from_bits(0x7ff8_0000_dead_beef);
    for v in [
        f64::NAN,
        -f64::NAN,
        payload_nan,
        f64::INFINITY,
        f64::NEG_INFINITY,
        -0.0,
        0.0,
    ] {
        assert_round_trip(Bits(v));
    }
    for v in [
        f32::NAN,
        f32::from_bits(0x7fc0_0123),
        f32::NEG_INFINITY,
        -0.0f32,
        1.5,
    ] {
        assert_round_trip(Bits32(v));
    }
    assert_round_trip(vec![Bits(f64::MIN_POSITIVE), Bits(f64::MAX), Bits(5e-324)]);
}

#[test]
fn integers_of_every_width_round_trip_at_their_limits() {
    assert_round_trip((u8::MAX, u16::MAX, u32::MAX, u64::MAX, u128::MAX));
    assert_round_trip((i8::MIN, i16::MIN, i32::MIN, i64::MIN, i128::MIN));
    assert_round_trip((i8::MAX, i16::MAX, i32::MAX, i64::MAX, i128::MAX));
    assert_round_trip((0u128, -1i128, 1usize, -1isize));
}

#[test]
fn options_nest_without_collapsing() {
    assert_round_trip(None::<Option<Option<u8>>>);
    assert_round_trip(Some(None::<Option<u8>>));
    assert_round_trip(Some(Some(None::<u8>)));
    assert_round_trip(Some(Some(Some(3u8))));
    assert_round_trip(Some(()));
    assert_round_trip(vec![None, Some(None), Some(Some(()))]);
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
struct Bytes {
    #[serde(with = "serde_bytes")]
    blob: Vec<u8>,
    plain: Vec<u8>,
}

#[test]
fn text_chars_and_bytes_round_trip() {
    assert_round_trip((
        'é',
        '\u{10ffff}',
        '\0',
        "ünïcødé \u{1f600}".to_owned(),
        String::new(),
    ));
    assert_round_trip(Bytes {
        blob: (0..=255).collect(),
        plain: vec![0, 255],
    });
    // serde_bytes values are recorded as bytes, not as a sequence of numbers.
    let bytes = ok_record(Bytes {
        blob: vec![1; 100],
        plain: vec![],
    });
    assert!(bytes.len() < 130, "{} bytes", bytes.len());
}

#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord, Serialize, Deserialize)]
enum External {
    Unit,
    Newtype(u16),
    Tuple(i8, String),
    Struct { a: Option<Option<u8>>, b: bool },
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(tag = "type")]
enum Internal {
    Unit,
    Struct { a: Option<Option<u8>>, f: Bits },
    Wrapped(Inner),
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
struct Inner {
    x: i64,
    e: External,
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(tag = "t", content = "c")]
enum Adjacent {
    Unit,
    Newtype(Option<Option<String>>),
    Tuple(u8, Bits),
    Struct { e: External },
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(untagged)]
enum Untagged {
    Int(i64),
    Text(String),
    Pair(bool, Option<Option<u8>>),
    Record { f: Bits, e: External },
}

#[test]
fn enums_of_every_representation_round_trip() {
    let externals = [
        External::Unit,
        External::Newtype(7),
        External::Tuple(-3, "t".to_owned()),
        External::Struct {
            a: Some(None),
            b: true,
        },
    ];
    for e in &externals {
        assert_round_trip(e.clone());
        assert_round_trip(Untagged::Record {
            f: Bits(f64::NAN),
            e: e.clone(),
        });
        assert_round_trip(Internal::Wrapped(Inner {
            x: -9,
            e: e.clone(),
        }));
        assert_round_trip(Adjacent::Struct { e: e.clone() });
    }
    assert_round_trip(Internal::Unit);
    assert_round_trip(Internal::Struct {
        a: Some(None),
        f: Bits(-0.0),
    });
    assert_round_trip(Adjacent::Unit);
    assert_round_trip(Adjacent::Newtype(Some(None)));
    assert_round_trip(Adjacent::Tuple(1, Bits(f64::INFINITY)));
    assert_round_trip(Untagged::Int(i64::MIN));
    assert_round_trip(Untagged::Text("x".to_owned()));
    assert_round_trip(Untagged::Pair(false, Some(None)));
    // Enums as map keys.
    let by_enum: BTreeMap<External, u8> = externals.iter().cloned().zip(0..).collect();
    assert_round_trip(by_enum);
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
struct Flattened {
    id: u32,
    #[serde(flatten)]
    meta: Meta,
    #[serde(flatten)]
    rest: BTreeMap<String, serde_json::Value>,
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
struct Meta {
    owner: String,
    note: Option<String>,
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
struct Skips {
    kept: u8,
    #[serde(skip)]
    never: u8,
    #[serde(skip_serializing_if = "Option::is_none")]
    maybe: Option<u8>,
    #[serde(skip_serializing_if = "Vec::is_empty", default)]
    list: Vec<u8>,
}

#[test]
fn flatten_and_skipped_fields_round_trip() {
    let rest = [("extra".to_owned(), json!([1, "two", null]))].into();
    assert_round_trip(Flattened {
        id: 1,
        meta: Meta {
            owner: "ada".to_owned(),
            note: None,
        },
        rest,
    });
    for maybe in [None, Some(3)] {
        assert_round_trip(Skips {
            kept: 1,
            never: 0,
            maybe,
            list: vec![],
        });
    }
    // A skipped field comes back as its default, as the type says.
    let back = round_trip(&Skips {
        kept: 1,
        never: 9,
        maybe: None,
        list: vec![2],
    });
    assert_eq!((back.kept, back.never, back.list), (1, 0, vec![2]));
}

#[test]
fn json_values_round_trip_with_big_numbers() {
    assert_round_trip(json!({
        "u64max": u64::MAX,
        "i64min": i64::MIN,
        "huge": 1.7976931348623157e308,
        "tiny": 5e-324,
        "neg_zero": -0.0,
        "nested": [{"a": null, "b": [true, false, "s"]}, [], {}],
        "text": "ünïcødé",
    }));
    assert_round_trip(serde_json::Value::Null);
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
struct Units;

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
struct Newtype(Vec<(u8, String)>);

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
struct TupleStruct(i32, Option<Units>, Newtype);

#[test]
fn structs_tuples_and_nested_containers_round_trip() {
    assert_round_trip(Units);
    assert_round_trip(());
    assert_round_trip(TupleStruct(
        -1,
        Some(Units),
        Newtype(vec![(1, "a".to_owned())]),
    ));
    type Inner = BTreeMap<(i8, bool), Option<Vec<u16>>>;
    let nested: BTreeMap<String, Vec<Inner>> = [(
        "k".to_owned(),
        vec![[((-1, true), Some(vec![1, 2])), ((0, false), None)].into()],
    )]
    .into();
    assert_round_trip(nested);
    let arrays: [[u8; 3]; 2] = [[1, 2, 3], [4, 5, 6]];
    assert_round_trip(arrays);
}

/// A `Serialize` impl that announces a wrong length, or none.
struct Misreported {
    announced: Option<usize>,
    items: Vec<u32>,
}

impl Serialize for Misreported {
    fn serialize<S: Serializer>(&self, serializer: S) -> Result<S::Ok, S::Error> {
        use serde::ser::SerializeMap;
        let mut outer = serializer.serialize_map(self.announced)?;
        outer.serialize_key("items")?;
        outer.serialize_value(&Seq(self.announced, &self.items))?;
        outer.end()
    }
}

struct Seq<'a>(Option<usize>, &'a [u32]);

impl Serialize for Seq<'_> {
    fn serialize<S: Serializer>(&self, serializer: S) -> Result<S::Ok, S::Error> {
        use serde::ser::SerializeSeq;
        let mut seq = serializer.serialize_seq(self.0)?;
        for item in self.1 {
            seq.serialize_element(item)?;
        }
        seq.end()
    }
}

#[derive(Debug, PartialEq, Serialize, Deserialize)]
struct Items {
    items: Vec<u32>,
}

#[test]
fn a_wrong_or_missing_length_hint_still_records_the_right_count() {
    for announced in [None, Some(0), Some(1), Some(3), Some(500)] {
        let items: Vec<u32> = (0..200).collect();
        let value = Misreported {
            announced,
            items: items.clone(),
        };
        let mut out = Vec::new();
        encode_record(TOOL, marker::OK, &value, &mut out).expect("encode");
        let decoded: Result<Items, ()> =
            <OkOnly as ResultCodec<Items, ()>>::decode(TOOL, &key(), &out).expect("decode");
        assert_eq!(decoded, Ok(Items { items }), "announced {announced:?}");
        assert!(render(&out).is_ok());
    }
}

#[derive(Debug, PartialEq, Serialize, Deserialize)]
struct V1 {
    id: u32,
    count: u8,
}

#[derive(Debug, PartialEq, Serialize, Deserialize)]
struct V2 {
    id: u32,
    count: Option<u8>,
    #[serde(default)]
    tags: Vec<String>,
    added: Option<String>,
}

#[test]
fn records_of_an_older_struct_decode_into_a_compatible_newer_one() {
    let bytes = ok_record(V1 { id: 4, count: 2 });
    let decoded: Result<V2, ()> =
        <OkOnly as ResultCodec<V2, ()>>::decode(TOOL, &key(), &bytes).expect("decode");
    assert_eq!(
        decoded,
        Ok(V2 {
            id: 4,
            count: Some(2),
            tags: vec![],
            added: None
        })
    );
}

#[test]
fn json_records_from_before_version_one_are_a_decode_error_naming_what_they_are() {
    // Development builds recorded JSON before format version 1; no release did, and this idem
    // does not read them: a clear decode error (never a second run), not a misread value.
    let decoded =
        <OkOnly as ResultCodec<V1, ()>>::decode(TOOL, &key(), br#"{"ok":{"id":1,"count":2}}"#);
    match decoded {
        Err(crate::Error::Decode { message, .. }) => {
            assert!(message.contains("JSON record"), "{message}");
        }
        other => panic!("expected a decode error, got {other:?}"),
    }
    use crate::replay::OkAndErr;
    let decoded = <OkAndErr as ResultCodec<u8, String>>::decode(TOOL, &key(), br#"{"err":"no"}"#);
    assert!(
        matches!(decoded, Err(crate::Error::Decode { .. })),
        "{decoded:?}"
    );
}

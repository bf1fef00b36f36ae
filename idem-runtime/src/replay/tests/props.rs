//! Property tests: generated values of a rich type replay equal (floats bit-exact), and
//! arbitrary bytes never make the decoder panic.

use std::collections::BTreeMap;

use proptest::collection::{btree_map, vec};
use proptest::prelude::*;
use serde::{Deserialize, Serialize};
use serde_json::Value;

use super::{Bits, Bits32, TOOL, key, round_trip};
use crate::replay::format::{VERSION, marker};
use crate::replay::{OkOnly, ResultCodec, render};

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
enum Ext {
    Unit,
    Newtype(Option<Option<u8>>),
    Tuple(i16, String),
    Struct { f: Bits, c: char },
}

#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord, Serialize, Deserialize)]
enum Color {
    Red,
    Rgb(u8, u8, u8),
    Named { name: String },
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(tag = "kind")]
enum Internal {
    A,
    B { x: Option<Option<i64>>, f: Bits },
    C(Inner),
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
struct Inner {
    s: String,
    e: Ext,
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(tag = "t", content = "c")]
enum Adjacent {
    A,
    B(Option<Option<String>>),
    C(u8, Bits),
    D { e: Ext },
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(untagged)]
enum Untagged {
    I(i64),
    S(String),
    P(bool, Option<Option<u8>>),
    R { f: Bits, e: Ext },
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
struct Extra {
    owner: String,
    note: Option<String>,
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
struct Rich {
    nested: Option<Option<Option<i32>>>,
    f: Bits,
    g: Bits32,
    grid: BTreeMap<(u8, i16), Vec<u32>>,
    big: u128,
    small: i128,
    #[serde(with = "serde_bytes")]
    blob: Vec<u8>,
    text: Box<str>,
    c: char,
    ext: Vec<Ext>,
    colors: BTreeMap<Color, Option<Option<u64>>>,
    internal: Vec<Internal>,
    adjacent: Vec<Adjacent>,
    untagged: Vec<Untagged>,
    json: Value,
    #[serde(flatten)]
    extra: Extra,
}

fn bits() -> impl Strategy<Value = Bits> {
    prop_oneof![
        any::<u64>().prop_map(f64::from_bits),
        Just(f64::NAN),
        Just(-0.0),
        Just(f64::INFINITY),
        Just(f64::NEG_INFINITY),
        any::<f64>(),
    ]
    .prop_map(Bits)
}

fn ext() -> impl Strategy<Value = Ext> {
    prop_oneof![
        Just(Ext::Unit),
        any::<Option<Option<u8>>>().prop_map(Ext::Newtype),
        (any::<i16>(), ".{0,8}").prop_map(|(i, s)| Ext::Tuple(i, s)),
        (bits(), any::<char>()).prop_map(|(f, c)| Ext::Struct { f, c }),
    ]
}

fn color() -> impl Strategy<Value = Color> {
    prop_oneof![
        Just(Color::Red),
        any::<(u8, u8, u8)>().prop_map(|(r, g, b)| Color::Rgb(r, g, b)),
        ".{0,6}".prop_map(|name| Color::Named { name }),
    ]
}

fn internal() -> impl Strategy<Value = Internal> {
    prop_oneof![
        Just(Internal::A),
        (any::<Option<Option<i64>>>(), bits()).prop_map(|(x, f)| Internal::B { x, f }),
        (".{0,6}", ext()).prop_map(|(s, e)| Internal::C(Inner { s, e })),
    ]
}

fn adjacent() -> impl Strategy<Value = Adjacent> {
    prop_oneof![
        Just(Adjacent::A),
        any::<Option<Option<String>>>().prop_map(Adjacent::B),
        (any::<u8>(), bits()).prop_map(|(n, f)| Adjacent::C(n, f)),
        ext().prop_map(|e| Adjacent::D { e }),
    ]
}

fn untagged() -> impl Strategy<Value = Untagged> {
    prop_oneof![
        any::<i64>().prop_map(Untagged::I),
        ".{0,6}".prop_map(Untagged::S),
        any::<(bool, Option<Option<u8>>)>().prop_map(|(b, o)| Untagged::P(b, o)),
        (bits(), ext()).prop_map(|(f, e)| Untagged::R { f, e }),
    ]
}

fn json() -> impl Strategy<Value = Value> {
    let leaf = prop_oneof![
        Just(Value::Null),
        any::<bool>().prop_map(Value::Bool),
        any::<i64>().prop_map(Value::from),
        any::<u64>().prop_map(Value::from),
        prop_oneof![Just(u64::MAX), Just(i64::MAX as u64)].prop_map(Value::from),
        Just(Value::from(i64::MIN)),
        any::<f64>().prop_filter_map("finite", |f| serde_json::Number::from_f64(f)
            .map(Value::Number)),
        ".{0,8}".prop_map(Value::String),
    ];
    leaf.prop_recursive(3, 24, 4, |inner| {
        prop_oneof![
            vec(inner.clone(), 0..4).prop_map(Value::Array),
            btree_map(".{0,6}", inner, 0..4).prop_map(|m| Value::Object(m.into_iter().collect())),
        ]
    })
}

fn rich() -> impl Strategy<Value = Rich> {
    let scalars = (
        any::<Option<Option<Option<i32>>>>(),
        bits(),
        any::<u32>().prop_map(|b| Bits32(f32::from_bits(b))),
        btree_map(any::<(u8, i16)>(), vec(any::<u32>(), 0..3), 0..4),
        any::<u128>(),
        any::<i128>(),
        vec(any::<u8>(), 0..16),
        ".{0,12}",
        any::<char>(),
    );
    let structured = (
        vec(ext(), 0..3),
        btree_map(color(), any::<Option<Option<u64>>>(), 0..3),
        vec(internal(), 0..3),
        vec(adjacent(), 0..3),
        vec(untagged(), 0..3),
        json(),
        (".{0,6}", any::<Option<String>>()),
    );
    (scalars, structured).prop_map(
        |(
            (nested, f, g, grid, big, small, blob, text, c),
            (ext, colors, internal, adjacent, untagged, json, (owner, note)),
        )| Rich {
            nested,
            f,
            g,
            grid,
            big,
            small,
            blob,
            text: text.into_boxed_str(),
            c,
            ext,
            colors,
            internal,
            adjacent,
            untagged,
            json,
            extra: Extra { owner, note },
        },
    )
}

proptest! {
    #[test]
    fn rich_values_replay_equal(value in rich()) {
        prop_assert_eq!(round_trip(&value), value);
    }

    #[test]
    fn json_values_replay_equal(value in json()) {
        prop_assert_eq!(round_trip(&value), value);
    }

    #[test]
    fn arbitrary_bytes_never_panic(body in vec(any::<u8>(), 0..64)) {
        let mut bytes = vec![VERSION, marker::OK];
        bytes.extend_from_slice(&body);
        let _ = render(&bytes);
        let _ = <OkOnly as ResultCodec<Value, ()>>::decode(TOOL, &key(), &bytes);
        let _ = <OkOnly as ResultCodec<Rich, ()>>::decode(TOOL, &key(), &bytes);
        let _ = <OkOnly as ResultCodec<Rich, ()>>::verify(TOOL, &bytes);
    }
}

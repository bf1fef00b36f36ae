//! A type that asks for a kind of value by name (`deserialize_u64`, `deserialize_struct`, …) is
//! offered what it can take as it was recorded, and refused the rest as `serde_json` refuses it.

use std::collections::BTreeMap;

use serde::{Deserialize, Serialize, Serializer};

use super::{TOOL, assert_round_trip, key, ok_record};
use crate::replay::{OkOnly, ResultCodec};

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
struct Wide {
    id: u32,
    removed: BTreeMap<String, Vec<Option<(u8, String)>>>,
    kind: Kind,
    small: i8,
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
enum Kind {
    Plain,
    Tagged { at: u64 },
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
struct Narrow {
    id: u64,
    kind: Kind,
    small: i64,
}

#[test]
fn fields_the_type_dropped_are_skipped_and_integers_widen() {
    let removed = BTreeMap::from([("a".to_owned(), vec![Some((1, "x".to_owned())), None])]);
    let bytes = ok_record(Wide {
        id: 7,
        removed,
        kind: Kind::Tagged { at: 9 },
        small: -3,
    });
    let decoded: Result<Narrow, ()> =
        <OkOnly as ResultCodec<Narrow, ()>>::decode(TOOL, &key(), &bytes).expect("decode");
    let expected = Narrow {
        id: 7,
        kind: Kind::Tagged { at: 9 },
        small: -3,
    };
    assert_eq!(decoded, Ok(expected));
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
struct Pair(u8, String);

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
struct Named {
    n: u8,
    s: String,
}

#[test]
fn a_struct_reads_from_a_sequence_of_its_fields() {
    let bytes = ok_record(Pair(3, "three".to_owned()));
    let decoded: Result<Named, ()> =
        <OkOnly as ResultCodec<Named, ()>>::decode(TOOL, &key(), &bytes).expect("decode");
    assert_eq!(
        decoded,
        Ok(Named {
            n: 3,
            s: "three".to_owned()
        })
    );
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
struct Counted {
    count: String,
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
struct CountedAsNumber {
    count: u64,
}

#[test]
fn a_value_of_another_kind_than_the_type_asks_for_is_an_invalid_type() {
    let bytes = ok_record(Counted {
        count: "12".to_owned(),
    });
    let decoded = <OkOnly as ResultCodec<CountedAsNumber, ()>>::decode(TOOL, &key(), &bytes);
    match decoded {
        Err(crate::Error::Decode { message, .. }) => assert!(
            message.contains("invalid type: string \"12\", expected u64"),
            "{message}"
        ),
        other => panic!("expected a decode error, got {other:?}"),
    }
}

/// Asks for text, with a visitor that would take a number too (as `deserialize_any` would
/// offer it).
#[derive(Debug, PartialEq, Serialize)]
struct AsksForText(String);

impl<'de> Deserialize<'de> for AsksForText {
    fn deserialize<D: serde::Deserializer<'de>>(deserializer: D) -> Result<Self, D::Error> {
        struct Text;
        impl serde::de::Visitor<'_> for Text {
            type Value = AsksForText;
            fn expecting(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
                f.write_str("text")
            }
            fn visit_str<E>(self, v: &str) -> Result<AsksForText, E> {
                Ok(AsksForText(v.to_owned()))
            }
            fn visit_u64<E>(self, v: u64) -> Result<AsksForText, E> {
                Ok(AsksForText(v.to_string()))
            }
        }
        deserializer.deserialize_str(Text)
    }
}

#[test]
fn a_type_that_asks_by_name_is_answered_as_json_answers_it() {
    let text = ok_record("five".to_owned());
    let decoded = <OkOnly as ResultCodec<AsksForText, ()>>::decode(TOOL, &key(), &text);
    assert_eq!(decoded.expect("decode"), Ok(AsksForText("five".to_owned())));
    // `serde_json` answers `deserialize_str` on a number with an error, not with `visit_u64`:
    // so does the record decoder (only `deserialize_any` offers a value to every method).
    let number = ok_record(5u64);
    match <OkOnly as ResultCodec<AsksForText, ()>>::decode(TOOL, &key(), &number) {
        Err(crate::Error::Decode { message, .. }) => assert!(
            message.contains("invalid type: integer `5`, expected text"),
            "{message}"
        ),
        other => panic!("expected a decode error, got {other:?}"),
    }
    assert!(serde_json::from_str::<AsksForText>("5").is_err());
}

/// A `u8` whose visitor takes only `visit_u8` (as `time`'s `Month` once did).
#[derive(Debug, Clone, PartialEq, Serialize)]
struct OnlyU8(u8);

impl<'de> Deserialize<'de> for OnlyU8 {
    fn deserialize<D: serde::Deserializer<'de>>(deserializer: D) -> Result<Self, D::Error> {
        struct V;
        impl serde::de::Visitor<'_> for V {
            type Value = OnlyU8;
            fn expecting(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
                f.write_str("a u8")
            }
            fn visit_u8<E>(self, v: u8) -> Result<OnlyU8, E> {
                Ok(OnlyU8(v))
            }
        }
        deserializer.deserialize_u8(V)
    }
}

/// Text when it is UTF-8, else bytes; read by a visitor of text that takes bytes too.
#[derive(Debug, Clone, PartialEq)]
struct TextOrBytes(Vec<u8>);

impl Serialize for TextOrBytes {
    fn serialize<S: Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        match std::str::from_utf8(&self.0) {
            Ok(text) => s.serialize_str(text),
            Err(_) => s.serialize_bytes(&self.0),
        }
    }
}

impl<'de> Deserialize<'de> for TextOrBytes {
    fn deserialize<D: serde::Deserializer<'de>>(deserializer: D) -> Result<Self, D::Error> {
        struct V;
        impl serde::de::Visitor<'_> for V {
            type Value = TextOrBytes;
            fn expecting(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
                f.write_str("text or bytes")
            }
            fn visit_str<E>(self, v: &str) -> Result<TextOrBytes, E> {
                Ok(TextOrBytes(v.as_bytes().to_vec()))
            }
            fn visit_bytes<E>(self, v: &[u8]) -> Result<TextOrBytes, E> {
                Ok(TextOrBytes(v.to_vec()))
            }
        }
        deserializer.deserialize_string(V)
    }
}

/// An enum read back through a struct of its variants (the JSON-shaped `from` helper).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(from = "ShapeFields")]
enum Shape {
    Circle(f64),
    Square { side: f64 },
    Line(u8, u8),
    Dot,
}

#[derive(Deserialize)]
struct ShapeFields {
    #[serde(rename = "Circle")]
    circle: Option<f64>,
    #[serde(rename = "Square")]
    square: Option<Side>,
    #[serde(rename = "Line")]
    line: Option<(u8, u8)>,
}

#[derive(Deserialize)]
struct Side {
    side: f64,
}

impl From<ShapeFields> for Shape {
    fn from(fields: ShapeFields) -> Shape {
        match fields {
            ShapeFields {
                circle: Some(r), ..
            } => Shape::Circle(r),
            ShapeFields {
                square: Some(Side { side }),
                ..
            } => Shape::Square { side },
            ShapeFields {
                line: Some((a, b)), ..
            } => Shape::Line(a, b),
            _ => Shape::Dot,
        }
    }
}

#[test]
fn what_a_request_by_name_can_take_is_offered_as_it_was_recorded() {
    // An integer at its recorded width, to a visitor that takes only that width.
    assert_round_trip(vec![OnlyU8(200), OnlyU8(0)]);
    // Bytes to a visitor of text.
    assert_round_trip(vec![
        TextOrBytes(b"plain".to_vec()),
        TextOrBytes(vec![0xff, 0x00]),
    ]);
    // A variant to a struct, as a one-entry map.
    assert_round_trip(vec![
        Shape::Circle(1.5),
        Shape::Square { side: 2.0 },
        Shape::Line(1, 2),
    ]);
    let by_name: std::collections::HashMap<String, u32> = {
        #[derive(Serialize, Deserialize)]
        enum Op {
            Add(u32),
        }
        let bytes = ok_record(Op::Add(4));
        <OkOnly as ResultCodec<_, ()>>::decode(TOOL, &key(), &bytes)
            .expect("decode")
            .expect("ok")
    };
    assert_eq!(
        by_name,
        std::collections::HashMap::from([("Add".to_owned(), 4)])
    );
    // A char recorded, read as text (a result type that became a `String`).
    let bytes = ok_record('x');
    let text: Result<String, ()> =
        <OkOnly as ResultCodec<String, ()>>::decode(TOOL, &key(), &bytes).expect("decode");
    assert_eq!(text, Ok("x".to_owned()));
}

//! A variant's name is offered to the type as a string, through the same requests as a
//! recorded value: as the key of the one-entry map a variant is read as, and as an enum's
//! variant identifier. A type that does not read it does not get it as the value after it.

use std::collections::BTreeMap;
use std::fmt;

use serde::de::{
    self, DeserializeSeed, Deserializer, EnumAccess, MapAccess, SeqAccess, VariantAccess,
};
use serde::{Deserialize, Serialize, Serializer};

use super::{TOOL, key, ok_record};
use crate::Error;
use crate::replay::format::{MAX_DEPTH, VERSION, marker, tag};
use crate::replay::{OkOnly, ResultCodec};

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
enum E {
    A(u8),
    B(Option<u8>),
}

fn decode<T: Serialize + de::DeserializeOwned>(bytes: &[u8]) -> Result<T, Error> {
    <OkOnly as ResultCodec<T, ()>>::decode(TOOL, &key(), bytes).map(|r| r.expect("an Ok record"))
}

#[test]
fn a_variant_read_as_a_map_has_its_name_as_the_key_whatever_the_key_asks_for() {
    let a = ok_record(E::A(7));
    let map: BTreeMap<String, u8> = decode(&a).expect("a string key");
    assert_eq!(map, BTreeMap::from([("A".to_owned(), 7)]));
    let map: BTreeMap<char, u8> = decode(&a).expect("a char key");
    assert_eq!(map, BTreeMap::from([('A', 7)]));
    let value: serde_json::Value = decode(&a).expect("any");
    assert_eq!(value, serde_json::json!({"A": 7}));
    // An optional key is `Some(name)`, even when the content is `None`.
    let b = ok_record(E::B(None));
    let map: BTreeMap<Option<String>, Option<u8>> = decode(&b).expect("an optional key");
    assert_eq!(map, BTreeMap::from([(Some("B".to_owned()), None)]));
    // A key that is not text is refused as `serde_json` refuses it.
    let refused = decode::<BTreeMap<u8, u8>>(&a);
    assert!(
        matches!(&refused, Err(Error::Decode { message, .. }) if message.contains("invalid type: string \"A\"")),
        "{refused:?}"
    );
}

/// A struct read from a variant, as `{name: content}`: a field named as the variant, or not.
#[derive(Debug, PartialEq, Serialize, Deserialize)]
struct Other {
    #[serde(rename = "B")]
    b: Option<u8>,
}

#[test]
fn a_variant_read_as_a_struct_is_the_field_it_names() {
    // A name the struct does not know is skipped with its content.
    let decoded: Other = decode(&ok_record(E::A(7))).expect("skipped");
    assert_eq!(decoded, Other { b: None });
    let decoded: Other = decode(&ok_record(E::B(Some(3)))).expect("read");
    assert_eq!(decoded, Other { b: Some(3) });
}

/// A seed that reads nothing of its value (as a hand-written `Deserialize` may).
struct Nothing;

impl<'de> DeserializeSeed<'de> for Nothing {
    type Value = ();
    fn deserialize<D: Deserializer<'de>>(self, _: D) -> Result<(), D::Error> {
        Ok(())
    }
}

/// How [`Content`] reads a variant: as a map whose key it does not read, as a map whose key
/// it skips, or as an enum whose variant's name it does not read.
const UNREAD_KEY: u8 = 0;
const SKIPPED_KEY: u8 = 1;
const UNREAD_NAME: u8 = 2;

/// A variant's content, read as `HOW` says: never its name.
#[derive(Debug, PartialEq, Serialize)]
struct Content<const HOW: u8>(u8);

impl<'de, const HOW: u8> Deserialize<'de> for Content<HOW> {
    fn deserialize<D: Deserializer<'de>>(deserializer: D) -> Result<Self, D::Error> {
        match HOW {
            UNREAD_NAME => deserializer.deserialize_enum("E", &["A", "B"], ContentVisitor),
            _ => deserializer.deserialize_map(ContentVisitor),
        }
    }
}

struct ContentVisitor<const HOW: u8>;

impl<'de, const HOW: u8> de::Visitor<'de> for ContentVisitor<HOW> {
    type Value = Content<HOW>;
    fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("a variant")
    }
    fn visit_map<A: MapAccess<'de>>(self, mut map: A) -> Result<Content<HOW>, A::Error> {
        match HOW {
            SKIPPED_KEY => map.next_key::<de::IgnoredAny>().map(drop)?,
            _ => map.next_key_seed(Nothing).map(drop)?,
        }
        map.next_value().map(Content)
    }
    fn visit_enum<A: EnumAccess<'de>>(self, data: A) -> Result<Content<HOW>, A::Error> {
        let ((), variant) = data.variant_seed(Nothing)?;
        variant.newtype_variant().map(Content)
    }
}

#[test]
fn a_name_the_type_does_not_read_is_not_offered_as_the_content() {
    let a = ok_record(E::A(7));
    assert_eq!(
        decode::<Content<UNREAD_KEY>>(&a).expect("a map"),
        Content(7)
    );
    assert_eq!(
        decode::<Content<SKIPPED_KEY>>(&a).expect("skipped"),
        Content(7)
    );
    assert_eq!(
        decode::<Content<UNREAD_NAME>>(&a).expect("an enum"),
        Content(7)
    );
}

/// Any unit variant, its name not read and no content asked for (which a unit variant allows).
#[derive(Debug, PartialEq)]
struct AnyUnit;

impl Serialize for AnyUnit {
    fn serialize<S: Serializer>(&self, serializer: S) -> Result<S::Ok, S::Error> {
        serializer.serialize_unit_variant("E", 0, "A")
    }
}

impl<'de> Deserialize<'de> for AnyUnit {
    fn deserialize<D: Deserializer<'de>>(deserializer: D) -> Result<Self, D::Error> {
        struct Unread;
        impl<'de> de::Visitor<'de> for Unread {
            type Value = AnyUnit;
            fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
                f.write_str("a unit variant")
            }
            fn visit_enum<A: EnumAccess<'de>>(self, data: A) -> Result<AnyUnit, A::Error> {
                data.variant_seed(Nothing).map(|_| AnyUnit)
            }
        }
        deserializer.deserialize_enum("E", &["A"], Unread)
    }
}

#[test]
fn a_variant_name_the_type_never_reads_is_not_the_next_value() {
    let decoded = decode::<(AnyUnit, u8)>(&ok_record((AnyUnit, 5u8)));
    assert!(matches!(decoded, Ok((AnyUnit, 5))), "{decoded:?}");
}

/// A unit enum, as a map's key.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Serialize, Deserialize)]
enum K {
    A,
}

/// A `BTreeMap<K, u8>` read inside `MAX_DEPTH - 1` one-element sequences.
#[derive(Debug, PartialEq, Serialize)]
struct Deep(BTreeMap<K, u8>);

/// Reads a `BTreeMap<K, u8>` inside `.0` one-element sequences.
struct Level(usize);

impl<'de> DeserializeSeed<'de> for Level {
    type Value = BTreeMap<K, u8>;
    fn deserialize<D: Deserializer<'de>>(self, deserializer: D) -> Result<Self::Value, D::Error> {
        if self.0 == 0 {
            return BTreeMap::deserialize(deserializer);
        }
        struct Outer(usize);
        impl<'de> de::Visitor<'de> for Outer {
            type Value = BTreeMap<K, u8>;
            fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
                f.write_str("a sequence")
            }
            fn visit_seq<A: SeqAccess<'de>>(self, mut seq: A) -> Result<Self::Value, A::Error> {
                seq.next_element_seed(Level(self.0 - 1))?
                    .ok_or_else(|| de::Error::custom("empty"))
            }
        }
        deserializer.deserialize_seq(Outer(self.0))
    }
}

impl<'de> Deserialize<'de> for Deep {
    fn deserialize<D: Deserializer<'de>>(deserializer: D) -> Result<Self, D::Error> {
        Level(MAX_DEPTH - 1).deserialize(deserializer).map(Deep)
    }
}

/// A variant's name read as an enum (a map's key) is not a level deeper: it has no content.
#[test]
fn a_variant_name_read_as_an_enum_key_fits_at_the_depth_limit() {
    let mut bytes = vec![VERSION, marker::OK];
    for _ in 0..MAX_DEPTH - 1 {
        bytes.extend_from_slice(&[tag::SEQ, 1]);
    }
    // `E::A(7)`, read as the map `{A: 7}` whose key is an enum.
    bytes.extend_from_slice(&[tag::NEWTYPE_VARIANT, 1, b'A', tag::U8, 7]);
    let decoded = decode::<Deep>(&bytes);
    assert!(
        matches!(&decoded, Ok(Deep(map)) if *map == BTreeMap::from([(K::A, 7)])),
        "{decoded:?}"
    );
}

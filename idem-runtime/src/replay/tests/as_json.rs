//! Differential: variants read without their enum (as `serde_json::Value`, an untagged enum,
//! a struct named after them, maps with text or optional keys) decode as `serde_json` reads
//! the same value's JSON: both succeed with equal values, or both refuse.

use std::collections::BTreeMap;

use proptest::collection::vec;
use proptest::prelude::*;
use serde::de::DeserializeOwned;
use serde::{Deserialize, Serialize};
use serde_json::Value;

use super::{TOOL, key, ok_record};
use crate::replay::{OkOnly, ResultCodec};

/// Every kind of variant, nested; no floats (`props.rs`'s `Ext` has one: JSON has no `NaN`).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
enum Variants {
    Unit,
    Newtype(Option<Option<u8>>),
    Tuple(i16, String),
    Struct { f: i32, c: char },
    Nested(Box<Option<Variants>>),
}

#[derive(Debug, PartialEq, Serialize, Deserialize)]
struct AsFields {
    #[serde(rename = "Newtype")]
    n: Option<Value>,
    #[serde(rename = "Tuple")]
    t: Option<(i16, String)>,
    #[serde(rename = "Struct")]
    s: Option<BTreeMap<String, Value>>,
    #[serde(rename = "Nested")]
    nested: Option<Option<Value>>,
}

#[derive(Debug, PartialEq, Serialize, Deserialize)]
#[serde(untagged)]
enum Loose {
    Name(String),
    Map(BTreeMap<Option<String>, Value>),
}

fn variants() -> impl Strategy<Value = Variants> {
    let leaf = prop_oneof![
        Just(Variants::Unit),
        any::<Option<u8>>().prop_map(|o| Variants::Newtype(o.map(Some))),
        (any::<i16>(), ".{0,4}").prop_map(|(i, s)| Variants::Tuple(i, s)),
        (any::<i32>(), any::<char>()).prop_map(|(f, c)| Variants::Struct { f, c }),
    ];
    leaf.prop_recursive(3, 8, 1, |inner| {
        proptest::option::of(inner).prop_map(|e| Variants::Nested(Box::new(e)))
    })
}

/// `value`'s record decoded as `T`, and its JSON read by `serde_json` as `T`.
fn both<V: Serialize + DeserializeOwned + Clone, T: Serialize + DeserializeOwned>(
    value: &V,
) -> (Result<T, String>, Result<T, String>) {
    let record = ok_record(value.clone());
    let ours = match <OkOnly as ResultCodec<T, ()>>::decode(TOOL, &key(), &record) {
        Ok(Ok(decoded)) => Ok(decoded),
        Ok(Err(())) => Err("an Ok record decoded as Err".to_owned()),
        Err(e) => Err(e.to_string()),
    };
    let json = serde_json::to_string(value).expect("JSON");
    (
        ours,
        serde_json::from_str::<T>(&json).map_err(|e| e.to_string()),
    )
}

fn same<T: std::fmt::Debug + PartialEq>(
    (ours, json): (Result<T, String>, Result<T, String>),
) -> Result<(), TestCaseError> {
    match (&ours, &json) {
        (Ok(a), Ok(b)) => prop_assert_eq!(a, b),
        (Err(_), Err(_)) => {}
        _ => prop_assert!(false, "record {:?}, JSON {:?}", ours, json),
    }
    Ok(())
}

proptest! {
    #[test]
    fn variants_read_without_their_enum_decode_as_their_json(v in vec(variants(), 0..4)) {
        same(both::<_, Value>(&v))?;
        same(both::<_, Vec<Loose>>(&v))?;
        same(both::<_, Vec<AsFields>>(&v))?;
        same(both::<_, Vec<BTreeMap<String, Value>>>(&v))?;
        same(both::<_, Vec<BTreeMap<Option<String>, Option<Value>>>>(&v))?;
        same(both::<_, Vec<Variants>>(&v))?;
    }
}

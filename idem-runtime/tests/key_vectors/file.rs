//! The format of `tests/vectors/keys.json` (shared with `tests/feature-probe`).

use serde::{Deserialize, Serialize};
use serde_json::Value;

#[derive(Serialize, Deserialize, PartialEq, Debug)]
pub struct File {
    pub comment: String,
    pub encoding_version: u8,
    pub contexts: Contexts,
    pub key_vectors: Vec<KeyVector>,
    pub value_vectors: Vec<ValueVector>,
}

#[derive(Serialize, Deserialize, PartialEq, Debug)]
pub struct Contexts {
    pub key: String,
    pub fingerprint: String,
}

#[derive(Serialize, Deserialize, PartialEq, Debug)]
pub struct KeyVector {
    pub id: String,
    pub description: String,
    pub namespace: String,
    pub turn_id: String,
    pub tool: String,
    pub version: u32,
    /// The arguments in the key, as the Rust value the vector is computed from.
    pub rust_args: String,
    /// The same arguments as JSON (an object: argument name -> value).
    pub args: Value,
    /// Arguments in the fingerprint only (`skip(..)`), as JSON.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub fingerprint_only_args: Option<Value>,
    /// A caller-supplied key (`#[key]`): key derived in caller-key mode.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub caller_key: Option<String>,
    /// Whether hashing the JSON values (`serde_json::Value`) gives the same key and fingerprint
    /// as the typed Rust values.
    pub json_equivalent: bool,
    pub key: String,
    pub fingerprint: String,
}

#[derive(Serialize, Deserialize, PartialEq, Debug)]
pub struct ValueVector {
    pub id: String,
    pub description: String,
    /// The Rust value.
    pub rust: String,
    /// The value as JSON, when JSON can express it.
    #[serde(
        default,
        skip_serializing_if = "Option::is_none",
        deserialize_with = "present"
    )]
    pub json: Option<Value>,
    /// Whether encoding the JSON value gives the same bytes.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub json_equivalent: Option<bool>,
    /// Hex of `encode_value(rust value)`.
    pub encoding: String,
}

/// A present field is `Some`, even when it is JSON `null`.
fn present<'de, D: serde::Deserializer<'de>>(d: D) -> Result<Option<Value>, D::Error> {
    Value::deserialize(d).map(Some)
}

//! Test vectors of the key derivation: `tests/vectors/keys.json` at the workspace root.
//!
//! The vectors are defined here, each with the typed Rust value it stands for (JSON cannot express
//! sets, enums, `Option`, NaN, integer widths, …). The test recomputes every vector and compares it
//! with the file; many are also recomputed by an independent, minimal re-implementation of the
//! spec (plain `blake3` calls on hand-built material, no use of the crate's encoder) so the file
//! is not only self-referential.
//!
//! After an intended change of the encoding (which must bump `ENCODING_VERSION` and the contexts),
//! regenerate the file with `IDEM_UPDATE_VECTORS=1 cargo test -p idem-tools-runtime --test key_vectors`.

use std::collections::{BTreeMap, BTreeSet, HashMap, HashSet};

use idem_tools_runtime::key::{
    ArgsDigest, ENCODING_VERSION, FINGERPRINT_CONTEXT, Fingerprint, KEY_CONTEXT, Key, Unordered,
    derive_key, encode_value, fingerprint,
};
use serde::ser::SerializeStruct;
use serde::{Deserialize, Serialize};
use serde_json::{Value, json};

const PATH: &str = concat!(env!("CARGO_MANIFEST_DIR"), "/../tests/vectors/keys.json");

// ---------------------------------------------------------------------------------------------
// File format.

#[derive(Serialize, Deserialize, PartialEq, Debug)]
struct File {
    comment: String,
    encoding_version: u8,
    contexts: Contexts,
    key_vectors: Vec<KeyVector>,
    value_vectors: Vec<ValueVector>,
}

#[derive(Serialize, Deserialize, PartialEq, Debug)]
struct Contexts {
    key: String,
    fingerprint: String,
}

#[derive(Serialize, Deserialize, PartialEq, Debug)]
struct KeyVector {
    id: String,
    description: String,
    namespace: String,
    turn_id: String,
    tool: String,
    version: u32,
    /// The arguments in the key, as the Rust value the vector is computed from.
    rust_args: String,
    /// The same arguments as JSON (an object: argument name -> value).
    args: Value,
    /// Arguments in the fingerprint only (`skip(..)`), as JSON.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    fingerprint_only_args: Option<Value>,
    /// A caller-supplied key (`#[key]`): key derived in caller-key mode.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    caller_key: Option<String>,
    /// Whether hashing the JSON values (`serde_json::Value`) gives the same key and fingerprint
    /// as the typed Rust values.
    json_equivalent: bool,
    key: String,
    fingerprint: String,
}

#[derive(Serialize, Deserialize, PartialEq, Debug)]
struct ValueVector {
    id: String,
    description: String,
    /// The Rust value.
    rust: String,
    /// The value as JSON, when JSON can express it.
    #[serde(
        default,
        skip_serializing_if = "Option::is_none",
        deserialize_with = "present"
    )]
    json: Option<Value>,
    /// Whether encoding the JSON value gives the same bytes.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    json_equivalent: Option<bool>,
    /// Hex of `encode_value(rust value)`.
    encoding: String,
}

/// A present field is `Some`, even when it is JSON `null`.
fn present<'de, D: serde::Deserializer<'de>>(d: D) -> Result<Option<Value>, D::Error> {
    Value::deserialize(d).map(Some)
}

// ---------------------------------------------------------------------------------------------
// Typed values used by the vectors.

#[derive(Serialize)]
struct SendEmail<'a> {
    to: &'a str,
    subject: &'a str,
}

#[derive(Serialize)]
struct NoArgs {}

#[derive(Serialize)]
struct Amount32 {
    amount: u32,
}

#[derive(Serialize)]
struct Amount64 {
    amount: i64,
}

#[derive(Serialize)]
struct Delta {
    delta: i64,
}

#[derive(Serialize)]
struct Big {
    big: u128,
    small: i128,
}

#[derive(Serialize)]
struct X {
    x: f64,
}

#[derive(Serialize)]
struct Ratio {
    ratio: f32,
}

#[derive(Serialize)]
struct Name<'a> {
    name: &'a str,
}

#[derive(Serialize)]
struct Cc<'a> {
    to: &'a str,
    cc: Option<&'a str>,
}

#[derive(Serialize)]
struct CcSkipped<'a> {
    to: &'a str,
    #[serde(skip_serializing_if = "Option::is_none")]
    cc: Option<&'a str>,
}

#[derive(Serialize)]
struct To<'a> {
    to: &'a str,
}

#[derive(Serialize)]
struct User<'a> {
    id: u64,
    name: &'a str,
}

#[derive(Serialize)]
struct Nested<'a> {
    user: User<'a>,
    tags: Vec<&'a str>,
}

#[derive(Serialize)]
struct Labels<T> {
    labels: T,
}

#[derive(Serialize)]
struct Scores {
    scores: HashMap<String, u32>,
}

#[derive(Serialize)]
enum Priority {
    #[allow(dead_code)]
    Low,
    High,
}

#[derive(Serialize)]
struct Ticket {
    priority: Priority,
}

#[derive(Serialize)]
enum Action<'a> {
    Transfer {
        from: &'a str,
        to: &'a str,
        cents: u64,
    },
    Refund(u64),
    Move(i32, i32),
}

#[derive(Serialize)]
struct Act<'a> {
    action: Action<'a>,
}

struct Bytes<'a>(&'a [u8]);

impl Serialize for Bytes<'_> {
    fn serialize<S: serde::Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        s.serialize_bytes(self.0)
    }
}

#[derive(Serialize)]
struct Blob<'a> {
    blob: Bytes<'a>,
}

#[derive(Serialize)]
struct Initial {
    initial: char,
}

#[derive(Serialize)]
struct Marker {
    marker: (),
}

#[derive(Serialize)]
struct Point {
    point: (u8, i32),
}

#[derive(Serialize)]
struct ById<'a> {
    by_id: BTreeMap<u32, &'a str>,
}

#[derive(Serialize)]
struct UnitStruct;

#[derive(Serialize)]
struct Meters(u32);

#[derive(Serialize)]
struct Pair {
    a: u8,
    b: bool,
}

/// What `serde_json::Number` serializes as with the `arbitrary_precision` feature.
struct ApNumber(&'static str);

impl Serialize for ApNumber {
    fn serialize<S: serde::Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        const TOKEN: &str = "$serde_json::private::Number";
        let mut st = s.serialize_struct(TOKEN, 1)?;
        st.serialize_field(TOKEN, self.0)?;
        st.end()
    }
}

/// What `serde_json::value::RawValue` serializes as.
struct Raw(&'static str);

impl Serialize for Raw {
    fn serialize<S: serde::Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        const TOKEN: &str = "$serde_json::private::RawValue";
        let mut st = s.serialize_struct(TOKEN, 1)?;
        st.serialize_field(TOKEN, self.0)?;
        st.end()
    }
}

#[derive(Serialize)]
struct Payment {
    amount: ApNumber,
    rate: ApNumber,
    big: ApNumber,
    zero: ApNumber,
    extra: Raw,
}

#[derive(Serialize)]
#[serde(tag = "type")]
enum Internal {
    Circle { r: u8 },
}

#[derive(Serialize)]
#[serde(tag = "t", content = "c")]
enum Adjacent {
    Scale(u8),
}

#[derive(Serialize)]
#[serde(untagged)]
enum Untagged {
    #[allow(dead_code)]
    Text(&'static str),
    Number(u8),
}

// ---------------------------------------------------------------------------------------------
// Vector definitions.

struct KeyCase {
    id: &'static str,
    description: &'static str,
    namespace: &'static str,
    turn_id: &'static str,
    tool: &'static str,
    version: u32,
    rust_args: &'static str,
    args: Value,
    fingerprint_only_args: Option<Value>,
    caller_key: Option<&'static str>,
    /// Key and fingerprint from the typed Rust values.
    typed: fn(&KeyCase) -> (Key, Fingerprint),
}

/// Key and fingerprint of a case whose arguments are all key arguments, given as one record.
fn record<T: Serialize>(c: &KeyCase, args: &T) -> (Key, Fingerprint) {
    (
        derive_key(c.namespace, c.turn_id, c.tool, c.version, args).expect("encodes"),
        fingerprint(c.tool, c.version, args).expect("encodes"),
    )
}

/// Key and fingerprint computed from the JSON form through `ArgsDigest`.
fn from_json(c: &KeyCase) -> (Key, Fingerprint) {
    let mut d = ArgsDigest::new("vector");
    for (name, value) in c.args.as_object().expect("args is an object") {
        d.arg(name, value).expect("encodes");
    }
    if let Some(fp) = &c.fingerprint_only_args {
        for (name, value) in fp.as_object().expect("object") {
            d.fingerprint_arg(name, value).expect("encodes");
        }
    }
    if let Some(k) = c.caller_key {
        d.caller_key(k);
    }
    d.finish(c.namespace, c.turn_id, c.tool, c.version)
}

fn kc(
    id: &'static str,
    description: &'static str,
    rust_args: &'static str,
    args: Value,
    typed: fn(&KeyCase) -> (Key, Fingerprint),
) -> KeyCase {
    KeyCase {
        id,
        description,
        namespace: "acme",
        turn_id: "turn-0001",
        tool: "tool",
        version: 1,
        rust_args,
        args,
        fingerprint_only_args: None,
        caller_key: None,
        typed,
    }
}

fn key_cases() -> Vec<KeyCase> {
    vec![
        KeyCase {
            tool: "send_email",
            ..kc(
                "struct_basic",
                "A struct of two strings; equals the JSON object with the same entries.",
                r#"SendEmail { to: "ann@example.com", subject: "Hello" }"#,
                json!({"to": "ann@example.com", "subject": "Hello"}),
                |c| {
                    record(
                        c,
                        &SendEmail {
                            to: "ann@example.com",
                            subject: "Hello",
                        },
                    )
                },
            )
        },
        kc(
            "no_args",
            "A tool without arguments: an empty record.",
            "NoArgs {}",
            json!({}),
            |c| record(c, &NoArgs {}),
        ),
        kc(
            "int_u32",
            "u32 5; same key as int_i64 (integer width and signedness do not matter).",
            "Amount32 { amount: 5u32 }",
            json!({"amount": 5}),
            |c| record(c, &Amount32 { amount: 5 }),
        ),
        kc(
            "int_i64",
            "i64 5; same key as int_u32.",
            "Amount64 { amount: 5i64 }",
            json!({"amount": 5}),
            |c| record(c, &Amount64 { amount: 5 }),
        ),
        kc(
            "int_negative",
            "A negative integer: sign byte 0x01 and the magnitude.",
            "Delta { delta: -42i64 }",
            json!({"delta": -42}),
            |c| record(c, &Delta { delta: -42 }),
        ),
        kc(
            "int_128",
            "u128::MAX and i128::MIN (not expressible in JSON; the JSON shows them as strings).",
            "Big { big: u128::MAX, small: i128::MIN }",
            json!({"big": u128::MAX.to_string(), "small": i128::MIN.to_string()}),
            |c| {
                record(
                    c,
                    &Big {
                        big: u128::MAX,
                        small: i128::MIN,
                    },
                )
            },
        ),
        kc(
            "float_negative_zero",
            "-0.0 is encoded as +0.0: same key as float_positive_zero.",
            "X { x: -0.0f64 }",
            json!({"x": -0.0}),
            |c| record(c, &X { x: -0.0 }),
        ),
        kc(
            "float_positive_zero",
            "+0.0.",
            "X { x: 0.0f64 }",
            json!({"x": 0.0}),
            |c| record(c, &X { x: 0.0 }),
        ),
        kc(
            "float_nan",
            "Every NaN is encoded as 0x7ff8000000000000 (JSON has no NaN; shown as null).",
            "X { x: -f64::NAN }",
            json!({"x": null}),
            |c| record(c, &X { x: -f64::NAN }),
        ),
        kc(
            "float_f32_widened",
            "f32 1.5 is widened exactly to f64: equals the JSON number 1.5.",
            "Ratio { ratio: 1.5f32 }",
            json!({"ratio": 1.5}),
            |c| record(c, &Ratio { ratio: 1.5 }),
        ),
        KeyCase {
            namespace: "équipe-東京",
            turn_id: "tour-🦀-1",
            ..kc(
                "unicode",
                "Non-ASCII strings in the namespace, turn id and arguments (lengths in bytes).",
                r#"Name { name: "Zoë 🦀 日本" }"#,
                json!({"name": "Zoë 🦀 日本"}),
                |c| {
                    record(
                        c,
                        &Name {
                            name: "Zoë 🦀 日本",
                        },
                    )
                },
            )
        },
        kc(
            "option_none",
            "None (0x01) differs from JSON null, which serde_json serializes as unit (0x00).",
            r#"Cc { to: "ann", cc: None }"#,
            json!({"to": "ann", "cc": null}),
            |c| {
                record(
                    c,
                    &Cc {
                        to: "ann",
                        cc: None,
                    },
                )
            },
        ),
        kc(
            "option_some",
            "Some(x) is 0x02 followed by x: differs from plain x.",
            r#"Cc { to: "ann", cc: Some("bob") }"#,
            json!({"to": "ann", "cc": "bob"}),
            |c| {
                record(
                    c,
                    &Cc {
                        to: "ann",
                        cc: Some("bob"),
                    },
                )
            },
        ),
        kc(
            "option_skipped",
            "A field skipped with skip_serializing_if is absent: same key as field_absent.",
            r#"CcSkipped { to: "ann", cc: None }"#,
            json!({"to": "ann"}),
            |c| {
                record(
                    c,
                    &CcSkipped {
                        to: "ann",
                        cc: None,
                    },
                )
            },
        ),
        kc(
            "field_absent",
            "A struct with only `to`.",
            r#"To { to: "ann" }"#,
            json!({"to": "ann"}),
            |c| record(c, &To { to: "ann" }),
        ),
        kc(
            "nested",
            "A nested struct and a vector of strings.",
            r#"Nested { user: User { id: 7, name: "ann" }, tags: vec!["a", "b"] }"#,
            json!({"user": {"id": 7, "name": "ann"}, "tags": ["a", "b"]}),
            |c| {
                record(
                    c,
                    &Nested {
                        user: User { id: 7, name: "ann" },
                        tags: vec!["a", "b"],
                    },
                )
            },
        ),
        kc(
            "nested_reordered_vec",
            "As `nested` with the vector reversed: sequences are ordered, so the key differs.",
            r#"Nested { user: User { id: 7, name: "ann" }, tags: vec!["b", "a"] }"#,
            json!({"user": {"id": 7, "name": "ann"}, "tags": ["b", "a"]}),
            |c| {
                record(
                    c,
                    &Nested {
                        user: User { id: 7, name: "ann" },
                        tags: vec!["b", "a"],
                    },
                )
            },
        ),
        kc(
            "hashset",
            "A HashSet is a set (detected by type name): same key as btreeset and unordered_vec.",
            r#"Labels { labels: HashSet::from(["x", "y", "z"]) }"#,
            json!({"labels": ["x", "y", "z"]}),
            |c| {
                record(
                    c,
                    &Labels {
                        labels: HashSet::from(["x", "y", "z"]),
                    },
                )
            },
        ),
        kc(
            "btreeset",
            "A BTreeSet is a set.",
            r#"Labels { labels: BTreeSet::from(["z", "y", "x"]) }"#,
            json!({"labels": ["x", "y", "z"]}),
            |c| {
                record(
                    c,
                    &Labels {
                        labels: BTreeSet::from(["z", "y", "x"]),
                    },
                )
            },
        ),
        kc(
            "unordered_vec",
            "A Vec wrapped in Unordered is a set.",
            r#"Labels { labels: Unordered(vec!["y", "z", "x"]) }"#,
            json!({"labels": ["y", "z", "x"]}),
            |c| {
                record(
                    c,
                    &Labels {
                        labels: Unordered(vec!["y", "z", "x"]),
                    },
                )
            },
        ),
        kc(
            "hashmap",
            "A HashMap<String, u32> equals the JSON object with the same entries.",
            r#"Scores { scores: HashMap::from([("ann", 3), ("bob", 5), ("cy", 0)]) }"#,
            json!({"scores": {"ann": 3, "bob": 5, "cy": 0}}),
            |c| {
                record(
                    c,
                    &Scores {
                        scores: [("ann", 3), ("bob", 5), ("cy", 0)]
                            .into_iter()
                            .map(|(k, v)| (k.to_owned(), v))
                            .collect(),
                    },
                )
            },
        ),
        kc(
            "map_int_keys",
            "Integer map keys are integers (JSON object keys are strings, so JSON differs).",
            r#"ById { by_id: BTreeMap::from([(1, "a"), (2, "b")]) }"#,
            json!({"by_id": {"1": "a", "2": "b"}}),
            |c| {
                record(
                    c,
                    &ById {
                        by_id: BTreeMap::from([(1, "a"), (2, "b")]),
                    },
                )
            },
        ),
        kc(
            "enum_unit_variant",
            "A unit variant by name (0x0E); differs from the string \"High\".",
            "Ticket { priority: Priority::High }",
            json!({"priority": "High"}),
            |c| {
                record(
                    c,
                    &Ticket {
                        priority: Priority::High,
                    },
                )
            },
        ),
        kc(
            "enum_struct_variant",
            "A struct variant: name, then its fields as an unordered record.",
            r#"Act { action: Action::Transfer { from: "a", to: "b", cents: 100 } }"#,
            json!({"action": {"Transfer": {"from": "a", "to": "b", "cents": 100}}}),
            |c| {
                record(
                    c,
                    &Act {
                        action: Action::Transfer {
                            from: "a",
                            to: "b",
                            cents: 100,
                        },
                    },
                )
            },
        ),
        kc(
            "enum_newtype_variant",
            "A newtype variant: name, then the value.",
            "Act { action: Action::Refund(100) }",
            json!({"action": {"Refund": 100}}),
            |c| {
                record(
                    c,
                    &Act {
                        action: Action::Refund(100),
                    },
                )
            },
        ),
        kc(
            "enum_tuple_variant",
            "A tuple variant: name, the elements in order, 0x0B.",
            "Act { action: Action::Move(3, -4) }",
            json!({"action": {"Move": [3, -4]}}),
            |c| {
                record(
                    c,
                    &Act {
                        action: Action::Move(3, -4),
                    },
                )
            },
        ),
        kc(
            "bytes",
            "serialize_bytes (0x08) differs from a sequence of u8 (JSON shows the sequence).",
            r#"Blob { blob: Bytes(b"\x00\x01\xff") }"#,
            json!({"blob": [0, 1, 255]}),
            |c| {
                record(
                    c,
                    &Blob {
                        blob: Bytes(b"\x00\x01\xff"),
                    },
                )
            },
        ),
        kc(
            "char",
            "A char is a one-character string.",
            "Initial { initial: 'é' }",
            json!({"initial": "é"}),
            |c| record(c, &Initial { initial: 'é' }),
        ),
        kc(
            "unit",
            "The unit value (0x00); JSON null is serialized as unit by serde_json.",
            "Marker { marker: () }",
            json!({"marker": null}),
            |c| record(c, &Marker { marker: () }),
        ),
        kc(
            "tuple",
            "A tuple is an ordered sequence.",
            "Point { point: (1u8, -2i32) }",
            json!({"point": [1, -2]}),
            |c| record(c, &Point { point: (1, -2) }),
        ),
        kc(
            "long_string",
            "A 5000-byte string argument: encoded by its length and BLAKE3 hash.",
            r#"Name { name: &"ab".repeat(2500) }"#,
            json!({"name": "ab".repeat(2500)}),
            |c| {
                record(
                    c,
                    &Name {
                        name: &"ab".repeat(2500),
                    },
                )
            },
        ),
        kc(
            "json_arbitrary_precision",
            "JSON numbers and a raw JSON value as serde_json serializes them with its \
             arbitrary_precision and raw_value features (token structs): same key as the plain \
             JSON; -0 and integers beyond u64 are floats.",
            r##"Payment { amount: ApNumber("1250"), rate: ApNumber("0.25"), big: ApNumber("18446744073709551616"), zero: ApNumber("-0"), extra: Raw(r#"{"x": [1, 2.0]}"#) }"##,
            json!({"amount": 1250, "rate": 0.25, "big": 18446744073709551616.0, "zero": 0.0, "extra": {"x": [1, 2.0]}}),
            |c| {
                record(
                    c,
                    &Payment {
                        amount: ApNumber("1250"),
                        rate: ApNumber("0.25"),
                        big: ApNumber("18446744073709551616"),
                        zero: ApNumber("-0"),
                        extra: Raw(r#"{"x": [1, 2.0]}"#),
                    },
                )
            },
        ),
        KeyCase {
            tool: "send_email",
            version: 2,
            ..kc(
                "version_2",
                "As struct_basic with tool version 2: a different key and fingerprint.",
                r#"SendEmail { to: "ann@example.com", subject: "Hello" }"#,
                json!({"to": "ann@example.com", "subject": "Hello"}),
                |c| {
                    record(
                        c,
                        &SendEmail {
                            to: "ann@example.com",
                            subject: "Hello",
                        },
                    )
                },
            )
        },
        KeyCase {
            tool: "send_email",
            fingerprint_only_args: Some(json!({"trace_id": "tr-9"})),
            ..kc(
                "fingerprint_only_arg",
                "As struct_basic plus a skipped argument: same key as struct_basic, other \
                 fingerprint.",
                r#"SendEmail { to: "ann@example.com", subject: "Hello" } + skip(trace_id: "tr-9")"#,
                json!({"to": "ann@example.com", "subject": "Hello"}),
                |c| {
                    let mut d = ArgsDigest::new("send_email");
                    d.arg("subject", "Hello").expect("encodes");
                    d.fingerprint_arg("trace_id", "tr-9").expect("encodes");
                    d.arg("to", "ann@example.com").expect("encodes");
                    d.finish(c.namespace, c.turn_id, c.tool, c.version)
                },
            )
        },
        KeyCase {
            tool: "charge",
            caller_key: Some("order-123"),
            ..kc(
                "caller_key",
                "Caller-key mode: key from namespace, tool, version and the caller key only.",
                r#"#[key] "order-123", amount: 500u64"#,
                json!({"amount": 500}),
                |c| {
                    let mut d = ArgsDigest::new("charge");
                    d.caller_key("order-123");
                    d.arg("amount", &500u64).expect("encodes");
                    d.finish(c.namespace, c.turn_id, c.tool, c.version)
                },
            )
        },
        KeyCase {
            tool: "charge",
            turn_id: "turn-0002",
            caller_key: Some("order-123"),
            ..kc(
                "caller_key_other_turn_and_args",
                "As caller_key in another turn with other args: same key, other fingerprint.",
                r#"#[key] "order-123", amount: 700u32"#,
                json!({"amount": 700}),
                |c| {
                    let mut d = ArgsDigest::new("charge");
                    d.arg("amount", &700u32).expect("encodes");
                    d.caller_key("order-123");
                    d.finish(c.namespace, c.turn_id, c.tool, c.version)
                },
            )
        },
    ]
}

struct ValueCase {
    id: &'static str,
    description: &'static str,
    rust: &'static str,
    json: Option<Value>,
    encode: fn() -> Vec<u8>,
}

fn enc<T: Serialize + ?Sized>(v: &T) -> Vec<u8> {
    encode_value(v).expect("encodes")
}

fn vc(
    id: &'static str,
    description: &'static str,
    rust: &'static str,
    json: Option<Value>,
    encode: fn() -> Vec<u8>,
) -> ValueCase {
    ValueCase {
        id,
        description,
        rust,
        json,
        encode,
    }
}

fn value_cases() -> Vec<ValueCase> {
    vec![
        vc("unit", "unit", "()", Some(json!(null)), || enc(&())),
        vc("none", "None", "None::<u8>", None, || enc(&None::<u8>)),
        vc("some_unit", "Some(())", "Some(())", None, || enc(&Some(()))),
        vc("false", "false", "false", Some(json!(false)), || {
            enc(&false)
        }),
        vc("true", "true", "true", Some(json!(true)), || enc(&true)),
        vc("u32_5", "u32 5", "5u32", Some(json!(5)), || enc(&5u32)),
        vc("i8_minus_1", "i8 -1", "-1i8", Some(json!(-1)), || {
            enc(&-1i8)
        }),
        vc("u128_max", "u128::MAX", "u128::MAX", None, || {
            enc(&u128::MAX)
        }),
        vc("i128_min", "i128::MIN", "i128::MIN", None, || {
            enc(&i128::MIN)
        }),
        vc("f64_1_5", "f64 1.5", "1.5f64", Some(json!(1.5)), || {
            enc(&1.5f64)
        }),
        vc(
            "f64_neg_zero",
            "-0.0 as +0.0",
            "-0.0f64",
            Some(json!(-0.0)),
            || enc(&-0.0f64),
        ),
        vc(
            "f64_nan",
            "a NaN with payload and sign",
            "f64::from_bits(0xfff0_0000_0000_0001)",
            None,
            || enc(&f64::from_bits(0xfff0_0000_0000_0001)),
        ),
        vc(
            "f32_0_1",
            "f32 0.1 widened exactly (not the f64 0.1)",
            "0.1f32",
            None,
            || enc(&0.1f32),
        ),
        vc(
            "str_empty",
            "empty string",
            r#""""#,
            Some(json!("")),
            || enc(""),
        ),
        vc(
            "str_unicode",
            "UTF-8 string; length in bytes",
            r#""héllo""#,
            Some(json!("héllo")),
            || enc("héllo"),
        ),
        vc(
            "char",
            "a char is a 1-char string",
            "'🦀'",
            Some(json!("🦀")),
            || enc(&'🦀'),
        ),
        vc("bytes", "serialize_bytes", r#"Bytes(b"ab")"#, None, || {
            enc(&Bytes(b"ab"))
        }),
        vc(
            "unit_struct",
            "a unit struct (name not encoded)",
            "UnitStruct",
            None,
            || enc(&UnitStruct),
        ),
        vc(
            "newtype_struct",
            "a newtype struct is transparent",
            "Meters(3)",
            Some(json!(3)),
            || enc(&Meters(3)),
        ),
        vc(
            "vec_empty",
            "empty sequence",
            "Vec::<u8>::new()",
            Some(json!([])),
            || enc(&Vec::<u8>::new()),
        ),
        vc(
            "vec_1_2",
            "sequence [1, 2]",
            "vec![1u8, 2]",
            Some(json!([1, 2])),
            || enc(&vec![1u8, 2]),
        ),
        vc(
            "tuple",
            "a tuple is a sequence",
            r#"(1u8, "a")"#,
            Some(json!([1, "a"])),
            || enc(&(1u8, "a")),
        ),
        vc(
            "map_empty",
            "empty map",
            "BTreeMap::<u8, u8>::new()",
            Some(json!({})),
            || enc(&BTreeMap::<u8, u8>::new()),
        ),
        vc(
            "map_a_1",
            "map {\"a\": 1}",
            r#"BTreeMap::from([("a", 1u8)])"#,
            Some(json!({"a": 1})),
            || enc(&BTreeMap::from([("a", 1u8)])),
        ),
        vc(
            "struct_pair",
            "a struct is a map with string keys",
            "Pair { a: 1, b: true }",
            Some(json!({"b": true, "a": 1})),
            || enc(&Pair { a: 1, b: true }),
        ),
        vc(
            "set_empty",
            "empty set",
            "HashSet::<u8>::new()",
            None,
            || enc(&HashSet::<u8>::new()),
        ),
        vc(
            "hashset_1_2_3",
            "HashSet: sorted element digests",
            "HashSet::from([3u32, 1, 2])",
            None,
            || enc(&HashSet::from([3u32, 1, 2])),
        ),
        vc(
            "btreeset_1_2_3",
            "BTreeSet: same as the HashSet",
            "BTreeSet::from([1u32, 2, 3])",
            None,
            || enc(&BTreeSet::from([1u32, 2, 3])),
        ),
        vc(
            "unordered_1_2_3",
            "Unordered Vec: same as the HashSet",
            "Unordered(vec![2u64, 3, 1])",
            None,
            || enc(&Unordered(vec![2u64, 3, 1])),
        ),
        vc("enum_unit", "unit variant", "Priority::High", None, || {
            enc(&Priority::High)
        }),
        vc(
            "enum_newtype",
            "newtype variant",
            "Action::Refund(1)",
            None,
            || enc(&Action::Refund(1)),
        ),
        vc(
            "enum_tuple",
            "tuple variant",
            "Action::Move(1, -1)",
            None,
            || enc(&Action::Move(1, -1)),
        ),
        vc(
            "enum_struct",
            "struct variant",
            r#"Action::Transfer { from: "a", to: "b", cents: 1 }"#,
            None,
            || {
                enc(&Action::Transfer {
                    from: "a",
                    to: "b",
                    cents: 1,
                })
            },
        ),
        vc(
            "option_nested",
            "Some(None)",
            "Some(None::<u8>)",
            None,
            || enc(&Some(None::<u8>)),
        ),
        vc(
            "json_number_5",
            "serde_json arbitrary_precision number 5: the integer 5",
            r#"ApNumber("5")"#,
            Some(json!(5)),
            || enc(&ApNumber("5")),
        ),
        vc(
            "json_number_minus_zero",
            "serde_json arbitrary_precision number -0: the float 0 (as serde_json parses it)",
            r#"ApNumber("-0")"#,
            None,
            || enc(&ApNumber("-0")),
        ),
        vc(
            "json_number_2_pow_64",
            "serde_json arbitrary_precision number 2^64: beyond u64, so the f64 2^64",
            r#"ApNumber("18446744073709551616")"#,
            Some(json!(18446744073709551616.0)),
            || enc(&ApNumber("18446744073709551616")),
        ),
        vc(
            "json_number_1_0",
            "serde_json arbitrary_precision number 1.0: a float, not the integer 1",
            r#"ApNumber("1.0")"#,
            Some(json!(1.0)),
            || enc(&ApNumber("1.0")),
        ),
        vc(
            "json_raw_value",
            "serde_json RawValue: the parsed JSON (whitespace and key order do not matter)",
            r##"Raw(r#"{ "b": [1, null], "a": "x" }"#)"##,
            Some(json!({"a": "x", "b": [1, null]})),
            || enc(&Raw(r#"{ "b": [1, null], "a": "x" }"#)),
        ),
        vc(
            "map_nested",
            "maps inside maps: each sorted by its entries' encodings",
            r#"BTreeMap::from([("z", BTreeMap::from([("b", 2u8), ("a", 1)])), ("a", BTreeMap::new())])"#,
            Some(json!({"z": {"b": 2, "a": 1}, "a": {}})),
            || {
                enc(&BTreeMap::from([
                    ("z", BTreeMap::from([("b", 2u8), ("a", 1)])),
                    ("a", BTreeMap::new()),
                ]))
            },
        ),
        vc(
            "serde_internally_tagged",
            "#[serde(tag = \"type\")]: serde hands a struct with the tag as a field",
            "Internal::Circle { r: 3 }",
            Some(json!({"type": "Circle", "r": 3})),
            || enc(&Internal::Circle { r: 3 }),
        ),
        vc(
            "serde_adjacently_tagged",
            "#[serde(tag = \"t\", content = \"c\")]: a struct of the tag (as a unit variant, \
             not a string) and the content",
            "Adjacent::Scale(2)",
            Some(json!({"t": "Scale", "c": 2})),
            || enc(&Adjacent::Scale(2)),
        ),
        vc(
            "serde_untagged",
            "#[serde(untagged)]: the variant's content alone",
            "Untagged::Number(7)",
            Some(json!(7)),
            || enc(&Untagged::Number(7)),
        ),
        vc(
            "u64_300",
            "u64 300: LEB128 magnitude ac 02",
            "300u64",
            Some(json!(300)),
            || enc(&300u64),
        ),
        vc(
            "str_1023",
            "a 1023-byte string: inline",
            r#""x".repeat(1023)"#,
            Some(Value::String("x".repeat(1023))),
            || enc(&"x".repeat(1023)),
        ),
        vc(
            "str_1024",
            "a 1024-byte string: uv(1024) and the BLAKE3 hash of its bytes",
            r#""x".repeat(1024)"#,
            Some(Value::String("x".repeat(1024))),
            || enc(&"x".repeat(1024)),
        ),
        vc(
            "bytes_4096",
            "4096 bytes through serialize_bytes: uv(4096) and their BLAKE3 hash",
            "Bytes(&[7u8; 4096])",
            None,
            || enc(&Bytes(&[7u8; 4096])),
        ),
    ]
}

// ---------------------------------------------------------------------------------------------
// Building and checking the file.

fn build() -> File {
    let key_vectors = key_cases()
        .iter()
        .map(|c| {
            let (key, fp) = (c.typed)(c);
            let json_equivalent = from_json(c) == (key, fp);
            KeyVector {
                id: c.id.into(),
                description: c.description.into(),
                namespace: c.namespace.into(),
                turn_id: c.turn_id.into(),
                tool: c.tool.into(),
                version: c.version,
                rust_args: c.rust_args.into(),
                args: c.args.clone(),
                fingerprint_only_args: c.fingerprint_only_args.clone(),
                caller_key: c.caller_key.map(Into::into),
                json_equivalent,
                key: key.to_hex(),
                fingerprint: fp.to_hex(),
            }
        })
        .collect();
    let value_vectors = value_cases()
        .iter()
        .map(|c| {
            let bytes = (c.encode)();
            ValueVector {
                id: c.id.into(),
                description: c.description.into(),
                rust: c.rust.into(),
                json_equivalent: c.json.as_ref().map(|j| enc(j) == bytes),
                json: c.json.clone(),
                encoding: hex(&bytes),
            }
        })
        .collect();
    File {
        comment: "Test vectors of idem keys, see docs/key-spec.md. Generated by \
                  idem-runtime/tests/key_vectors.rs (IDEM_UPDATE_VECTORS=1); `args` is the JSON \
                  form of `rust_args`, and `json_equivalent` says whether hashing that JSON gives \
                  the same result."
            .into(),
        encoding_version: ENCODING_VERSION,
        contexts: Contexts {
            key: KEY_CONTEXT.into(),
            fingerprint: FINGERPRINT_CONTEXT.into(),
        },
        key_vectors,
        value_vectors,
    }
}

fn hex(bytes: &[u8]) -> String {
    hex::encode(bytes)
}

fn load() -> File {
    let text = std::fs::read_to_string(PATH).expect("tests/vectors/keys.json exists");
    serde_json::from_str(&text).expect("tests/vectors/keys.json parses")
}

#[test]
fn vectors_match_the_implementation() {
    let built = build();
    if std::env::var_os("IDEM_UPDATE_VECTORS").is_some() {
        let text = serde_json::to_string_pretty(&built).expect("serializes") + "\n";
        std::fs::write(PATH, text).expect("writes the vectors");
        return;
    }
    let file = load();
    assert_eq!(file.encoding_version, built.encoding_version);
    assert_eq!(file.contexts, built.contexts);
    assert!(file.key_vectors.len() >= 20);
    assert_eq!(file.key_vectors.len(), built.key_vectors.len());
    for (f, b) in file.key_vectors.iter().zip(&built.key_vectors) {
        assert_eq!(f, b, "key vector `{}`", f.id);
    }
    assert_eq!(file.value_vectors.len(), built.value_vectors.len());
    for (f, b) in file.value_vectors.iter().zip(&built.value_vectors) {
        assert_eq!(f, b, "value vector `{}`", f.id);
    }
}

fn key_vector<'a>(file: &'a File, id: &str) -> &'a KeyVector {
    file.key_vectors
        .iter()
        .find(|v| v.id == id)
        .unwrap_or_else(|| panic!("key vector {id}"))
}

fn value_vector<'a>(file: &'a File, id: &str) -> &'a str {
    &file
        .value_vectors
        .iter()
        .find(|v| v.id == id)
        .unwrap_or_else(|| panic!("value vector {id}"))
        .encoding
}

/// Expected relations between vectors (documented in their descriptions).
#[test]
fn vector_relations() {
    let file = load();
    let k = |id: &str| {
        let v = key_vector(&file, id);
        (v.key.as_str(), v.fingerprint.as_str())
    };
    assert_eq!(k("int_u32"), k("int_i64"));
    assert_eq!(k("float_negative_zero"), k("float_positive_zero"));
    assert_eq!(k("option_skipped"), k("field_absent"));
    assert_ne!(k("option_none"), k("field_absent"));
    assert_ne!(k("nested"), k("nested_reordered_vec"));
    assert_eq!(k("hashset"), k("btreeset"));
    assert_eq!(k("hashset"), k("unordered_vec"));
    assert_ne!(k("struct_basic"), k("version_2"));
    assert_eq!(k("struct_basic").0, k("fingerprint_only_arg").0);
    assert_ne!(k("struct_basic").1, k("fingerprint_only_arg").1);
    assert_eq!(k("caller_key").0, k("caller_key_other_turn_and_args").0);
    assert_ne!(k("caller_key").1, k("caller_key_other_turn_and_args").1);
    let v = |id: &str| value_vector(&file, id);
    assert_eq!(v("hashset_1_2_3"), v("btreeset_1_2_3"));
    assert_eq!(v("hashset_1_2_3"), v("unordered_1_2_3"));
    assert_eq!(v("char"), hex(&enc("🦀")));
    assert_eq!(v("newtype_struct"), hex(&enc(&3u8)));
    // The JSON equivalences the spec promises.
    for id in [
        "struct_basic",
        "int_u32",
        "hashmap",
        "nested",
        "unit",
        "char",
    ] {
        assert!(key_vector(&file, id).json_equivalent, "{id}");
    }
    for id in ["option_none", "hashset", "enum_unit_variant", "bytes"] {
        assert!(!key_vector(&file, id).json_equivalent, "{id}");
    }
    assert!(key_vector(&file, "json_arbitrary_precision").json_equivalent);
    let value_json_equivalent = |id: &str| {
        file.value_vectors
            .iter()
            .find(|v| v.id == id)
            .and_then(|v| v.json_equivalent)
    };
    for id in [
        "json_number_5",
        "json_number_2_pow_64",
        "json_number_1_0",
        "json_raw_value",
        "map_nested",
        "serde_internally_tagged",
        "serde_untagged",
    ] {
        assert_eq!(value_json_equivalent(id), Some(true), "{id}");
    }
    assert_eq!(
        value_json_equivalent("serde_adjacently_tagged"),
        Some(false)
    );
    // Arbitrary-precision tokens encode like the typed numbers.
    assert_eq!(v("json_number_5"), v("u32_5"));
    assert_eq!(v("json_number_minus_zero"), v("f64_neg_zero"));
}

// ---------------------------------------------------------------------------------------------
// An independent minimal re-implementation of the spec (docs/key-spec.md), written from the
// document alone: hand-built byte strings and plain `blake3` calls.

mod reference {
    pub const KEY_CTX: &str = "idem 2026-12-02 idempotency key v2";
    pub const FP_CTX: &str = "idem 2026-12-02 arguments digest v2";

    /// `uv(n)`: unsigned LEB128.
    pub fn uv(mut n: u128) -> Vec<u8> {
        let mut v = Vec::new();
        loop {
            let low = (n & 0x7f) as u8;
            n >>= 7;
            if n == 0 {
                v.push(low);
                return v;
            }
            v.push(low | 0x80);
        }
    }

    /// `str(s)`.
    pub fn str_(s: &str) -> Vec<u8> {
        let mut v = uv(s.len() as u128);
        v.extend_from_slice(s.as_bytes());
        v
    }

    /// A string (0x07) or bytes (0x08) value: inline below 1024 bytes, else BLAKE3 of them.
    pub fn text(tag: u8, bytes: &[u8]) -> Vec<u8> {
        let body = if bytes.len() < 1024 {
            bytes.to_vec()
        } else {
            blake3::hash(bytes).as_bytes().to_vec()
        };
        [vec![tag], uv(bytes.len() as u128), body].concat()
    }

    pub fn string(s: &str) -> Vec<u8> {
        text(0x07, s.as_bytes())
    }

    pub fn int(n: i128) -> Vec<u8> {
        [vec![0x05, u8::from(n < 0)], uv(n.unsigned_abs())].concat()
    }

    pub fn float(f: f64) -> Vec<u8> {
        let bits = if f.is_nan() {
            0x7ff8_0000_0000_0000
        } else if f == 0.0 {
            0
        } else {
            f.to_bits()
        };
        [vec![0x06], bits.to_le_bytes().to_vec()].concat()
    }

    pub fn seq(elements: &[Vec<u8>]) -> Vec<u8> {
        [vec![0x0A], elements.concat(), vec![0x0B]].concat()
    }

    /// A map/struct/set: tag, the entries sorted bytewise, end.
    pub fn unordered(tag: u8, entries: &[Vec<u8>]) -> Vec<u8> {
        let mut sorted = entries.to_vec();
        sorted.sort();
        [vec![tag], sorted.concat(), vec![0x0B]].concat()
    }

    pub fn map(entries: &[(Vec<u8>, Vec<u8>)]) -> Vec<u8> {
        let entries: Vec<Vec<u8>> = entries
            .iter()
            .map(|(k, v)| [k.clone(), v.clone()].concat())
            .collect();
        unordered(0x0C, &entries)
    }

    pub fn record(fields: &[(&str, Vec<u8>)]) -> Vec<u8> {
        let entries: Vec<(Vec<u8>, Vec<u8>)> = fields
            .iter()
            .map(|(name, value)| (string(name), value.clone()))
            .collect();
        map(&entries)
    }

    fn keyed(context: &str, material: &[u8]) -> [u8; 32] {
        let key = blake3::derive_key(context, b"");
        *blake3::keyed_hash(&key, material).as_bytes()
    }

    /// The arguments digest (= the fingerprint of a record of all arguments).
    pub fn args_digest(tool: &str, version: u32, record: &[u8]) -> [u8; 32] {
        let material = [
            vec![2],
            str_(tool),
            uv(u128::from(version)),
            record.to_vec(),
        ]
        .concat();
        keyed(FP_CTX, &material)
    }

    pub fn fingerprint(tool: &str, version: u32, record: &[u8]) -> String {
        super::hex(&args_digest(tool, version, record))
    }

    pub fn turn_key(ns: &str, turn: &str, tool: &str, version: u32, record: &[u8]) -> String {
        let digest = args_digest(tool, version, record);
        let material = [vec![2, b'T'], str_(ns), str_(turn), digest.to_vec()].concat();
        super::hex(&keyed(KEY_CTX, &material))
    }

    pub fn caller_key(ns: &str, tool: &str, version: u32, key: &str) -> String {
        let material = [
            vec![2, b'C'],
            str_(ns),
            str_(tool),
            uv(u128::from(version)),
            str_(key),
        ]
        .concat();
        super::hex(&keyed(KEY_CTX, &material))
    }
}

#[test]
fn the_reference_uses_the_published_contexts() {
    assert_eq!(reference::KEY_CTX, KEY_CONTEXT);
    assert_eq!(reference::FP_CTX, FINGERPRINT_CONTEXT);
    assert_eq!(ENCODING_VERSION, 2);
}

#[test]
fn vectors_agree_with_an_independent_reimplementation() {
    use reference::*;
    let file = load();
    let kv = |id: &str| key_vector(&file, id);
    let check = |id: &str, fields: &[(&str, Vec<u8>)]| {
        let v = kv(id);
        let args = record(fields);
        assert_eq!(
            v.key,
            turn_key(&v.namespace, &v.turn_id, &v.tool, v.version, &args),
            "{id}"
        );
        assert_eq!(
            v.fingerprint,
            fingerprint(&v.tool, v.version, &args),
            "{id}"
        );
    };

    let email = [
        ("to", string("ann@example.com")),
        ("subject", string("Hello")),
    ];
    check("struct_basic", &email);
    check("version_2", &email);
    check("no_args", &[]);
    check("int_u32", &[("amount", int(5))]);
    check("int_i64", &[("amount", int(5))]);
    check("int_negative", &[("delta", int(-42))]);
    let u128_max = [vec![0x05, 0], uv(u128::MAX)].concat();
    check("int_128", &[("big", u128_max), ("small", int(i128::MIN))]);
    check("float_negative_zero", &[("x", float(0.0))]);
    check("float_nan", &[("x", float(f64::NAN))]);
    check("float_f32_widened", &[("ratio", float(1.5))]);
    check("unicode", &[("name", string("Zoë 🦀 日本"))]);
    check("option_none", &[("to", string("ann")), ("cc", vec![0x01])]);
    check(
        "option_some",
        &[
            ("to", string("ann")),
            ("cc", [vec![0x02], string("bob")].concat()),
        ],
    );
    check("field_absent", &[("to", string("ann"))]);
    let user = record(&[("id", int(7)), ("name", string("ann"))]);
    check(
        "nested",
        &[("user", user), ("tags", seq(&[string("a"), string("b")]))],
    );
    let xyz = unordered(0x0D, &[string("x"), string("y"), string("z")]);
    check("hashset", &[("labels", xyz.clone())]);
    check("btreeset", &[("labels", xyz.clone())]);
    check("unordered_vec", &[("labels", xyz)]);
    check(
        "enum_unit_variant",
        &[("priority", [vec![0x0E], str_("High")].concat())],
    );
    check("char", &[("initial", string("é"))]);
    check("long_string", &[("name", string(&"ab".repeat(2500)))]);
    check("unit", &[("marker", vec![0x00])]);
    check("tuple", &[("point", seq(&[int(1), int(-2)]))]);
    check(
        "json_arbitrary_precision",
        &[
            ("amount", int(1250)),
            ("rate", float(0.25)),
            ("big", float(18446744073709551616.0)),
            ("zero", float(0.0)),
            ("extra", record(&[("x", seq(&[int(1), float(2.0)]))])),
        ],
    );

    let v = kv("fingerprint_only_arg");
    let all = record(&[
        ("to", string("ann@example.com")),
        ("subject", string("Hello")),
        ("trace_id", string("tr-9")),
    ]);
    assert_eq!(
        v.key,
        turn_key("acme", "turn-0001", "send_email", 1, &record(&email))
    );
    assert_eq!(v.fingerprint, fingerprint("send_email", 1, &all));

    let v = kv("caller_key");
    assert_eq!(v.key, caller_key("acme", "charge", 1, "order-123"));
    assert_eq!(
        v.fingerprint,
        fingerprint("charge", 1, &record(&[("amount", int(500))]))
    );

    let vv = |id: &str| value_vector(&file, id).to_owned();
    assert_eq!(vv("u32_5"), hex(&int(5)));
    assert_eq!(vv("u64_300"), "0500ac02");
    assert_eq!(vv("i8_minus_1"), hex(&int(-1)));
    assert_eq!(vv("i128_min"), hex(&int(i128::MIN)));
    assert_eq!(
        vv("u128_max"),
        hex(&[vec![0x05, 0], uv(u128::MAX)].concat())
    );
    assert_eq!(vv("f64_1_5"), hex(&float(1.5)));
    assert_eq!(vv("f64_nan"), hex(&float(f64::NAN)));
    assert_eq!(vv("str_unicode"), hex(&string("héllo")));
    assert_eq!(
        vv("bytes"),
        hex(&[vec![0x08], uv(2), b"ab".to_vec()].concat())
    );
    let one_two_three = unordered(0x0D, &[int(1), int(2), int(3)]);
    assert_eq!(vv("hashset_1_2_3"), hex(&one_two_three));
    assert_eq!(vv("unordered_1_2_3"), hex(&one_two_three));
    assert_eq!(vv("vec_1_2"), hex(&seq(&[int(1), int(2)])));
    assert_eq!(
        vv("struct_pair"),
        hex(&record(&[("a", int(1)), ("b", vec![0x04])]))
    );
    assert_eq!(
        vv("map_nested"),
        hex(&map(&[
            (
                string("z"),
                map(&[(string("b"), int(2)), (string("a"), int(1))])
            ),
            (string("a"), map(&[])),
        ]))
    );
    assert_eq!(
        vv("enum_newtype"),
        hex(&[vec![0x0F], str_("Refund"), int(1)].concat())
    );
    assert_eq!(
        vv("enum_tuple"),
        hex(&[vec![0x10], str_("Move"), int(1), int(-1), vec![0x0B]].concat())
    );
    let fields = [
        [string("from"), string("a")].concat(),
        [string("to"), string("b")].concat(),
        [string("cents"), int(1)].concat(),
    ];
    let mut sorted = fields.to_vec();
    sorted.sort();
    assert_eq!(
        vv("enum_struct"),
        hex(&[vec![0x11], str_("Transfer"), sorted.concat(), vec![0x0B]].concat())
    );
    assert_eq!(vv("json_number_5"), hex(&int(5)));
    assert_eq!(vv("json_number_minus_zero"), hex(&float(0.0)));
    assert_eq!(
        vv("json_number_2_pow_64"),
        hex(&float(18446744073709551616.0))
    );
    assert_eq!(vv("json_number_1_0"), hex(&float(1.0)));
    assert_eq!(
        vv("json_raw_value"),
        hex(&map(&[
            (string("a"), string("x")),
            (string("b"), seq(&[int(1), vec![0x00]]))
        ]))
    );
    assert_eq!(
        vv("serde_internally_tagged"),
        hex(&record(&[("type", string("Circle")), ("r", int(3))]))
    );
    assert_eq!(
        vv("serde_adjacently_tagged"),
        hex(&record(&[
            ("t", [vec![0x0E], str_("Scale")].concat()),
            ("c", int(2))
        ]))
    );
    assert_eq!(vv("serde_untagged"), hex(&int(7)));
    assert_eq!(vv("str_1023"), hex(&string(&"x".repeat(1023))));
    assert_eq!(vv("str_1024"), hex(&string(&"x".repeat(1024))));
    assert!(vv("str_1024").starts_with("078008"));
    assert_eq!(vv("bytes_4096"), hex(&text(0x08, &[7u8; 4096])));
    assert_eq!(vv("none"), "01");
    assert_eq!(vv("unit"), "00");
    assert_eq!(vv("unit_struct"), "09");
    assert_eq!(vv("vec_empty"), "0a0b");
    assert_eq!(vv("map_empty"), "0c0b");
    assert_eq!(vv("set_empty"), "0d0b");
}

//! The vectors: each key and value case with the typed Rust value it stands for, and the file
//! as this build computes it (shared with `tests/feature-probe`, which builds it with other
//! serde_json features).

use std::collections::{BTreeMap, BTreeSet, HashMap, HashSet};

use idem_tools_runtime::key::{
    ArgsDigest, ENCODING_VERSION, FINGERPRINT_CONTEXT, Fingerprint, KEY_CONTEXT, Key, Unordered,
    derive_key, encode_value, fingerprint,
};
use serde::Serialize;
use serde::ser::SerializeStruct;
use serde_json::{Value, json};

use super::file::{Contexts, File, KeyVector, ValueVector};

// The typed values: Appendix A of docs/key-spec.md.
include!("types.rs");

pub struct KeyCase {
    pub id: &'static str,
    pub description: &'static str,
    pub namespace: &'static str,
    pub turn_id: &'static str,
    pub tool: &'static str,
    pub version: u32,
    pub rust_args: &'static str,
    pub args: Value,
    pub fingerprint_only_args: Option<Value>,
    pub caller_key: Option<&'static str>,
    /// Key and fingerprint from the typed Rust values.
    pub typed: fn(&KeyCase) -> (Key, Fingerprint),
}

/// Key and fingerprint of a case whose arguments are all key arguments, given as one record.
pub fn record<T: Serialize>(c: &KeyCase, args: &T) -> (Key, Fingerprint) {
    (
        derive_key(c.namespace, c.turn_id, c.tool, c.version, args).expect("encodes"),
        fingerprint(c.tool, c.version, args).expect("encodes"),
    )
}

/// Key and fingerprint computed from the JSON form through `ArgsDigest`.
pub fn from_json(c: &KeyCase) -> (Key, Fingerprint) {
    json_digest(
        (c.namespace, c.turn_id, c.tool, c.version),
        &c.args,
        c.fingerprint_only_args.as_ref(),
        c.caller_key,
    )
}

/// Key and fingerprint of a call whose arguments are the entries of the JSON objects `args`
/// (key and fingerprint) and `fingerprint_only` (fingerprint only), with a caller key or not.
pub fn json_digest(
    (namespace, turn_id, tool, version): (&str, &str, &str, u32),
    args: &Value,
    fingerprint_only: Option<&Value>,
    caller_key: Option<&str>,
) -> (Key, Fingerprint) {
    let mut d = ArgsDigest::new("vector");
    for (name, value) in args.as_object().expect("args is an object") {
        d.arg(name, value).expect("encodes");
    }
    for (name, value) in fingerprint_only
        .iter()
        .flat_map(|v| v.as_object().expect("object"))
    {
        d.fingerprint_arg(name, value).expect("encodes");
    }
    if let Some(k) = caller_key {
        d.caller_key(k);
    }
    d.finish(namespace, turn_id, tool, version)
}

/// `text` parsed by serde_json (as a JSON form read from a file or the wire would be).
fn parsed(text: &str) -> Value {
    serde_json::from_str(text).expect("valid JSON")
}

/// A `hashbrown::HashSet` of `items`.
fn brown<T: std::hash::Hash + Eq>(
    items: impl IntoIterator<Item = T>,
) -> hashbrown::HashSet<T, std::hash::RandomState> {
    items.into_iter().collect()
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

pub fn key_cases() -> Vec<KeyCase> {
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
            "field_ignored",
            "A field marked ignored (idem_tools::key::ignored) is left out: same key as \
             field_absent.",
            r#"CcIgnored { to: "ann", cc: Ignored("bob") }"#,
            json!({"to": "ann"}),
            |c| {
                record(
                    c,
                    &CcIgnored {
                        to: "ann",
                        cc: Ignored("bob"),
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
        KeyCase {
            tool: "Invoice__send",
            ..kc(
                "method_tool_name",
                "A method's tool name, `Type__method`: a plain string to the key.",
                r#"To { to: "ann" }"#,
                json!({"to": "ann"}),
                |c| record(c, &To { to: "ann" }),
            )
        },
        kc(
            "float_shortest_text",
            "A float whose shortest text serde_json without float_roundtrip reads one ulp off \
             (215218.44830576063); idem enables float_roundtrip, so the JSON text gives the \
             typed key.",
            "X { x: 215218.44830576066f64 }",
            parsed(r#"{"x": 215218.44830576066}"#),
            |c| {
                record(
                    c,
                    &X {
                        x: 215218.44830576066,
                    },
                )
            },
        ),
        kc(
            "hashbrown_set",
            "A hashbrown::HashSet is a set: same key as hashset.",
            r#"Labels { labels: hashbrown::HashSet::from_iter(["z", "x", "y"]) }"#,
            json!({"labels": ["x", "y", "z"]}),
            |c| {
                record(
                    c,
                    &Labels {
                        labels: brown(["z", "x", "y"]),
                    },
                )
            },
        ),
        KeyCase {
            namespace: "",
            version: 0,
            ..kc(
                "defaults",
                "The defaults of a macro tool: namespace \"\" (str(\"\") = 00) and version 0 \
                 (uv(0) = 00).",
                r#"To { to: "ann" }"#,
                json!({"to": "ann"}),
                |c| record(c, &To { to: "ann" }),
            )
        },
        KeyCase {
            namespace: "n".repeat(300).leak(),
            turn_id: "t".repeat(1100).leak(),
            tool: "x".repeat(200).leak(),
            version: u32::MAX,
            ..kc(
                "long_headers",
                "Header strings are always inline, however long (§4.2): a 300-byte namespace, \
                 a 1100-byte turn id and a 200-byte tool name are written whole, not hashed; \
                 version u32::MAX is uv = ff ff ff ff 0f.",
                r#"To { to: "ann" }"#,
                json!({"to": "ann"}),
                |c| record(c, &To { to: "ann" }),
            )
        },
        KeyCase {
            namespace: "",
            tool: "charge",
            version: 0,
            caller_key: Some("k".repeat(2000).leak()),
            ..kc(
                "caller_key_long",
                "A 2000-byte caller key is written whole (inline, like every header string).",
                r#"#[key] "k".repeat(2000), amount: 500u64"#,
                json!({"amount": 500}),
                |c| {
                    let mut d = ArgsDigest::new("charge");
                    d.caller_key(c.caller_key.expect("a caller key"));
                    d.arg("amount", &500u64).expect("encodes");
                    d.finish(c.namespace, c.turn_id, c.tool, c.version)
                },
            )
        },
        kc(
            "long_argument_name",
            "An argument name is a string value: one of 1030 bytes is written as uv(1030) and its \
             BLAKE3 hash (§4.2), unlike the header strings.",
            r#""a".repeat(1030): 1u8"#,
            json!({"a".repeat(1030): 1}),
            |c| {
                let mut d = ArgsDigest::new("tool");
                d.arg(&"a".repeat(1030), &1u8).expect("encodes");
                d.finish(c.namespace, c.turn_id, c.tool, c.version)
            },
        ),
    ]
}

pub struct ValueCase {
    pub id: &'static str,
    pub description: &'static str,
    pub rust: &'static str,
    pub json: Option<Value>,
    pub encode: fn() -> Vec<u8>,
}

pub fn enc<T: Serialize + ?Sized>(v: &T) -> Vec<u8> {
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

pub fn value_cases() -> Vec<ValueCase> {
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
        vc(
            "float_shortest_text",
            "f64 215218.44830576066; its JSON text, parsed by serde_json in a build with idem \
             (float_roundtrip), is the same float",
            "215218.44830576066f64",
            Some(parsed("215218.44830576066")),
            || enc(&215218.44830576066f64),
        ),
        vc(
            "json_number_float_shortest_text",
            "serde_json arbitrary_precision number 215218.44830576066: correctly rounded",
            r#"ApNumber("215218.44830576066")"#,
            Some(parsed("215218.44830576066")),
            || enc(&ApNumber("215218.44830576066")),
        ),
        vc(
            "json_raw_value_exact_decimal",
            "raw JSON text of the exact decimal value of the f64 0.1: that f64",
            r#"Raw("0.1000000000000000055511151231257827021181583404541015625")"#,
            Some(json!(0.1)),
            || {
                enc(&Raw(
                    "0.1000000000000000055511151231257827021181583404541015625",
                ))
            },
        ),
        vc(
            "hashbrown_set_1_2_3",
            "hashbrown::HashSet: same as the std HashSet",
            "hashbrown::HashSet::<u32, RandomState>::from_iter([3u32, 1, 2])",
            None,
            || enc(&brown([3u32, 1, 2])),
        ),
        vc(
            "owned_set_1_2_3",
            "a set type handed to collect_seq by value: a set, same as the HashSet",
            "OwnedSet(BTreeSet::from([3u32, 1, 2]))",
            None,
            || enc(&OwnedSet(BTreeSet::from([3u32, 1, 2]))),
        ),
        vc(
            "set_by_iter",
            "a set serialized through its iterator: an ordered sequence, not a set",
            "SetByIter(BTreeSet::from([3u32, 1, 2]))",
            Some(json!([1, 2, 3])),
            || enc(&SetByIter(BTreeSet::from([3u32, 1, 2]))),
        ),
        vc(
            "unordered_map",
            "Unordered around a map: a set of (key, value) sequences, not a map",
            r#"Unordered(BTreeMap::from([("b", 2u8), ("a", 1)]))"#,
            None,
            || enc(&Unordered(BTreeMap::from([("b", 2u8), ("a", 1)]))),
        ),
        vc(
            "unordered_option",
            "Unordered around an Option: a set of 0 or 1 element",
            "Unordered(Some(5u8))",
            None,
            || enc(&Unordered(Some(5u8))),
        ),
        vc(
            "unordered_nested_vecs",
            "Unordered around vectors of vectors: a set of ordered sequences",
            "Unordered(vec![vec![2u8, 1], vec![0]])",
            None,
            || enc(&Unordered(vec![vec![2u8, 1], vec![0]])),
        ),
        vc(
            "marked_newtype_seq",
            "the unordered marker passes through newtype structs: a set, same as \
             Unordered(vec![1u8, 2])",
            "Marked(Tags(vec![2, 1]))",
            None,
            || enc(&Marked(Tags(vec![2, 1]))),
        ),
        vc(
            "marked_json_array",
            "a serde_json array serializes by collect_seq: the unordered marker makes it a set",
            "Marked(json!([3, 1, 2]))",
            None,
            || enc(&Marked(json!([3, 1, 2]))),
        ),
        vc(
            "marked_tuple",
            "the unordered marker around a tuple: the marker covers sequences only, so the \
             tuple stays ordered",
            "Marked((2u8, 1u8))",
            Some(json!([2, 1])),
            || enc(&Marked((2u8, 1u8))),
        ),
        vc(
            "marked_option_of_seq",
            "the unordered marker around Some(sequence): not a sequence itself, so the marker \
             has no effect, and the sequence inside stays ordered",
            "Marked(Some(vec![2u8, 1]))",
            None,
            || enc(&Marked(Some(vec![2u8, 1]))),
        ),
        vc(
            "newtype_named_like_token",
            "a newtype struct named $serde_json::private::Number is transparent: the string \
             \"5\", not the number 5",
            r#"NamedLikeToken("5")"#,
            Some(json!("5")),
            || enc(&NamedLikeToken("5")),
        ),
        vc(
            "long_variant_name",
            "a variant name is always inline, however long (§4.2): a unit variant of 1100 bytes is \
             0e, uv(1100) = cc 08 and the 1100 bytes, not their hash",
            r#"Variant("V".repeat(1100).leak())"#,
            None,
            || enc(&Variant("V".repeat(1100).leak())),
        ),
    ]
}

pub fn build() -> File {
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

pub fn hex(bytes: &[u8]) -> String {
    hex::encode(bytes)
}

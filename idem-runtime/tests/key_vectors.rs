//! Test vectors of the key derivation: `tests/vectors/keys.json` at the workspace root.
//!
//! The vectors are defined in `key_vectors/cases.rs`, each with the typed Rust value it stands
//! for (JSON cannot express sets, enums, `Option`, NaN, integer widths, …), from the types of
//! `key_vectors/types.rs` (Appendix A of docs/key-spec.md, verbatim). The test recomputes every
//! vector and compares it with the file; many are also recomputed by an independent, minimal
//! re-implementation of the spec (plain `blake3` calls on hand-built material, no use of the
//! crate's encoder) so the file is not only self-referential. `tests/feature-probe` runs the
//! same checks with serde_json's `arbitrary_precision`, `raw_value` and `preserve_order` on.
//!
//! After an intended change of the encoding (which must bump `ENCODING_VERSION` and the contexts),
//! regenerate the file with `IDEM_UPDATE_VECTORS=1 cargo test -p idem-tools-runtime --test key_vectors`;
//! without a version bump that refuses to change any existing vector (new vectors may be added).

#[path = "key_vectors/cases.rs"]
mod cases;
#[path = "key_vectors/check.rs"]
mod check;
#[path = "key_vectors/file.rs"]
mod file;

use idem_tools_runtime::key::{ENCODING_VERSION, FINGERPRINT_CONTEXT, KEY_CONTEXT};

use std::collections::BTreeMap;

use idem_tools_runtime::key::Unordered;

use cases::{build, enc, hex};
use file::{File, KeyVector};

const PATH: &str = concat!(env!("CARGO_MANIFEST_DIR"), "/../tests/vectors/keys.json");
const SPEC: &str = concat!(env!("CARGO_MANIFEST_DIR"), "/../docs/key-spec.md");
const TYPES: &str = concat!(env!("CARGO_MANIFEST_DIR"), "/tests/key_vectors/types.rs");

fn load() -> File {
    check::load(PATH)
}

#[test]
fn vectors_match_the_implementation() {
    if std::env::var_os("IDEM_UPDATE_VECTORS").is_some() {
        update();
        return;
    }
    check::file_matches_this_build(&load());
}

/// Rewrites the file from this build; refuses to change an existing vector's key, fingerprint
/// or encoding unless the encoding version changed (keys never change silently).
fn update() {
    let built = build();
    let old: Option<File> = std::fs::read_to_string(PATH)
        .ok()
        .and_then(|text| serde_json::from_str(&text).ok());
    if let Some(old) = old.filter(|old| old.encoding_version == built.encoding_version) {
        assert_eq!(
            old.contexts, built.contexts,
            "the contexts changed without an ENCODING_VERSION bump"
        );
        for o in &old.key_vectors {
            if let Some(b) = built.key_vectors.iter().find(|b| b.id == o.id) {
                assert_eq!(
                    (&o.key, &o.fingerprint),
                    (&b.key, &b.fingerprint),
                    "key vector `{}` changed without an ENCODING_VERSION bump",
                    o.id
                );
            }
        }
        for o in &old.value_vectors {
            if let Some(b) = built.value_vectors.iter().find(|b| b.id == o.id) {
                assert_eq!(
                    o.encoding, b.encoding,
                    "value vector `{}` changed without an ENCODING_VERSION bump",
                    o.id
                );
            }
        }
    }
    let text = serde_json::to_string_pretty(&built).expect("serializes") + "\n";
    std::fs::write(PATH, text).expect("writes the vectors");
}

/// The hash keys and the worked example (§1, §6) that the spec quotes are today's.
#[test]
fn the_spec_quotes_the_current_values() {
    let spec = std::fs::read_to_string(SPEC).expect("docs/key-spec.md");
    let file = load();
    let quoted = [
        hex(&blake3::derive_key(FINGERPRINT_CONTEXT, b"")),
        hex(&blake3::derive_key(KEY_CONTEXT, b"")),
        format!("derive_key(\"{FINGERPRINT_CONTEXT}\", \"\")"),
        format!("derive_key(\"{KEY_CONTEXT}\", \"\")"),
        format!("`ENCODING_VERSION` = `0x{ENCODING_VERSION:02x}`"),
        format!("# idem key derivation, encoding version {ENCODING_VERSION}\n"),
        key_vector(&file, "struct_basic").key.clone(),
        key_vector(&file, "struct_basic").fingerprint.clone(),
        key_vector(&file, "caller_key").key.clone(),
    ];
    for q in quoted {
        assert!(spec.contains(&q), "docs/key-spec.md does not quote `{q}`");
    }
}

#[test]
fn json_forms_hash_as_stated() {
    check::json_forms_hash_as_stated(&load());
}

/// Appendix A of the spec is exactly the types the vectors are computed from.
#[test]
fn the_spec_defines_every_type_the_vectors_use() {
    const MARKER: &str = "// === docs/key-spec.md, Appendix A ===\n";
    let types = std::fs::read_to_string(TYPES).expect("types.rs");
    let (_, types) = types.split_once(MARKER).expect("the marker line");
    let spec = std::fs::read_to_string(SPEC).expect("docs/key-spec.md");
    let (_, appendix) = spec
        .split_once("\n## Appendix A.")
        .expect("the spec has an Appendix A");
    let (_, block) = appendix.split_once("```rust\n").expect("a rust block");
    let (block, _) = block.split_once("```\n").expect("the block ends");
    assert_eq!(
        block, types,
        "docs/key-spec.md Appendix A differs from types.rs"
    );
    // Every type a vector names is defined there.
    let file = load();
    let named = file
        .key_vectors
        .iter()
        .map(|v| v.rust_args.as_str())
        .chain(file.value_vectors.iter().map(|v| v.rust.as_str()));
    for text in named {
        // Outside string literals (every other piece between quotes).
        let code: String = text.split('"').step_by(2).collect::<Vec<_>>().join(" ");
        for word in code.split(|c: char| !c.is_alphanumeric() && c != '_') {
            let is_type = word.starts_with(|c: char| c.is_ascii_uppercase())
                && word.chars().any(|c| c.is_ascii_lowercase());
            let library = [
                "HashSet",
                "BTreeSet",
                "BTreeMap",
                "HashMap",
                "Vec",
                "Some",
                "None",
                "Unordered",
                "RandomState",
                "NAN",
                "MAX",
                "MIN",
            ];
            if is_type && !library.contains(&word) {
                let defined = [
                    format!("struct {word}"),
                    format!("enum {word}"),
                    format!("    {word}"),
                ];
                assert!(
                    defined.iter().any(|d| block.contains(d.as_str())),
                    "`{word}` (in `{text}`) is not defined in Appendix A"
                );
            }
        }
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
    // Floats from text are correctly rounded, whichever way the text arrives.
    assert!(key_vector(&file, "float_shortest_text").json_equivalent);
    assert_eq!(
        v("json_number_float_shortest_text"),
        v("float_shortest_text")
    );
    for id in [
        "float_shortest_text",
        "json_number_float_shortest_text",
        "json_raw_value_exact_decimal",
    ] {
        assert_eq!(value_json_equivalent(id), Some(true), "{id}");
    }
    // Which sequences are sets (§4.4).
    assert_eq!(k("hashbrown_set"), k("hashset"));
    assert_eq!(v("hashbrown_set_1_2_3"), v("hashset_1_2_3"));
    assert_eq!(v("owned_set_1_2_3"), v("hashset_1_2_3"));
    assert_eq!(v("set_by_iter"), hex(&enc(&vec![1u32, 2, 3])));
    assert_eq!(v("marked_newtype_seq"), hex(&enc(&Unordered(vec![1u8, 2]))));
    assert_eq!(v("marked_tuple"), hex(&enc(&(2u8, 1u8))));
    assert_eq!(v("marked_option_of_seq"), hex(&enc(&Some(vec![2u8, 1]))));
    assert_eq!(v("unordered_option"), hex(&enc(&Unordered(vec![5u8]))));
    assert_eq!(
        v("unordered_map"),
        hex(&enc(&Unordered(vec![("a", 1u8), ("b", 2)])))
    );
    assert_ne!(
        v("unordered_map"),
        hex(&enc(&BTreeMap::from([("a", 1u8), ("b", 2)])))
    );
    // A newtype named like a token is transparent (§4.3).
    assert_eq!(v("newtype_named_like_token"), hex(&enc("5")));
    assert_eq!(
        value_json_equivalent("newtype_named_like_token"),
        Some(true)
    );
}

// ---------------------------------------------------------------------------------------------
// An independent minimal re-implementation of the spec (docs/key-spec.md), written from the
// document alone: hand-built byte strings and plain `blake3` calls.

mod reference {
    pub const KEY_CTX: &str = "idem 2026-12-04 idempotency key v3";
    pub const FP_CTX: &str = "idem 2026-12-04 arguments digest v3";
    pub const VERSION: u8 = 3;

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
            vec![VERSION],
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
        let material = [vec![VERSION, b'T'], str_(ns), str_(turn), digest.to_vec()].concat();
        super::hex(&keyed(KEY_CTX, &material))
    }

    pub fn caller_key(ns: &str, tool: &str, version: u32, key: &str) -> String {
        let material = [
            vec![VERSION, b'C'],
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
    assert_eq!(ENCODING_VERSION, reference::VERSION);
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
    check("hashbrown_set", &[("labels", xyz.clone())]);
    check("method_tool_name", &[("to", string("ann"))]);
    check("float_shortest_text", &[("x", float(215218.44830576066))]);
    check("btreeset", &[("labels", xyz.clone())]);
    check("unordered_vec", &[("labels", xyz)]);
    check(
        "enum_unit_variant",
        &[("priority", [vec![0x0E], str_("High")].concat())],
    );
    check("char", &[("initial", string("é"))]);
    check("long_string", &[("name", string(&"ab".repeat(2500)))]);
    // Header strings are inline however long; argument names are string values (§4.2).
    check("defaults", &[("to", string("ann"))]);
    check("long_headers", &[("to", string("ann"))]);
    check("long_argument_name", &[("a".repeat(1030).as_str(), int(1))]);
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

    let v = kv("caller_key_long");
    assert_eq!(v.key, caller_key("", "charge", 0, &"k".repeat(2000)));
    assert_eq!(
        v.fingerprint,
        fingerprint("charge", 0, &record(&[("amount", int(500))]))
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
    assert_eq!(
        vv("long_variant_name"),
        hex(&[vec![0x0E], str_(&"V".repeat(1100))].concat())
    );
    assert!(vv("long_variant_name").starts_with("0ecc08"));
    assert_eq!(vv("bytes_4096"), hex(&text(0x08, &[7u8; 4096])));
    assert_eq!(vv("hashbrown_set_1_2_3"), hex(&one_two_three));
    assert_eq!(vv("owned_set_1_2_3"), hex(&one_two_three));
    assert_eq!(vv("set_by_iter"), hex(&seq(&[int(1), int(2), int(3)])));
    let pair = |k: &str, n: i128| seq(&[string(k), int(n)]);
    assert_eq!(
        vv("unordered_map"),
        hex(&unordered(0x0D, &[pair("b", 2), pair("a", 1)]))
    );
    assert_eq!(vv("unordered_option"), hex(&unordered(0x0D, &[int(5)])));
    assert_eq!(
        vv("unordered_nested_vecs"),
        hex(&unordered(0x0D, &[seq(&[int(2), int(1)]), seq(&[int(0)])]))
    );
    assert_eq!(
        vv("marked_newtype_seq"),
        hex(&unordered(0x0D, &[int(2), int(1)]))
    );
    assert_eq!(
        vv("marked_json_array"),
        hex(&unordered(0x0D, &[int(3), int(1), int(2)]))
    );
    assert_eq!(vv("marked_tuple"), hex(&seq(&[int(2), int(1)])));
    assert_eq!(
        vv("marked_option_of_seq"),
        hex(&[vec![0x02], seq(&[int(2), int(1)])].concat())
    );
    assert_eq!(vv("newtype_named_like_token"), hex(&string("5")));
    assert_eq!(vv("float_shortest_text"), hex(&float(215218.44830576066)));
    assert_eq!(
        vv("json_number_float_shortest_text"),
        hex(&float(215218.44830576066))
    );
    assert_eq!(vv("json_raw_value_exact_decimal"), hex(&float(0.1)));
    assert_eq!(vv("none"), "01");
    assert_eq!(vv("unit"), "00");
    assert_eq!(vv("unit_struct"), "09");
    assert_eq!(vv("vec_empty"), "0a0b");
    assert_eq!(vv("map_empty"), "0c0b");
    assert_eq!(vv("set_empty"), "0d0b");
}

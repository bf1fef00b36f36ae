//! idem's key vectors (`tests/vectors/keys.json`), computed in a build where serde_json's
//! features are on (`--all-features`: `arbitrary_precision`, `raw_value`, `preserve_order`; idem
//! itself enables `float_roundtrip`), with the very cases and checks the main test runs
//! (`idem-runtime/tests/key_vectors/`); and the exceptions of docs/key-spec.md §4.7, from the
//! side of the features.

#[path = "../../../idem-runtime/tests/key_vectors/cases.rs"]
mod cases;
#[path = "../../../idem-runtime/tests/key_vectors/check.rs"]
mod check;
#[path = "../../../idem-runtime/tests/key_vectors/file.rs"]
mod file;

use idem_tools_runtime::key::encode_value;
use serde::Serialize;
use serde_json::{Value, json};

const PATH: &str = concat!(env!("CARGO_MANIFEST_DIR"), "/../vectors/keys.json");

const ARBITRARY_PRECISION: bool = cfg!(feature = "arbitrary_precision");

fn enc<T: Serialize + ?Sized>(v: &T) -> Vec<u8> {
    encode_value(v).expect("encodes")
}

#[test]
fn the_features_are_what_the_build_asked_for() {
    // Only arbitrary_precision keeps a number beyond the f64 range.
    assert_eq!(
        serde_json::from_str::<Value>("1e400").is_ok(),
        ARBITRARY_PRECISION
    );
    // Only preserve_order keeps the keys of an object in their order.
    let object: Value = serde_json::from_str(r#"{"b": 1, "a": 2}"#).expect("JSON");
    let first = object.as_object().and_then(|o| o.keys().next().cloned());
    let expected = if cfg!(feature = "preserve_order") {
        "b"
    } else {
        "a"
    };
    assert_eq!(first.as_deref(), Some(expected));
}

#[test]
fn every_vector_is_what_this_build_computes() {
    check::file_matches_this_build(&check::load(PATH));
}

#[test]
fn every_json_form_hashes_as_the_file_states() {
    check::json_forms_hash_as_stated(&check::load(PATH));
}

/// Pseudo-random doubles of every magnitude.
fn doubles(n: usize) -> impl Iterator<Item = f64> {
    let mut x: u64 = 0x2545_f491_4f6c_dd1d;
    std::iter::from_fn(move || {
        x ^= x << 13;
        x ^= x >> 7;
        x ^= x << 17;
        Some(f64::from_bits(x))
    })
    .filter(|f| f.is_finite())
    .take(n)
}

#[test]
fn numbers_encode_as_the_number_they_hold_whatever_the_features() {
    for f in doubles(20_000) {
        let text = format!("{f:?}");
        let parsed: Value = serde_json::from_str(&text).expect("JSON");
        for v in [json!(f), Value::from(f), parsed] {
            assert_eq!(enc(&v), enc(&f), "{text}");
        }
    }
    for n in [0, 1, 127, 128, u64::MAX - 1, u64::MAX] {
        assert_eq!(enc(&json!(n)), enc(&n));
        assert_eq!(
            enc(&serde_json::from_str::<Value>(&n.to_string()).expect("JSON")),
            enc(&n)
        );
    }
    for n in [-1i64, -128, i64::MIN] {
        assert_eq!(enc(&json!(n)), enc(&n));
        assert_eq!(
            enc(&serde_json::from_str::<Value>(&n.to_string()).expect("JSON")),
            enc(&n)
        );
    }
    // 128-bit integers within 64 bits make the same Value either way.
    for n in [0i128, 5, -5, i128::from(i64::MIN), i128::from(u64::MAX)] {
        let v = serde_json::to_value(n).expect("within 64 bits");
        assert_eq!(enc(&v), enc(&n), "{n}");
    }
    // A number written with a fraction or exponent is a float, -0 the float zero.
    let parsed = |t: &str| serde_json::from_str::<Value>(t).expect("JSON");
    assert_eq!(enc(&parsed("1.0")), enc(&1.0f64));
    assert_eq!(enc(&parsed("1e2")), enc(&100.0f64));
    assert_eq!(enc(&parsed("-0")), enc(&0.0f64));
    assert_eq!(
        enc(&parsed("18446744073709551616")),
        enc(&18446744073709551616.0f64)
    );
}

#[cfg(feature = "raw_value")]
#[test]
fn raw_values_encode_like_the_values_they_denote() {
    let text = r#"{"b": [1, 2.5, "x", null, true], "a": {"z": -0, "y": 215218.44830576066}}"#;
    let raw = serde_json::value::RawValue::from_string(text.to_owned()).expect("JSON");
    let parsed: Value = serde_json::from_str(text).expect("JSON");
    assert_eq!(enc(&raw), enc(&parsed));
}

#[test]
fn a_value_from_an_f32_follows_arbitrary_precision() {
    // docs/key-spec.md §4.7 (1): the one case where the feature changes a key.
    let v = json!(0.1f32);
    if ARBITRARY_PRECISION {
        assert_eq!(enc(&v), enc(&0.1f64));
    } else {
        assert_eq!(enc(&v), enc(&0.1f32));
    }
    assert_eq!(enc(&json!(1.5f32)), enc(&1.5f32));
}

#[test]
fn numbers_beyond_both_ranges_are_values_with_arbitrary_precision_only() {
    // docs/key-spec.md §4.7 (3).
    let big = serde_json::to_value(u128::MAX);
    let huge = serde_json::from_str::<Value>("1e400");
    if ARBITRARY_PRECISION {
        assert_eq!(enc(&big.expect("a value")), enc(&(u128::MAX as f64)));
        assert_eq!(enc(&huge.expect("a value")), enc(&f64::INFINITY));
    } else {
        assert!(big.is_err() && huge.is_err());
    }
}

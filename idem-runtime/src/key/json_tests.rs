//! serde_json's `arbitrary_precision` numbers and `RawValue`s encode like plain JSON values.
//!
//! The crate is not built with those features (enabling them would change every other test's
//! serde_json), so the tests serialize hand-written structs named exactly like serde_json's
//! private tokens: that name and its one string field are the whole wire contract.

use serde::Serialize;
use serde::ser::SerializeStruct;
use serde_json::json;

use super::encode_value;
use super::json::{NUMBER_TOKEN, RAW_VALUE_TOKEN};
use crate::Error;

/// What `serde_json::Number` serializes as with `arbitrary_precision`.
struct ApNumber<'a>(&'a str);

impl Serialize for ApNumber<'_> {
    fn serialize<S: serde::Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        let mut st = s.serialize_struct(NUMBER_TOKEN, 1)?;
        st.serialize_field(NUMBER_TOKEN, self.0)?;
        st.end()
    }
}

/// What `serde_json::value::RawValue` serializes as.
struct Raw<'a>(&'a str);

impl Serialize for Raw<'_> {
    fn serialize<S: serde::Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        let mut st = s.serialize_struct(RAW_VALUE_TOKEN, 1)?;
        st.serialize_field(RAW_VALUE_TOKEN, self.0)?;
        st.end()
    }
}

fn enc<T: Serialize + ?Sized>(v: &T) -> Vec<u8> {
    encode_value(v).expect("encodes")
}

#[test]
fn the_token_names_are_serde_jsons() {
    // The names serde_json 1.x uses; a rename there would silently break the immunity.
    assert_eq!(NUMBER_TOKEN, "$serde_json::private::Number");
    assert_eq!(RAW_VALUE_TOKEN, "$serde_json::private::RawValue");
}

#[test]
fn arbitrary_precision_numbers_encode_like_plain_ones() {
    // Integers that fit u64/i64: the typed integer.
    assert_eq!(enc(&ApNumber("5")), enc(&5u8));
    assert_eq!(enc(&ApNumber("5")), enc(&json!(5)));
    assert_eq!(enc(&ApNumber("0")), enc(&0i64));
    assert_eq!(enc(&ApNumber("-7")), enc(&-7i32));
    assert_eq!(enc(&ApNumber("18446744073709551615")), enc(&u64::MAX));
    assert_eq!(enc(&ApNumber("-9223372036854775808")), enc(&i64::MIN));
    // Fractions and exponents: f64, even when the value is an integer.
    assert_eq!(enc(&ApNumber("1.5")), enc(&1.5f64));
    assert_eq!(enc(&ApNumber("1.0")), enc(&1.0f64));
    assert_ne!(enc(&ApNumber("1.0")), enc(&1u8));
    assert_eq!(enc(&ApNumber("1e2")), enc(&100.0f64));
    assert_eq!(enc(&ApNumber("0.1")), enc(&json!(0.1)));
    // -0 is the float zero (serde_json parses `-0` as -0.0), unlike `0`.
    assert_eq!(enc(&ApNumber("-0")), enc(&0.0f64));
    assert_eq!(
        enc(&ApNumber("-0")),
        enc(&serde_json::from_str::<serde_json::Value>("-0").unwrap())
    );
    assert_ne!(enc(&ApNumber("-0")), enc(&ApNumber("0")));
    // Beyond u64 / i64: the nearest f64, as serde_json without arbitrary_precision parses it.
    let big = "18446744073709551616";
    assert_eq!(enc(&ApNumber(big)), enc(&18446744073709551616.0f64));
    assert_eq!(
        enc(&ApNumber(big)),
        enc(&serde_json::from_str::<serde_json::Value>(big).unwrap())
    );
    assert_eq!(
        enc(&ApNumber("-9223372036854775809")),
        enc(&serde_json::from_str::<serde_json::Value>("-9223372036854775809").unwrap())
    );
}

#[test]
fn json_documents_agree_with_and_without_the_tokens() {
    // A record whose numbers arrive as tokens equals the plain serde_json::Value.
    #[derive(Serialize)]
    struct Args {
        amount: ApNumber<'static>,
        ratio: ApNumber<'static>,
        items: Vec<ApNumber<'static>>,
    }
    let tokens = Args {
        amount: ApNumber("1250"),
        ratio: ApNumber("0.25"),
        items: vec![ApNumber("-1"), ApNumber("2e0")],
    };
    let plain = json!({"amount": 1250, "ratio": 0.25, "items": [-1, 2.0]});
    assert_eq!(enc(&tokens), enc(&plain));
}

#[test]
fn raw_values_encode_like_the_parsed_json() {
    let text = r#"{"b": [1, 2.5, "x", null, true], "a": {"z": -0, "y": 18446744073709551616}}"#;
    let parsed: serde_json::Value = serde_json::from_str(text).unwrap();
    assert_eq!(enc(&Raw(text)), enc(&parsed));
    // Whitespace and key order of the raw text do not matter.
    let compact = r#"{"a":{"y":18446744073709551616,"z":-0},"b":[1,2.5,"x",null,true]}"#;
    assert_eq!(enc(&Raw(text)), enc(&Raw(compact)));
    assert_eq!(enc(&Raw("5")), enc(&5u64));
    assert_ne!(enc(&Raw("[1,2]")), enc(&Raw("[2,1]")));
}

#[test]
fn long_token_texts_are_read_in_full() {
    // Token texts from 1024 bytes on, which plain long strings would encode by their hash.
    let items: Vec<String> = (0..400).map(|i| format!("\"item-{i}\"")).collect();
    let text = format!("[{}]", items.join(","));
    assert!(text.len() > 4000);
    let parsed: serde_json::Value = serde_json::from_str(&text).unwrap();
    assert_eq!(enc(&Raw(&text)), enc(&parsed));
    let digits = format!("1{}", "0".repeat(1100));
    assert_eq!(enc(&ApNumber(&digits)), enc(&f64::INFINITY));
    let fraction = format!("0.{}1", "0".repeat(1100));
    assert_eq!(enc(&ApNumber(&fraction)), enc(&0.0f64));
    // Inside newtype structs, which are transparent (§4.5), a long text is read in full too.
    assert_eq!(enc(&Wrapped(NUMBER_TOKEN, &digits)), enc(&f64::INFINITY));
    assert_eq!(enc(&Wrapped(RAW_VALUE_TOKEN, &text)), enc(&parsed));
}

/// A token struct whose field's text is inside a newtype struct.
struct Wrapped<'a>(&'static str, &'a str);

impl Serialize for Wrapped<'_> {
    fn serialize<S: serde::Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        struct Newtype<'a>(&'a str);
        impl Serialize for Newtype<'_> {
            fn serialize<S: serde::Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
                s.serialize_newtype_struct("W", self.0)
            }
        }
        let mut st = s.serialize_struct(self.0, 1)?;
        st.serialize_field(self.0, &Newtype(self.1))?;
        st.end()
    }
}

#[test]
fn malformed_tokens_are_errors_not_panics() {
    let err = |r: Result<Vec<u8>, Error>| matches!(r, Err(Error::Encode { .. }));
    for bad in ["", "01", "1.", "abc", "1 ", "--1", "0x5"] {
        assert!(err(encode_value(&ApNumber(bad))), "{bad:?}");
    }
    assert!(err(encode_value(&Raw("{"))));
    assert!(err(encode_value(&Raw("[1,]"))));
    assert!(err(encode_value(&Raw("1 2"))));

    /// A token struct with a missing, extra, misnamed or non-string field.
    struct Odd(&'static str, Vec<(&'static str, u8)>, bool);
    impl Serialize for Odd {
        fn serialize<S: serde::Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
            let mut st = s.serialize_struct(self.0, 1)?;
            for (name, v) in &self.1 {
                if self.2 {
                    st.serialize_field(name, &v.to_string())?;
                } else {
                    st.serialize_field(name, v)?;
                }
            }
            st.end()
        }
    }
    for token in [NUMBER_TOKEN, RAW_VALUE_TOKEN] {
        assert!(err(encode_value(&Odd(token, vec![], true))));
        assert!(err(encode_value(&Odd(
            token,
            vec![(token, 1), (token, 2)],
            true
        ))));
        assert!(err(encode_value(&Odd(token, vec![("other", 1)], true))));
        assert!(err(encode_value(&Odd(token, vec![(token, 1)], false))));
        assert_eq!(
            encode_value(&Odd(token, vec![(token, 1)], true)).ok(),
            Some(enc(&1u8))
        );
    }
}

/// Floats read from JSON text by serde_json, as tool arguments usually are.
mod floats_from_text {
    use super::enc;
    use serde_json::Value;

    /// Shortest-form texts of `n` pseudo-random finite doubles of every magnitude.
    fn shortest_texts(n: usize) -> impl Iterator<Item = (f64, String)> {
        let mut x: u64 = 0x9e37_79b9_7f4a_7c15;
        std::iter::from_fn(move || {
            x ^= x << 13;
            x ^= x >> 7;
            x ^= x << 17;
            Some(f64::from_bits(x))
        })
        .filter(|f| f.is_finite())
        .map(|f| (f, format!("{f:?}")))
        .take(n)
    }

    #[test]
    fn serde_json_parses_them_correctly_rounded_in_a_build_with_idem() {
        // idem enables serde_json's `float_roundtrip` (spec §4.6); without it this text reads as
        // 215218.44830576063, and a sizeable share of the random ones one ulp off too.
        let known = (215218.44830576066, "215218.44830576066".to_owned());
        for (f, text) in shortest_texts(20_000).chain([known]) {
            let value: Value = serde_json::from_str(&text).expect("JSON");
            assert_eq!(enc(&value), enc(&f), "{text}");
            let typed: f64 = serde_json::from_str(&text).expect("JSON");
            assert_eq!(typed.to_bits(), f.to_bits(), "{text}");
        }
    }

    #[test]
    fn without_arbitrary_precision_a_value_from_an_f32_is_its_exact_widening() {
        // Spec §4.7 (1); tests/feature-probe checks the other side, where it is the f64 0.1.
        let from_f32 = [
            serde_json::json!(0.1f32),
            serde_json::to_value(0.1f32).expect("a number"),
            Value::from(0.1f32),
        ];
        for v in from_f32 {
            assert_eq!(enc(&v), enc(&0.1f32));
            assert_ne!(enc(&v), enc(&0.1f64));
        }
        // Where the shortest f32 text denotes the widening, both builds agree.
        assert_eq!(enc(&serde_json::json!(1.5f32)), enc(&1.5f64));
    }

    #[test]
    fn without_arbitrary_precision_numbers_beyond_both_ranges_make_no_value() {
        // Spec §4.7 (3): with the feature these are values (tests/feature-probe).
        assert!(serde_json::to_value(u128::MAX).is_err());
        assert!(serde_json::to_value(i128::MIN).is_err());
        assert!(serde_json::from_str::<Value>("1e400").is_err());
        assert!(serde_json::from_str::<Value>("18446744073709551616").is_ok());
    }
}

//! `serde_json`'s private wire tokens: with its `arbitrary_precision` feature a `Number`
//! serializes as a one-field struct named [`NUMBER_TOKEN`] holding the number's text, and a
//! `RawValue` (feature `raw_value`) as a one-field struct named [`RAW_VALUE_TOKEN`] holding raw
//! JSON text. The key encoder recognises both and encodes what they stand for, so a `Number` or
//! `Value` holding the same number encodes the same whether or not a crate of the build enables
//! those features (the exceptions, where serde_json keeps different numbers, are in
//! docs/key-spec.md §4.7).

use super::encode::EncodeError;

/// Struct and field name of an `arbitrary_precision` `serde_json::Number`.
pub(crate) const NUMBER_TOKEN: &str = "$serde_json::private::Number";

/// Struct and field name of a `serde_json::value::RawValue`.
pub(crate) const RAW_VALUE_TOKEN: &str = "$serde_json::private::RawValue";

/// Which token a struct is.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Token {
    /// [`NUMBER_TOKEN`].
    Number,
    /// [`RAW_VALUE_TOKEN`].
    RawValue,
}

impl Token {
    /// The token a struct of this name stands for, if any.
    pub(crate) fn of(struct_name: &str) -> Option<Token> {
        match struct_name {
            NUMBER_TOKEN => Some(Token::Number),
            RAW_VALUE_TOKEN => Some(Token::RawValue),
            _ => None,
        }
    }

    /// The struct's (and its only field's) name.
    pub(crate) fn name(self) -> &'static str {
        match self {
            Token::Number => NUMBER_TOKEN,
            Token::RawValue => RAW_VALUE_TOKEN,
        }
    }
}

/// A JSON number, as `serde_json` without `arbitrary_precision` would hand it to a serializer.
#[derive(Clone, Copy, Debug, PartialEq)]
pub(crate) enum JsonNumber {
    /// An integer (`u64` or `i64` in serde_json).
    Int {
        /// Below zero.
        negative: bool,
        /// The absolute value (at most `2^63` when negative).
        magnitude: u64,
    },
    /// Any other number: an `f64`.
    Float(f64),
}

fn digits(s: &[u8]) -> usize {
    s.iter().take_while(|b| b.is_ascii_digit()).count()
}

fn invalid(text: &[u8]) -> EncodeError {
    let shown = String::from_utf8_lossy(text.get(..40).unwrap_or(text)).into_owned();
    EncodeError(format!("invalid JSON number `{shown}`"))
}

/// Parses JSON number text (RFC 8259 grammar, nothing else) the way `serde_json` does without
/// `arbitrary_precision`: an integer literal (no fraction, no exponent) that fits `u64`, or a
/// negative one that fits `i64` other than `-0`, is an integer; everything else, including `-0`
/// and integer literals beyond `u64`/`i64`, is the nearest `f64` (`±infinity` beyond its range).
pub(crate) fn parse_number(text: &[u8]) -> Result<JsonNumber, EncodeError> {
    let (negative, rest) = match text.split_first() {
        Some((b'-', rest)) => (true, rest),
        _ => (false, text),
    };
    let int_len = digits(rest);
    let leading_zero = rest.first() == Some(&b'0');
    if int_len == 0 || (leading_zero && int_len > 1) {
        return Err(invalid(text));
    }
    let (int_part, mut tail) = rest.split_at(int_len);
    let mut integer = true;
    if let Some((b'.', after)) = tail.split_first() {
        let n = digits(after);
        if n == 0 {
            return Err(invalid(text));
        }
        tail = after.get(n..).unwrap_or_default();
        integer = false;
    }
    if let Some((b'e' | b'E', after)) = tail.split_first() {
        let after = match after.split_first() {
            Some((b'+' | b'-', a)) => a,
            _ => after,
        };
        let n = digits(after);
        if n == 0 {
            return Err(invalid(text));
        }
        tail = after.get(n..).unwrap_or_default();
        integer = false;
    }
    if !tail.is_empty() {
        return Err(invalid(text));
    }
    if integer {
        let magnitude = int_part.iter().try_fold(0u64, |acc, d| {
            acc.checked_mul(10)?.checked_add(u64::from(d - b'0'))
        });
        match magnitude {
            Some(m) if !negative => {
                return Ok(JsonNumber::Int {
                    negative: false,
                    magnitude: m,
                });
            }
            Some(m) if m != 0 && m <= 1 << 63 => {
                return Ok(JsonNumber::Int {
                    negative: true,
                    magnitude: m,
                });
            }
            _ => {}
        }
    }
    std::str::from_utf8(text)
        .ok()
        .and_then(|s| s.parse::<f64>().ok())
        .map(JsonNumber::Float)
        .ok_or_else(|| invalid(text))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn int(negative: bool, magnitude: u64) -> JsonNumber {
        JsonNumber::Int {
            negative,
            magnitude,
        }
    }

    #[test]
    fn integers_and_floats_as_serde_json_parses_them() {
        let p = |s: &str| parse_number(s.as_bytes()).expect(s);
        assert_eq!(p("0"), int(false, 0));
        assert_eq!(p("5"), int(false, 5));
        assert_eq!(p("18446744073709551615"), int(false, u64::MAX));
        assert_eq!(p("-9223372036854775808"), int(true, 1 << 63));
        assert_eq!(p("-1"), int(true, 1));
        // -0, integers beyond u64 / i64 and anything with a fraction or exponent: f64.
        assert!(matches!(p("-0"), JsonNumber::Float(f) if f == 0.0 && f.is_sign_negative()));
        assert_eq!(
            p("18446744073709551616"),
            JsonNumber::Float(18446744073709551616.0)
        );
        assert_eq!(
            p("-9223372036854775809"),
            JsonNumber::Float(-9223372036854775809.0)
        );
        assert_eq!(p("1.0"), JsonNumber::Float(1.0));
        assert_eq!(p("1e2"), JsonNumber::Float(100.0));
        assert_eq!(p("-2.5E-1"), JsonNumber::Float(-0.25));
        assert_eq!(p("1e+2"), JsonNumber::Float(100.0));
        assert_eq!(p("1e999"), JsonNumber::Float(f64::INFINITY));
        assert_eq!(
            p("100000000000000000000000000000000000000000"),
            JsonNumber::Float(1e41)
        );
    }

    #[test]
    fn rejects_what_json_does_not_allow() {
        for bad in [
            "", "-", "+1", "01", "-01", "1.", ".5", "1e", "1e+", "0x10", "1 ", " 1", "NaN", "inf",
            "1.5.2", "١",
        ] {
            assert!(parse_number(bad.as_bytes()).is_err(), "{bad:?}");
        }
    }
}

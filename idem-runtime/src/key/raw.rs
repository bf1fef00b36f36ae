//! Raw JSON text (a `serde_json::value::RawValue`) encoded canonically: exactly like the
//! `serde_json::Value` it denotes, with numbers read by the rules of
//! [`parse_number`](super::json::parse_number) (so the result does not depend on serde_json's
//! `arbitrary_precision` or `float_roundtrip` features), and an object with a repeated key
//! rejected (JSON leaves its meaning open).

use super::encode::{EncodeError, put_float, put_int, put_text, tag};
use super::json::{JsonNumber, parse_number};
use super::scratch::{Scratch, Span};

/// Nesting deeper than this is rejected (serde_json's own limit), so hostile input cannot
/// exhaust the stack.
const MAX_DEPTH: usize = 128;

/// Appends the canonical encoding of the JSON text `text`.
pub(crate) fn encode_raw_json(out: &mut Scratch, text: &[u8]) -> Result<(), EncodeError> {
    let mut p = Parser {
        text,
        at: 0,
        string: Vec::new(),
    };
    p.value(out, 0)?;
    p.skip_ws();
    if p.at != text.len() {
        return Err(p.error("trailing characters"));
    }
    Ok(())
}

struct Parser<'t> {
    text: &'t [u8],
    at: usize,
    /// Decoded bytes of the string being read (reused).
    string: Vec<u8>,
}

impl Parser<'_> {
    fn error(&self, what: &str) -> EncodeError {
        EncodeError(format!(
            "invalid raw JSON value: {what} at byte {}",
            self.at
        ))
    }

    fn peek(&self) -> Option<u8> {
        self.text.get(self.at).copied()
    }

    fn next(&mut self) -> Option<u8> {
        let b = self.peek();
        self.at += usize::from(b.is_some());
        b
    }

    fn skip_ws(&mut self) {
        while matches!(self.peek(), Some(b' ' | b'\t' | b'\n' | b'\r')) {
            self.at += 1;
        }
    }

    fn expect(&mut self, b: u8, what: &str) -> Result<(), EncodeError> {
        self.skip_ws();
        if self.next() == Some(b) {
            Ok(())
        } else {
            Err(self.error(what))
        }
    }

    fn literal(&mut self, word: &[u8]) -> Result<(), EncodeError> {
        let end = self.at + word.len();
        if self.text.get(self.at..end) == Some(word) {
            self.at = end;
            Ok(())
        } else {
            Err(self.error("expected a value"))
        }
    }

    fn value(&mut self, out: &mut Scratch, depth: usize) -> Result<(), EncodeError> {
        self.skip_ws();
        match self.peek() {
            Some(b'n') => {
                self.literal(b"null")?;
                // serde_json serializes `Value::Null` as unit.
                out.put_u8(tag::UNIT);
            }
            Some(b't') => {
                self.literal(b"true")?;
                out.put_u8(tag::TRUE);
            }
            Some(b'f') => {
                self.literal(b"false")?;
                out.put_u8(tag::FALSE);
            }
            Some(b'"') => {
                self.string()?;
                put_text(out, tag::STR, &self.string);
            }
            Some(b'-' | b'0'..=b'9') => self.number(out)?,
            Some(b'[') => {
                let depth = self.nest(depth)?;
                out.put_u8(tag::SEQ);
                self.skip_ws();
                if self.peek() == Some(b']') {
                    self.at += 1;
                } else {
                    loop {
                        self.value(out, depth)?;
                        self.skip_ws();
                        match self.next() {
                            Some(b',') => {}
                            Some(b']') => break,
                            _ => return Err(self.error("expected `,` or `]`")),
                        }
                    }
                }
                out.put_u8(tag::END);
            }
            Some(b'{') => {
                let depth = self.nest(depth)?;
                self.object(out, depth)?;
            }
            _ => return Err(self.error("expected a value")),
        }
        Ok(())
    }

    fn nest(&mut self, depth: usize) -> Result<usize, EncodeError> {
        if depth >= MAX_DEPTH {
            return Err(self.error("nested too deeply"));
        }
        self.at += 1;
        Ok(depth + 1)
    }

    fn object(&mut self, out: &mut Scratch, depth: usize) -> Result<(), EncodeError> {
        out.put_u8(tag::MAP);
        let (region, base) = (out.len(), out.spans.len());
        // Length of each entry's key encoding, to find repeated keys.
        let mut key_lens = Vec::new();
        self.skip_ws();
        if self.peek() == Some(b'}') {
            self.at += 1;
        } else {
            loop {
                self.skip_ws();
                if self.peek() != Some(b'"') {
                    return Err(self.error("expected a string key"));
                }
                let start = out.len();
                self.string()?;
                put_text(out, tag::STR, &self.string);
                key_lens.push(out.len() - start);
                self.expect(b':', "expected `:`")?;
                self.value(out, depth)?;
                out.spans.push(Span::new(&out.bytes, start, out.len()));
                self.skip_ws();
                match self.next() {
                    Some(b',') => {}
                    Some(b'}') => break,
                    _ => return Err(self.error("expected `,` or `}`")),
                }
            }
        }
        if key_lens.len() > 1 {
            let mut keys: Vec<&[u8]> = out
                .spans
                .get(base..)
                .unwrap_or_default()
                .iter()
                .zip(&key_lens)
                .map(|(s, len)| out.bytes.get(s.start..s.start + len).unwrap_or_default())
                .collect();
            keys.sort_unstable();
            if keys.windows(2).any(|w| w.first() == w.get(1)) {
                return Err(self.error("repeated object key"));
            }
        }
        out.sort_entries(region, base);
        out.put_u8(tag::END);
        Ok(())
    }

    fn number(&mut self, out: &mut Scratch) -> Result<(), EncodeError> {
        let start = self.at;
        while matches!(
            self.peek(),
            Some(b'0'..=b'9' | b'-' | b'+' | b'.' | b'e' | b'E')
        ) {
            self.at += 1;
        }
        match parse_number(self.text.get(start..self.at).unwrap_or_default())? {
            JsonNumber::Int {
                negative,
                magnitude,
            } => put_int(out, negative, u128::from(magnitude)),
            JsonNumber::Float(f) => put_float(out, f),
        }
        Ok(())
    }

    /// Reads a string literal into `self.string` (decoded UTF-8).
    fn string(&mut self) -> Result<(), EncodeError> {
        self.string.clear();
        self.at += 1; // the opening quote
        loop {
            let run = self
                .text
                .get(self.at..)
                .unwrap_or_default()
                .iter()
                .take_while(|&&b| b != b'"' && b != b'\\' && b >= 0x20)
                .count();
            let chunk = self.text.get(self.at..self.at + run).unwrap_or_default();
            self.string.extend_from_slice(chunk);
            self.at += run;
            match self.next() {
                Some(b'"') => break,
                Some(b'\\') => self.escape()?,
                _ => return Err(self.error("unterminated string or control character")),
            }
        }
        if std::str::from_utf8(&self.string).is_err() {
            return Err(self.error("string is not UTF-8"));
        }
        Ok(())
    }

    fn escape(&mut self) -> Result<(), EncodeError> {
        let c = match self.next() {
            Some(b'"') => '"',
            Some(b'\\') => '\\',
            Some(b'/') => '/',
            Some(b'b') => '\u{8}',
            Some(b'f') => '\u{c}',
            Some(b'n') => '\n',
            Some(b'r') => '\r',
            Some(b't') => '\t',
            Some(b'u') => {
                let first = self.hex4()?;
                let code = if (0xD800..0xDC00).contains(&first) {
                    if self.next() != Some(b'\\') || self.next() != Some(b'u') {
                        return Err(self.error("lone surrogate"));
                    }
                    let second = self.hex4()?;
                    if !(0xDC00..0xE000).contains(&second) {
                        return Err(self.error("lone surrogate"));
                    }
                    0x10000 + ((first - 0xD800) << 10) + (second - 0xDC00)
                } else {
                    first
                };
                char::from_u32(code).ok_or_else(|| self.error("lone surrogate"))?
            }
            _ => return Err(self.error("invalid escape")),
        };
        let mut buf = [0; 4];
        self.string
            .extend_from_slice(c.encode_utf8(&mut buf).as_bytes());
        Ok(())
    }

    /// The four hex digits of a `\u` escape.
    fn hex4(&mut self) -> Result<u32, EncodeError> {
        let mut code = [0u8; 2];
        let digits = self.text.get(self.at..self.at + 4);
        match digits.map(|d| hex::decode_to_slice(d, &mut code)) {
            Some(Ok(())) => {
                self.at += 4;
                Ok(u32::from(u16::from_be_bytes(code)))
            }
            _ => Err(self.error("invalid \\u escape")),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::key::encode::encode_into;
    use serde_json::json;

    fn raw(text: &str) -> Result<Vec<u8>, EncodeError> {
        let mut s = Scratch::default();
        encode_raw_json(&mut s, text.as_bytes())?;
        Ok(s.bytes)
    }

    fn value(v: &serde_json::Value) -> Vec<u8> {
        let mut s = Scratch::default();
        encode_into(&mut s, v).expect("encodes");
        s.bytes
    }

    #[test]
    fn encodes_like_the_parsed_value() {
        for text in [
            "null",
            "true",
            " false ",
            "0",
            "-12",
            "1.5e3",
            r#""""#,
            r#""a\"b\\c\/d\b\f\n\r\t\u00e9\ud83e\udd80 日本""#,
            "[]",
            "[1, [2, [3]], {}]",
            r#"{"b": {"d": [true, null], "c": 1}, "a": "x", "": 0}"#,
            "\n\t{ \"k\" :\r\n [ ] }",
        ] {
            let parsed: serde_json::Value = serde_json::from_str(text).expect(text);
            assert_eq!(raw(text).ok(), Some(value(&parsed)), "{text}");
        }
        assert_eq!(raw("-0").ok(), Some(value(&json!(0.0))));
    }

    #[test]
    fn rejects_invalid_text_without_panicking() {
        let deep_ok = format!("{}{}", "[".repeat(MAX_DEPTH), "]".repeat(MAX_DEPTH));
        assert!(raw(&deep_ok).is_ok());
        let too_deep = format!("{}{}", "[".repeat(MAX_DEPTH + 1), "]".repeat(MAX_DEPTH + 1));
        assert!(raw(&too_deep).is_err());
        for bad in [
            "",
            " ",
            "nul",
            "tru",
            "[1,]",
            "[1 2]",
            "{\"a\" 1}",
            "{\"a\":1,}",
            "{a:1}",
            "{\"a\":1,\"a\":2}",
            "\"abc",
            "\"a\u{1}b\"",
            r#""\x""#,
            r#""\u12""#,
            r#""\ud800""#,
            r#""\ud800\u0041""#,
            r#""\udc00""#,
            "01",
            "1.",
            "+1",
            "[1] x",
            "{\"a\":1}}",
        ] {
            assert!(raw(bad).is_err(), "{bad:?}");
        }
    }
}

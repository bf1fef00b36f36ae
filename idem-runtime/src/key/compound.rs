//! Encoders of compound values: sequences and sets ([`SeqEncoder`]), maps, structs and struct
//! variants ([`MapEncoder`]), and serde_json's token structs (see [`json`]).

use serde::Serialize;
use serde::ser;

use super::encode::{EncodeError, ValueSerializer, field_start, put_float, put_int, tag};
use super::json::{self, JsonNumber, Token};
use super::raw;
use super::scratch::{Scratch, Span};

/// Encoder of sequences (ordered, or as sets) and of tuple variants.
pub(crate) struct SeqEncoder<'a> {
    out: &'a mut Scratch,
    /// For a set: where its elements begin and the index of its first span.
    set: Option<(usize, usize)>,
}

impl<'a> SeqEncoder<'a> {
    /// The elements of a tuple variant (its tag and name are written): ordered, then `0x0B`.
    pub(crate) fn start_variant(out: &'a mut Scratch) -> Self {
        SeqEncoder { out, set: None }
    }

    /// Writes the tag of a sequence (`0x0A`) or, if `as_set`, of a set (`0x0D`).
    pub(crate) fn start(out: &'a mut Scratch, as_set: bool) -> Self {
        if as_set {
            out.put_u8(tag::SET);
            let set = Some((out.len(), out.spans.len()));
            SeqEncoder { out, set }
        } else {
            out.put_u8(tag::SEQ);
            SeqEncoder { out, set: None }
        }
    }

    pub(crate) fn element<T: Serialize + ?Sized>(&mut self, value: &T) -> Result<(), EncodeError> {
        let start = self.out.len();
        value
            .serialize(ValueSerializer::new(self.out))
            .map_err(|e| e.not_ignorable("an element of a sequence or tuple"))?;
        if self.set.is_some() {
            let span = Span::new(&self.out.bytes, start, self.out.len());
            self.out.spans.push(span);
        }
        Ok(())
    }

    pub(crate) fn finish(self) -> Result<(), EncodeError> {
        if let Some((region, base)) = self.set {
            self.out.sort_entries(region, base);
        }
        self.out.put_u8(tag::END);
        Ok(())
    }
}

/// Encoder of maps, structs and struct variants (and of serde_json's token structs).
pub(crate) struct MapEncoder<'a> {
    out: &'a mut Scratch,
    /// Where the entries begin.
    region: usize,
    /// Index of the first span of this container's entries.
    base: usize,
    /// Start of the entry whose key was given by `serialize_key` but whose value was not yet.
    pending: Option<usize>,
    /// A serde_json token struct: which, and whether its field was seen.
    token: Option<(Token, bool)>,
}

impl<'a> MapEncoder<'a> {
    /// Writes `tag` and starts the entries.
    pub(crate) fn new(out: &'a mut Scratch, tag: u8) -> Self {
        out.put_u8(tag);
        MapEncoder::token(out, None)
    }

    /// Starts the entries (no tag): of a serde_json token struct if `token`, else of a struct
    /// variant whose tag and name are written.
    pub(crate) fn token(out: &'a mut Scratch, token: Option<Token>) -> Self {
        MapEncoder {
            region: out.len(),
            base: out.spans.len(),
            out,
            pending: None,
            token: token.map(|t| (t, false)),
        }
    }

    fn field<T: Serialize + ?Sized>(&mut self, key: &str, value: &T) -> Result<(), EncodeError> {
        if let Some((token, seen)) = &mut self.token {
            if *seen || key != token.name() {
                return Err(EncodeError(format!(
                    "`{}` must have exactly one field of that name",
                    token.name()
                )));
            }
            *seen = true;
            return token_value(self.out, *token, value);
        }
        let (start, spans) = field_start(self.out, key);
        self.entry_value(start, spans, value)
    }

    /// Writes the value of the entry whose name (or key) begins at `start` (with `spans` spans
    /// before it), and the entry's span; an entry whose value is marked `ignored` is left out,
    /// its name too (§4.3) — so is the field of a `#[serde(flatten)]`ed struct, which serde
    /// writes as a map entry.
    fn entry_value<T: Serialize + ?Sized>(
        &mut self,
        start: usize,
        spans: usize,
        value: &T,
    ) -> Result<(), EncodeError> {
        match value.serialize(ValueSerializer::new(self.out)) {
            Ok(()) => {
                let span = Span::new(&self.out.bytes, start, self.out.len());
                self.out.spans.push(span);
                Ok(())
            }
            Err(error) if error.is_ignored() => {
                self.out.rollback(start, spans);
                Ok(())
            }
            Err(error) => Err(error),
        }
    }

    fn finish(self) -> Result<(), EncodeError> {
        match self.token {
            Some((_, true)) => return Ok(()),
            Some((token, false)) => {
                return Err(EncodeError(format!("`{}` without its field", token.name())));
            }
            None => {}
        }
        if self.pending.is_some() {
            return Err(EncodeError("map key serialized without a value".to_owned()));
        }
        self.out.sort_entries(self.region, self.base);
        self.out.put_u8(tag::END);
        Ok(())
    }
}

/// Encodes what a serde_json token struct stands for, given its field's value (the text).
fn token_value<T: Serialize + ?Sized>(
    out: &mut Scratch,
    token: Token,
    value: &T,
) -> Result<(), EncodeError> {
    let start = out.len();
    // A marked text is not the field's whole content: the token stands for a value.
    value
        .serialize(ValueSerializer::verbatim(out))
        .map_err(|error| error.not_ignorable(&format!("the text of `{}`", token.name())))?;
    let text = string_at(&out.bytes, start)
        .ok_or_else(|| EncodeError(format!("the field of `{}` must be a string", token.name())))?;
    match token {
        Token::Number => {
            let number = json::parse_number(text)?;
            out.bytes.truncate(start);
            match number {
                JsonNumber::Int {
                    negative,
                    magnitude,
                } => put_int(out, negative, u128::from(magnitude)),
                JsonNumber::Float(f) => put_float(out, f),
            }
            Ok(())
        }
        Token::RawValue => {
            // The text lives in the buffer it is re-encoded into: copy it out (a rare path).
            let text = text.to_vec();
            out.bytes.truncate(start);
            raw::encode_raw_json(out, &text)
        }
    }
}

/// The bytes of the string value encoded at `bytes[start..]` (which must be exactly one string).
fn string_at(bytes: &[u8], start: usize) -> Option<&[u8]> {
    let (&tag, mut rest) = bytes.get(start..)?.split_first()?;
    if tag != tag::STR {
        return None;
    }
    let mut len: u64 = 0;
    let mut shift = 0;
    loop {
        let (&b, r) = rest.split_first()?;
        rest = r;
        len |= u64::from(b & 0x7f).checked_shl(shift)?;
        if b & 0x80 == 0 {
            break;
        }
        shift += 7;
    }
    (usize::try_from(len).ok()? == rest.len()).then_some(rest)
}

impl ser::SerializeSeq for SeqEncoder<'_> {
    type Ok = ();
    type Error = EncodeError;
    fn serialize_element<T: Serialize + ?Sized>(&mut self, value: &T) -> Result<(), EncodeError> {
        self.element(value)
    }
    fn end(self) -> Result<(), EncodeError> {
        self.finish()
    }
}

impl ser::SerializeTuple for SeqEncoder<'_> {
    type Ok = ();
    type Error = EncodeError;
    fn serialize_element<T: Serialize + ?Sized>(&mut self, value: &T) -> Result<(), EncodeError> {
        self.element(value)
    }
    fn end(self) -> Result<(), EncodeError> {
        self.finish()
    }
}

impl ser::SerializeTupleStruct for SeqEncoder<'_> {
    type Ok = ();
    type Error = EncodeError;
    fn serialize_field<T: Serialize + ?Sized>(&mut self, value: &T) -> Result<(), EncodeError> {
        self.element(value)
    }
    fn end(self) -> Result<(), EncodeError> {
        self.finish()
    }
}

impl ser::SerializeTupleVariant for SeqEncoder<'_> {
    type Ok = ();
    type Error = EncodeError;
    fn serialize_field<T: Serialize + ?Sized>(&mut self, value: &T) -> Result<(), EncodeError> {
        self.element(value)
    }
    fn end(self) -> Result<(), EncodeError> {
        self.finish()
    }
}

impl ser::SerializeMap for MapEncoder<'_> {
    type Ok = ();
    type Error = EncodeError;

    fn serialize_key<T: Serialize + ?Sized>(&mut self, key: &T) -> Result<(), EncodeError> {
        if self.pending.is_some() {
            return Err(EncodeError(
                "map key serialized twice without a value".to_owned(),
            ));
        }
        self.pending = Some(self.out.len());
        key.serialize(ValueSerializer::new(self.out))
            .map_err(|e| e.not_ignorable("a map's key"))
    }

    fn serialize_value<T: Serialize + ?Sized>(&mut self, value: &T) -> Result<(), EncodeError> {
        let Some(start) = self.pending.take() else {
            return Err(EncodeError("map value serialized without a key".to_owned()));
        };
        let spans = self.out.spans.len();
        self.entry_value(start, spans, value)
    }

    fn serialize_entry<K: Serialize + ?Sized, V: Serialize + ?Sized>(
        &mut self,
        key: &K,
        value: &V,
    ) -> Result<(), EncodeError> {
        ser::SerializeMap::serialize_key(self, key)?;
        ser::SerializeMap::serialize_value(self, value)
    }

    fn end(self) -> Result<(), EncodeError> {
        self.finish()
    }
}

impl ser::SerializeStruct for MapEncoder<'_> {
    type Ok = ();
    type Error = EncodeError;
    fn serialize_field<T: Serialize + ?Sized>(
        &mut self,
        key: &'static str,
        value: &T,
    ) -> Result<(), EncodeError> {
        self.field(key, value)
    }
    fn end(self) -> Result<(), EncodeError> {
        self.finish()
    }
}

impl ser::SerializeStructVariant for MapEncoder<'_> {
    type Ok = ();
    type Error = EncodeError;
    fn serialize_field<T: Serialize + ?Sized>(
        &mut self,
        key: &'static str,
        value: &T,
    ) -> Result<(), EncodeError> {
        self.field(key, value)
    }
    fn end(self) -> Result<(), EncodeError> {
        self.finish()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::key::encode::encode_into;

    #[test]
    fn string_at_reads_exactly_one_string() {
        let mut s = Scratch::default();
        s.put(b"xx");
        encode_into(&mut s, "héllo").expect("encodes");
        assert_eq!(string_at(&s.bytes, 2), Some("héllo".as_bytes()));
        assert_eq!(string_at(&s.bytes, 0), None);
        s.put_u8(0);
        assert_eq!(string_at(&s.bytes, 2), None, "trailing bytes");
        let mut n = Scratch::default();
        encode_into(&mut n, &5u8).expect("encodes");
        assert_eq!(string_at(&n.bytes, 0), None, "not a string");
        // A length whose LEB128 never ends, or overflows: no panic.
        assert_eq!(string_at(&[tag::STR, 0x80, 0x80], 0), None);
        let mut overlong = vec![tag::STR];
        overlong.extend([0xff; 12]);
        assert_eq!(string_at(&overlong, 0), None);
    }
}

//! The canonical value encoding (v2): a `serde::Serializer` that writes into a [`Scratch`]
//! buffer. Unordered containers (maps, structs, sets) are written entry after entry and then
//! reordered in place so their entries' encodings ascend bytewise.
//!
//! The format is specified in `docs/key-spec.md`; keep the two in sync.

use std::fmt;

use serde::Serialize;
use serde::ser;

use super::json::{self, JsonNumber, Token};
use super::raw;
use super::scratch::{Scratch, Span};
use super::unordered::UNORDERED_MAGIC;

/// One-byte tags of the value encoding.
pub(crate) mod tag {
    pub(crate) const UNIT: u8 = 0x00;
    pub(crate) const NONE: u8 = 0x01;
    pub(crate) const SOME: u8 = 0x02;
    pub(crate) const FALSE: u8 = 0x03;
    pub(crate) const TRUE: u8 = 0x04;
    pub(crate) const INT: u8 = 0x05;
    pub(crate) const FLOAT: u8 = 0x06;
    pub(crate) const STR: u8 = 0x07;
    pub(crate) const BYTES: u8 = 0x08;
    pub(crate) const UNIT_STRUCT: u8 = 0x09;
    pub(crate) const SEQ: u8 = 0x0A;
    pub(crate) const END: u8 = 0x0B;
    pub(crate) const MAP: u8 = 0x0C;
    pub(crate) const SET: u8 = 0x0D;
    pub(crate) const UNIT_VARIANT: u8 = 0x0E;
    pub(crate) const NEWTYPE_VARIANT: u8 = 0x0F;
    pub(crate) const TUPLE_VARIANT: u8 = 0x10;
    pub(crate) const STRUCT_VARIANT: u8 = 0x11;
}

/// The bits every NaN is encoded as.
const CANONICAL_NAN: u64 = 0x7ff8_0000_0000_0000;

/// Type-name prefixes of collections whose `Serialize` impl goes through `collect_seq` and whose
/// iteration order is not meaningful; they are encoded as sets (a heuristic, see the spec).
const SET_TYPE_PREFIXES: [&str; 3] = [
    "std::collections::hash::set::HashSet<",
    "alloc::collections::btree::set::BTreeSet<",
    "hashbrown::set::HashSet<",
];

/// A `Serialize` impl failed (or misused the serializer); carries its message.
#[derive(Debug)]
pub(crate) struct EncodeError(pub(crate) String);

impl fmt::Display for EncodeError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.0)
    }
}

impl std::error::Error for EncodeError {}

impl ser::Error for EncodeError {
    fn custom<T: fmt::Display>(msg: T) -> Self {
        EncodeError(msg.to_string())
    }
}

/// Appends the encoding of `value`; on error the buffer may hold a partial encoding (callers
/// roll back).
pub(crate) fn encode_into<V: Serialize + ?Sized>(
    out: &mut Scratch,
    value: &V,
) -> Result<(), EncodeError> {
    value.serialize(ValueSerializer::new(out))
}

/// Appends the entry `str(name) value` of a struct field or argument, returning its span; on
/// error the buffer is restored.
pub(crate) fn encode_field<V: Serialize + ?Sized>(
    out: &mut Scratch,
    name: &str,
    value: &V,
) -> Result<Span, EncodeError> {
    let (start, spans) = (out.len(), out.spans.len());
    out.put_u8(tag::STR);
    out.put_str(name);
    match value.serialize(ValueSerializer::new(out)) {
        Ok(()) => Ok(Span::new(&out.bytes, start, out.len())),
        Err(e) => {
            out.rollback(start, spans);
            Err(e)
        }
    }
}

/// Is `type_name` (of the iterator passed to `collect_seq`) a known unordered set type?
fn is_set_type(type_name: &str) -> bool {
    let mut name = type_name;
    while let Some(rest) = name.strip_prefix('&') {
        name = rest.strip_prefix("mut ").unwrap_or(rest);
    }
    SET_TYPE_PREFIXES.iter().any(|p| name.starts_with(p))
}

pub(crate) fn put_int(out: &mut Scratch, negative: bool, magnitude: u128) {
    out.put(&[tag::INT, u8::from(negative)]);
    out.put_uv(magnitude);
}

pub(crate) fn put_float(out: &mut Scratch, v: f64) {
    let bits = if v.is_nan() {
        CANONICAL_NAN
    } else if v == 0.0 {
        0
    } else {
        v.to_bits()
    };
    out.put_u8(tag::FLOAT);
    out.put(&bits.to_le_bytes());
}

/// The canonical serializer.
pub(crate) struct ValueSerializer<'a> {
    out: &'a mut Scratch,
    /// Encode the next sequence as a set (inside `Unordered`).
    as_set: bool,
}

impl<'a> ValueSerializer<'a> {
    pub(crate) fn new(out: &'a mut Scratch) -> Self {
        ValueSerializer { out, as_set: false }
    }

    fn int(self, negative: bool, magnitude: u128) -> Result<(), EncodeError> {
        put_int(self.out, negative, magnitude);
        Ok(())
    }

    fn signed(self, v: i128) -> Result<(), EncodeError> {
        self.int(v < 0, v.unsigned_abs())
    }
}

/// Encoder of sequences (ordered, or as sets) and of tuple variants.
pub(crate) struct SeqEncoder<'a> {
    out: &'a mut Scratch,
    /// For a set: where its elements begin and the index of its first span.
    set: Option<(usize, usize)>,
}

impl<'a> SeqEncoder<'a> {
    fn start(out: &'a mut Scratch, as_set: bool) -> Self {
        if as_set {
            out.put_u8(tag::SET);
            let set = Some((out.len(), out.spans.len()));
            SeqEncoder { out, set }
        } else {
            out.put_u8(tag::SEQ);
            SeqEncoder { out, set: None }
        }
    }

    fn element<T: Serialize + ?Sized>(&mut self, value: &T) -> Result<(), EncodeError> {
        let start = self.out.len();
        value.serialize(ValueSerializer::new(self.out))?;
        if self.set.is_some() {
            let span = Span::new(&self.out.bytes, start, self.out.len());
            self.out.spans.push(span);
        }
        Ok(())
    }

    fn finish(self) -> Result<(), EncodeError> {
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
    fn new(out: &'a mut Scratch, tag: u8) -> Self {
        out.put_u8(tag);
        MapEncoder::token(out, None)
    }

    fn token(out: &'a mut Scratch, token: Option<Token>) -> Self {
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
        let start = self.out.len();
        self.out.put_u8(tag::STR);
        self.out.put_str(key);
        value.serialize(ValueSerializer::new(self.out))?;
        let span = Span::new(&self.out.bytes, start, self.out.len());
        self.out.spans.push(span);
        Ok(())
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
    value.serialize(ValueSerializer::new(out))?;
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

impl<'a> ser::Serializer for ValueSerializer<'a> {
    type Ok = ();
    type Error = EncodeError;
    type SerializeSeq = SeqEncoder<'a>;
    type SerializeTuple = SeqEncoder<'a>;
    type SerializeTupleStruct = SeqEncoder<'a>;
    type SerializeTupleVariant = SeqEncoder<'a>;
    type SerializeMap = MapEncoder<'a>;
    type SerializeStruct = MapEncoder<'a>;
    type SerializeStructVariant = MapEncoder<'a>;

    fn serialize_bool(self, v: bool) -> Result<(), EncodeError> {
        self.out.put_u8(if v { tag::TRUE } else { tag::FALSE });
        Ok(())
    }

    fn serialize_i8(self, v: i8) -> Result<(), EncodeError> {
        self.signed(i128::from(v))
    }
    fn serialize_i16(self, v: i16) -> Result<(), EncodeError> {
        self.signed(i128::from(v))
    }
    fn serialize_i32(self, v: i32) -> Result<(), EncodeError> {
        self.signed(i128::from(v))
    }
    fn serialize_i64(self, v: i64) -> Result<(), EncodeError> {
        self.signed(i128::from(v))
    }
    fn serialize_i128(self, v: i128) -> Result<(), EncodeError> {
        self.signed(v)
    }
    fn serialize_u8(self, v: u8) -> Result<(), EncodeError> {
        self.int(false, u128::from(v))
    }
    fn serialize_u16(self, v: u16) -> Result<(), EncodeError> {
        self.int(false, u128::from(v))
    }
    fn serialize_u32(self, v: u32) -> Result<(), EncodeError> {
        self.int(false, u128::from(v))
    }
    fn serialize_u64(self, v: u64) -> Result<(), EncodeError> {
        self.int(false, u128::from(v))
    }
    fn serialize_u128(self, v: u128) -> Result<(), EncodeError> {
        self.int(false, v)
    }

    fn serialize_f32(self, v: f32) -> Result<(), EncodeError> {
        self.serialize_f64(f64::from(v))
    }

    fn serialize_f64(self, v: f64) -> Result<(), EncodeError> {
        put_float(self.out, v);
        Ok(())
    }

    fn serialize_char(self, v: char) -> Result<(), EncodeError> {
        let mut buf = [0; 4];
        self.serialize_str(v.encode_utf8(&mut buf))
    }

    fn serialize_str(self, v: &str) -> Result<(), EncodeError> {
        self.out.put_u8(tag::STR);
        self.out.put_str(v);
        Ok(())
    }

    fn serialize_bytes(self, v: &[u8]) -> Result<(), EncodeError> {
        self.out.put_u8(tag::BYTES);
        self.out.put_len(v.len());
        self.out.put(v);
        Ok(())
    }

    fn serialize_none(self) -> Result<(), EncodeError> {
        self.out.put_u8(tag::NONE);
        Ok(())
    }

    fn serialize_some<T: Serialize + ?Sized>(self, value: &T) -> Result<(), EncodeError> {
        self.out.put_u8(tag::SOME);
        value.serialize(ValueSerializer::new(self.out))
    }

    fn serialize_unit(self) -> Result<(), EncodeError> {
        self.out.put_u8(tag::UNIT);
        Ok(())
    }

    fn serialize_unit_struct(self, _name: &'static str) -> Result<(), EncodeError> {
        self.out.put_u8(tag::UNIT_STRUCT);
        Ok(())
    }

    fn serialize_unit_variant(
        self,
        _name: &'static str,
        _index: u32,
        variant: &'static str,
    ) -> Result<(), EncodeError> {
        self.out.put_u8(tag::UNIT_VARIANT);
        self.out.put_str(variant);
        Ok(())
    }

    fn serialize_newtype_struct<T: Serialize + ?Sized>(
        self,
        name: &'static str,
        value: &T,
    ) -> Result<(), EncodeError> {
        let as_set = self.as_set || name == UNORDERED_MAGIC;
        value.serialize(ValueSerializer {
            out: self.out,
            as_set,
        })
    }

    fn serialize_newtype_variant<T: Serialize + ?Sized>(
        self,
        _name: &'static str,
        _index: u32,
        variant: &'static str,
        value: &T,
    ) -> Result<(), EncodeError> {
        self.out.put_u8(tag::NEWTYPE_VARIANT);
        self.out.put_str(variant);
        value.serialize(ValueSerializer::new(self.out))
    }

    fn serialize_seq(self, _len: Option<usize>) -> Result<SeqEncoder<'a>, EncodeError> {
        Ok(SeqEncoder::start(self.out, self.as_set))
    }

    fn serialize_tuple(self, _len: usize) -> Result<SeqEncoder<'a>, EncodeError> {
        Ok(SeqEncoder::start(self.out, false))
    }

    fn serialize_tuple_struct(
        self,
        _name: &'static str,
        _len: usize,
    ) -> Result<SeqEncoder<'a>, EncodeError> {
        Ok(SeqEncoder::start(self.out, false))
    }

    fn serialize_tuple_variant(
        self,
        _name: &'static str,
        _index: u32,
        variant: &'static str,
        _len: usize,
    ) -> Result<SeqEncoder<'a>, EncodeError> {
        self.out.put_u8(tag::TUPLE_VARIANT);
        self.out.put_str(variant);
        Ok(SeqEncoder {
            out: self.out,
            set: None,
        })
    }

    fn serialize_map(self, _len: Option<usize>) -> Result<MapEncoder<'a>, EncodeError> {
        Ok(MapEncoder::new(self.out, tag::MAP))
    }

    fn serialize_struct(
        self,
        name: &'static str,
        _len: usize,
    ) -> Result<MapEncoder<'a>, EncodeError> {
        Ok(match Token::of(name) {
            Some(token) => MapEncoder::token(self.out, Some(token)),
            None => MapEncoder::new(self.out, tag::MAP),
        })
    }

    fn serialize_struct_variant(
        self,
        _name: &'static str,
        _index: u32,
        variant: &'static str,
        _len: usize,
    ) -> Result<MapEncoder<'a>, EncodeError> {
        self.out.put_u8(tag::STRUCT_VARIANT);
        self.out.put_str(variant);
        Ok(MapEncoder::token(self.out, None))
    }

    fn collect_seq<I>(self, iter: I) -> Result<(), EncodeError>
    where
        I: IntoIterator,
        I::Item: Serialize,
    {
        let as_set = self.as_set || is_set_type(std::any::type_name::<I>());
        let mut seq = SeqEncoder::start(self.out, as_set);
        for item in iter {
            seq.element(&item)?;
        }
        seq.finish()
    }
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
    }

    fn serialize_value<T: Serialize + ?Sized>(&mut self, value: &T) -> Result<(), EncodeError> {
        let Some(start) = self.pending.take() else {
            return Err(EncodeError("map value serialized without a key".to_owned()));
        };
        value.serialize(ValueSerializer::new(self.out))?;
        let span = Span::new(&self.out.bytes, start, self.out.len());
        self.out.spans.push(span);
        Ok(())
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

    #[test]
    fn set_type_names() {
        assert!(is_set_type(
            "&std::collections::hash::set::HashSet<u32, std::hash::random::RandomState>"
        ));
        assert!(is_set_type(
            "&&mut alloc::collections::btree::set::BTreeSet<u32>"
        ));
        assert!(is_set_type("hashbrown::set::HashSet<u32>"));
        assert!(!is_set_type("&alloc::vec::Vec<u32>"));
        assert!(!is_set_type("std::collections::hash::set::Iter<'_, u32>"));
    }

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

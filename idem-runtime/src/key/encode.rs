//! The canonical value encoding (v3): a `serde::Serializer` that writes into a [`Scratch`]
//! buffer. Unordered containers (maps, structs, sets) are written entry after entry and then
//! reordered in place so their entries' encodings ascend bytewise.
//!
//! The format is specified in `docs/key-spec.md`; keep the two in sync.

use std::fmt;

use serde::Serialize;
use serde::ser;

use super::compound::{MapEncoder, SeqEncoder};
use super::ignored::IGNORED_MAGIC;
use super::json::Token;
use super::scratch::{Scratch, Span};
use super::sets::{UNORDERED_MAGIC, iterable_is_set};

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

/// Strings and byte strings of at least this many bytes (one BLAKE3 chunk) are encoded by their
/// BLAKE3 hash, computed on the caller's bytes in one aligned pass (the fast path of BLAKE3).
pub(crate) const LONG_TEXT: usize = 1024;

/// Appends a string (`tag::STR`) or byte string (`tag::BYTES`) value:
/// `tag ‖ uv(len) ‖ bytes` below [`LONG_TEXT`] bytes, `tag ‖ uv(len) ‖ BLAKE3(bytes)` from it on.
#[cfg_attr(not(debug_assertions), inline)]
pub(crate) fn put_text(out: &mut Scratch, tag: u8, bytes: &[u8]) {
    if let Ok(len @ 0..0x80) = u8::try_from(bytes.len()) {
        // The common case, in one reservation: a tag, a one-byte length, the bytes.
        let b = &mut out.bytes;
        b.reserve(bytes.len() + 2);
        b.extend_from_slice(&[tag, len]);
        b.extend_from_slice(bytes);
    } else {
        put_long_text(out, tag, bytes);
    }
}

/// [`put_text`] from 128 bytes on: out of line, so that the short case stays small.
#[cold]
#[inline(never)]
fn put_long_text(out: &mut Scratch, tag: u8, bytes: &[u8]) {
    out.put_u8(tag);
    out.put_len(bytes.len());
    if bytes.len() < LONG_TEXT {
        out.put(bytes);
    } else {
        out.put(blake3::hash(bytes).as_bytes());
    }
}

/// The bits every NaN is encoded as.
const CANONICAL_NAN: u64 = 0x7ff8_0000_0000_0000;

/// A `Serialize` impl failed (or misused the serializer); carries its message.
#[derive(Debug)]
pub(crate) struct EncodeError(pub(crate) String);

impl fmt::Display for EncodeError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.0)
    }
}

impl std::error::Error for EncodeError {}

/// What a value marked [`ignored`](super::ignored) with no struct field around it says.
const IGNORED_OUTSIDE_A_FIELD: &str = "a value marked `idem_tools::key::ignored` is left out of \
    the key with the struct field or map entry it is in; this one is not inside a struct field \
    or map entry (mark a field of the argument's struct, or leave the argument out with \
    `ignore(..)`)";

impl EncodeError {
    /// A marked value: the struct field or map entry around it is left out.
    fn ignored() -> Self {
        EncodeError(IGNORED_OUTSIDE_A_FIELD.to_owned())
    }

    /// Whether this is a marked value, which the struct field or map entry around it leaves out.
    pub(crate) fn is_ignored(&self) -> bool {
        self.0 == IGNORED_OUTSIDE_A_FIELD
    }

    /// This error, where a marked value cannot be left out without leaving out more than it —
    /// `inside` (an element of a sequence, a variant's content, a map's key) — and so must not
    /// reach the struct field around it: an encoding error.
    pub(crate) fn not_ignorable(self, inside: &str) -> Self {
        if self.is_ignored() {
            EncodeError(format!(
                "a value marked `idem_tools::key::ignored` is {inside}, which the key cannot \
                 leave out without what is around it: mark a field of a struct, or a map's value"
            ))
        } else {
            self
        }
    }
}

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

/// Appends the entry `str(name) value` of an argument, returning its span; on error the
/// buffer is restored. Only the value's `serialize` is compiled for each argument type.
pub(crate) fn encode_field<V: Serialize + ?Sized>(
    out: &mut Scratch,
    name: &str,
    value: &V,
) -> Result<Span, EncodeError> {
    let start = field_start(out, name);
    let encoded = value.serialize(ValueSerializer::new(out));
    field_end(out, start, encoded)
}

/// Where an entry begins (the buffer's length and span count), its name appended: an
/// argument's, or a struct field's or map entry's ([`MapEncoder`]).
#[cfg_attr(not(debug_assertions), inline)]
pub(crate) fn field_start(out: &mut Scratch, name: &str) -> (usize, usize) {
    let start = (out.len(), out.spans.len());
    put_text(out, tag::STR, name.as_bytes());
    start
}

/// The span of the entry begun at `start`, or the error its value's encoding failed with, the
/// buffer restored.
#[cfg_attr(not(debug_assertions), inline)]
fn field_end(
    out: &mut Scratch,
    (start, spans): (usize, usize),
    encoded: Result<(), EncodeError>,
) -> Result<Span, EncodeError> {
    match encoded {
        Ok(()) => Ok(Span::new(&out.bytes, start, out.len())),
        Err(e) => {
            out.rollback(start, spans);
            Err(e)
        }
    }
}

#[cfg_attr(not(debug_assertions), inline)]
pub(crate) fn put_int(out: &mut Scratch, negative: bool, magnitude: u128) {
    if let Ok(small @ 0..0x80) = u8::try_from(magnitude) {
        out.put(&[tag::INT, u8::from(negative), small]);
        return;
    }
    out.put(&[tag::INT, u8::from(negative)]);
    out.put_uv(magnitude);
}

#[cfg_attr(not(debug_assertions), inline)]
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
    /// Write a string in full whatever its length (the text of a serde_json token).
    verbatim: bool,
}

impl<'a> ValueSerializer<'a> {
    // `inline` in optimized builds only, here and below: in a debug build, a crate with tools
    // would compile a copy of each such function it calls (BENCHMARKS.md, "Compile cost").
    #[cfg_attr(not(debug_assertions), inline)]
    pub(crate) fn new(out: &'a mut Scratch) -> Self {
        ValueSerializer {
            out,
            as_set: false,
            verbatim: false,
        }
    }

    /// A serializer that writes a string value in full, even from [`LONG_TEXT`] bytes on.
    pub(crate) fn verbatim(out: &'a mut Scratch) -> Self {
        ValueSerializer {
            out,
            as_set: false,
            verbatim: true,
        }
    }

    #[cfg_attr(not(debug_assertions), inline)]
    fn int(self, negative: bool, magnitude: u128) -> Result<(), EncodeError> {
        put_int(self.out, negative, magnitude);
        Ok(())
    }

    #[cfg_attr(not(debug_assertions), inline)]
    fn signed(self, v: i128) -> Result<(), EncodeError> {
        self.int(v < 0, v.unsigned_abs())
    }
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

    #[cfg_attr(not(debug_assertions), inline)]
    fn serialize_bool(self, v: bool) -> Result<(), EncodeError> {
        self.out.put_u8(if v { tag::TRUE } else { tag::FALSE });
        Ok(())
    }

    #[cfg_attr(not(debug_assertions), inline)]
    fn serialize_i8(self, v: i8) -> Result<(), EncodeError> {
        self.signed(i128::from(v))
    }
    #[cfg_attr(not(debug_assertions), inline)]
    fn serialize_i16(self, v: i16) -> Result<(), EncodeError> {
        self.signed(i128::from(v))
    }
    #[cfg_attr(not(debug_assertions), inline)]
    fn serialize_i32(self, v: i32) -> Result<(), EncodeError> {
        self.signed(i128::from(v))
    }
    #[cfg_attr(not(debug_assertions), inline)]
    fn serialize_i64(self, v: i64) -> Result<(), EncodeError> {
        self.signed(i128::from(v))
    }
    fn serialize_i128(self, v: i128) -> Result<(), EncodeError> {
        self.signed(v)
    }
    #[cfg_attr(not(debug_assertions), inline)]
    fn serialize_u8(self, v: u8) -> Result<(), EncodeError> {
        self.int(false, u128::from(v))
    }
    #[cfg_attr(not(debug_assertions), inline)]
    fn serialize_u16(self, v: u16) -> Result<(), EncodeError> {
        self.int(false, u128::from(v))
    }
    #[cfg_attr(not(debug_assertions), inline)]
    fn serialize_u32(self, v: u32) -> Result<(), EncodeError> {
        self.int(false, u128::from(v))
    }
    #[cfg_attr(not(debug_assertions), inline)]
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

    #[cfg_attr(not(debug_assertions), inline)]
    fn serialize_str(self, v: &str) -> Result<(), EncodeError> {
        if self.verbatim {
            self.out.put_u8(tag::STR);
            self.out.put_str(v);
        } else {
            put_text(self.out, tag::STR, v.as_bytes());
        }
        Ok(())
    }

    fn serialize_bytes(self, v: &[u8]) -> Result<(), EncodeError> {
        put_text(self.out, tag::BYTES, v);
        Ok(())
    }

    #[cfg_attr(not(debug_assertions), inline)]
    fn serialize_none(self) -> Result<(), EncodeError> {
        self.out.put_u8(tag::NONE);
        Ok(())
    }

    fn serialize_some<T: Serialize + ?Sized>(self, value: &T) -> Result<(), EncodeError> {
        self.out.put_u8(tag::SOME);
        value.serialize(ValueSerializer::new(self.out))
    }

    #[cfg_attr(not(debug_assertions), inline)]
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
        if name == IGNORED_MAGIC {
            return Err(EncodeError::ignored()); // the field or entry around it is left out (§4.3)
        }
        // Transparent: a token struct's text keeps being written in full inside it (§4.5).
        let as_set = self.as_set || name == UNORDERED_MAGIC;
        value.serialize(ValueSerializer {
            out: self.out,
            as_set,
            verbatim: self.verbatim,
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
        value
            .serialize(ValueSerializer::new(self.out))
            .map_err(|e| e.not_ignorable("the content of an enum variant"))
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
        Ok(SeqEncoder::start_variant(self.out))
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
        let as_set = self.as_set || iterable_is_set::<I>();
        let mut seq = SeqEncoder::start(self.out, as_set);
        for item in iter {
            seq.element(&item)?;
        }
        seq.finish()
    }
}

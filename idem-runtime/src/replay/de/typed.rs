//! What a type asks for by name (`deserialize_u64`, `deserialize_struct`, …): a value of the
//! kinds that request can take is offered to the visitor as `deserialize_any` offers it (an
//! integer at its recorded width, a variant to a map or struct as `{name: content}`, text,
//! chars and bytes to a text request); a value of another kind — a string for a number, a
//! number for text — is an `invalid type` error, as `serde_json` answers it. So only the
//! visitor methods a request can use are compiled for each visitor.

use serde::de::{self, Unexpected, Visitor};

use super::{Decoder, VariantEntry};
use crate::replay::format::{FormatError, tag, tri};
use crate::replay::head::{self, Head};
use crate::replay::node;

impl<'de> Decoder<'de> {
    // `inline` in optimized builds only, here and below: in a debug build, a crate with tools
    // would compile a copy of each such function it calls (BENCHMARKS.md, "Compile cost").
    /// The head of the next value.
    #[cfg_attr(not(debug_assertions), inline)]
    pub(super) fn head(&mut self) -> Result<Head<'de>, FormatError> {
        if let Some(name) = self.name.take() {
            return Ok(Head::Str(name));
        }
        let t = self.tag()?;
        head::read(&mut self.reader, t)
    }

    /// An integer of up to 64 bits, at its recorded width (a visitor may take only its own).
    pub(super) fn integer<V: Visitor<'de>>(&mut self, visitor: V) -> Result<V::Value, FormatError> {
        match tri!(self.head()) {
            Head::U8(v) => visitor.visit_u8(v),
            Head::U16(v) => visitor.visit_u16(v),
            Head::U32(v) => visitor.visit_u32(v),
            Head::U64(v) => visitor.visit_u64(v),
            Head::I8(v) => visitor.visit_i8(v),
            Head::I16(v) => visitor.visit_i16(v),
            Head::I32(v) => visitor.visit_i32(v),
            Head::I64(v) => visitor.visit_i64(v),
            other => Err(invalid(other, &visitor)),
        }
    }

    /// A 128-bit integer, or a narrower one.
    pub(super) fn integer128<V: Visitor<'de>>(
        &mut self,
        visitor: V,
    ) -> Result<V::Value, FormatError> {
        match tri!(self.peek_tag()) {
            tag::U128 | tag::I128 => match tri!(self.head()) {
                Head::U128(v) => visitor.visit_u128(v),
                Head::I128(v) => visitor.visit_i128(v),
                other => Err(invalid(other, &visitor)),
            },
            _ => self.integer(visitor),
        }
    }

    /// A float, as its bits were recorded, or an integer.
    pub(super) fn float<V: Visitor<'de>>(&mut self, visitor: V) -> Result<V::Value, FormatError> {
        match tri!(self.peek_tag()) {
            tag::F32 | tag::F64 => match tri!(self.head()) {
                Head::F32(bits) => visitor.visit_f32(f32::from_bits(bits)),
                Head::F64(bits) => visitor.visit_f64(f64::from_bits(bits)),
                other => Err(invalid(other, &visitor)),
            },
            _ => self.integer(visitor),
        }
    }

    /// Text (a unit variant read without its enum is its name, as in JSON), a char (as the
    /// text it is, which every visitor of text takes), or bytes (a visitor of text may take
    /// them).
    pub(super) fn text<V: Visitor<'de>>(&mut self, visitor: V) -> Result<V::Value, FormatError> {
        let mut buf = [0; 4];
        match self.text_head(&mut buf, &visitor) {
            Ok(Text::Borrowed(v)) => visitor.visit_borrowed_str(v),
            Ok(Text::Char(v)) => visitor.visit_str(v),
            Ok(Text::Bytes(v)) => visitor.visit_borrowed_bytes(v),
            Err(error) => Err(error),
        }
    }

    /// What [`text`](Self::text) offers its visitor, read (compiled once: a crate's every
    /// struct has a visitor of text, its fields' names); a char is written in `buf`. Always
    /// inlined in optimized builds, where the split would cost a replay ~90 instructions.
    #[cfg_attr(not(debug_assertions), inline(always))]
    fn text_head<'b>(
        &mut self,
        buf: &'b mut [u8; 4],
        expected: &dyn de::Expected,
    ) -> Result<Text<'de, 'b>, FormatError> {
        match tri!(self.head()) {
            Head::Str(v) | Head::UnitVariant(v) => Ok(Text::Borrowed(v)),
            Head::Char(v) => Ok(Text::Char(v.encode_utf8(buf))),
            Head::Bytes(v) => Ok(Text::Bytes(v)),
            other => Err(invalid(other, expected)),
        }
    }

    /// A sequence (a set reads as the sequence it was written as).
    pub(super) fn sequence<V: Visitor<'de>>(
        &mut self,
        visitor: V,
    ) -> Result<V::Value, FormatError> {
        match tri!(self.head()) {
            Head::Seq(len) | Head::Set(len) => self.seq(len, visitor),
            other => Err(invalid(other, &visitor)),
        }
    }

    /// A map, or a newtype, tuple or struct variant read as `{name: content}`.
    pub(super) fn mapping<V: Visitor<'de>>(&mut self, visitor: V) -> Result<V::Value, FormatError> {
        match tri!(self.head()) {
            Head::Map(len) => self.entries(len, None, visitor),
            Head::Variant(kind, name) => self.entries(1, VariantEntry::as_map(kind, name), visitor),
            other => Err(invalid(other, &visitor)),
        }
    }

    /// A struct: a map of its fields, or a sequence of them (or a variant read as a map).
    pub(super) fn fields<V: Visitor<'de>>(&mut self, visitor: V) -> Result<V::Value, FormatError> {
        match self.fields_head(&visitor) {
            Ok(Fields::Map(len, variant)) => self.entries(len, variant, visitor),
            Ok(Fields::Seq(len)) => self.seq(len, visitor),
            Err(error) => Err(error),
        }
    }

    /// What [`fields`](Self::fields) offers its visitor, read (compiled once: a crate's every
    /// struct has a visitor of fields; always inlined in optimized builds, as `text_head`).
    #[cfg_attr(not(debug_assertions), inline(always))]
    fn fields_head(&mut self, expected: &dyn de::Expected) -> Result<Fields<'de>, FormatError> {
        match tri!(self.head()) {
            Head::Map(len) => Ok(Fields::Map(len, None)),
            Head::Seq(len) | Head::Set(len) => Ok(Fields::Seq(len)),
            Head::Variant(kind, name) => Ok(Fields::Map(1, VariantEntry::as_map(kind, name))),
            other => Err(invalid(other, expected)),
        }
    }

    pub(super) fn boolean<V: Visitor<'de>>(&mut self, visitor: V) -> Result<V::Value, FormatError> {
        match tri!(self.head()) {
            Head::Bool(v) => visitor.visit_bool(v),
            other => Err(invalid(other, &visitor)),
        }
    }

    /// A char, or text (of one char, or the visitor refuses it).
    pub(super) fn character<V: Visitor<'de>>(
        &mut self,
        visitor: V,
    ) -> Result<V::Value, FormatError> {
        match tri!(self.head()) {
            Head::Char(v) => visitor.visit_char(v),
            Head::Str(v) => visitor.visit_borrowed_str(v),
            other => Err(invalid(other, &visitor)),
        }
    }

    /// Bytes, or what `serde_bytes` also reads them from: a sequence, text.
    pub(super) fn bytes<V: Visitor<'de>>(&mut self, visitor: V) -> Result<V::Value, FormatError> {
        match tri!(self.head()) {
            Head::Bytes(v) => visitor.visit_borrowed_bytes(v),
            Head::Str(v) => visitor.visit_borrowed_str(v),
            Head::Seq(len) | Head::Set(len) => self.seq(len, visitor),
            other => Err(invalid(other, &visitor)),
        }
    }

    pub(super) fn unit<V: Visitor<'de>>(&mut self, visitor: V) -> Result<V::Value, FormatError> {
        match tri!(self.head()) {
            Head::Unit => visitor.visit_unit(),
            other => Err(invalid(other, &visitor)),
        }
    }

    /// Skips the value (read as a tree, which the visitor never sees).
    pub(super) fn ignored<V: Visitor<'de>>(&mut self, visitor: V) -> Result<V::Value, FormatError> {
        tri!(self.skip());
        visitor.visit_unit()
    }
}

impl Decoder<'_> {
    /// Skips the next value (compiled once: see [`ignored`](Self::ignored)).
    fn skip(&mut self) -> Result<(), FormatError> {
        if self.name.take().is_some() {
            return Ok(());
        }
        let t = self.tag()?;
        node::read_tagged(&mut self.reader, t, self.depth).map(drop)
    }
}

/// What a request for a struct reads: the entries of a map (or of a variant read as a map),
/// or the elements of a sequence.
enum Fields<'de> {
    Map(usize, Option<VariantEntry<'de>>),
    Seq(usize),
}

/// What a request for text reads: text borrowed from the record, a char's text, or bytes.
enum Text<'de, 'b> {
    Borrowed(&'de str),
    Char(&'b str),
    Bytes(&'de [u8]),
}

/// The error for a value of another kind than the type asked for (compiled once: the generic
/// callers pass their visitor as what was expected).
fn invalid(head: Head<'_>, expected: &dyn de::Expected) -> FormatError {
    let unexpected = match head {
        Head::None | Head::Some => Unexpected::Option,
        Head::Unit => Unexpected::Unit,
        Head::Bool(v) => Unexpected::Bool(v),
        Head::U8(v) => Unexpected::Unsigned(v.into()),
        Head::U16(v) => Unexpected::Unsigned(v.into()),
        Head::U32(v) => Unexpected::Unsigned(v.into()),
        Head::U64(v) => Unexpected::Unsigned(v),
        Head::U128(_) => Unexpected::Other("a u128"),
        Head::I8(v) => Unexpected::Signed(v.into()),
        Head::I16(v) => Unexpected::Signed(v.into()),
        Head::I32(v) => Unexpected::Signed(v.into()),
        Head::I64(v) => Unexpected::Signed(v),
        Head::I128(_) => Unexpected::Other("an i128"),
        Head::F32(bits) => Unexpected::Float(f32::from_bits(bits).into()),
        Head::F64(bits) => Unexpected::Float(f64::from_bits(bits)),
        Head::Char(v) => Unexpected::Char(v),
        Head::Str(v) => Unexpected::Str(v),
        Head::Bytes(v) => Unexpected::Bytes(v),
        Head::Seq(_) | Head::Set(_) => Unexpected::Seq,
        Head::Map(_) => Unexpected::Map,
        Head::UnitVariant(_) => Unexpected::UnitVariant,
        Head::Variant(tag::NEWTYPE_VARIANT, _) => Unexpected::NewtypeVariant,
        Head::Variant(tag::TUPLE_VARIANT, _) => Unexpected::TupleVariant,
        Head::Variant(..) => Unexpected::StructVariant,
    };
    de::Error::invalid_type(unexpected, expected)
}

//! The serde `Deserializer` of the record format. Self-describing: `deserialize_any` works, so
//! untagged and internally tagged enums, `#[serde(flatten)]` and `serde_json::Value` decode.
//! Only `deserialize_any` offers a value to every visitor method (compiled for each visitor it
//! is given); what a type asks for by name is read as `serde_json` reads it (`typed.rs`).

mod typed;
mod variant;

use serde::de::{self, DeserializeOwned, DeserializeSeed, Visitor};

use super::format::{FormatError, MAX_DEPTH, Reader, tag, tag_name, tri};
use super::head::Head;
use variant::Variant;

/// Decodes one value that must fill `bytes` exactly.
pub(super) fn decode_value<T: DeserializeOwned>(bytes: &[u8]) -> Result<T, FormatError> {
    let mut de = Decoder::new(bytes);
    match T::deserialize(&mut de) {
        Ok(value) => match all_consumed(&de) {
            Ok(()) => Ok(value),
            Err(error) => Err(error),
        },
        Err(error) => Err(located(&de, error)),
    }
}

/// Refuses bytes left after the value. Compiled once, like [`located`].
fn all_consumed(de: &Decoder<'_>) -> Result<(), FormatError> {
    match de.reader.remaining() {
        0 => Ok(()),
        left => Err(FormatError::new(format!(
            "{left} unexpected bytes after the value, at byte {}",
            de.reader.offset()
        ))),
    }
}

/// The error, saying at which byte it happened if it does not already.
fn located(de: &Decoder<'_>, error: FormatError) -> FormatError {
    if error.0.contains(" at byte ") {
        return error;
    }
    FormatError::new(format!("{}, at byte {}", error.0, de.reader.offset()))
}

/// Reads values from a byte slice.
pub(super) struct Decoder<'de> {
    reader: Reader<'de>,
    depth: usize,
    /// The tag of the next value, when it is not in the input: the content of a tuple or struct
    /// variant read as a map's value is a sequence or a map whose count follows the variant's
    /// name ([`Entries::next_value_seed`]).
    tag: Option<u8>,
    /// The next value, when it is not in the input: a string, the name of a variant read as
    /// the key of the one-entry map it is read as ([`Entries::next_key_seed`]), or as the
    /// identifier of an enum's variant ([`Variant`]). Read through the same requests as a
    /// value in the input, so that a key's visitor is compiled for this decoder alone.
    name: Option<&'de str>,
}

impl<'de> Decoder<'de> {
    fn new(input: &'de [u8]) -> Self {
        Decoder {
            reader: Reader::new(input),
            depth: 0,
            tag: None,
            name: None,
        }
    }

    // `inline` in optimized builds only, here and below: in a debug build, a crate with tools
    // would compile a copy of each such function it calls (BENCHMARKS.md, "Compile cost").
    /// The next value's tag, read.
    #[cfg_attr(not(debug_assertions), inline)]
    fn tag(&mut self) -> Result<u8, FormatError> {
        match self.tag.take() {
            Some(t) => Ok(t),
            None => self.reader.byte(),
        }
    }

    /// The next value's tag, not read.
    #[cfg_attr(not(debug_assertions), inline)]
    fn peek_tag(&self) -> Result<u8, FormatError> {
        if self.name.is_some() {
            return Ok(tag::STR);
        }
        match self.tag {
            Some(t) => Ok(t),
            None => self.reader.peek(),
        }
    }

    /// Enters the next value, a variant: its kind, its name (a string names a unit variant, as
    /// in JSON), and whether its content is a level deeper — a variant read from the input is;
    /// a name that is the next value ([`Decoder::name`], a key's) has no content. Compiled
    /// once, like [`head`](Self::head); [`leave_variant`](Self::leave_variant) follows.
    fn enter_variant(&mut self) -> Result<(u8, &'de str, bool), FormatError> {
        if let Some(name) = self.name.take() {
            return Ok((tag::UNIT_VARIANT, name, false));
        }
        let kind = match self.tag()? {
            t @ (tag::UNIT_VARIANT
            | tag::NEWTYPE_VARIANT
            | tag::TUPLE_VARIANT
            | tag::STRUCT_VARIANT) => t,
            tag::STR => tag::UNIT_VARIANT,
            other => {
                return Err(FormatError::new(format!(
                    "expected an enum variant, found {} at byte {}",
                    tag_name(other),
                    self.reader.offset().saturating_sub(1)
                )));
            }
        };
        let name = self.reader.str()?;
        self.descend()?;
        Ok((kind, name, true))
    }

    /// After the type read the variant [`enter_variant`](Self::enter_variant) entered: a level
    /// up if it went down, and the variant's name, if the type did not read it, is not the next
    /// value.
    fn leave_variant(&mut self, deeper: bool) {
        self.name = None;
        if deeper {
            self.ascend();
        }
    }

    /// One level deeper, within [`MAX_DEPTH`] (compiled once: the generic code only calls it).
    /// Each `descend` is followed by an [`ascend`](Self::ascend) around the nested read, written
    /// out rather than taken as a closure, which would compile once per call site and type.
    fn descend(&mut self) -> Result<(), FormatError> {
        if self.depth >= MAX_DEPTH {
            return Err(FormatError::new(format!(
                "values nest deeper than {MAX_DEPTH} levels at byte {}",
                self.reader.offset()
            )));
        }
        self.depth += 1;
        Ok(())
    }

    /// One level up again, after the read a [`descend`](Self::descend) began.
    fn ascend(&mut self) {
        self.depth -= 1;
    }

    // `matches!` rather than `is_err`, here and in `entries`: a call in a debug build, compiled
    // once more for every visitor's value type.
    #[allow(clippy::redundant_pattern_matching)]
    #[inline]
    fn seq<V: Visitor<'de>>(&mut self, len: usize, visitor: V) -> Result<V::Value, FormatError> {
        tri!(self.descend());
        let mut access = Elements {
            de: self,
            left: len,
        };
        let value = visitor.visit_seq(&mut access);
        match access.end(matches!(value, Err(_))) {
            None => value,
            Some(error) => Err(error),
        }
    }

    /// The `len` entries of a map, or (`variant`) the one entry of a variant read as a map,
    /// offered to the visitor; every one must be read.
    #[allow(clippy::redundant_pattern_matching)]
    fn entries<V: Visitor<'de>>(
        &mut self,
        len: usize,
        variant: Option<VariantEntry<'de>>,
        visitor: V,
    ) -> Result<V::Value, FormatError> {
        tri!(self.descend());
        let mut access = Entries {
            de: self,
            left: len,
            variant,
        };
        let value = visitor.visit_map(&mut access);
        match access.end(matches!(value, Err(_))) {
            None => value,
            Some(error) => Err(error),
        }
    }

    /// The value after a `Some` (or a value recorded before its field became optional).
    #[inline]
    fn some<V: Visitor<'de>>(&mut self, visitor: V) -> Result<V::Value, FormatError> {
        tri!(self.descend());
        let value = visitor.visit_some(&mut *self);
        self.ascend();
        value
    }

    /// The value `head` begins, as the type's visitor takes it.
    fn any<V: Visitor<'de>>(
        &mut self,
        head: Head<'de>,
        visitor: V,
    ) -> Result<V::Value, FormatError> {
        match head {
            Head::None => visitor.visit_none(),
            Head::Some => self.some(visitor),
            Head::Unit => visitor.visit_unit(),
            Head::Bool(v) => visitor.visit_bool(v),
            Head::U8(v) => visitor.visit_u8(v),
            Head::U16(v) => visitor.visit_u16(v),
            Head::U32(v) => visitor.visit_u32(v),
            Head::U64(v) => visitor.visit_u64(v),
            Head::U128(v) => visitor.visit_u128(v),
            Head::I8(v) => visitor.visit_i8(v),
            Head::I16(v) => visitor.visit_i16(v),
            Head::I32(v) => visitor.visit_i32(v),
            Head::I64(v) => visitor.visit_i64(v),
            Head::I128(v) => visitor.visit_i128(v),
            Head::F32(bits) => visitor.visit_f32(f32::from_bits(bits)),
            Head::F64(bits) => visitor.visit_f64(f64::from_bits(bits)),
            Head::Char(v) => visitor.visit_char(v),
            // Variants read without a type's guidance look as they do in JSON: a unit variant
            // is its name, the others a one-entry map from the name to the content. This is
            // what untagged and internally tagged enums expect.
            Head::Str(v) | Head::UnitVariant(v) => visitor.visit_borrowed_str(v),
            Head::Bytes(v) => visitor.visit_borrowed_bytes(v),
            // A set reads as the sequence it was written as; the type decides what it holds.
            Head::Seq(len) | Head::Set(len) => self.seq(len, visitor),
            Head::Map(len) => self.entries(len, None, visitor),
            Head::Variant(kind, name) => self.entries(1, VariantEntry::as_map(kind, name), visitor),
        }
    }
}

/// The error for a collection the type did not read to its end (`left` of its `what`).
fn unread(left: usize, what: &str) -> Option<FormatError> {
    match left {
        0 => None,
        left => Some(FormatError::new(format!(
            "the record holds {left} more {what} than the type reads"
        ))),
    }
}

/// `Deserializer` methods each answered by one of [`Decoder`]'s typed reads.
macro_rules! typed_requests {
    ($($($method:ident)+ => $read:ident,)+) => {$($(
        fn $method<V: Visitor<'de>>(self, visitor: V) -> Result<V::Value, FormatError> {
            self.$read(visitor)
        }
    )+)+};
}

impl<'de> de::Deserializer<'de> for &mut Decoder<'de> {
    type Error = FormatError;

    #[inline]
    fn deserialize_any<V: Visitor<'de>>(self, visitor: V) -> Result<V::Value, FormatError> {
        let head = tri!(self.head());
        self.any(head, visitor)
    }

    #[inline]
    fn deserialize_option<V: Visitor<'de>>(self, visitor: V) -> Result<V::Value, FormatError> {
        match tri!(self.peek_tag()) {
            tag::NONE => {
                tri!(self.tag());
                visitor.visit_none()
            }
            tag::SOME => {
                tri!(self.tag());
                self.some(visitor)
            }
            // A value recorded before a field became optional.
            _ => self.some(visitor),
        }
    }

    fn deserialize_newtype_struct<V: Visitor<'de>>(
        self,
        _name: &'static str,
        visitor: V,
    ) -> Result<V::Value, FormatError> {
        tri!(self.descend());
        let value = visitor.visit_newtype_struct(&mut *self);
        self.ascend();
        value
    }

    fn deserialize_enum<V: Visitor<'de>>(
        self,
        _name: &'static str,
        _variants: &'static [&'static str],
        visitor: V,
    ) -> Result<V::Value, FormatError> {
        let (kind, name, deeper) = tri!(self.enter_variant());
        let value = visitor.visit_enum(Variant {
            de: &mut *self,
            kind,
            name,
        });
        self.leave_variant(deeper);
        value
    }

    typed_requests! {
        deserialize_bool => boolean,
        deserialize_i8 deserialize_i16 deserialize_i32 deserialize_i64 => integer,
        deserialize_u8 deserialize_u16 deserialize_u32 deserialize_u64 => integer,
        deserialize_i128 deserialize_u128 => integer128,
        deserialize_f32 deserialize_f64 => float,
        deserialize_char => character,
        deserialize_str deserialize_string deserialize_identifier => text,
        deserialize_bytes deserialize_byte_buf => bytes,
        deserialize_unit => unit,
        deserialize_seq => sequence,
        deserialize_map => mapping,
        deserialize_ignored_any => ignored,
    }

    fn deserialize_unit_struct<V: Visitor<'de>>(
        self,
        _name: &'static str,
        visitor: V,
    ) -> Result<V::Value, FormatError> {
        self.unit(visitor)
    }

    fn deserialize_tuple<V: Visitor<'de>>(
        self,
        _len: usize,
        visitor: V,
    ) -> Result<V::Value, FormatError> {
        self.sequence(visitor)
    }

    fn deserialize_tuple_struct<V: Visitor<'de>>(
        self,
        _name: &'static str,
        _len: usize,
        visitor: V,
    ) -> Result<V::Value, FormatError> {
        self.sequence(visitor)
    }

    fn deserialize_struct<V: Visitor<'de>>(
        self,
        _name: &'static str,
        _fields: &'static [&'static str],
        visitor: V,
    ) -> Result<V::Value, FormatError> {
        self.fields(visitor)
    }

    fn is_human_readable(&self) -> bool {
        true
    }
}

/// The elements of a sequence or of a tuple variant.
struct Elements<'a, 'de> {
    de: &'a mut Decoder<'de>,
    left: usize,
}

impl Elements<'_, '_> {
    /// Whether an element is left: if so, it is counted read.
    #[cfg_attr(not(debug_assertions), inline)]
    fn next(&mut self) -> bool {
        if self.left == 0 {
            return false;
        }
        self.left -= 1;
        true
    }

    /// Ends the sequence, one level up again: the error to answer instead of the value read,
    /// if the type did not read every element and did not fail (`failed`: its error comes
    /// first, it stopped reading because of it). Compiled once, so that the code compiled for
    /// every visitor only picks between the value and this error.
    #[cfg_attr(not(debug_assertions), inline)]
    fn end(self, failed: bool) -> Option<FormatError> {
        self.de.ascend();
        if failed {
            None
        } else {
            unread(self.left, "elements")
        }
    }
}

impl<'de> de::SeqAccess<'de> for Elements<'_, 'de> {
    type Error = FormatError;

    #[inline]
    fn next_element_seed<S: DeserializeSeed<'de>>(
        &mut self,
        seed: S,
    ) -> Result<Option<S::Value>, FormatError> {
        if !self.next() {
            return Ok(None);
        }
        match seed.deserialize(&mut *self.de) {
            Ok(element) => Ok(Some(element)),
            Err(error) => Err(error),
        }
    }

    fn size_hint(&self) -> Option<usize> {
        // Bounded by the input left (each element takes a byte at least), so a hostile count
        // cannot make a collection preallocate more than the record's size.
        Some(self.left.min(self.de.reader.remaining()))
    }
}

/// The entries of a map, of a struct or of a struct variant.
struct Entries<'a, 'de> {
    de: &'a mut Decoder<'de>,
    left: usize,
    /// A variant read as a map: its one entry, until its content is read.
    variant: Option<VariantEntry<'de>>,
}

/// A variant read as the one entry of a map.
struct VariantEntry<'de> {
    /// Its tag: a newtype, tuple or struct variant.
    kind: u8,
    /// Its name, until read as the entry's key.
    name: Option<&'de str>,
}

impl<'de> VariantEntry<'de> {
    /// A newtype, tuple or struct variant (`kind`) named `name`, read without its enum: as
    /// JSON shows it, a one-entry map from the name to the content (read through the same
    /// [`Entries`] as a map, so that a visitor's `visit_map` is compiled once).
    fn as_map(kind: u8, name: &'de str) -> Option<Self> {
        Some(VariantEntry {
            kind,
            name: Some(name),
        })
    }
}

impl<'de> Entries<'_, 'de> {
    /// Ends the map, as [`Elements::end`] ends a sequence (a variant read as a map must have
    /// its content read).
    #[cfg_attr(not(debug_assertions), inline)]
    fn end(self, failed: bool) -> Option<FormatError> {
        self.de.ascend();
        match (failed, self.variant) {
            (true, _) => None,
            (false, Some(_)) => Some(FormatError::new("the content of a variant was not read")),
            (false, None) => unread(self.left, "entries"),
        }
    }

    /// Whether an entry is left: if so, it is counted read, and the name of the variant read
    /// as this map, the first time, is the decoder's next value (the entry's key).
    #[cfg_attr(not(debug_assertions), inline)]
    fn next_key(&mut self) -> bool {
        if self.left == 0 {
            return false;
        }
        self.left -= 1;
        self.de.name = self
            .variant
            .as_mut()
            .and_then(|variant| variant.name.take());
        true
    }

    /// Readies the entry's value: a key that did not read the variant's name does not leave it
    /// to be read as the value, and a variant's content has the tag of what it is.
    #[cfg_attr(not(debug_assertions), inline)]
    fn next_value(&mut self) {
        self.de.name = None;
        if let Some(variant) = self.variant.take() {
            self.de.tag = variant::content_tag(variant.kind);
        }
    }
}

impl<'de> de::MapAccess<'de> for Entries<'_, 'de> {
    type Error = FormatError;

    #[inline]
    fn next_key_seed<K: DeserializeSeed<'de>>(
        &mut self,
        seed: K,
    ) -> Result<Option<K::Value>, FormatError> {
        if !self.next_key() {
            return Ok(None);
        }
        match seed.deserialize(&mut *self.de) {
            Ok(key) => Ok(Some(key)),
            Err(error) => Err(error),
        }
    }

    /// The entry's value; for a variant read as a map, its content: a newtype variant's value,
    /// or a tuple or struct variant's body, read as the sequence or map it is (its count is
    /// next in the input, where a sequence's or a map's follows its tag).
    #[inline]
    fn next_value_seed<S: DeserializeSeed<'de>>(
        &mut self,
        seed: S,
    ) -> Result<S::Value, FormatError> {
        self.next_value();
        let value = seed.deserialize(&mut *self.de);
        // A body the value did not read (a `deserialize_with` that reads nothing, an error
        // the type swallowed) is not offered to the next read: its count is.
        self.de.tag = None;
        value
    }

    fn size_hint(&self) -> Option<usize> {
        Some(self.left.min(self.de.reader.remaining() / 2))
    }
}

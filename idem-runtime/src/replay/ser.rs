//! The serde `Serializer` of the record format: one tag byte per value, then its payload.

use serde::Serialize;
use serde::ser;

use super::format::{FormatError, put_str, put_varint, put_varint128, tag, tri, zigzag, zigzag128};
use crate::key::sets::{UNORDERED_MAGIC, iterable_is_set};

/// Appends the encoding of `value` to `out`; returns the names its types passed on the way.
pub(super) fn encode_value<T: Serialize + ?Sized>(
    value: &T,
    out: &mut Vec<u8>,
) -> Result<Names, FormatError> {
    let mut encoder = Encoder {
        out,
        set_at: None,
        names: Names::default(),
    };
    tri!(value.serialize(&mut encoder));
    Ok(encoder.names)
}

/// The names a value's types hand their serializer (of structs, and of enums and their
/// variants) and the record does not keep, as a multiset: a digest that ignores their order, as
/// the comparison of records ignores the order of map entries. Two values whose records are
/// the same can still differ in it: the variants of an untagged enum that encode alike.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub(crate) struct Names(u64);

impl Names {
    fn add(&mut self, name: &str) {
        // FNV-1a of the name, summed: each name counts once per appearance, in any order.
        let hash = name.bytes().fold(0xcbf2_9ce4_8422_2325_u64, |h, b| {
            (h ^ u64::from(b)).wrapping_mul(0x0000_0100_0000_01b3)
        });
        self.0 = self.0.wrapping_add(hash);
    }
}

/// Writes values into a byte buffer.
pub(super) struct Encoder<'o> {
    out: &'o mut Vec<u8>,
    /// Where the content of an `Unordered` marker begins: a sequence starting there (through
    /// further newtype structs, which write nothing) is a set, as in the key encoder; any other
    /// value writes a byte first, so the hint cannot reach a sequence nested inside it.
    set_at: Option<usize>,
    /// The names passed so far.
    names: Names,
}

impl<'o> Encoder<'o> {
    /// Whether the sequence about to be written is the content of an `Unordered` marker.
    #[cfg_attr(not(debug_assertions), inline)]
    fn marked_set(&mut self) -> bool {
        self.set_at.take() == Some(self.out.len())
    }

    /// Writes the tag of a set or of a sequence and starts its body.
    #[cfg_attr(not(debug_assertions), inline)]
    fn sequence<'a>(&'a mut self, set: bool, len: Option<usize>) -> Compound<'a, 'o> {
        self.out.push(if set { tag::SET } else { tag::SEQ });
        self.compound(len)
    }

    // `inline` in optimized builds only, here and below: in a debug build, a crate with tools
    // would compile a copy of each such function it calls (BENCHMARKS.md, "Compile cost").
    #[cfg_attr(not(debug_assertions), inline)]
    fn tagged_varint(&mut self, t: u8, v: u64) {
        self.out.push(t);
        put_varint(self.out, v);
    }

    /// Starts a sequence or map body after its tag (and variant name): writes the announced
    /// count (0 if unknown); [`Compound::finish`] rewrites it if the value produced a different
    /// number of elements, so a wrong `len` from a hand-written `Serialize` cannot corrupt the
    /// record.
    #[cfg_attr(not(debug_assertions), inline)]
    fn compound<'a>(&'a mut self, len: Option<usize>) -> Compound<'a, 'o> {
        let len_at = self.out.len();
        let announced = len.unwrap_or(0);
        put_varint(self.out, announced as u64);
        Compound {
            body_at: self.out.len(),
            len_at,
            announced,
            count: 0,
            enc: self,
        }
    }
}

/// A sequence, map, struct or variant body being written.
pub(super) struct Compound<'a, 'o> {
    enc: &'a mut Encoder<'o>,
    len_at: usize,
    body_at: usize,
    announced: usize,
    count: usize,
}

impl Compound<'_, '_> {
    #[inline]
    fn element<T: Serialize + ?Sized>(&mut self, value: &T) -> Result<(), FormatError> {
        self.count += 1;
        value.serialize(&mut *self.enc)
    }

    #[cfg_attr(not(debug_assertions), inline)]
    fn finish(self) -> Result<(), FormatError> {
        if self.count != self.announced {
            let mut len = Vec::with_capacity(10);
            put_varint(&mut len, self.count as u64);
            self.enc.out.splice(self.len_at..self.body_at, len);
        }
        Ok(())
    }
}

impl<'a, 'o> ser::Serializer for &'a mut Encoder<'o> {
    type Ok = ();
    type Error = FormatError;
    type SerializeSeq = Compound<'a, 'o>;
    type SerializeTuple = Compound<'a, 'o>;
    type SerializeTupleStruct = Compound<'a, 'o>;
    type SerializeTupleVariant = Compound<'a, 'o>;
    type SerializeMap = Compound<'a, 'o>;
    type SerializeStruct = Compound<'a, 'o>;
    type SerializeStructVariant = Compound<'a, 'o>;

    fn is_human_readable(&self) -> bool {
        // Types with two representations (addresses, timestamps, UUIDs) record their readable
        // one, as they did in JSON, so that operators can read them; the decoder agrees.
        true
    }

    #[cfg_attr(not(debug_assertions), inline)]
    fn serialize_bool(self, v: bool) -> Result<(), FormatError> {
        self.out.push(if v { tag::TRUE } else { tag::FALSE });
        Ok(())
    }

    #[cfg_attr(not(debug_assertions), inline)]
    fn serialize_i8(self, v: i8) -> Result<(), FormatError> {
        self.out.extend_from_slice(&[tag::I8, v.to_le_bytes()[0]]);
        Ok(())
    }

    #[cfg_attr(not(debug_assertions), inline)]
    fn serialize_i16(self, v: i16) -> Result<(), FormatError> {
        self.tagged_varint(tag::I16, zigzag(i64::from(v)));
        Ok(())
    }

    #[cfg_attr(not(debug_assertions), inline)]
    fn serialize_i32(self, v: i32) -> Result<(), FormatError> {
        self.tagged_varint(tag::I32, zigzag(i64::from(v)));
        Ok(())
    }

    #[cfg_attr(not(debug_assertions), inline)]
    fn serialize_i64(self, v: i64) -> Result<(), FormatError> {
        self.tagged_varint(tag::I64, zigzag(v));
        Ok(())
    }

    fn serialize_i128(self, v: i128) -> Result<(), FormatError> {
        self.out.push(tag::I128);
        put_varint128(self.out, zigzag128(v));
        Ok(())
    }

    #[cfg_attr(not(debug_assertions), inline)]
    fn serialize_u8(self, v: u8) -> Result<(), FormatError> {
        self.out.extend_from_slice(&[tag::U8, v]);
        Ok(())
    }

    #[cfg_attr(not(debug_assertions), inline)]
    fn serialize_u16(self, v: u16) -> Result<(), FormatError> {
        self.tagged_varint(tag::U16, u64::from(v));
        Ok(())
    }

    #[cfg_attr(not(debug_assertions), inline)]
    fn serialize_u32(self, v: u32) -> Result<(), FormatError> {
        self.tagged_varint(tag::U32, u64::from(v));
        Ok(())
    }

    #[cfg_attr(not(debug_assertions), inline)]
    fn serialize_u64(self, v: u64) -> Result<(), FormatError> {
        self.tagged_varint(tag::U64, v);
        Ok(())
    }

    fn serialize_u128(self, v: u128) -> Result<(), FormatError> {
        self.out.push(tag::U128);
        put_varint128(self.out, v);
        Ok(())
    }

    #[cfg_attr(not(debug_assertions), inline)]
    fn serialize_f32(self, v: f32) -> Result<(), FormatError> {
        self.out.push(tag::F32);
        self.out.extend_from_slice(&v.to_bits().to_le_bytes());
        Ok(())
    }

    #[cfg_attr(not(debug_assertions), inline)]
    fn serialize_f64(self, v: f64) -> Result<(), FormatError> {
        self.out.push(tag::F64);
        self.out.extend_from_slice(&v.to_bits().to_le_bytes());
        Ok(())
    }

    #[cfg_attr(not(debug_assertions), inline)]
    fn serialize_char(self, v: char) -> Result<(), FormatError> {
        self.tagged_varint(tag::CHAR, u64::from(u32::from(v)));
        Ok(())
    }

    #[cfg_attr(not(debug_assertions), inline)]
    fn serialize_str(self, v: &str) -> Result<(), FormatError> {
        self.out.push(tag::STR);
        put_str(self.out, v);
        Ok(())
    }

    #[cfg_attr(not(debug_assertions), inline)]
    fn serialize_bytes(self, v: &[u8]) -> Result<(), FormatError> {
        self.tagged_varint(tag::BYTES, v.len() as u64);
        self.out.extend_from_slice(v);
        Ok(())
    }

    #[cfg_attr(not(debug_assertions), inline)]
    fn serialize_none(self) -> Result<(), FormatError> {
        self.out.push(tag::NONE);
        Ok(())
    }

    #[inline]
    fn serialize_some<T: Serialize + ?Sized>(self, value: &T) -> Result<(), FormatError> {
        self.out.push(tag::SOME);
        value.serialize(self)
    }

    #[cfg_attr(not(debug_assertions), inline)]
    fn serialize_unit(self) -> Result<(), FormatError> {
        self.out.push(tag::UNIT);
        Ok(())
    }

    fn serialize_unit_struct(self, name: &'static str) -> Result<(), FormatError> {
        self.names.add(name);
        self.serialize_unit()
    }

    #[cfg_attr(not(debug_assertions), inline)]
    fn serialize_unit_variant(
        self,
        name: &'static str,
        _index: u32,
        variant: &'static str,
    ) -> Result<(), FormatError> {
        self.names.add(name);
        self.out.push(tag::UNIT_VARIANT);
        put_str(self.out, variant);
        Ok(())
    }

    #[inline]
    fn serialize_newtype_struct<T: Serialize + ?Sized>(
        self,
        name: &'static str,
        value: &T,
    ) -> Result<(), FormatError> {
        if name == UNORDERED_MAGIC {
            self.set_at = Some(self.out.len());
        }
        self.names.add(name);
        value.serialize(self)
    }

    fn serialize_newtype_variant<T: Serialize + ?Sized>(
        self,
        name: &'static str,
        _index: u32,
        variant: &'static str,
        value: &T,
    ) -> Result<(), FormatError> {
        self.names.add(name);
        self.out.push(tag::NEWTYPE_VARIANT);
        put_str(self.out, variant);
        value.serialize(self)
    }

    #[cfg_attr(not(debug_assertions), inline)]
    fn serialize_seq(self, len: Option<usize>) -> Result<Compound<'a, 'o>, FormatError> {
        let set = self.marked_set();
        Ok(self.sequence(set, len))
    }

    fn serialize_tuple(self, len: usize) -> Result<Compound<'a, 'o>, FormatError> {
        Ok(self.sequence(false, Some(len)))
    }

    fn serialize_tuple_struct(
        self,
        name: &'static str,
        len: usize,
    ) -> Result<Compound<'a, 'o>, FormatError> {
        self.names.add(name);
        Ok(self.sequence(false, Some(len)))
    }

    fn serialize_tuple_variant(
        self,
        name: &'static str,
        _index: u32,
        variant: &'static str,
        len: usize,
    ) -> Result<Compound<'a, 'o>, FormatError> {
        self.names.add(name);
        self.out.push(tag::TUPLE_VARIANT);
        put_str(self.out, variant);
        Ok(self.compound(Some(len)))
    }

    #[cfg_attr(not(debug_assertions), inline)]
    fn serialize_map(self, len: Option<usize>) -> Result<Compound<'a, 'o>, FormatError> {
        self.out.push(tag::MAP);
        Ok(self.compound(len))
    }

    #[cfg_attr(not(debug_assertions), inline)]
    fn serialize_struct(
        self,
        name: &'static str,
        len: usize,
    ) -> Result<Compound<'a, 'o>, FormatError> {
        self.names.add(name);
        self.serialize_map(Some(len))
    }

    fn serialize_struct_variant(
        self,
        name: &'static str,
        _index: u32,
        variant: &'static str,
        len: usize,
    ) -> Result<Compound<'a, 'o>, FormatError> {
        self.names.add(name);
        self.out.push(tag::STRUCT_VARIANT);
        put_str(self.out, variant);
        Ok(self.compound(Some(len)))
    }

    /// Sets are recognised here, by the iterable's type, exactly as the key encoder does.
    fn collect_seq<I>(self, iter: I) -> Result<(), FormatError>
    where
        I: IntoIterator,
        I::Item: Serialize,
    {
        let set = self.marked_set() || iterable_is_set::<I>();
        let iter = iter.into_iter();
        let len = match iter.size_hint() {
            (low, Some(high)) if low == high => Some(low),
            _ => None,
        };
        let mut seq = self.sequence(set, len);
        for item in iter {
            tri!(seq.element(&item));
        }
        seq.finish()
    }
}

impl ser::SerializeSeq for Compound<'_, '_> {
    type Ok = ();
    type Error = FormatError;

    #[inline]
    fn serialize_element<T: Serialize + ?Sized>(&mut self, value: &T) -> Result<(), FormatError> {
        self.element(value)
    }

    fn end(self) -> Result<(), FormatError> {
        self.finish()
    }
}

impl ser::SerializeTuple for Compound<'_, '_> {
    type Ok = ();
    type Error = FormatError;

    fn serialize_element<T: Serialize + ?Sized>(&mut self, value: &T) -> Result<(), FormatError> {
        self.element(value)
    }

    fn end(self) -> Result<(), FormatError> {
        self.finish()
    }
}

impl ser::SerializeTupleStruct for Compound<'_, '_> {
    type Ok = ();
    type Error = FormatError;

    fn serialize_field<T: Serialize + ?Sized>(&mut self, value: &T) -> Result<(), FormatError> {
        self.element(value)
    }

    fn end(self) -> Result<(), FormatError> {
        self.finish()
    }
}

impl ser::SerializeTupleVariant for Compound<'_, '_> {
    type Ok = ();
    type Error = FormatError;

    fn serialize_field<T: Serialize + ?Sized>(&mut self, value: &T) -> Result<(), FormatError> {
        self.element(value)
    }

    fn end(self) -> Result<(), FormatError> {
        self.finish()
    }
}

impl ser::SerializeMap for Compound<'_, '_> {
    type Ok = ();
    type Error = FormatError;

    #[inline]
    fn serialize_key<T: Serialize + ?Sized>(&mut self, key: &T) -> Result<(), FormatError> {
        self.element(key)
    }

    #[inline]
    fn serialize_value<T: Serialize + ?Sized>(&mut self, value: &T) -> Result<(), FormatError> {
        value.serialize(&mut *self.enc)
    }

    fn end(self) -> Result<(), FormatError> {
        self.finish()
    }
}

impl Compound<'_, '_> {
    #[inline]
    fn field<T: Serialize + ?Sized>(
        &mut self,
        key: &'static str,
        value: &T,
    ) -> Result<(), FormatError> {
        self.count += 1;
        self.enc.out.push(tag::STR);
        put_str(self.enc.out, key);
        value.serialize(&mut *self.enc)
    }
}

impl ser::SerializeStruct for Compound<'_, '_> {
    type Ok = ();
    type Error = FormatError;

    #[inline]
    fn serialize_field<T: Serialize + ?Sized>(
        &mut self,
        key: &'static str,
        value: &T,
    ) -> Result<(), FormatError> {
        self.field(key, value)
    }

    fn end(self) -> Result<(), FormatError> {
        self.finish()
    }
}

impl ser::SerializeStructVariant for Compound<'_, '_> {
    type Ok = ();
    type Error = FormatError;

    fn serialize_field<T: Serialize + ?Sized>(
        &mut self,
        key: &'static str,
        value: &T,
    ) -> Result<(), FormatError> {
        self.field(key, value)
    }

    fn end(self) -> Result<(), FormatError> {
        self.finish()
    }
}

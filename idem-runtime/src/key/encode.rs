//! The canonical value encoding: a `serde::Serializer` that streams into a byte sink (a BLAKE3
//! hasher when deriving keys, a `Vec<u8>` for [`encode_value`](super::encode_value)).
//!
//! The format is specified in `docs/key-spec.md`; keep the two in sync.

use std::fmt;

use serde::Serialize;
use serde::ser;

use super::unordered::UNORDERED_MAGIC;

/// BLAKE3 derive-key context of entry (map/struct) and element (set) digests.
pub const ENTRY_CONTEXT: &str = "idem 2026-12-01 unordered entry v1";

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
    pub(crate) const SEQ_END: u8 = 0x0B;
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

/// Where encoded bytes go.
pub(crate) trait Sink {
    /// Appends `bytes`.
    fn put(&mut self, bytes: &[u8]);
}

impl Sink for blake3::Hasher {
    fn put(&mut self, bytes: &[u8]) {
        self.update(bytes);
    }
}

impl Sink for Vec<u8> {
    fn put(&mut self, bytes: &[u8]) {
        self.extend_from_slice(bytes);
    }
}

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

/// Writes a length as u64 little-endian.
pub(crate) fn put_len<W: Sink + ?Sized>(out: &mut W, len: usize) {
    // usize is at most 64 bits on every platform Rust supports.
    out.put(&(len as u64).to_le_bytes());
}

/// Writes `str(s)`: u64 LE byte length, then the UTF-8 bytes (no tag).
pub(crate) fn put_str<W: Sink + ?Sized>(out: &mut W, s: &str) {
    put_len(out, s.len());
    out.put(s.as_bytes());
}

/// A fresh hasher for one entry/element digest.
pub(crate) fn entry_hasher() -> blake3::Hasher {
    blake3::Hasher::new_derive_key(ENTRY_CONTEXT)
}

/// Digest of the entry `name: value` of a struct or argument record (the name encoded as a string
/// value).
pub(crate) fn field_digest<V: Serialize + ?Sized>(
    name: &str,
    value: &V,
) -> Result<[u8; 32], EncodeError> {
    let mut h = entry_hasher();
    h.put(&[tag::STR]);
    put_str(&mut h, name);
    value.serialize(ValueSerializer::new(&mut h))?;
    Ok(*h.finalize().as_bytes())
}

/// Writes the whole encoding of `value`.
pub(crate) fn encode_into<W: Sink, V: Serialize + ?Sized>(
    out: &mut W,
    value: &V,
) -> Result<(), EncodeError> {
    value.serialize(ValueSerializer::new(out))
}

/// How many digests are kept without a heap allocation.
const INLINE_DIGESTS: usize = 8;

/// A list of 32-byte digests, inline up to [`INLINE_DIGESTS`] entries.
// The inline variant is large on purpose: it avoids a heap allocation for small maps.
#[allow(clippy::large_enum_variant)]
#[derive(Clone)]
pub(crate) enum Digests {
    /// No heap allocation yet.
    Inline {
        /// Storage; the first `len` are used.
        buf: [[u8; 32]; INLINE_DIGESTS],
        /// Number of digests in use.
        len: usize,
    },
    /// Spilled to the heap.
    Heap(Vec<[u8; 32]>),
}

impl Digests {
    /// An empty list.
    pub(crate) const fn new() -> Self {
        Digests::Inline {
            buf: [[0; 32]; INLINE_DIGESTS],
            len: 0,
        }
    }

    /// Appends a digest.
    pub(crate) fn push(&mut self, digest: [u8; 32]) {
        match self {
            Digests::Inline { buf, len } => {
                if let Some(slot) = buf.get_mut(*len) {
                    *slot = digest;
                    *len += 1;
                } else {
                    let mut v = Vec::with_capacity(INLINE_DIGESTS * 4);
                    v.extend_from_slice(buf);
                    v.push(digest);
                    *self = Digests::Heap(v);
                }
            }
            Digests::Heap(v) => v.push(digest),
        }
    }

    fn as_mut_slice(&mut self) -> &mut [[u8; 32]] {
        match self {
            Digests::Inline { buf, len } => buf.get_mut(..*len).unwrap_or_default(),
            Digests::Heap(v) => v,
        }
    }

    /// Writes `u64 LE count ‖ digests sorted ascending`.
    pub(crate) fn write_sorted<W: Sink + ?Sized>(&mut self, out: &mut W) {
        let digests = self.as_mut_slice();
        digests.sort_unstable();
        put_len(out, digests.len());
        for d in digests.iter() {
            out.put(d);
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

/// The canonical serializer.
pub(crate) struct ValueSerializer<'a, W: Sink> {
    out: &'a mut W,
    /// Encode the next sequence as a set (inside `Unordered`).
    as_set: bool,
}

impl<'a, W: Sink> ValueSerializer<'a, W> {
    pub(crate) fn new(out: &'a mut W) -> Self {
        ValueSerializer { out, as_set: false }
    }

    fn int(self, negative: bool, magnitude: u128) -> Result<(), EncodeError> {
        self.out.put(&[tag::INT, u8::from(negative)]);
        self.out.put(&magnitude.to_le_bytes());
        Ok(())
    }

    fn signed(self, v: i128) -> Result<(), EncodeError> {
        self.int(v < 0, v.unsigned_abs())
    }
}

/// Encoder of sequences (ordered, or as sets) and of tuple variants.
// Lives on the stack for the duration of one sequence; the size difference is intended.
#[allow(clippy::large_enum_variant)]
pub(crate) enum SeqEncoder<'a, W: Sink> {
    /// Elements written in order, then `SEQ_END`.
    Ordered(&'a mut W),
    /// Element digests collected, then written sorted.
    Set {
        /// The output.
        out: &'a mut W,
        /// Digests of the elements so far.
        digests: Digests,
    },
}

impl<'a, W: Sink> SeqEncoder<'a, W> {
    fn start(out: &'a mut W, as_set: bool) -> Self {
        if as_set {
            out.put(&[tag::SET]);
            SeqEncoder::Set {
                out,
                digests: Digests::new(),
            }
        } else {
            out.put(&[tag::SEQ]);
            SeqEncoder::Ordered(out)
        }
    }

    fn element<T: Serialize + ?Sized>(&mut self, value: &T) -> Result<(), EncodeError> {
        match self {
            SeqEncoder::Ordered(out) => value.serialize(ValueSerializer::new(&mut **out)),
            SeqEncoder::Set { digests, .. } => {
                let mut h = entry_hasher();
                value.serialize(ValueSerializer::new(&mut h))?;
                digests.push(*h.finalize().as_bytes());
                Ok(())
            }
        }
    }

    fn finish(self) -> Result<(), EncodeError> {
        match self {
            SeqEncoder::Ordered(out) => out.put(&[tag::SEQ_END]),
            SeqEncoder::Set { out, mut digests } => digests.write_sorted(out),
        }
        Ok(())
    }
}

/// Encoder of maps, structs and struct variants.
pub(crate) struct MapEncoder<'a, W: Sink> {
    out: &'a mut W,
    digests: Digests,
    /// Entry hasher holding a key whose value has not been given yet (boxed: only used by
    /// `Serialize` impls that call `serialize_key`/`serialize_value` separately).
    pending: Option<Box<blake3::Hasher>>,
}

impl<'a, W: Sink> MapEncoder<'a, W> {
    fn new(out: &'a mut W) -> Self {
        MapEncoder {
            out,
            digests: Digests::new(),
            pending: None,
        }
    }

    fn finish(mut self) -> Result<(), EncodeError> {
        if self.pending.is_some() {
            return Err(EncodeError("map key serialized without a value".to_owned()));
        }
        self.digests.write_sorted(self.out);
        Ok(())
    }
}

impl<'a, W: Sink> ser::Serializer for ValueSerializer<'a, W> {
    type Ok = ();
    type Error = EncodeError;
    type SerializeSeq = SeqEncoder<'a, W>;
    type SerializeTuple = SeqEncoder<'a, W>;
    type SerializeTupleStruct = SeqEncoder<'a, W>;
    type SerializeTupleVariant = SeqEncoder<'a, W>;
    type SerializeMap = MapEncoder<'a, W>;
    type SerializeStruct = MapEncoder<'a, W>;
    type SerializeStructVariant = MapEncoder<'a, W>;

    fn serialize_bool(self, v: bool) -> Result<(), EncodeError> {
        self.out.put(&[if v { tag::TRUE } else { tag::FALSE }]);
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
        let bits = if v.is_nan() {
            CANONICAL_NAN
        } else if v == 0.0 {
            0
        } else {
            v.to_bits()
        };
        self.out.put(&[tag::FLOAT]);
        self.out.put(&bits.to_le_bytes());
        Ok(())
    }

    fn serialize_char(self, v: char) -> Result<(), EncodeError> {
        let mut buf = [0; 4];
        self.serialize_str(v.encode_utf8(&mut buf))
    }

    fn serialize_str(self, v: &str) -> Result<(), EncodeError> {
        self.out.put(&[tag::STR]);
        put_str(self.out, v);
        Ok(())
    }

    fn serialize_bytes(self, v: &[u8]) -> Result<(), EncodeError> {
        self.out.put(&[tag::BYTES]);
        put_len(self.out, v.len());
        self.out.put(v);
        Ok(())
    }

    fn serialize_none(self) -> Result<(), EncodeError> {
        self.out.put(&[tag::NONE]);
        Ok(())
    }

    fn serialize_some<T: Serialize + ?Sized>(self, value: &T) -> Result<(), EncodeError> {
        self.out.put(&[tag::SOME]);
        value.serialize(ValueSerializer::new(self.out))
    }

    fn serialize_unit(self) -> Result<(), EncodeError> {
        self.out.put(&[tag::UNIT]);
        Ok(())
    }

    fn serialize_unit_struct(self, _name: &'static str) -> Result<(), EncodeError> {
        self.out.put(&[tag::UNIT_STRUCT]);
        Ok(())
    }

    fn serialize_unit_variant(
        self,
        _name: &'static str,
        _index: u32,
        variant: &'static str,
    ) -> Result<(), EncodeError> {
        self.out.put(&[tag::UNIT_VARIANT]);
        put_str(self.out, variant);
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
        self.out.put(&[tag::NEWTYPE_VARIANT]);
        put_str(self.out, variant);
        value.serialize(ValueSerializer::new(self.out))
    }

    fn serialize_seq(self, _len: Option<usize>) -> Result<SeqEncoder<'a, W>, EncodeError> {
        Ok(SeqEncoder::start(self.out, self.as_set))
    }

    fn serialize_tuple(self, _len: usize) -> Result<SeqEncoder<'a, W>, EncodeError> {
        Ok(SeqEncoder::start(self.out, false))
    }

    fn serialize_tuple_struct(
        self,
        _name: &'static str,
        _len: usize,
    ) -> Result<SeqEncoder<'a, W>, EncodeError> {
        Ok(SeqEncoder::start(self.out, false))
    }

    fn serialize_tuple_variant(
        self,
        _name: &'static str,
        _index: u32,
        variant: &'static str,
        _len: usize,
    ) -> Result<SeqEncoder<'a, W>, EncodeError> {
        self.out.put(&[tag::TUPLE_VARIANT]);
        put_str(self.out, variant);
        Ok(SeqEncoder::Ordered(self.out))
    }

    fn serialize_map(self, _len: Option<usize>) -> Result<MapEncoder<'a, W>, EncodeError> {
        self.out.put(&[tag::MAP]);
        Ok(MapEncoder::new(self.out))
    }

    fn serialize_struct(
        self,
        _name: &'static str,
        _len: usize,
    ) -> Result<MapEncoder<'a, W>, EncodeError> {
        self.out.put(&[tag::MAP]);
        Ok(MapEncoder::new(self.out))
    }

    fn serialize_struct_variant(
        self,
        _name: &'static str,
        _index: u32,
        variant: &'static str,
        _len: usize,
    ) -> Result<MapEncoder<'a, W>, EncodeError> {
        self.out.put(&[tag::STRUCT_VARIANT]);
        put_str(self.out, variant);
        Ok(MapEncoder::new(self.out))
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

impl<W: Sink> ser::SerializeSeq for SeqEncoder<'_, W> {
    type Ok = ();
    type Error = EncodeError;
    fn serialize_element<T: Serialize + ?Sized>(&mut self, value: &T) -> Result<(), EncodeError> {
        self.element(value)
    }
    fn end(self) -> Result<(), EncodeError> {
        self.finish()
    }
}

impl<W: Sink> ser::SerializeTuple for SeqEncoder<'_, W> {
    type Ok = ();
    type Error = EncodeError;
    fn serialize_element<T: Serialize + ?Sized>(&mut self, value: &T) -> Result<(), EncodeError> {
        self.element(value)
    }
    fn end(self) -> Result<(), EncodeError> {
        self.finish()
    }
}

impl<W: Sink> ser::SerializeTupleStruct for SeqEncoder<'_, W> {
    type Ok = ();
    type Error = EncodeError;
    fn serialize_field<T: Serialize + ?Sized>(&mut self, value: &T) -> Result<(), EncodeError> {
        self.element(value)
    }
    fn end(self) -> Result<(), EncodeError> {
        self.finish()
    }
}

impl<W: Sink> ser::SerializeTupleVariant for SeqEncoder<'_, W> {
    type Ok = ();
    type Error = EncodeError;
    fn serialize_field<T: Serialize + ?Sized>(&mut self, value: &T) -> Result<(), EncodeError> {
        self.element(value)
    }
    fn end(self) -> Result<(), EncodeError> {
        self.finish()
    }
}

impl<W: Sink> ser::SerializeMap for MapEncoder<'_, W> {
    type Ok = ();
    type Error = EncodeError;

    fn serialize_key<T: Serialize + ?Sized>(&mut self, key: &T) -> Result<(), EncodeError> {
        if self.pending.is_some() {
            return Err(EncodeError(
                "map key serialized twice without a value".to_owned(),
            ));
        }
        let mut h = Box::new(entry_hasher());
        key.serialize(ValueSerializer::new(&mut *h))?;
        self.pending = Some(h);
        Ok(())
    }

    fn serialize_value<T: Serialize + ?Sized>(&mut self, value: &T) -> Result<(), EncodeError> {
        let Some(mut h) = self.pending.take() else {
            return Err(EncodeError("map value serialized without a key".to_owned()));
        };
        value.serialize(ValueSerializer::new(&mut *h))?;
        self.digests.push(*h.finalize().as_bytes());
        Ok(())
    }

    fn serialize_entry<K: Serialize + ?Sized, V: Serialize + ?Sized>(
        &mut self,
        key: &K,
        value: &V,
    ) -> Result<(), EncodeError> {
        if self.pending.is_some() {
            return Err(EncodeError(
                "map key serialized twice without a value".to_owned(),
            ));
        }
        let mut h = entry_hasher();
        key.serialize(ValueSerializer::new(&mut h))?;
        value.serialize(ValueSerializer::new(&mut h))?;
        self.digests.push(*h.finalize().as_bytes());
        Ok(())
    }

    fn end(self) -> Result<(), EncodeError> {
        self.finish()
    }
}

impl<W: Sink> ser::SerializeStruct for MapEncoder<'_, W> {
    type Ok = ();
    type Error = EncodeError;
    fn serialize_field<T: Serialize + ?Sized>(
        &mut self,
        key: &'static str,
        value: &T,
    ) -> Result<(), EncodeError> {
        self.digests.push(field_digest(key, value)?);
        Ok(())
    }
    fn end(self) -> Result<(), EncodeError> {
        self.finish()
    }
}

impl<W: Sink> ser::SerializeStructVariant for MapEncoder<'_, W> {
    type Ok = ();
    type Error = EncodeError;
    fn serialize_field<T: Serialize + ?Sized>(
        &mut self,
        key: &'static str,
        value: &T,
    ) -> Result<(), EncodeError> {
        self.digests.push(field_digest(key, value)?);
        Ok(())
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
    }

    #[test]
    fn digests_spill_to_heap_in_order() {
        let mut d = Digests::new();
        for i in (0..20u8).rev() {
            d.push([i; 32]);
        }
        assert!(matches!(d, Digests::Heap(_)));
        let mut out = Vec::new();
        d.write_sorted(&mut out);
        assert_eq!(out.len(), 8 + 20 * 32);
        assert_eq!(&out[..8], &20u64.to_le_bytes());
        assert_eq!(out[8], 0);
        assert_eq!(out[8 + 19 * 32], 19);
    }
}

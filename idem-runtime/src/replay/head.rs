//! A value's head: its tag and what follows the tag up to the value's contents (a scalar, a
//! length, a variant's name). Read by one function for both readers of the format: the serde
//! decoder (`de.rs`), which hands the head to the type's visitor, and the tree reader
//! (`node.rs`), which renders and compares records without knowing their type.

use super::format::{FormatError, Reader, tag};

/// What a tag and the bytes right after it say.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum Head<'a> {
    None,
    /// `Some`: the value follows.
    Some,
    Unit,
    Bool(bool),
    U8(u8),
    U16(u16),
    U32(u32),
    U64(u64),
    U128(u128),
    I8(i8),
    I16(i16),
    I32(i32),
    I64(i64),
    I128(i128),
    /// An `f32`, as its bits.
    F32(u32),
    /// An `f64`, as its bits.
    F64(u64),
    Char(char),
    Str(&'a str),
    Bytes(&'a [u8]),
    /// A sequence of this many elements.
    Seq(usize),
    /// A sequence whose order is not part of its value (format version 2), of this many.
    Set(usize),
    /// A map of this many entries.
    Map(usize),
    UnitVariant(&'a str),
    /// A newtype, tuple or struct variant (its tag) and its name; its content follows.
    Variant(u8, &'a str),
}

/// Reads the head of a value whose tag `t` was just read from `r`.
pub(super) fn read<'a>(r: &mut Reader<'a>, t: u8) -> Result<Head<'a>, FormatError> {
    Ok(match t {
        tag::NONE => Head::None,
        tag::SOME => Head::Some,
        tag::UNIT => Head::Unit,
        tag::FALSE => Head::Bool(false),
        tag::TRUE => Head::Bool(true),
        tag::U8 => Head::U8(r.byte()?),
        tag::U16 => Head::U16(r.u16()?),
        tag::U32 => Head::U32(r.u32()?),
        tag::U64 => Head::U64(r.varint()?),
        tag::U128 => Head::U128(r.varint128()?),
        tag::I8 => Head::I8(i8::from_le_bytes([r.byte()?])),
        tag::I16 => Head::I16(r.i16()?),
        tag::I32 => Head::I32(r.i32()?),
        tag::I64 => Head::I64(r.i64()?),
        tag::I128 => Head::I128(r.i128()?),
        tag::F32 => Head::F32(r.f32_bits()?),
        tag::F64 => Head::F64(r.f64_bits()?),
        tag::CHAR => Head::Char(r.char()?),
        tag::STR => Head::Str(r.str()?),
        tag::BYTES => Head::Bytes(r.bytes()?),
        tag::SEQ => Head::Seq(r.count(1)?),
        tag::SET => Head::Set(r.count(1)?),
        tag::MAP => Head::Map(r.count(2)?),
        tag::UNIT_VARIANT => Head::UnitVariant(r.str()?),
        tag::NEWTYPE_VARIANT | tag::TUPLE_VARIANT | tag::STRUCT_VARIANT => {
            Head::Variant(t, r.str()?)
        }
        other => {
            return Err(FormatError::new(format!(
                "unknown tag {other:#04x} at byte {}",
                r.offset().saturating_sub(1)
            )));
        }
    })
}

//! The wire format's constants, its error type and a bounds-checked reader.

use std::fmt;

/// Format version: the first byte of every record written. Version 2 added [`tag::SET`];
/// records of version 1 (which have no sets) decode as before.
pub(super) const VERSION: u8 = 2;

/// The oldest format version still read.
pub(super) const OLDEST_VERSION: u8 = 1;

/// The envelope markers: the second byte of every record.
pub(super) mod marker {
    /// `Ok(value)`.
    pub(crate) const OK: u8 = 0;
    /// `Err(value)`.
    pub(crate) const ERR: u8 = 1;
    /// The tool ran but its result cannot be replayed: tool name and reason follow.
    pub(crate) const NOT_REPLAYABLE: u8 = 2;
    /// The tool was started and interrupted: its name follows.
    pub(crate) const INTERRUPTED: u8 = 3;
}

/// One tag byte per value, saying what follows.
pub(super) mod tag {
    pub(crate) const NONE: u8 = 0x00;
    pub(crate) const SOME: u8 = 0x01;
    pub(crate) const UNIT: u8 = 0x02;
    pub(crate) const FALSE: u8 = 0x03;
    pub(crate) const TRUE: u8 = 0x04;
    pub(crate) const U8: u8 = 0x05;
    pub(crate) const U16: u8 = 0x06;
    pub(crate) const U32: u8 = 0x07;
    pub(crate) const U64: u8 = 0x08;
    pub(crate) const U128: u8 = 0x09;
    pub(crate) const I8: u8 = 0x0a;
    pub(crate) const I16: u8 = 0x0b;
    pub(crate) const I32: u8 = 0x0c;
    pub(crate) const I64: u8 = 0x0d;
    pub(crate) const I128: u8 = 0x0e;
    pub(crate) const F32: u8 = 0x0f;
    pub(crate) const F64: u8 = 0x10;
    pub(crate) const CHAR: u8 = 0x11;
    pub(crate) const STR: u8 = 0x12;
    pub(crate) const BYTES: u8 = 0x13;
    pub(crate) const SEQ: u8 = 0x14;
    pub(crate) const MAP: u8 = 0x15;
    pub(crate) const UNIT_VARIANT: u8 = 0x16;
    pub(crate) const NEWTYPE_VARIANT: u8 = 0x17;
    pub(crate) const TUPLE_VARIANT: u8 = 0x18;
    pub(crate) const STRUCT_VARIANT: u8 = 0x19;
    /// A sequence whose order is not part of its value (a `HashSet`, `BTreeSet`,
    /// `hashbrown::HashSet` or `Unordered` collection, as the key encoder recognises them):
    /// an element count, then the elements in iteration order. Since format version 2.
    pub(crate) const SET: u8 = 0x1a;
}

/// How deeply values may nest (options, sequences, maps, variants, newtypes), as in
/// `serde_json`: deeper input is refused rather than risking the stack.
pub(super) const MAX_DEPTH: usize = 128;

/// `?` for the code compiled once per type a crate records (the serde `Serializer`'s and
/// `Deserializer`'s generic methods): the error is already a [`FormatError`], so the match is
/// written out, where `?` would call `Try::branch` and `FromResidual::from_residual` — in a
/// debug build, a copy of the latter for every value type, and some 15 lines of IR at each
/// use (BENCHMARKS.md, "Compile cost"; `serde_json` has the same macro for the same reason).
macro_rules! tri {
    ($e:expr) => {
        match $e {
            Ok(value) => value,
            Err(error) => return Err(error),
        }
    };
}
pub(super) use tri;

/// What went wrong while encoding or decoding a value.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(super) struct FormatError(pub(super) String);

impl FormatError {
    pub(super) fn new(message: impl Into<String>) -> Self {
        FormatError(message.into())
    }
}

impl fmt::Display for FormatError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.0)
    }
}

impl std::error::Error for FormatError {}

impl serde::ser::Error for FormatError {
    fn custom<M: fmt::Display>(message: M) -> Self {
        FormatError(message.to_string())
    }
}

impl serde::de::Error for FormatError {
    fn custom<M: fmt::Display>(message: M) -> Self {
        FormatError(message.to_string())
    }
}

// `inline` in optimized builds only, here and below: in a debug build, a crate with tools
// would compile a copy of each such function it calls (BENCHMARKS.md, "Compile cost").
/// Appends `v` as an unsigned LEB128 varint.
#[cfg_attr(not(debug_assertions), inline)]
pub(super) fn put_varint(out: &mut Vec<u8>, mut v: u64) {
    while v >= 0x80 {
        out.push((v as u8) | 0x80);
        v >>= 7;
    }
    out.push(v as u8);
}

/// Appends `v` as an unsigned LEB128 varint (up to 19 bytes).
pub(super) fn put_varint128(out: &mut Vec<u8>, mut v: u128) {
    while v >= 0x80 {
        out.push((v as u8) | 0x80);
        v >>= 7;
    }
    out.push(v as u8);
}

/// Appends a length-prefixed UTF-8 string without a tag (variant names, marker texts).
#[cfg_attr(not(debug_assertions), inline)]
pub(super) fn put_str(out: &mut Vec<u8>, s: &str) {
    put_varint(out, s.len() as u64);
    out.extend_from_slice(s.as_bytes());
}

/// Maps signed to unsigned so that small magnitudes stay short.
#[cfg_attr(not(debug_assertions), inline)]
pub(super) fn zigzag(v: i64) -> u64 {
    ((v << 1) ^ (v >> 63)) as u64
}

/// [`zigzag`] for 128 bits.
pub(super) fn zigzag128(v: i128) -> u128 {
    ((v << 1) ^ (v >> 127)) as u128
}

fn unzigzag(u: u64) -> i64 {
    ((u >> 1) as i64) ^ -((u & 1) as i64)
}

fn unzigzag128(u: u128) -> i128 {
    ((u >> 1) as i128) ^ -((u & 1) as i128)
}

/// The name of a tag, for messages.
pub(super) fn tag_name(t: u8) -> &'static str {
    match t {
        tag::NONE => "None",
        tag::SOME => "Some",
        tag::UNIT => "unit",
        tag::FALSE | tag::TRUE => "bool",
        tag::U8 => "u8",
        tag::U16 => "u16",
        tag::U32 => "u32",
        tag::U64 => "u64",
        tag::U128 => "u128",
        tag::I8 => "i8",
        tag::I16 => "i16",
        tag::I32 => "i32",
        tag::I64 => "i64",
        tag::I128 => "i128",
        tag::F32 => "f32",
        tag::F64 => "f64",
        tag::CHAR => "char",
        tag::STR => "string",
        tag::BYTES => "bytes",
        tag::SEQ => "sequence",
        tag::SET => "set",
        tag::MAP => "map",
        tag::UNIT_VARIANT => "unit variant",
        tag::NEWTYPE_VARIANT => "newtype variant",
        tag::TUPLE_VARIANT => "tuple variant",
        tag::STRUCT_VARIANT => "struct variant",
        _ => "unknown tag",
    }
}

/// Reads the format from a byte slice; every read is bounds-checked and every length is checked
/// against the input that remains, so hostile input can neither panic nor make it allocate more
/// than the input's size.
#[derive(Clone)]
pub(super) struct Reader<'de> {
    input: &'de [u8],
    pos: usize,
}

impl<'de> Reader<'de> {
    pub(super) fn new(input: &'de [u8]) -> Self {
        Reader { input, pos: 0 }
    }

    /// Bytes read so far.
    pub(super) fn offset(&self) -> usize {
        self.pos
    }

    /// Bytes not read yet.
    pub(super) fn remaining(&self) -> usize {
        self.input.len().saturating_sub(self.pos)
    }

    /// The bytes not read yet.
    pub(super) fn rest(&self) -> &'de [u8] {
        self.input.get(self.pos..).unwrap_or_default()
    }

    fn truncated(&self) -> FormatError {
        FormatError::new(format!("the record ends early, at byte {}", self.pos))
    }

    /// The next byte, not consumed.
    #[cfg_attr(not(debug_assertions), inline)]
    pub(super) fn peek(&self) -> Result<u8, FormatError> {
        self.input
            .get(self.pos)
            .copied()
            .ok_or_else(|| self.truncated())
    }

    /// The next byte.
    #[cfg_attr(not(debug_assertions), inline)]
    pub(super) fn byte(&mut self) -> Result<u8, FormatError> {
        let b = self.peek()?;
        self.pos += 1;
        Ok(b)
    }

    /// The next `n` bytes.
    #[cfg_attr(not(debug_assertions), inline)]
    pub(super) fn take(&mut self, n: usize) -> Result<&'de [u8], FormatError> {
        let end = self.pos.checked_add(n).ok_or_else(|| self.truncated())?;
        let bytes = self
            .input
            .get(self.pos..end)
            .ok_or_else(|| self.truncated())?;
        self.pos = end;
        Ok(bytes)
    }

    fn array<const N: usize>(&mut self) -> Result<[u8; N], FormatError> {
        let bytes = self.take(N)?;
        let mut out = [0u8; N];
        out.copy_from_slice(bytes);
        Ok(out)
    }

    /// An unsigned varint of at most 64 bits.
    #[cfg_attr(not(debug_assertions), inline)]
    pub(super) fn varint(&mut self) -> Result<u64, FormatError> {
        let first = self.byte()?;
        if first < 0x80 {
            return Ok(u64::from(first));
        }
        let mut v = u64::from(first & 0x7f);
        let mut shift = 7u32;
        loop {
            let b = self.byte()?;
            let bits = u64::from(b & 0x7f);
            if (shift == 63 && bits > 1) || shift > 63 {
                return Err(FormatError::new(format!(
                    "a number overflows 64 bits at byte {}",
                    self.pos
                )));
            }
            v |= bits << shift;
            if b < 0x80 {
                return Ok(v);
            }
            shift += 7;
        }
    }

    /// An unsigned varint of at most 128 bits.
    pub(super) fn varint128(&mut self) -> Result<u128, FormatError> {
        let mut v = 0u128;
        let mut shift = 0u32;
        loop {
            let b = self.byte()?;
            let bits = u128::from(b & 0x7f);
            if (shift == 126 && bits > 3) || shift > 126 {
                return Err(FormatError::new(format!(
                    "a number overflows 128 bits at byte {}",
                    self.pos
                )));
            }
            v |= bits << shift;
            if b < 0x80 {
                return Ok(v);
            }
            shift += 7;
        }
    }

    fn narrow<N: TryFrom<u64>>(&self, v: u64, what: &str) -> Result<N, FormatError> {
        N::try_from(v).map_err(|_| {
            FormatError::new(format!(
                "{v} is out of range for {what} at byte {}",
                self.pos
            ))
        })
    }

    fn narrow_signed<N: TryFrom<i64>>(&self, v: i64, what: &str) -> Result<N, FormatError> {
        N::try_from(v).map_err(|_| {
            FormatError::new(format!(
                "{v} is out of range for {what} at byte {}",
                self.pos
            ))
        })
    }

    pub(super) fn u16(&mut self) -> Result<u16, FormatError> {
        let v = self.varint()?;
        self.narrow(v, "u16")
    }

    pub(super) fn u32(&mut self) -> Result<u32, FormatError> {
        let v = self.varint()?;
        self.narrow(v, "u32")
    }

    pub(super) fn i16(&mut self) -> Result<i16, FormatError> {
        let v = unzigzag(self.varint()?);
        self.narrow_signed(v, "i16")
    }

    pub(super) fn i32(&mut self) -> Result<i32, FormatError> {
        let v = unzigzag(self.varint()?);
        self.narrow_signed(v, "i32")
    }

    pub(super) fn i64(&mut self) -> Result<i64, FormatError> {
        Ok(unzigzag(self.varint()?))
    }

    pub(super) fn i128(&mut self) -> Result<i128, FormatError> {
        Ok(unzigzag128(self.varint128()?))
    }

    pub(super) fn f32_bits(&mut self) -> Result<u32, FormatError> {
        Ok(u32::from_le_bytes(self.array()?))
    }

    pub(super) fn f64_bits(&mut self) -> Result<u64, FormatError> {
        Ok(u64::from_le_bytes(self.array()?))
    }

    pub(super) fn char(&mut self) -> Result<char, FormatError> {
        let v = self.u32()?;
        char::from_u32(v)
            .ok_or_else(|| FormatError::new(format!("{v:#x} is not a char, at byte {}", self.pos)))
    }

    /// A length-prefixed byte string.
    #[cfg_attr(not(debug_assertions), inline)]
    pub(super) fn bytes(&mut self) -> Result<&'de [u8], FormatError> {
        let len = self.varint()?;
        let len = usize::try_from(len).map_err(|_| self.truncated())?;
        self.take(len)
    }

    /// A length-prefixed UTF-8 string.
    #[cfg_attr(not(debug_assertions), inline)]
    pub(super) fn str(&mut self) -> Result<&'de str, FormatError> {
        let at = self.pos;
        let bytes = self.bytes()?;
        std::str::from_utf8(bytes)
            .map_err(|e| FormatError::new(format!("invalid UTF-8 in the string at byte {at}: {e}")))
    }

    /// An element count, each element taking at least `min_size` bytes: a count the remaining
    /// input cannot hold is refused before anything is allocated for it.
    #[cfg_attr(not(debug_assertions), inline)]
    pub(super) fn count(&mut self, min_size: usize) -> Result<usize, FormatError> {
        let at = self.pos;
        let n = self.varint()?;
        match usize::try_from(n) {
            Ok(n) if n.saturating_mul(min_size) <= self.remaining() => Ok(n),
            _ => Err(FormatError::new(format!(
                "a count of {n} at byte {at} exceeds the {} bytes that follow",
                self.remaining()
            ))),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn varints_round_trip_at_the_edges() {
        for v in [
            0,
            1,
            127,
            128,
            300,
            u64::from(u32::MAX),
            u64::MAX - 1,
            u64::MAX,
        ] {
            let mut out = Vec::new();
            put_varint(&mut out, v);
            let mut r = Reader::new(&out);
            assert_eq!(r.varint(), Ok(v));
            assert_eq!(r.remaining(), 0);
        }
        for v in [0, 1, u128::from(u64::MAX) + 1, u128::MAX - 1, u128::MAX] {
            let mut out = Vec::new();
            put_varint128(&mut out, v);
            assert_eq!(Reader::new(&out).varint128(), Ok(v));
        }
        for v in [0, -1, 1, i64::MIN, i64::MAX] {
            assert_eq!(unzigzag(zigzag(v)), v);
        }
        for v in [0, -1, 1, i128::MIN, i128::MAX] {
            assert_eq!(unzigzag128(zigzag128(v)), v);
        }
    }

    #[test]
    fn overlong_varints_and_counts_are_refused() {
        let eleven = [0xff; 11];
        assert!(Reader::new(&eleven).varint().is_err());
        // 2^64 exactly: nine continuation bytes then 0x02.
        let mut two_to_64 = vec![0x80; 9];
        two_to_64.push(0x02);
        assert!(Reader::new(&two_to_64).varint().is_err());
        assert!(Reader::new(&[0xff; 20]).varint128().is_err());
        // A count of 5 elements with 2 bytes left.
        assert!(Reader::new(&[5, 0, 0]).count(1).is_err());
        assert_eq!(Reader::new(&[2, 0, 0]).count(1), Ok(2));
        assert!(Reader::new(&[2, 0, 0]).count(2).is_err());
        assert!(Reader::new(&[3, b'a']).str().is_err());
        assert!(Reader::new(&[2, 0xff, 0xfe]).str().is_err());
    }
}

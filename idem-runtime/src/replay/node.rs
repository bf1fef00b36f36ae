//! A recorded value as a tree, read without knowing its Rust type: for rendering records to
//! operators and for checking that a result replays faithfully.

use super::format::{FormatError, MAX_DEPTH, Reader, tag};
use super::head::{self, Head};

/// One recorded value. Floats are kept as their bits, so that equality is bit-exact and `Ord`
/// is total.
#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord)]
pub(super) enum Node<'a> {
    None,
    Some(Box<Node<'a>>),
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
    F32(u32),
    F64(u64),
    Char(char),
    Str(&'a str),
    Bytes(&'a [u8]),
    Seq(Vec<Node<'a>>),
    /// A sequence whose order is not part of its value (format version 2).
    Set(Vec<Node<'a>>),
    Map(Vec<(Node<'a>, Node<'a>)>),
    UnitVariant(&'a str),
    NewtypeVariant(&'a str, Box<Node<'a>>),
    TupleVariant(&'a str, Vec<Node<'a>>),
    StructVariant(&'a str, Vec<(Node<'a>, Node<'a>)>),
}

/// Reads one value that must fill `bytes` exactly.
pub(super) fn parse(bytes: &[u8]) -> Result<Node<'_>, FormatError> {
    let mut reader = Reader::new(bytes);
    let node = read(&mut reader, 0)?;
    match reader.remaining() {
        0 => Ok(node),
        n => Err(FormatError::new(format!(
            "{n} unexpected bytes after the value, at byte {}",
            reader.offset()
        ))),
    }
}

/// Reads one value from `r`, `depth` levels deep.
pub(super) fn read<'a>(r: &mut Reader<'a>, depth: usize) -> Result<Node<'a>, FormatError> {
    let t = r.byte()?;
    read_tagged(r, t, depth)
}

/// Reads one value whose tag `t` was read from `r` already, `depth` levels deep.
pub(super) fn read_tagged<'a>(
    r: &mut Reader<'a>,
    t: u8,
    depth: usize,
) -> Result<Node<'a>, FormatError> {
    if depth > MAX_DEPTH {
        return Err(FormatError::new(format!(
            "values nest deeper than {MAX_DEPTH} levels at byte {}",
            r.offset()
        )));
    }
    let deeper = depth + 1;
    Ok(match head::read(r, t)? {
        Head::None => Node::None,
        Head::Some => Node::Some(Box::new(read(r, deeper)?)),
        Head::Unit => Node::Unit,
        Head::Bool(v) => Node::Bool(v),
        Head::U8(v) => Node::U8(v),
        Head::U16(v) => Node::U16(v),
        Head::U32(v) => Node::U32(v),
        Head::U64(v) => Node::U64(v),
        Head::U128(v) => Node::U128(v),
        Head::I8(v) => Node::I8(v),
        Head::I16(v) => Node::I16(v),
        Head::I32(v) => Node::I32(v),
        Head::I64(v) => Node::I64(v),
        Head::I128(v) => Node::I128(v),
        Head::F32(bits) => Node::F32(bits),
        Head::F64(bits) => Node::F64(bits),
        Head::Char(v) => Node::Char(v),
        Head::Str(v) => Node::Str(v),
        Head::Bytes(v) => Node::Bytes(v),
        Head::Seq(len) => Node::Seq(elements(r, len, deeper)?),
        Head::Set(len) => Node::Set(elements(r, len, deeper)?),
        Head::Map(len) => Node::Map(entries(r, len, deeper)?),
        Head::UnitVariant(name) => Node::UnitVariant(name),
        Head::Variant(tag::NEWTYPE_VARIANT, name) => {
            Node::NewtypeVariant(name, Box::new(read(r, deeper)?))
        }
        Head::Variant(tag::TUPLE_VARIANT, name) => {
            let len = r.count(1)?;
            Node::TupleVariant(name, elements(r, len, deeper)?)
        }
        Head::Variant(_, name) => {
            let len = r.count(2)?;
            Node::StructVariant(name, entries(r, len, deeper)?)
        }
    })
}

fn elements<'a>(
    r: &mut Reader<'a>,
    len: usize,
    depth: usize,
) -> Result<Vec<Node<'a>>, FormatError> {
    let mut out = Vec::with_capacity(len);
    for _ in 0..len {
        out.push(read(r, depth)?);
    }
    Ok(out)
}

fn entries<'a>(
    r: &mut Reader<'a>,
    len: usize,
    depth: usize,
) -> Result<Vec<(Node<'a>, Node<'a>)>, FormatError> {
    let mut out = Vec::with_capacity(len);
    for _ in 0..len {
        let key = read(r, depth)?;
        out.push((key, read(r, depth)?));
    }
    Ok(out)
}

impl Node<'_> {
    /// The same value with the entries of every map and the elements of every set in a
    /// canonical order: two values are the same when their canonical forms are equal, whatever
    /// order their maps and sets were iterated in (a `HashMap` or `HashSet` decoded anew iterates
    /// in another order). Sequences keep their order: a sequence replayed in another order is
    /// another value.
    pub(super) fn canonical(self) -> Self {
        let canon_entries = |entries: Vec<(Self, Self)>| {
            let mut entries: Vec<_> = entries
                .into_iter()
                .map(|(k, v)| (k.canonical(), v.canonical()))
                .collect();
            entries.sort();
            entries
        };
        let canon_elements = |elements: Vec<Self>| {
            elements
                .into_iter()
                .map(Node::canonical)
                .collect::<Vec<_>>()
        };
        match self {
            Node::Some(inner) => Node::Some(Box::new(inner.canonical())),
            Node::NewtypeVariant(name, inner) => {
                Node::NewtypeVariant(name, Box::new(inner.canonical()))
            }
            Node::Seq(elements) => Node::Seq(canon_elements(elements)),
            Node::Set(elements) => {
                let mut elements = canon_elements(elements);
                elements.sort();
                Node::Set(elements)
            }
            Node::TupleVariant(name, elements) => {
                Node::TupleVariant(name, canon_elements(elements))
            }
            Node::Map(entries) => Node::Map(canon_entries(entries)),
            Node::StructVariant(name, entries) => Node::StructVariant(name, canon_entries(entries)),
            leaf => leaf,
        }
    }
}

//! The reusable encoding buffer: bytes, the stack of entry ranges of the maps and sets being
//! encoded, and the argument entries of an [`ArgsDigest`](super::ArgsDigest).
//!
//! One buffer per thread is kept in a thread-local and lent out ([`Pooled::take`]), so deriving a
//! key allocates nothing once the thread has encoded arguments of that size before.

use std::cell::Cell;
use std::ops::{Deref, DerefMut};

/// Buffers that grew beyond this many bytes are freed instead of kept for the next call.
const MAX_KEPT_BYTES: usize = 256 * 1024;

/// The byte range `start..end` of one encoded entry (or set element) in [`Scratch::bytes`].
#[derive(Clone, Copy, Debug)]
pub(crate) struct Span {
    pub(crate) start: usize,
    pub(crate) end: usize,
    /// The first 8 bytes, big-endian, zero-padded: comparing these first orders spans like
    /// their bytes do (ties are broken by the full bytes), without a `memcmp` call.
    prefix: u64,
}

impl Span {
    // `inline` in optimized builds only, here and below: in a debug build, a crate with tools
    // would compile a copy of each such function it calls (BENCHMARKS.md, "Compile cost").
    /// The span `start..end` of `bytes`.
    #[cfg_attr(not(debug_assertions), inline)]
    pub(crate) fn new(bytes: &[u8], start: usize, end: usize) -> Span {
        let s = bytes.get(start..end).unwrap_or_default();
        let head = match s.first_chunk::<8>() {
            Some(head) => *head,
            None => {
                let mut head = [0u8; 8];
                for (h, b) in head.iter_mut().zip(s) {
                    *h = *b;
                }
                head
            }
        };
        Span {
            start,
            end,
            prefix: u64::from_be_bytes(head),
        }
    }

    /// Orders two spans of `bytes` as their bytes compare.
    pub(crate) fn cmp_in(&self, other: &Span, bytes: &[u8]) -> std::cmp::Ordering {
        self.prefix
            .cmp(&other.prefix)
            .then_with(|| slice(bytes, *self).cmp(slice(bytes, *other)))
    }

    /// Length in bytes.
    #[cfg_attr(not(debug_assertions), inline)]
    pub(crate) fn len(&self) -> usize {
        self.end - self.start
    }
}

/// One argument of an [`ArgsDigest`](super::ArgsDigest): its encoded entry and whether it is
/// part of the key (or only of the fingerprint).
#[derive(Clone, Copy, Debug)]
pub(crate) struct ArgEntry {
    pub(crate) span: Span,
    pub(crate) in_key: bool,
}

/// The encoding buffer.
#[derive(Clone, Debug, Default)]
pub(crate) struct Scratch {
    /// Encoded bytes.
    pub(crate) bytes: Vec<u8>,
    /// Entries of the unordered containers being encoded, innermost last; each container
    /// remembers where its own entries begin and pops them when it ends.
    pub(crate) spans: Vec<Span>,
    /// Arguments of an `ArgsDigest` (unused by the other entry points).
    pub(crate) args: Vec<ArgEntry>,
    /// The caller-supplied key of an `ArgsDigest`, if [`Scratch::has_caller_key`].
    pub(crate) caller_key: String,
    /// Whether `caller_key` is set.
    pub(crate) has_caller_key: bool,
}

/// `bytes[span]`, or nothing if the span is out of range (it never is: spans are only made by
/// the encoder, over bytes it wrote).
#[cfg_attr(not(debug_assertions), inline)]
pub(crate) fn slice(bytes: &[u8], span: Span) -> &[u8] {
    bytes.get(span.start..span.end).unwrap_or_default()
}

impl Scratch {
    const fn new() -> Self {
        Scratch {
            bytes: Vec::new(),
            spans: Vec::new(),
            args: Vec::new(),
            caller_key: String::new(),
            has_caller_key: false,
        }
    }

    fn clear(&mut self) {
        self.bytes.clear();
        self.spans.clear();
        self.args.clear();
        self.caller_key.clear();
        self.has_caller_key = false;
    }

    /// Number of bytes written so far.
    #[cfg_attr(not(debug_assertions), inline)]
    pub(crate) fn len(&self) -> usize {
        self.bytes.len()
    }

    /// Appends one byte.
    #[cfg_attr(not(debug_assertions), inline)]
    pub(crate) fn put_u8(&mut self, b: u8) {
        self.bytes.push(b);
    }

    /// Appends bytes.
    #[cfg_attr(not(debug_assertions), inline)]
    pub(crate) fn put(&mut self, b: &[u8]) {
        self.bytes.extend_from_slice(b);
    }

    /// Appends `uv(n)`: unsigned LEB128, 7 bits per byte, least significant group first, high
    /// bit set on every byte but the last; minimal (no trailing zero groups).
    #[cfg_attr(not(debug_assertions), inline)]
    pub(crate) fn put_uv(&mut self, n: u128) {
        let mut n = n;
        while n >= 0x80 {
            self.bytes.push((n as u8 & 0x7f) | 0x80);
            n >>= 7;
        }
        self.bytes.push(n as u8);
    }

    /// Appends `uv(len)`.
    #[cfg_attr(not(debug_assertions), inline)]
    pub(crate) fn put_len(&mut self, len: usize) {
        if len < 0x80 {
            self.bytes.push(len as u8);
        } else {
            // usize is at most 64 bits on every platform Rust supports.
            self.put_uv(len as u128);
        }
    }

    /// Appends `str(s)` = `uv(byte length) ‖ UTF-8 bytes`.
    #[cfg_attr(not(debug_assertions), inline)]
    pub(crate) fn put_str(&mut self, s: &str) {
        self.put_len(s.len());
        self.put(s.as_bytes());
    }

    /// Forgets everything written from `len` bytes and `spans` entries on (an encoding that
    /// failed half-way).
    pub(crate) fn rollback(&mut self, len: usize, spans: usize) {
        self.bytes.truncate(len);
        self.spans.truncate(spans);
    }

    /// Ends an unordered container whose entries `spans[base..]` fill `bytes[region..]` back to
    /// back: reorders them so their encodings ascend bytewise, and pops their spans.
    pub(crate) fn sort_entries(&mut self, region: usize, base: usize) {
        let Scratch { bytes, spans, .. } = self;
        let entries = spans.get_mut(base..).unwrap_or_default();
        let sorted = entries.is_sorted_by(|a, b| a.cmp_in(b, bytes).is_le());
        if !sorted {
            entries.sort_unstable_by(|a, b| a.cmp_in(b, bytes));
            let end = bytes.len();
            for span in entries.iter() {
                bytes.extend_from_within(span.start..span.end);
            }
            // The region holds exactly the entries, so the sorted copy is as long as it.
            bytes.copy_within(end.., region);
            bytes.truncate(end);
        }
        spans.truncate(base);
    }

    /// Sorts the arguments by the bytes of their entries.
    pub(crate) fn sort_args(&mut self) {
        let Scratch { bytes, args, .. } = self;
        if !args.is_sorted_by(|a, b| a.span.cmp_in(&b.span, bytes).is_le()) {
            args.sort_unstable_by(|a, b| a.span.cmp_in(&b.span, bytes));
        }
    }
}

thread_local! {
    static SPARE: Cell<Option<Box<Scratch>>> = const { Cell::new(None) };
}

/// A [`Scratch`] lent by the thread's pool (boxed, so lending it moves one pointer); given back
/// (cleared) when dropped, to the pool of whichever thread drops it.
#[derive(Clone, Debug, Default)]
pub(crate) struct Pooled(Option<Box<Scratch>>);

impl Pooled {
    /// The thread's spare buffer (a new one if it is in use or the thread is exiting).
    pub(crate) fn take() -> Pooled {
        let spare = SPARE.try_with(Cell::take).ok().flatten();
        Pooled(Some(spare.unwrap_or_default()))
    }
}

impl Drop for Pooled {
    fn drop(&mut self) {
        let Some(mut scratch) = self.0.take() else {
            return;
        };
        if scratch.bytes.capacity() > MAX_KEPT_BYTES {
            return;
        }
        scratch.clear();
        // Replaces (and frees) the buffer of a nested use, if any: the last one back stays.
        let _ = SPARE.try_with(|spare| spare.set(Some(scratch)));
    }
}

impl Deref for Pooled {
    type Target = Scratch;
    fn deref(&self) -> &Scratch {
        self.0.as_deref().unwrap_or(&EMPTY)
    }
}

impl DerefMut for Pooled {
    fn deref_mut(&mut self) -> &mut Scratch {
        // Always `Some` outside `drop`.
        self.0.get_or_insert_default()
    }
}

/// What an (impossible) emptied `Pooled` reads as.
static EMPTY: Scratch = Scratch::new();

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn leb128() {
        let enc = |n: u128| {
            let mut s = Scratch::default();
            s.put_uv(n);
            s.bytes
        };
        assert_eq!(enc(0), [0]);
        assert_eq!(enc(127), [0x7f]);
        assert_eq!(enc(128), [0x80, 0x01]);
        assert_eq!(enc(300), [0xac, 0x02]);
        assert_eq!(enc(u128::MAX).len(), 19);
        let mut s = Scratch::default();
        s.put_len(200);
        assert_eq!(s.bytes, enc(200));
    }

    #[test]
    fn sort_entries_reorders_the_region_only() {
        let mut s = Scratch::default();
        s.put(b"HDR");
        let region = s.len();
        for e in [&b"cc"[..], b"a", b"bbb"] {
            let start = s.len();
            s.put(e);
            s.spans.push(Span::new(&s.bytes, start, s.len()));
        }
        s.sort_entries(region, 0);
        assert_eq!(s.bytes, b"HDRabbbcc");
        assert!(s.spans.is_empty());
    }

    #[test]
    fn pool_reuses_the_buffer() {
        let capacity = {
            let mut p = Pooled::take();
            p.put(&[0; 1000]);
            p.bytes.capacity()
        };
        let p = Pooled::take();
        assert!(p.bytes.is_empty());
        assert_eq!(p.bytes.capacity(), capacity);
        // A nested take gets an empty buffer without disturbing the first one.
        let q = Pooled::take();
        assert_eq!(q.bytes.capacity(), 0);
        drop(q);
        drop(p);
        assert_eq!(Pooled::take().bytes.capacity(), capacity);
    }

    #[test]
    fn span_prefixes_order_like_the_bytes() {
        let cases: [&[u8]; 9] = [
            b"",
            b"\0",
            b"\0\0\0\0\0\0\0\0\0",
            b"a",
            b"a\0",
            b"abcdefgh",
            b"abcdefgh\0",
            b"abcdefghi",
            b"abcdefgi",
        ];
        let mut bytes = Vec::new();
        let spans: Vec<Span> = cases
            .iter()
            .map(|c| {
                let start = bytes.len();
                bytes.extend_from_slice(c);
                Span::new(&bytes, start, bytes.len())
            })
            .collect();
        for (a, x) in spans.iter().zip(cases) {
            for (b, y) in spans.iter().zip(cases) {
                assert_eq!(a.cmp_in(b, &bytes), x.cmp(y), "{x:?} {y:?}");
            }
        }
    }
}

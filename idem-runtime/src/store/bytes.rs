//! [`ResultBytes`]: an encoded result as stores hand it out — small ones inline, larger ones
//! shared, so that a replay from memory copies a few bytes or bumps a count, never allocates.

use std::fmt;
use std::ops::Deref;
use std::sync::Arc;

/// Results up to this many bytes are kept inline.
const INLINE: usize = 22;

/// The encoded result of a completed key.
///
/// Up to 22 bytes are held inline (cloning copies them); longer results are shared behind an
/// [`Arc`] (cloning bumps a count). It dereferences to `[u8]`.
///
/// ```
/// use idem_tools_runtime::store::ResultBytes;
///
/// let small = ResultBytes::from(&b"ok"[..]);
/// let large = ResultBytes::from(vec![7u8; 1000]);
/// assert_eq!(&*small, b"ok");
/// assert_eq!(large.len(), 1000);
/// assert_eq!(large.clone(), large);
/// ```
#[derive(Clone)]
pub struct ResultBytes(Repr);

#[derive(Clone)]
enum Repr {
    Inline { len: u8, bytes: [u8; INLINE] },
    Shared(Arc<[u8]>),
}

impl ResultBytes {
    /// No bytes.
    pub const fn new() -> Self {
        ResultBytes(Repr::Inline {
            len: 0,
            bytes: [0; INLINE],
        })
    }
}

impl Default for ResultBytes {
    fn default() -> Self {
        Self::new()
    }
}

impl From<&[u8]> for ResultBytes {
    fn from(bytes: &[u8]) -> Self {
        match u8::try_from(bytes.len()) {
            Ok(len) if bytes.len() <= INLINE => {
                let mut inline = [0; INLINE];
                inline[..bytes.len()].copy_from_slice(bytes);
                ResultBytes(Repr::Inline { len, bytes: inline })
            }
            _ => ResultBytes(Repr::Shared(Arc::from(bytes))),
        }
    }
}

impl From<Vec<u8>> for ResultBytes {
    fn from(bytes: Vec<u8>) -> Self {
        if bytes.len() <= INLINE {
            ResultBytes::from(&bytes[..])
        } else {
            ResultBytes(Repr::Shared(Arc::from(bytes)))
        }
    }
}

impl From<Arc<[u8]>> for ResultBytes {
    fn from(bytes: Arc<[u8]>) -> Self {
        ResultBytes(Repr::Shared(bytes))
    }
}

impl Deref for ResultBytes {
    type Target = [u8];

    fn deref(&self) -> &[u8] {
        match &self.0 {
            Repr::Inline { len, bytes } => bytes.get(..usize::from(*len)).unwrap_or_default(),
            Repr::Shared(bytes) => bytes,
        }
    }
}

impl AsRef<[u8]> for ResultBytes {
    fn as_ref(&self) -> &[u8] {
        self
    }
}

impl PartialEq for ResultBytes {
    fn eq(&self, other: &Self) -> bool {
        **self == **other
    }
}

impl Eq for ResultBytes {}

impl fmt::Debug for ResultBytes {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "ResultBytes({} bytes)", self.len())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_length_round_trips_and_compares_by_content() {
        for len in [0, 1, INLINE - 1, INLINE, INLINE + 1, 4096] {
            let data: Vec<u8> = (0..len).map(|i| i as u8).collect();
            let (a, b) = (
                ResultBytes::from(&data[..]),
                ResultBytes::from(data.clone()),
            );
            assert_eq!(&*a, &data[..], "len {len}");
            assert_eq!(a, b, "len {len}");
            assert_eq!(a.clone(), a);
            assert_eq!(
                matches!(a.0, Repr::Inline { .. }),
                len <= INLINE,
                "len {len}"
            );
        }
        assert_ne!(ResultBytes::from(&b"a"[..]), ResultBytes::from(&b"b"[..]));
        assert_eq!(
            ResultBytes::from(Arc::<[u8]>::from(&b"shared"[..])),
            ResultBytes::from(&b"shared"[..])
        );
    }

    #[test]
    fn it_stays_small() {
        assert_eq!(std::mem::size_of::<ResultBytes>(), 24);
    }
}

//! [`Padded`]: a value alone on its cache lines.

use std::ops::Deref;

/// A value alone on its cache lines (128 bytes: two 64-byte lines, as adjacent-line
/// prefetching pairs them), so that threads writing neighbouring values do not slow each
/// other down.
#[repr(align(128))]
pub(crate) struct Padded<T>(pub(crate) T);

impl<T> Deref for Padded<T> {
    type Target = T;

    fn deref(&self) -> &T {
        &self.0
    }
}

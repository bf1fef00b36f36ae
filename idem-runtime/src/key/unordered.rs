//! [`Unordered`] and [`unordered`]: collections whose order does not matter in keys.

use serde::{Deserialize, Deserializer, Serialize, Serializer};

/// The newtype-struct name that makes the key serializer encode the inner sequence as a set.
/// Other serializers treat newtype structs as transparent, so the marker is invisible to them.
pub(crate) const UNORDERED_MAGIC: &str = "$idem_tools::Unordered";

/// A collection whose iteration order does not matter for idempotency keys: it is encoded as a
/// set (its elements sorted by their encoding), so `Unordered(vec![a, b])` and
/// `Unordered(vec![b, a])` give the same key.
///
/// For every other serializer (JSON, …) it serializes the collection's elements as a sequence,
/// in iteration order: around a sequence or a set that is exactly the inner collection's own
/// form, and it deserializes like the inner collection. Around a map it is a sequence of
/// `[key, value]` pairs and around an `Option` a sequence of zero or one element, which the map
/// or `Option` does not read back: use it on sequences and sets (a map's key does not depend on
/// its order anyway). A result recorded for replay marks it as a set too, so it may replay in
/// another order (a plain `Vec` may not); a result that would not read back is refused on its
/// retry (`Error::NotReplayable`), never replayed wrong.
///
/// ```
/// # extern crate idem_tools_runtime as idem_tools;
/// use idem_tools::key::{Unordered, encode_value};
///
/// let a = encode_value(&Unordered(vec!["x", "y"])).unwrap();
/// let b = encode_value(&Unordered(vec!["y", "x"])).unwrap();
/// assert_eq!(a, b);
/// assert_eq!(serde_json::to_string(&Unordered(vec![1, 2])).unwrap(), "[1,2]");
/// ```
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct Unordered<T>(pub T);

impl<T> Serialize for Unordered<T>
where
    for<'a> &'a T: IntoIterator,
    for<'a> <&'a T as IntoIterator>::Item: Serialize,
{
    fn serialize<S: Serializer>(&self, serializer: S) -> Result<S::Ok, S::Error> {
        unordered(&self.0, serializer)
    }
}

impl<'de, T: Deserialize<'de>> Deserialize<'de> for Unordered<T> {
    fn deserialize<D: Deserializer<'de>>(deserializer: D) -> Result<Self, D::Error> {
        T::deserialize(deserializer).map(Unordered)
    }
}

impl<T> From<T> for Unordered<T> {
    fn from(value: T) -> Self {
        Unordered(value)
    }
}

impl<T> std::ops::Deref for Unordered<T> {
    type Target = T;
    fn deref(&self) -> &T {
        &self.0
    }
}

impl<T> std::ops::DerefMut for Unordered<T> {
    fn deref_mut(&mut self) -> &mut T {
        &mut self.0
    }
}

/// Serializes the elements of `value` as a sequence (in iteration order).
struct AsSeq<'a, T: ?Sized>(&'a T);

impl<'a, T: ?Sized> Serialize for AsSeq<'a, T>
where
    &'a T: IntoIterator,
    <&'a T as IntoIterator>::Item: Serialize,
{
    fn serialize<S: Serializer>(&self, serializer: S) -> Result<S::Ok, S::Error> {
        serializer.collect_seq(self.0)
    }
}

/// Serializes a collection as an unordered set in keys (and as a plain sequence elsewhere); for
/// fields of your own types: `#[serde(serialize_with = "idem_tools::key::unordered")]`.
///
/// ```
/// # extern crate idem_tools_runtime as idem_tools;
/// use idem_tools::key::encode_value;
///
/// #[derive(serde::Serialize)]
/// struct Invite {
///     #[serde(serialize_with = "idem_tools::key::unordered")]
///     emails: Vec<String>,
/// }
///
/// let a = Invite { emails: vec!["a@x".into(), "b@x".into()] };
/// let b = Invite { emails: vec!["b@x".into(), "a@x".into()] };
/// assert_eq!(encode_value(&a).unwrap(), encode_value(&b).unwrap());
/// ```
///
/// # Errors
///
/// Whatever the serializer or an element's `Serialize` impl returns.
pub fn unordered<'a, T, S>(value: &'a T, serializer: S) -> Result<S::Ok, S::Error>
where
    T: ?Sized,
    &'a T: IntoIterator,
    <&'a T as IntoIterator>::Item: Serialize,
    S: Serializer,
{
    serializer.serialize_newtype_struct(UNORDERED_MAGIC, &AsSeq(value))
}

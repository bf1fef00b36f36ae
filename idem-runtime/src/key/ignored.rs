//! [`ignored`]: a field of an argument's struct that the key leaves out.

use serde::{Serialize, Serializer};

/// The newtype-struct name that makes the key serializer leave a struct field out. Other
/// serializers treat newtype structs as transparent, so the marker is invisible to them.
pub(crate) const IGNORED_MAGIC: &str = "$idem_tools::Ignored";

/// Leaves a field out of keys and fingerprints, as `ignore(..)` leaves out an argument: for a
/// field of an argument's struct that a model rewords between retries of one action (a memo, a
/// reason), where the tool takes one structured argument — rmcp's `Parameters<T>`, say — and
/// `ignore(memo)` has no parameter to name. Use it as
/// `#[serde(serialize_with = "idem_tools::key::ignored")]`: every other serializer (JSON, the
/// record of a result, …) writes the field as before.
///
/// The key leaves out the field of a struct (or of an enum's struct variant, or of a
/// `#[serde(flatten)]`ed struct), or the entry of a map, whose value this marks (also inside
/// `Some` or a newtype struct). Anywhere else — an element of a sequence or tuple, the content
/// of an enum variant, a map's key, a whole argument — it is an encoding error: the key never
/// leaves out more than the marked value. (Key spec, §4.3.)
///
/// ```
/// # extern crate idem_tools_runtime as idem_tools;
/// use idem_tools::key::encode_value;
///
/// #[derive(serde::Serialize)]
/// struct Refund {
///     order: u64,
///     #[serde(serialize_with = "idem_tools::key::ignored")]
///     memo: String,
/// }
///
/// #[derive(serde::Serialize)]
/// struct RefundKeyed {
///     order: u64,
/// }
///
/// let a = Refund { order: 7, memo: "customer asked".into() };
/// let b = Refund { order: 7, memo: "Customer asked for it".into() };
/// assert_eq!(encode_value(&a).unwrap(), encode_value(&b).unwrap());
/// assert_eq!(encode_value(&a).unwrap(), encode_value(&RefundKeyed { order: 7 }).unwrap());
/// assert_eq!(serde_json::to_string(&a).unwrap(), r#"{"order":7,"memo":"customer asked"}"#);
/// ```
///
/// # Errors
///
/// Whatever the serializer or the value's `Serialize` impl returns.
pub fn ignored<T, S>(value: &T, serializer: S) -> Result<S::Ok, S::Error>
where
    T: Serialize + ?Sized,
    S: Serializer,
{
    serializer.serialize_newtype_struct(IGNORED_MAGIC, value)
}

//! [`ArgsDigest`]: the key and fingerprint of one call, built argument by argument.

use serde::Serialize;

use super::encode::{EncodeError, encode_field, tag};
use super::hash::{self, ArgsOutput};
use super::scratch::{ArgEntry, Pooled, Scratch, Span, slice};
use super::{Fingerprint, Key, encode_error};
use crate::Error;

/// Above this many bytes of entries, the record is hashed entry by entry instead of being copied
/// into one contiguous run first.
const COPY_LIMIT: usize = 4096;

/// Streams the arguments of one call into the key digest and the fingerprint digest.
///
/// Each argument is encoded once, as the entry `name: value` of the arguments record, into a
/// buffer reused across calls on the thread; the record is unordered, so the order of the calls
/// does not matter. With only [`arg`](Self::arg) calls, the result equals
/// [`derive_key`](super::derive_key) and [`fingerprint`](super::fingerprint) of a struct with
/// those fields.
///
/// ```
/// # extern crate idem_tools_runtime as idem_tools;
/// use idem_tools::key::{ArgsDigest, derive_key};
///
/// #[derive(serde::Serialize)]
/// struct Args<'a> { to: &'a str, amount_cents: u64 }
///
/// let mut d = ArgsDigest::new("send_payment");
/// d.arg("to", "acct_42")?;
/// d.arg("amount_cents", &1250u32)?; // integer width does not matter
/// d.fingerprint_arg("memo", "lunch")?; // fingerprint only
/// let (key, fp) = d.finish("billing", "turn-7", "send_payment", 1);
///
/// let args = Args { to: "acct_42", amount_cents: 1250 };
/// assert_eq!(key, derive_key("billing", "turn-7", "send_payment", 1, &args)?);
/// assert_eq!(key.to_hex().len(), 64);
/// # let _ = fp;
/// # Ok::<(), idem_tools::Error>(())
/// ```
#[derive(Clone)]
pub struct ArgsDigest {
    tool: &'static str,
    /// The encoded entries, the arguments and the caller key.
    scratch: Pooled,
}

impl std::fmt::Debug for ArgsDigest {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("ArgsDigest")
            .field("tool", &self.tool)
            .field("args", &self.scratch.args.len())
            .field("caller_key", &self.scratch.has_caller_key)
            .finish_non_exhaustive()
    }
}

impl ArgsDigest {
    /// Starts the digests of a call of `tool` (the name is used in error messages).
    pub fn new(tool: &'static str) -> Self {
        ArgsDigest {
            tool,
            scratch: Pooled::take(),
        }
    }

    fn add<T: Serialize + ?Sized>(
        &mut self,
        name: &str,
        value: &T,
        in_key: bool,
    ) -> Result<(), Error> {
        let encoded = encode_field(&mut self.scratch, name, value);
        self.added(name, encoded, in_key)
    }

    /// Keeps an argument's entry, or makes its encoding's failure the call's error. Out of
    /// [`add`](Self::add), which is compiled for each argument type, in a debug build.
    #[cfg_attr(not(debug_assertions), inline)]
    fn added(
        &mut self,
        name: &str,
        encoded: Result<Span, EncodeError>,
        in_key: bool,
    ) -> Result<(), Error> {
        match encoded {
            Ok(span) => {
                self.scratch.args.push(ArgEntry { span, in_key });
                Ok(())
            }
            Err(e) => Err(encode_error(self.tool, format!("argument `{name}`"), e)),
        }
    }

    /// An argument that is part of the key AND the fingerprint.
    ///
    /// # Errors
    ///
    /// [`Error::Encode`] if `value`'s `Serialize` impl fails; the digest is then unchanged.
    pub fn arg<T: Serialize + ?Sized>(&mut self, name: &str, value: &T) -> Result<(), Error> {
        self.add(name, value, true)
    }

    /// An argument left out of the key (`skip(..)`) but still part of the fingerprint.
    ///
    /// # Errors
    ///
    /// [`Error::Encode`] if `value`'s `Serialize` impl fails; the digest is then unchanged.
    pub fn fingerprint_arg<T: Serialize + ?Sized>(
        &mut self,
        name: &str,
        value: &T,
    ) -> Result<(), Error> {
        self.add(name, value, false)
    }

    /// A caller-supplied idempotency key (`#[key]` parameter): the key is then derived from
    /// namespace, tool, version and this string only (turn id and other args excluded); other
    /// args still go in the fingerprint. The caller key itself is not part of the fingerprint.
    /// If called more than once, the last value counts.
    pub fn caller_key(&mut self, key: &str) {
        let s = &mut *self.scratch;
        s.caller_key.clear();
        s.caller_key.push_str(key);
        s.has_caller_key = true;
    }

    /// Whether a caller-supplied key was given ([`caller_key`](Self::caller_key)): the key
    /// then does not depend on the turn id.
    pub fn has_caller_key(&self) -> bool {
        self.scratch.has_caller_key
    }

    /// Finishes both digests.
    pub fn finish(
        mut self,
        namespace: &str,
        turn_id: &str,
        tool: &str,
        version: u32,
    ) -> (Key, Fingerprint) {
        let s = &mut *self.scratch;
        s.sort_args();
        let all = record_digest(s, tool, version, |_| true);
        let key = if s.has_caller_key {
            let caller = std::mem::take(&mut s.caller_key);
            let key = hash::caller_key(s, namespace, tool, version, &caller);
            s.caller_key = caller;
            key
        } else if s.args.iter().all(|a| a.in_key) {
            hash::turn_key(s, namespace, turn_id, &all)
        } else {
            let record = record_digest(s, tool, version, |a| a.in_key);
            hash::turn_key(s, namespace, turn_id, &record)
        };
        (Key::from_bytes(key), Fingerprint::from_bytes(all))
    }
}

/// The arguments digest of the record of the (sorted) arguments `keep` selects:
/// `header ‖ 0x0C ‖ their entries ‖ 0x0B`.
fn record_digest(
    s: &mut Scratch,
    tool: &str,
    version: u32,
    keep: impl Fn(&ArgEntry) -> bool,
) -> ArgsOutput {
    let start = s.len();
    hash::put_args_header(s, tool, version);
    s.put_u8(tag::MAP);
    let size: usize = s
        .args
        .iter()
        .filter(|a| keep(a))
        .map(|a| a.span.len())
        .sum();
    if size <= COPY_LIMIT {
        // One contiguous run: header, the entries in order, end.
        for i in 0..s.args.len() {
            if let Some(a) = s.args.get(i).copied().filter(|a| keep(a)) {
                s.bytes.extend_from_within(a.span.start..a.span.end);
            }
        }
        s.put_u8(tag::END);
        let digest = hash::args_digest(s.bytes.get(start..).unwrap_or_default());
        s.bytes.truncate(start);
        digest
    } else {
        // Large entries: each is already contiguous; hash them in place.
        let mut h = hash::args_hasher();
        h.update(s.bytes.get(start..).unwrap_or_default());
        for a in s.args.iter().filter(|a| keep(a)) {
            h.update(slice(&s.bytes, a.span));
        }
        h.update(&[tag::END]);
        s.bytes.truncate(start);
        *h.finalize().as_bytes()
    }
}

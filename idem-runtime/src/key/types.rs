//! [`Key`], [`Fingerprint`] and [`ShortKey`].

use std::fmt;

use crate::Error;

/// Writes `bytes` (at most 32) as lowercase hex, without allocating.
fn write_hex(f: &mut fmt::Formatter<'_>, bytes: &[u8]) -> fmt::Result {
    let mut buf = [0u8; 64];
    let text = buf.get_mut(..2 * bytes.len()).ok_or(fmt::Error)?;
    hex::encode_to_slice(bytes, text).map_err(|_| fmt::Error)?;
    f.write_str(std::str::from_utf8(text).map_err(|_| fmt::Error)?)
}

/// Parses exactly `2 * N` hex characters (either case) into `N` bytes.
fn from_hex<const N: usize>(s: &str, what: &str) -> Result<[u8; N], Error> {
    let invalid = |why: &str| {
        let shown: String = s.chars().take(2 * N + 2).collect();
        let ellipsis = if shown.len() < s.len() { "…" } else { "" };
        Error::Config(format!(
            "invalid {what} `{shown}{ellipsis}`: {why}; expected {} hex characters",
            2 * N
        ))
    };
    if s.len() != 2 * N {
        return Err(invalid(&format!("it is {} bytes long", s.len())));
    }
    let mut out = [0u8; N];
    hex::decode_to_slice(s, &mut out).map_err(|_| invalid("it contains a non-hex character"))?;
    Ok(out)
}

/// An idempotency key: the 32-byte BLAKE3 digest identifying one logical tool call.
///
/// Derived by [`derive_key`](super::derive_key) or [`ArgsDigest`](super::ArgsDigest) as specified
/// in `docs/key-spec.md`. `Display` prints the 64 lowercase hex characters, `Debug` an
/// abbreviation `Key(0123456789ab…)`.
#[derive(Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
pub struct Key([u8; 32]);

/// Hashes the key's first eight bytes only: a key is a BLAKE3 digest, whose every eight bytes
/// are as evenly spread as all 32 (equality still compares all 32). The stores' and the
/// single-flight's tables hash a key on every call.
impl std::hash::Hash for Key {
    fn hash<H: std::hash::Hasher>(&self, state: &mut H) {
        let [a, b, c, d, e, f, g, h, ..] = self.0;
        state.write_u64(u64::from_le_bytes([a, b, c, d, e, f, g, h]));
    }
}

impl Key {
    /// The key with these bytes.
    pub const fn from_bytes(b: [u8; 32]) -> Key {
        Key(b)
    }

    /// The 32 bytes of the key.
    pub fn as_bytes(&self) -> &[u8; 32] {
        &self.0
    }

    /// The key as 64 lowercase hex characters.
    pub fn to_hex(&self) -> String {
        hex::encode(self.0)
    }

    /// Parses 64 hex characters (either case).
    ///
    /// # Errors
    ///
    /// [`Error::Config`] if `s` is not exactly 64 hex characters.
    pub fn from_hex(s: &str) -> Result<Key, Error> {
        from_hex(s, "key").map(Key)
    }

    /// The first 6 bytes, for messages and logs.
    pub fn short(&self) -> ShortKey {
        let [a, b, c, d, e, f, ..] = self.0;
        ShortKey([a, b, c, d, e, f])
    }
}

impl fmt::Display for Key {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write_hex(f, &self.0)
    }
}

impl fmt::Debug for Key {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("Key(")?;
        write_hex(f, self.short().as_bytes())?;
        f.write_str("…)")
    }
}

/// A digest of all arguments of a call, used to detect a key reused with different arguments.
///
/// `Display` prints the 64 lowercase hex characters, `Debug` an abbreviation
/// `Fingerprint(0123456789ab…)`.
#[derive(Clone, Copy, PartialEq, Eq, Hash)]
pub struct Fingerprint([u8; 32]);

/// Where a [`Fingerprint::marked`] fingerprint's mark begins.
const MARKED: usize = 24;

impl Fingerprint {
    /// The fingerprint with these bytes.
    pub const fn from_bytes(b: [u8; 32]) -> Fingerprint {
        Fingerprint(b)
    }

    /// The 32 bytes of the fingerprint.
    pub fn as_bytes(&self) -> &[u8; 32] {
        &self.0
    }

    /// This fingerprint of a call's arguments, its last 8 bytes replaced by `mark`, which says
    /// which tool made the call (docs/key-spec.md, §5): its first 24
    /// bytes still tell two calls' arguments apart ([`same_arguments`](Self::same_arguments)).
    #[must_use]
    pub fn marked(self, mark: &[u8; 8]) -> Fingerprint {
        let mut bytes = self.0;
        bytes[MARKED..].copy_from_slice(mark);
        Fingerprint(bytes)
    }

    /// Whether `other` is of the same arguments, whatever their marks: the first 24 bytes.
    pub fn same_arguments(&self, other: &Fingerprint) -> bool {
        self.0[..MARKED] == other.0[..MARKED]
    }

    /// The fingerprint as 64 lowercase hex characters.
    pub fn to_hex(&self) -> String {
        hex::encode(self.0)
    }

    /// Parses 64 hex characters (either case).
    ///
    /// # Errors
    ///
    /// [`Error::Config`] if `s` is not exactly 64 hex characters.
    pub fn from_hex(s: &str) -> Result<Fingerprint, Error> {
        from_hex(s, "fingerprint").map(Fingerprint)
    }
}

impl fmt::Display for Fingerprint {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write_hex(f, &self.0)
    }
}

impl fmt::Debug for Fingerprint {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("Fingerprint(")?;
        write_hex(f, self.0.get(..6).unwrap_or_default())?;
        f.write_str("…)")
    }
}

/// The first 6 bytes of a [`Key`], shown in error messages and logs.
///
/// `Display` and `Debug` both print 12 lowercase hex characters.
#[derive(Clone, Copy, PartialEq, Eq, Hash)]
pub struct ShortKey([u8; 6]);

impl ShortKey {
    /// The short key with these bytes.
    pub const fn from_bytes(b: [u8; 6]) -> ShortKey {
        ShortKey(b)
    }

    /// The 6 bytes.
    pub fn as_bytes(&self) -> &[u8; 6] {
        &self.0
    }

    /// The 12 lowercase hex characters.
    pub fn to_hex(&self) -> String {
        hex::encode(self.0)
    }
}

impl From<Key> for ShortKey {
    fn from(key: Key) -> ShortKey {
        key.short()
    }
}

impl fmt::Display for ShortKey {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write_hex(f, &self.0)
    }
}

impl fmt::Debug for ShortKey {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write_hex(f, &self.0)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn hex_round_trip_and_formatting() {
        let mut b = [0u8; 32];
        for (i, x) in b.iter_mut().enumerate() {
            *x = (i as u8).wrapping_mul(37);
        }
        let k = Key::from_bytes(b);
        let hex = k.to_hex();
        assert_eq!(hex.len(), 64);
        assert_eq!(hex, k.to_string());
        assert!(
            hex.bytes()
                .all(|c| c.is_ascii_digit() || c.is_ascii_lowercase())
        );
        assert_eq!(Key::from_hex(&hex).ok(), Some(k));
        assert_eq!(Key::from_hex(&hex.to_uppercase()).ok(), Some(k));
        assert_eq!(format!("{k:?}"), format!("Key({}…)", &hex[..12]));
        assert_eq!(k.short().to_string(), hex[..12]);
        assert_eq!(format!("{:?}", k.short()), hex[..12]);
        let fp = Fingerprint::from_bytes(b);
        assert_eq!(fp.to_string(), hex);
        assert_eq!(Fingerprint::from_hex(&hex).ok(), Some(fp));
        assert_eq!(format!("{fp:?}"), format!("Fingerprint({}…)", &hex[..12]));
    }

    #[test]
    fn from_hex_rejects_bad_input_without_panicking() {
        for bad in [
            "",
            "00",
            &"0".repeat(63),
            &"0".repeat(65),
            &format!("{}g", "0".repeat(63)),
            &format!("{}é", "0".repeat(62)),
            &"é".repeat(32),
            &"€".repeat(64),
        ] {
            assert!(
                matches!(Key::from_hex(bad), Err(Error::Config(_))),
                "{bad:?}"
            );
            assert!(matches!(Fingerprint::from_hex(bad), Err(Error::Config(_))));
        }
    }
}

//! Where a [`RedisStore`](super::RedisStore) keeps things: Redis key names. A key's record and
//! its attempt count share one hash; a turn's counts of started actions and its index of records
//! share a hash of its own, in the namespace's slot when the namespace has a hash tag.

use ::redis::{RedisWrite, ToRedisArgs};
use bytes::BufMut;

use crate::key::Key;
use crate::store::budget::CounterId;

/// Length of a key in hex, inside the hash tag that ends every record's Redis key.
pub(super) const KEY_HEX_LEN: usize = 64;

/// The tail of a record's Redis key: `:{` + 64 hex digits + `}`.
const RECORD_TAIL_LEN: usize = KEY_HEX_LEN + 3;

/// Writes `<prefix>:<namespace>:<kind>{<id in hex>}` (the hex spelled out on the stack), in
/// one piece: it is an argument of every command.
fn write_key(out: &mut impl BufMut, prefix: &str, namespace: &str, kind: &str, id: &[u8]) {
    let mut hex = [0u8; KEY_HEX_LEN];
    let hex = &mut hex[..2 * id.len().min(KEY_HEX_LEN / 2)];
    // The buffer is twice the input: cannot fail.
    let _ = hex::encode_to_slice(&id[..hex.len() / 2], hex);
    out.put_slice(prefix.as_bytes());
    out.put_u8(b':');
    out.put_slice(namespace.as_bytes());
    out.put_u8(b':');
    out.put_slice(kind.as_bytes());
    out.put_u8(b'{');
    out.put_slice(hex);
    out.put_u8(b'}');
}

/// The length of what [`write_key`] writes for an id of `id_len` bytes.
fn key_len(prefix: &str, namespace: &str, kind: &str, id_len: usize) -> usize {
    prefix.len() + namespace.len() + kind.len() + 2 * id_len.min(KEY_HEX_LEN / 2) + 4
}

/// A Redis key as a `String` (for the admin API, Cluster slots and tests).
fn text(write: impl FnOnce(&mut Vec<u8>)) -> String {
    let mut out = Vec::new();
    write(&mut out);
    String::from_utf8_lossy(&out).into_owned()
}

/// A record's Redis key, `<prefix>:<namespace>:{<key in hex>}`, written where it is needed.
#[derive(Clone, Copy)]
pub(super) struct RecordKey<'a> {
    pub(super) prefix: &'a str,
    pub(super) namespace: &'a str,
    pub(super) key: &'a Key,
}

impl RecordKey<'_> {
    /// Its length in bytes.
    pub(super) fn len(&self) -> usize {
        key_len(self.prefix, self.namespace, "", self.key.as_bytes().len())
    }

    fn write(&self, out: &mut impl BufMut) {
        write_key(out, self.prefix, self.namespace, "", self.key.as_bytes());
    }

    /// As a `String`.
    pub(super) fn text(self) -> String {
        text(|out| self.write(out))
    }
}

impl ToRedisArgs for RecordKey<'_> {
    fn write_redis_args<W: ?Sized + RedisWrite>(&self, out: &mut W) {
        self.write(&mut out.bufmut_for_next_arg(self.len()));
    }
}

/// A turn's hash (its counts of started actions and its index of records),
/// `<prefix>:<namespace>:t:{<counter id in hex>}`.
#[derive(Clone, Copy)]
pub(super) struct TurnKey<'a> {
    pub(super) prefix: &'a str,
    pub(super) namespace: &'a str,
    pub(super) id: &'a CounterId,
}

impl TurnKey<'_> {
    fn write(&self, out: &mut impl BufMut) {
        write_key(out, self.prefix, self.namespace, "t:", self.id);
    }

    /// As a `String`.
    pub(super) fn text(self) -> String {
        text(|out| self.write(out))
    }
}

impl ToRedisArgs for TurnKey<'_> {
    fn write_redis_args<W: ?Sized + RedisWrite>(&self, out: &mut W) {
        let len = key_len(self.prefix, self.namespace, "t:", self.id.len());
        self.write(&mut out.bufmut_for_next_arg(len));
    }
}

/// The `SCAN MATCH` pattern of the records of one namespace, or of every namespace.
pub(super) fn record_pattern(prefix: &str, namespace: Option<&str>) -> String {
    match namespace {
        Some(ns) => format!(
            "{}:{}:{{{}}}",
            glob_escape(prefix),
            glob_escape(ns),
            "?".repeat(KEY_HEX_LEN)
        ),
        None => format!("{}:*}}", glob_escape(prefix)),
    }
}

/// Splits a record's Redis key `<prefix>:<namespace>:{<key in hex>}` into its namespace and
/// key; `None` for anything else (budget counts, foreign keys).
pub(super) fn parse_record_key(prefix: &str, raw: &[u8]) -> Option<(String, Key)> {
    let text = std::str::from_utf8(raw).ok()?;
    let rest = text.strip_prefix(prefix)?.strip_prefix(':')?;
    let split = rest.len().checked_sub(RECORD_TAIL_LEN)?;
    let (namespace, tail) = (rest.get(..split)?, rest.get(split..)?);
    let hex = tail.strip_prefix(":{")?.strip_suffix('}')?;
    Some((namespace.to_owned(), Key::from_hex(hex).ok()?))
}

/// Escapes the glob characters of `text` for `SCAN MATCH`.
pub(super) fn glob_escape(text: &str) -> String {
    let mut out = String::with_capacity(text.len());
    for c in text.chars() {
        if matches!(c, '*' | '?' | '[' | ']' | '\\') {
            out.push('\\');
        }
        out.push(c);
    }
    out
}

/// The Redis Cluster hash slot of a Redis key (CRC16/XMODEM of its hash tag, mod 16384): a
/// script may touch two keys only if they share a slot.
pub(super) fn slot(redis_key: &str) -> u16 {
    let bytes = redis_key.as_bytes();
    let tagged = bytes.iter().position(|&b| b == b'{').and_then(|open| {
        let close = bytes[open + 1..].iter().position(|&b| b == b'}')?;
        (close > 0).then(|| &bytes[open + 1..open + 1 + close])
    });
    let mut crc: u16 = 0;
    for &b in tagged.unwrap_or(bytes) {
        crc ^= u16::from(b) << 8;
        for _ in 0..8 {
            crc = if crc & 0x8000 != 0 {
                (crc << 1) ^ 0x1021
            } else {
                crc << 1
            };
        }
    }
    crc % 16384
}

#[cfg(test)]
mod tests {
    use super::*;

    fn record_key(prefix: &str, namespace: &str, key: &Key) -> String {
        RecordKey {
            prefix,
            namespace,
            key,
        }
        .text()
    }

    fn turn_counter_key(prefix: &str, namespace: &str, id: &CounterId) -> String {
        TurnKey {
            prefix,
            namespace,
            id,
        }
        .text()
    }

    #[test]
    fn glob_characters_are_escaped() {
        assert_eq!(glob_escape(r"a*b?c[d]e\f"), r"a\*b\?c\[d\]e\\f");
    }

    #[test]
    fn record_keys_split_into_namespace_and_key() {
        let key = Key::from_bytes([0xab; 32]);
        let raw = record_key("idem", "a:b", &key);
        assert_eq!(
            raw.len(),
            RecordKey {
                prefix: "idem",
                namespace: "a:b",
                key: &key
            }
            .len()
        );
        assert_eq!(raw, format!("idem:a:b:{{{}}}", key.to_hex()));
        assert_eq!(
            parse_record_key("idem", raw.as_bytes()),
            Some(("a:b".to_owned(), key))
        );
        let empty = record_key("idem", "", &key);
        assert_eq!(
            parse_record_key("idem", empty.as_bytes()),
            Some((String::new(), key))
        );
        assert_eq!(parse_record_key("other", raw.as_bytes()), None);
        assert_eq!(parse_record_key("idem", b"idem:ns:{not-a-key}"), None);
        let turn = turn_counter_key("idem", "a:b", &[7; 16]);
        assert_eq!(parse_record_key("idem", turn.as_bytes()), None);
    }

    #[test]
    fn the_slot_function_matches_redis() {
        // Values from the Redis Cluster specification and `CLUSTER KEYSLOT`.
        assert_eq!(slot("123456789"), 0x31C3);
        assert_eq!(slot("foo"), 12182);
        assert_eq!(slot("somekey"), 11058);
        assert_eq!(slot("{user1000}.following"), slot("user1000"));
        // An empty tag does not count: the whole key is hashed.
        assert_ne!(slot("foo{}{bar}"), slot("bar"));
    }

    #[test]
    fn keys_spread_and_a_namespace_tag_pins_a_tenant_to_one_slot() {
        let mut slots = std::collections::HashSet::new();
        for i in 0..64u8 {
            let key = Key::from_bytes(*blake3::hash(&[i]).as_bytes());
            slots.insert(slot(&record_key("idem", "tenant", &key)));
        }
        assert!(slots.len() > 50, "keys spread over slots: {}", slots.len());
        // A namespace hash tag pins a tenant to one slot, turn counts included.
        let tagged: std::collections::HashSet<u16> = (0..16u8)
            .flat_map(|i| {
                let key = Key::from_bytes([i; 32]);
                [
                    slot(&record_key("idem", "{tenant-42}", &key)),
                    slot(&turn_counter_key("idem", "{tenant-42}", &[i; 16])),
                ]
            })
            .collect();
        assert_eq!(tagged.len(), 1);
        // An empty tag is no tag: such a namespace spreads its keys like any other.
        let empty: std::collections::HashSet<u16> = (0..16u8)
            .map(|i| slot(&record_key("idem", "user{}", &Key::from_bytes([i; 32]))))
            .collect();
        assert!(empty.len() > 8);
    }
}

//! TEMPORARY stand-in (replaced by the real module from branch `key`).
#![allow(missing_docs)]
use serde::Serialize;
#[derive(Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct Key([u8; 32]);
impl Key {
    pub const fn from_bytes(b: [u8; 32]) -> Key {
        Key(b)
    }
    pub fn as_bytes(&self) -> &[u8; 32] {
        &self.0
    }
    pub fn to_hex(&self) -> String {
        self.0.iter().map(|b| format!("{b:02x}")).collect()
    }
    pub fn from_hex(s: &str) -> Result<Key, crate::Error> {
        let mut out = [0u8; 32];
        if s.len() != 64 {
            return Err(crate::Error::Config("bad".into()));
        }
        for i in 0..32 {
            out[i] = u8::from_str_radix(&s[2 * i..2 * i + 2], 16)
                .map_err(|_| crate::Error::Config("bad".into()))?;
        }
        Ok(Key(out))
    }
    pub fn short(&self) -> ShortKey {
        let mut b = [0u8; 6];
        b.copy_from_slice(&self.0[..6]);
        ShortKey(b)
    }
}
impl std::fmt::Display for Key {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(&self.to_hex())
    }
}
impl std::fmt::Debug for Key {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "Key({})", self.short())
    }
}
#[derive(Clone, Copy, PartialEq, Eq, Hash, Debug)]
pub struct Fingerprint([u8; 32]);
impl Fingerprint {
    pub const fn from_bytes(b: [u8; 32]) -> Self {
        Fingerprint(b)
    }
    pub fn as_bytes(&self) -> &[u8; 32] {
        &self.0
    }
    pub fn to_hex(&self) -> String {
        self.0.iter().map(|b| format!("{b:02x}")).collect()
    }
    pub fn from_hex(s: &str) -> Result<Self, crate::Error> {
        Key::from_hex(s).map(|k| Fingerprint(k.0))
    }
}
#[derive(Clone, Copy, PartialEq, Eq, Hash)]
pub struct ShortKey([u8; 6]);
impl std::fmt::Display for ShortKey {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        for b in self.0 {
            write!(f, "{b:02x}")?;
        }
        Ok(())
    }
}
impl std::fmt::Debug for ShortKey {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        std::fmt::Display::fmt(self, f)
    }
}
pub struct ArgsDigest {
    tool: &'static str,
    k: Vec<u8>,
    f: Vec<u8>,
    ck: Option<String>,
}
impl ArgsDigest {
    pub fn new(tool: &'static str) -> Self {
        ArgsDigest {
            tool,
            k: vec![],
            f: vec![],
            ck: None,
        }
    }
    pub fn arg<T: Serialize + ?Sized>(
        &mut self,
        name: &str,
        value: &T,
    ) -> Result<(), crate::Error> {
        let j = serde_json::to_vec(value).map_err(|e| crate::Error::Encode {
            tool: self.tool,
            what: name.into(),
            message: e.to_string(),
        })?;
        self.k.extend_from_slice(name.as_bytes());
        self.k.extend_from_slice(&j);
        self.f.extend_from_slice(name.as_bytes());
        self.f.extend_from_slice(&j);
        Ok(())
    }
    pub fn fingerprint_arg<T: Serialize + ?Sized>(
        &mut self,
        name: &str,
        value: &T,
    ) -> Result<(), crate::Error> {
        let j = serde_json::to_vec(value).map_err(|e| crate::Error::Encode {
            tool: self.tool,
            what: name.into(),
            message: e.to_string(),
        })?;
        self.f.extend_from_slice(name.as_bytes());
        self.f.extend_from_slice(&j);
        Ok(())
    }
    pub fn caller_key(&mut self, key: &str) {
        self.ck = Some(key.to_owned());
    }
    pub fn finish(
        self,
        namespace: &str,
        turn_id: &str,
        tool: &str,
        version: u32,
    ) -> (Key, Fingerprint) {
        let mut h = blake3::Hasher::new();
        h.update(namespace.as_bytes());
        h.update(tool.as_bytes());
        h.update(&version.to_le_bytes());
        match &self.ck {
            Some(c) => {
                h.update(c.as_bytes());
            }
            None => {
                h.update(turn_id.as_bytes());
                h.update(&self.k);
            }
        }
        let mut g = blake3::Hasher::new();
        g.update(&self.f);
        (
            Key(*h.finalize().as_bytes()),
            Fingerprint(*g.finalize().as_bytes()),
        )
    }
}

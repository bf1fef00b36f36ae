// The Rust types of the vectors, included by `cases.rs` (and by `tests/feature-probe`). Everything
// below the marker line is Appendix A of docs/key-spec.md, verbatim: `key_vectors.rs` compares
// the two, so the spec defines exactly the types the vectors are computed from.
// === docs/key-spec.md, Appendix A ===
#[derive(Serialize)]
struct SendEmail<'a> {
    to: &'a str,
    subject: &'a str,
}

#[derive(Serialize)]
struct NoArgs {}

#[derive(Serialize)]
struct Amount32 {
    amount: u32,
}

#[derive(Serialize)]
struct Amount64 {
    amount: i64,
}

#[derive(Serialize)]
struct Delta {
    delta: i64,
}

#[derive(Serialize)]
struct Big {
    big: u128,
    small: i128,
}

#[derive(Serialize)]
struct X {
    x: f64,
}

#[derive(Serialize)]
struct Ratio {
    ratio: f32,
}

#[derive(Serialize)]
struct Name<'a> {
    name: &'a str,
}

#[derive(Serialize)]
struct Cc<'a> {
    to: &'a str,
    cc: Option<&'a str>,
}

/// `cc` is left out of the serialized struct when it is `None`.
#[derive(Serialize)]
struct CcSkipped<'a> {
    to: &'a str,
    #[serde(skip_serializing_if = "Option::is_none")]
    cc: Option<&'a str>,
}

#[derive(Serialize)]
struct To<'a> {
    to: &'a str,
}

#[derive(Serialize)]
struct User<'a> {
    id: u64,
    name: &'a str,
}

#[derive(Serialize)]
struct Nested<'a> {
    user: User<'a>,
    tags: Vec<&'a str>,
}

/// `labels` is whatever collection a vector puts there.
#[derive(Serialize)]
struct Labels<T> {
    labels: T,
}

#[derive(Serialize)]
struct Scores {
    scores: HashMap<String, u32>,
}

/// Externally tagged (serde's default), like every enum here without a `#[serde(tag)]`.
#[derive(Serialize)]
enum Priority {
    #[allow(dead_code)]
    Low,
    High,
}

#[derive(Serialize)]
struct Ticket {
    priority: Priority,
}

#[derive(Serialize)]
enum Action<'a> {
    Transfer {
        from: &'a str,
        to: &'a str,
        cents: u64,
    },
    Refund(u64),
    Move(i32, i32),
}

#[derive(Serialize)]
struct Act<'a> {
    action: Action<'a>,
}

/// Serializes through `serialize_bytes` (as `serde_bytes` does).
struct Bytes<'a>(&'a [u8]);

impl Serialize for Bytes<'_> {
    fn serialize<S: serde::Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        s.serialize_bytes(self.0)
    }
}

#[derive(Serialize)]
struct Blob<'a> {
    blob: Bytes<'a>,
}

#[derive(Serialize)]
struct Initial {
    initial: char,
}

#[derive(Serialize)]
struct Marker {
    marker: (),
}

#[derive(Serialize)]
struct Point {
    point: (u8, i32),
}

#[derive(Serialize)]
struct ById<'a> {
    by_id: BTreeMap<u32, &'a str>,
}

/// A unit struct.
#[derive(Serialize)]
struct UnitStruct;

/// A newtype struct.
#[derive(Serialize)]
struct Meters(u32);

#[derive(Serialize)]
struct Pair {
    a: u8,
    b: bool,
}

/// What `serde_json::Number` serializes as with the `arbitrary_precision` feature.
struct ApNumber(&'static str);

impl Serialize for ApNumber {
    fn serialize<S: serde::Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        const TOKEN: &str = "$serde_json::private::Number";
        let mut st = s.serialize_struct(TOKEN, 1)?;
        st.serialize_field(TOKEN, self.0)?;
        st.end()
    }
}

/// What `serde_json::value::RawValue` serializes as.
struct Raw(&'static str);

impl Serialize for Raw {
    fn serialize<S: serde::Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        const TOKEN: &str = "$serde_json::private::RawValue";
        let mut st = s.serialize_struct(TOKEN, 1)?;
        st.serialize_field(TOKEN, self.0)?;
        st.end()
    }
}

/// serde_json's tokens as fields of a struct.
#[derive(Serialize)]
struct Payment {
    amount: ApNumber,
    rate: ApNumber,
    big: ApNumber,
    zero: ApNumber,
    extra: Raw,
}

/// Internally tagged.
#[derive(Serialize)]
#[serde(tag = "type")]
enum Internal {
    Circle { r: u8 },
}

/// Adjacently tagged.
#[derive(Serialize)]
#[serde(tag = "t", content = "c")]
enum Adjacent {
    Scale(u8),
}

/// Untagged.
#[derive(Serialize)]
#[serde(untagged)]
enum Untagged {
    #[allow(dead_code)]
    Text(&'static str),
    Number(u8),
}

/// A set serialized through its iterator (`collect_seq(set.iter())`): the iterable is not a
/// set type (§4.4), so this is an ordered sequence.
struct SetByIter(BTreeSet<u32>);

impl Serialize for SetByIter {
    fn serialize<S: serde::Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        s.collect_seq(self.0.iter())
    }
}

/// A set handed to `collect_seq` by value: an owned set type is a set too (§4.4).
struct OwnedSet(BTreeSet<u32>);

impl Serialize for OwnedSet {
    fn serialize<S: serde::Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        s.collect_seq(self.0.clone())
    }
}

/// The unordered marker of §4.4 around any value: what `Unordered` does, without
/// `collect_seq`, to show what the marker covers.
struct Marked<T>(T);

impl<T: Serialize> Serialize for Marked<T> {
    fn serialize<S: serde::Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        s.serialize_newtype_struct("$idem_tools::Unordered", &self.0)
    }
}

/// A newtype struct around a sequence.
#[derive(Serialize)]
struct Tags(Vec<u8>);

/// The ignored marker of §4.3 around any value: what `idem_tools::key::ignored` writes.
struct Ignored<T>(T);

impl<T: Serialize> Serialize for Ignored<T> {
    fn serialize<S: serde::Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        s.serialize_newtype_struct("$idem_tools::Ignored", &self.0)
    }
}

/// `cc` is marked ignored: left out of keys and fingerprints.
#[derive(Serialize)]
struct CcIgnored<'a> {
    to: &'a str,
    cc: Ignored<&'a str>,
}

/// A newtype struct named like serde_json's number token: transparent like every newtype
/// struct (§4.3); only a struct of that name is a token (§4.5).
struct NamedLikeToken(&'static str);

impl Serialize for NamedLikeToken {
    fn serialize<S: serde::Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        s.serialize_newtype_struct("$serde_json::private::Number", self.0)
    }
}

/// A unit variant whose name is given at run time: variant names are written inline, however
/// long (§4.2).
struct Variant(&'static str);

impl Serialize for Variant {
    fn serialize<S: serde::Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        s.serialize_unit_variant("Variant", 0, self.0)
    }
}

//! Property tests of the key derivation.

use std::collections::{BTreeMap, BTreeSet, HashMap, HashSet};
use std::hash::RandomState;

use idem_tools_runtime::key::{ArgsDigest, Key, Unordered, derive_key, encode_value, fingerprint};
use proptest::prelude::*;
use serde::Serialize;
use serde::ser::{SerializeMap, SerializeStruct};
use serde_json::Value;

fn key<T: Serialize + ?Sized>(args: &T) -> Key {
    derive_key("ns", "turn", "tool", 1, args).expect("encodes")
}

/// Arbitrary JSON values (finite floats only: JSON has no NaN or infinities).
fn json_value() -> impl Strategy<Value = Value> {
    let leaf = prop_oneof![
        Just(Value::Null),
        any::<bool>().prop_map(Value::Bool),
        any::<i64>().prop_map(Value::from),
        any::<u64>().prop_map(Value::from),
        any::<f64>()
            .prop_filter("finite", |f| f.is_finite())
            .prop_map(Value::from),
        ".{0,12}".prop_map(Value::String),
    ];
    leaf.prop_recursive(4, 48, 6, |inner| {
        prop_oneof![
            prop::collection::vec(inner.clone(), 0..6).prop_map(Value::Array),
            prop::collection::btree_map(".{0,6}", inner, 0..6)
                .prop_map(|m| Value::Object(m.into_iter().collect())),
        ]
    })
}

/// Serializes its entries as a map, in the given order.
struct InOrder<'a, V>(&'a [(String, V)]);

impl<V: Serialize> Serialize for InOrder<'_, V> {
    fn serialize<S: serde::Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        let mut m = s.serialize_map(Some(self.0.len()))?;
        for (k, v) in self.0 {
            m.serialize_entry(k, v)?;
        }
        m.end()
    }
}

/// What `serde_json::value::RawValue` serializes as (serde_json's private token, the wire
/// contract the key encoder recognises).
struct Raw<'a>(&'a str);

impl Serialize for Raw<'_> {
    fn serialize<S: serde::Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        const TOKEN: &str = "$serde_json::private::RawValue";
        let mut st = s.serialize_struct(TOKEN, 1)?;
        st.serialize_field(TOKEN, self.0)?;
        st.end()
    }
}

#[derive(Serialize, Clone, Debug, PartialEq)]
struct Inner {
    id: u32,
    label: String,
    flags: Vec<bool>,
}

#[derive(Serialize, Clone, Debug, PartialEq)]
struct Record {
    name: String,
    count: u64,
    delta: i32,
    tags: Vec<String>,
    inner: Inner,
    scores: BTreeMap<String, i64>,
    maybe: Option<String>,
}

fn record() -> impl Strategy<Value = Record> {
    (
        ".{0,10}",
        any::<u64>(),
        any::<i32>(),
        prop::collection::vec(".{0,5}", 0..5),
        (
            any::<u32>(),
            ".{0,8}",
            prop::collection::vec(any::<bool>(), 0..5),
        ),
        prop::collection::btree_map(".{0,5}", any::<i64>(), 0..5),
        prop::option::of(".{0,5}"),
    )
        .prop_map(
            |(name, count, delta, tags, (id, label, flags), scores, maybe)| Record {
                name,
                count,
                delta,
                tags,
                inner: Inner { id, label, flags },
                scores,
                maybe,
            },
        )
}

/// Applies one change, selected by `which` and `at`, that always yields a different record.
fn mutate(r: &mut Record, which: u8, at: usize) {
    match which % 12 {
        0 => r.name.push('x'),
        1 => r.count = r.count.wrapping_add(1),
        2 => r.delta = r.delta.wrapping_sub(1),
        3 => r.tags.push(String::new()),
        4 => match r.tags.len() {
            0 => r.tags.push("t".into()),
            n => r.tags[at % n].push('!'),
        },
        5 => r.inner.id ^= 1 << (at % 32),
        6 => r.inner.label.insert(0, 'é'),
        7 => match r.inner.flags.len() {
            0 => r.inner.flags.push(true),
            n => r.inner.flags[at % n] ^= true,
        },
        8 => {
            let k = format!(
                "{}{}",
                r.scores.keys().last().cloned().unwrap_or_default(),
                "+"
            );
            r.scores.insert(k, 0);
        }
        9 => {
            let n = r.scores.len().max(1);
            match r.scores.values_mut().nth(at % n) {
                Some(v) => *v = v.wrapping_add(1),
                None => {
                    r.scores.insert(String::new(), 0);
                }
            }
        }
        10 => {
            r.maybe = match r.maybe.take() {
                None => Some(String::new()),
                Some(_) => None,
            }
        }
        _ => {
            // Swap two different tags: sequences are ordered.
            let n = r.tags.len();
            let i = at % n.max(1);
            match (0..n).find(|&j| r.tags.get(j) != r.tags.get(i)) {
                Some(j) => r.tags.swap(i, j),
                None => r.tags.push("swap".into()),
            }
        }
    }
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(256))]

    #[test]
    fn equal_values_have_equal_keys(v in json_value()) {
        let copy = v.clone();
        prop_assert_eq!(key(&v), key(&copy));
        // Through JSON text and back (serde_json may round the last bit of a float when
        // parsing; the key follows the value).
        let text = serde_json::to_string(&v).expect("serializes");
        let back: Value = serde_json::from_str(&text).expect("parses");
        prop_assert_eq!(back == v, key(&v) == key(&back));
    }

    #[test]
    fn keys_differ_exactly_when_values_differ(a in json_value(), b in json_value()) {
        prop_assert_eq!(a == b, key(&a) == key(&b));
        prop_assert_eq!(
            a == b,
            encode_value(&a).expect("encodes") == encode_value(&b).expect("encodes")
        );
    }

    #[test]
    fn map_insertion_order_is_irrelevant(
        entries in prop::collection::btree_map(".{0,8}", json_value(), 0..24)
            .prop_map(|m| m.into_iter().collect::<Vec<_>>())
            .prop_shuffle(),
        seed in any::<u64>(),
    ) {
        let mut shuffled = entries.clone();
        // A deterministic permutation from the seed (rotate + reverse).
        if !shuffled.is_empty() {
            let n = shuffled.len();
            shuffled.rotate_left((seed as usize) % n);
        }
        if seed & 1 == 1 {
            shuffled.reverse();
        }
        let k = key(&InOrder(&entries));
        prop_assert_eq!(k, key(&InOrder(&shuffled)));
        let hm: HashMap<String, Value> = shuffled.iter().cloned().collect();
        prop_assert_eq!(k, key(&hm));
        let bt: BTreeMap<String, Value> = entries.iter().cloned().collect();
        prop_assert_eq!(k, key(&bt));
        // As tool arguments, in any order.
        let mut d = ArgsDigest::new("tool");
        for (name, v) in &shuffled {
            d.arg(name, v).expect("encodes");
        }
        let (dk, dfp) = d.finish("ns", "turn", "tool", 1);
        prop_assert_eq!(dk, k);
        prop_assert_eq!(dfp, fingerprint("tool", 1, &bt).expect("encodes"));
    }

    #[test]
    fn any_single_change_changes_the_key(r in record(), which in any::<u8>(), at in any::<usize>()) {
        let mut changed = r.clone();
        mutate(&mut changed, which, at);
        prop_assert_ne!(&r, &changed);
        prop_assert_ne!(key(&r), key(&changed));
        prop_assert_ne!(
            fingerprint("tool", 1, &r).expect("encodes"),
            fingerprint("tool", 1, &changed).expect("encodes")
        );
        // And the unchanged record keeps its key.
        prop_assert_eq!(key(&r), key(&r.clone()));
    }

    #[test]
    fn struct_equals_its_fields_as_args(r in record(), rotate in any::<usize>()) {
        type AddArg<'a> = Box<dyn Fn(&mut ArgsDigest) + 'a>;
        let fields: Vec<(&str, AddArg<'_>)> = vec![
            ("name", Box::new(|d| d.arg("name", &r.name).expect("encodes"))),
            ("count", Box::new(|d| d.arg("count", &r.count).expect("encodes"))),
            ("delta", Box::new(|d| d.arg("delta", &r.delta).expect("encodes"))),
            ("tags", Box::new(|d| d.arg("tags", &r.tags).expect("encodes"))),
            ("inner", Box::new(|d| d.arg("inner", &r.inner).expect("encodes"))),
            ("scores", Box::new(|d| d.arg("scores", &r.scores).expect("encodes"))),
            ("maybe", Box::new(|d| d.arg("maybe", &r.maybe).expect("encodes"))),
        ];
        let mut order: Vec<usize> = (0..fields.len()).collect();
        order.rotate_left(rotate % fields.len());
        let mut d = ArgsDigest::new("tool");
        for i in order {
            (fields[i].1)(&mut d);
        }
        let (k, fp) = d.finish("ns", "turn", "tool", 1);
        prop_assert_eq!(k, key(&r));
        prop_assert_eq!(fp, fingerprint("tool", 1, &r).expect("encodes"));
    }

    #[test]
    fn integer_width_is_irrelevant(n in any::<u32>(), m in any::<i32>()) {
        prop_assert_eq!(key(&n), key(&u64::from(n)));
        prop_assert_eq!(key(&n), key(&i64::from(n)));
        prop_assert_eq!(key(&n), key(&u128::from(n)));
        prop_assert_eq!(key(&m), key(&i64::from(m)));
        prop_assert_eq!(key(&m), key(&i128::from(m)));
    }

    #[test]
    fn header_fields_are_separated(a in ".{0,6}", b in ".{0,6}", c in ".{0,6}") {
        // Moving a boundary between adjacent header strings changes the key.
        let joined = format!("{a}{b}");
        let k1 = derive_key(&joined, &c, "tool", 1, &()).expect("encodes");
        let k2 = derive_key(&a, &format!("{b}{c}"), "tool", 1, &()).expect("encodes");
        prop_assert_eq!(b.is_empty(), k1 == k2);
    }

    #[test]
    fn fingerprint_only_args_split_key_and_fingerprint(
        entries in prop::collection::btree_map("[a-z]{1,6}", json_value(), 0..10),
        mask in any::<u16>(),
        rotate in any::<usize>(),
    ) {
        let mut list: Vec<(String, Value)> = entries.clone().into_iter().collect();
        if !list.is_empty() {
            let n = list.len();
            list.rotate_left(rotate % n);
        }
        let in_key = |name: &str| {
            let i = entries.keys().position(|k| k == name).unwrap_or(0);
            mask & (1 << i) == 0
        };
        let mut d = ArgsDigest::new("tool");
        for (name, v) in &list {
            if in_key(name) {
                d.arg(name, v).expect("encodes");
            } else {
                d.fingerprint_arg(name, v).expect("encodes");
            }
        }
        let (k, fp) = d.finish("ns", "turn", "tool", 1);
        let keyed: BTreeMap<&String, &Value> =
            entries.iter().filter(|(name, _)| in_key(name)).collect();
        prop_assert_eq!(k, key(&keyed));
        prop_assert_eq!(fp, fingerprint("tool", 1, &entries).expect("encodes"));
    }

    #[test]
    fn raw_json_text_encodes_like_the_value(v in json_value(), pretty in any::<bool>()) {
        let text = if pretty {
            serde_json::to_string_pretty(&v)
        } else {
            serde_json::to_string(&v)
        }
        .expect("serializes");
        prop_assert_eq!(
            encode_value(&Raw(&text)).expect("encodes"),
            encode_value(&v).expect("encodes")
        );
    }

    #[test]
    fn long_strings_differ_exactly_when_their_bytes_do(
        a in "[ab]{1000,1100}",
        flip in any::<usize>(),
    ) {
        // Around the 1024-byte threshold where strings are encoded by their hash.
        let mut b = a.clone().into_bytes();
        let i = flip % b.len();
        b[i] = if b[i] == b'a' { b'b' } else { b'a' };
        let b = String::from_utf8(b).expect("ASCII");
        prop_assert_ne!(key(&a), key(&b));
        prop_assert_eq!(key(&a), key(&a.clone()));
        let shorter = &a[..a.len() - 1];
        prop_assert_ne!(key(&a), key(shorter));
    }

    #[test]
    fn json_float_text_encodes_as_the_float_it_denotes(f in any::<f64>().prop_filter("finite", |f| f.is_finite())) {
        // Shortest and long forms, through serde_json (float_roundtrip) and through raw text.
        for text in [format!("{f:?}"), format!("{f:.40e}")] {
            let parsed: Value = serde_json::from_str(&text).expect("JSON");
            let exact: f64 = text.parse().expect("a float");
            prop_assert_eq!(encode_value(&parsed).expect("encodes"), encode_value(&exact).expect("encodes"));
            prop_assert_eq!(encode_value(&Raw(&text)).expect("encodes"), encode_value(&exact).expect("encodes"));
        }
    }

    #[test]
    fn sets_ignore_order_and_sequences_keep_it(v in proptest::collection::vec(any::<u16>(), 0..24), rotate in any::<usize>()) {
        let mut w = v.clone();
        if !w.is_empty() {
            let n = rotate % w.len();
            w.rotate_left(n);
        }
        let set = key(&Unordered(v.clone()));
        prop_assert_eq!(set, key(&Unordered(w.clone())));
        let distinct: BTreeSet<u16> = v.iter().copied().collect();
        let std: HashSet<u16> = w.iter().copied().collect();
        let brown: hashbrown::HashSet<u16, RandomState> = w.iter().copied().collect();
        prop_assert_eq!(key(&distinct), key(&std));
        prop_assert_eq!(key(&distinct), key(&brown));
        prop_assert_eq!(key(&distinct), key(&Unordered(distinct.iter().rev().collect::<Vec<_>>())));
        prop_assert_eq!(key(&v) == key(&w), v == w);
    }
}

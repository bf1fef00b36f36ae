//! Unit tests of the key derivation.

use std::collections::{BTreeMap, BTreeSet, HashMap, HashSet};
use std::hash::RandomState;

use serde::Serialize;

use super::*;

fn key<T: Serialize + ?Sized>(args: &T) -> Key {
    derive_key("ns", "turn", "tool", 1, args).expect("encodes")
}

fn enc<T: Serialize + ?Sized>(v: &T) -> Vec<u8> {
    encode_value(v).expect("encodes")
}

#[test]
fn header_strings_are_length_prefixed() {
    let a = derive_key("ab", "c", "t", 1, &()).unwrap();
    let b = derive_key("a", "bc", "t", 1, &()).unwrap();
    assert_ne!(a, b);
    let a = derive_key("n", "ab", "c", 1, &()).unwrap();
    let b = derive_key("n", "a", "bc", 1, &()).unwrap();
    assert_ne!(a, b);
    assert_ne!(key(&("ab", "c")), key(&("a", "bc")));
    // Strings inside a struct.
    #[derive(Serialize)]
    struct P<'a> {
        x: &'a str,
        y: &'a str,
    }
    assert_ne!(key(&P { x: "ab", y: "c" }), key(&P { x: "a", y: "bc" }));
}

#[test]
fn every_header_field_matters() {
    let base = derive_key("ns", "turn", "tool", 1, &5u8).unwrap();
    assert_ne!(base, derive_key("ns2", "turn", "tool", 1, &5u8).unwrap());
    assert_ne!(base, derive_key("ns", "turn2", "tool", 1, &5u8).unwrap());
    assert_ne!(base, derive_key("ns", "turn", "tool2", 1, &5u8).unwrap());
    assert_ne!(base, derive_key("ns", "turn", "tool", 2, &5u8).unwrap());
    assert_ne!(base, derive_key("ns", "turn", "tool", 1, &6u8).unwrap());
}

#[test]
fn hashmap_order_and_hasher_state_do_not_matter() {
    let mut a: HashMap<String, u64, RandomState> = HashMap::with_hasher(RandomState::new());
    let mut b: HashMap<String, u64, RandomState> = HashMap::with_hasher(RandomState::new());
    for i in 0..1000u64 {
        a.insert(format!("k{i}"), i * 7);
    }
    for i in (0..1000u64).rev() {
        b.insert(format!("k{i}"), i * 7);
    }
    // Two RandomStates: the iteration orders (almost surely) differ.
    assert_ne!(
        a.keys().take(20).collect::<Vec<_>>(),
        b.keys().take(20).collect::<Vec<_>>()
    );
    assert_eq!(key(&a), key(&b));
    let bt: BTreeMap<String, u64> = a.iter().map(|(k, v)| (k.clone(), *v)).collect();
    assert_eq!(key(&a), key(&bt));
    b.insert("k999".into(), 0);
    assert_ne!(key(&a), key(&b));
}

#[derive(Serialize)]
struct Ab {
    a: u32,
    b: String,
}

#[derive(Serialize)]
struct Ba {
    b: String,
    a: u64,
}

#[test]
fn struct_field_order_and_name_do_not_matter() {
    let x = Ab {
        a: 3,
        b: "hi".into(),
    };
    let y = Ba {
        b: "hi".into(),
        a: 3,
    };
    assert_eq!(key(&x), key(&y));
    let m = serde_json::json!({"b": "hi", "a": 3});
    assert_eq!(key(&x), key(&m));
    let mut via_digest = ArgsDigest::new("tool");
    via_digest.arg("b", "hi").unwrap();
    via_digest.arg("a", &3i8).unwrap();
    let (k, fp) = via_digest.finish("ns", "turn", "tool", 1);
    assert_eq!(k, key(&x));
    assert_eq!(fp, fingerprint("tool", 1, &y).unwrap());
}

#[test]
fn integer_width_and_sign_type_do_not_matter() {
    assert_eq!(enc(&5u32), enc(&5u64));
    assert_eq!(enc(&5u32), enc(&5i64));
    assert_eq!(enc(&5u8), enc(&5i128));
    assert_eq!(enc(&5u8), enc(&5u128));
    assert_eq!(enc(&-5i8), enc(&-5i64));
    assert_ne!(enc(&5i32), enc(&-5i32));
    assert_eq!(enc(&0i32), enc(&0u8));
    assert_eq!(enc(&i128::MIN)[1], 1);
    // |i128::MIN| = 2^127: eighteen 7-bit groups of zeros, then 2^(127-126).
    let mut min = vec![0x80; 18];
    min.push(0x02);
    assert_eq!(&enc(&i128::MIN)[2..], &min);
    let mut max = vec![0xff; 18];
    max.push(0x03);
    assert_eq!(&enc(&u128::MAX)[2..], &max);
    assert_eq!(enc(&300u16), [0x05, 0x00, 0xac, 0x02]);
    assert_eq!(key(&5u32), key(&5i64));
    // An integer is not a float.
    assert_ne!(enc(&5u32), enc(&5.0f64));
}

#[test]
fn floats_are_canonical() {
    assert_eq!(enc(&-0.0f64), enc(&0.0f64));
    assert_eq!(enc(&-0.0f32), enc(&0.0f64));
    assert_eq!(enc(&1.5f32), enc(&1.5f64));
    let nan = enc(&f64::NAN);
    assert_eq!(nan, enc(&-f64::NAN));
    assert_eq!(nan, enc(&f64::from_bits(0x7ff0_0000_0000_0001)));
    assert_eq!(nan, enc(&f64::from_bits(0xfff8_dead_beef_0000)));
    assert_eq!(nan, enc(&f32::NAN));
    assert_eq!(nan, enc(&f32::from_bits(0xffc0_1234)));
    let mut expected = vec![0x06];
    expected.extend(0x7ff8_0000_0000_0000u64.to_le_bytes());
    assert_eq!(nan, expected);
    assert_ne!(enc(&f64::INFINITY), enc(&f64::NEG_INFINITY));
    assert_ne!(enc(&0.1f32), enc(&0.1f64)); // widened exactly, not rounded to the f64 literal
}

#[derive(Serialize)]
struct UnitStruct;

#[derive(Serialize)]
struct Empty {}

#[derive(Serialize)]
enum E {
    A,
    B(u8),
    C(u8, u8),
    D { x: u8 },
}

#[test]
fn empty_things_are_distinct() {
    let encs = [
        enc(&None::<u8>),
        enc(&()),
        enc(&UnitStruct),
        enc(&Vec::<u8>::new()),
        enc(&BTreeMap::<u8, u8>::new()),
        enc(&HashSet::<u8>::new()),
        enc(""),
        enc(&serde_bytes_like::Bytes(&[])),
        enc(&false),
        enc(&E::A),
    ];
    for (i, a) in encs.iter().enumerate() {
        for b in &encs[i + 1..] {
            assert_ne!(a, b);
        }
    }
    // An empty struct equals an empty map.
    assert_eq!(enc(&Empty {}), enc(&BTreeMap::<u8, u8>::new()));
    assert_ne!(enc(&Some(())), enc(&()));
    assert_ne!(enc(&Some(None::<u8>)), enc(&None::<u8>));
}

mod serde_bytes_like {
    /// Serializes through `serialize_bytes`.
    pub struct Bytes<'a>(pub &'a [u8]);
    impl serde::Serialize for Bytes<'_> {
        fn serialize<S: serde::Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
            s.serialize_bytes(self.0)
        }
    }
}

#[test]
fn bytes_differ_from_seq_of_u8_and_str() {
    assert_ne!(enc(&serde_bytes_like::Bytes(b"ab")), enc(&b"ab".to_vec()));
    assert_ne!(enc(&serde_bytes_like::Bytes(b"ab")), enc("ab"));
    assert_eq!(enc(&serde_bytes_like::Bytes(b"ab")), [0x08, 2, b'a', b'b']);
}

#[test]
fn enums_by_variant_name() {
    #[derive(Serialize)]
    enum Other {
        #[allow(dead_code)]
        Z,
        A,
    }
    assert_eq!(enc(&E::A), enc(&Other::A));
    assert_ne!(enc(&E::A), enc("A"));
    assert_ne!(enc(&E::B(1)), enc(&E::B(2)));
    assert_ne!(enc(&E::C(1, 2)), enc(&E::C(2, 1)));
    assert_ne!(enc(&E::D { x: 1 }), enc(&E::D { x: 2 }));
    let all = [
        enc(&E::A),
        enc(&E::B(1)),
        enc(&E::C(1, 1)),
        enc(&E::D { x: 1 }),
    ];
    for (i, a) in all.iter().enumerate() {
        for b in &all[i + 1..] {
            assert_ne!(a, b);
        }
    }
}

#[test]
fn char_is_a_one_char_string() {
    assert_eq!(enc(&'é'), enc("é"));
}

#[test]
fn newtypes_are_transparent() {
    #[derive(Serialize)]
    struct Meters(u32);
    assert_eq!(enc(&Meters(3)), enc(&3u64));
}

#[test]
fn sets_are_unordered_and_sequences_ordered() {
    let a: HashSet<u32> = (0..100).collect();
    let b: HashSet<u32> = (0..100).rev().collect();
    assert_eq!(enc(&a), enc(&b));
    let bt: BTreeSet<u32> = (0..100).collect();
    assert_eq!(enc(&a), enc(&bt));
    assert_eq!(
        enc(&a),
        enc(&Unordered((0..100u32).rev().collect::<Vec<_>>()))
    );
    assert_eq!(enc(&a), enc(&Unordered(a.clone())));
    assert_eq!(enc(&a)[0], 0x0D);
    assert_ne!(enc(&vec![1u8, 2]), enc(&vec![2u8, 1]));
    assert_ne!(enc(&vec![1u8, 2]), enc(&Unordered(vec![1u8, 2])));
    // The set marker applies to the collection only, not its elements.
    assert_ne!(
        enc(&Unordered(vec![vec![1u8, 2]])),
        enc(&Unordered(vec![vec![2u8, 1]]))
    );
    // Sets keep duplicates of an `Unordered` vec (multiset).
    assert_ne!(enc(&Unordered(vec![1u8])), enc(&Unordered(vec![1u8, 1])));
}

#[test]
fn split_map_key_value_calls_are_supported_and_checked() {
    struct Split(bool);
    impl Serialize for Split {
        fn serialize<S: serde::Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
            use serde::ser::SerializeMap;
            let mut m = s.serialize_map(None)?;
            m.serialize_key("a")?;
            if self.0 {
                m.serialize_value(&1u8)?;
            }
            m.end()
        }
    }
    assert_eq!(enc(&Split(true)), enc(&BTreeMap::from([("a", 1u8)])));
    assert!(encode_value(&Split(false)).is_err());
}

#[test]
fn map_entries_are_sorted_by_their_encoding_whatever_the_insertion_order() {
    for n in [1u32, 2, 7, 9, 17, 300] {
        let m: HashMap<u32, u32> = (0..n).map(|i| (i, i)).collect();
        let r: BTreeMap<u32, u32> = (0..n).rev().map(|i| (i, i)).collect();
        assert_eq!(enc(&m), enc(&r));
        // 0x0C ‖ entries ascending bytewise ‖ 0x0B.
        let mut entries: Vec<Vec<u8>> = (0..n).map(|i| [enc(&i), enc(&i)].concat()).collect();
        entries.sort();
        assert_eq!(enc(&m), [vec![0x0C], entries.concat(), vec![0x0B]].concat());
    }
}

#[test]
fn nested_unordered_containers_are_sorted_inside_out() {
    let inner_a: HashMap<&str, Vec<u8>> = HashMap::from([("x", vec![1]), ("y", vec![2, 3])]);
    let inner_b: BTreeMap<&str, Vec<u8>> = BTreeMap::from([("y", vec![2, 3]), ("x", vec![1])]);
    let a = HashMap::from([
        ("m", Unordered(vec![inner_a.clone()])),
        ("n", Unordered(vec![])),
    ]);
    #[derive(Serialize)]
    struct S<'a> {
        n: Unordered<Vec<BTreeMap<&'a str, Vec<u8>>>>,
        m: Unordered<Vec<BTreeMap<&'a str, Vec<u8>>>>,
    }
    let b = S {
        n: Unordered(vec![]),
        m: Unordered(vec![inner_b]),
    };
    assert_eq!(enc(&a), enc(&b));
    // Two set elements that are maps, in both orders.
    let m1 = BTreeMap::from([("k", 1u8), ("j", 2)]);
    let m2 = BTreeMap::from([("k", 2u8)]);
    assert_eq!(
        enc(&Unordered(vec![m1.clone(), m2.clone()])),
        enc(&Unordered(vec![m2, m1]))
    );
}

#[test]
fn long_strings_and_bytes_are_encoded_by_their_hash() {
    let short = "é".repeat(511) + "x"; // 1023 bytes: inline
    let mut expected = vec![0x07, 0xff, 0x07];
    expected.extend_from_slice(short.as_bytes());
    assert_eq!(enc(&short), expected);
    let long = "é".repeat(512); // 1024 bytes: hashed
    let mut expected = vec![0x07, 0x80, 0x08];
    expected.extend_from_slice(blake3::hash(long.as_bytes()).as_bytes());
    assert_eq!(enc(&long), expected);
    // A change anywhere in a long string changes its encoding.
    let mut other = long.clone();
    other.replace_range(1000..1002, "ü");
    assert_eq!(other.len(), long.len());
    assert_ne!(enc(&other), enc(&long));
    // Bytes follow the same rule under their own tag.
    let bytes = vec![7u8; 4096];
    let mut expected = vec![0x08, 0x80, 0x20];
    expected.extend_from_slice(blake3::hash(&bytes).as_bytes());
    assert_eq!(enc(&serde_bytes_like::Bytes(&bytes)), expected);
    assert_ne!(enc(&serde_bytes_like::Bytes(long.as_bytes())), enc(&long));
    // A long field name is a long string too: a struct still equals the map.
    let name = "n".repeat(2000);
    let mut d = ArgsDigest::new("t");
    d.arg(&name, &long).unwrap();
    let (k, _) = d.finish("ns", "turn", "tool", 1);
    assert_eq!(k, key(&BTreeMap::from([(name.as_str(), long.as_str())])));
}

#[test]
fn a_value_marked_ignored_leaves_out_the_struct_field_around_it_or_is_refused() {
    struct Marked(&'static str);
    impl Serialize for Marked {
        fn serialize<S: serde::Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
            crate::key::ignored(self.0, s)
        }
    }
    #[derive(Serialize)]
    struct WithMap {
        to: &'static str,
        notes: std::collections::BTreeMap<&'static str, Marked>,
    }
    #[derive(Serialize)]
    struct To {
        to: &'static str,
    }
    #[derive(Serialize)]
    struct WithSeq {
        to: &'static str,
        notes: Vec<Marked>,
    }
    #[derive(Serialize)]
    struct Flattened {
        #[serde(flatten)]
        inner: Inner,
    }
    #[derive(Serialize)]
    struct Inner {
        to: &'static str,
        #[serde(serialize_with = "crate::key::ignored")]
        memo: &'static str,
    }
    // A map's entry is left out, key and value.
    let notes = [("a", Marked("x")), ("b", Marked("y"))]
        .into_iter()
        .collect();
    let empty = std::collections::BTreeMap::new();
    assert_eq!(
        enc(&WithMap { to: "ann", notes }),
        enc(&WithMap {
            to: "ann",
            notes: empty
        })
    );
    // Inside a sequence (or a tuple, a tuple struct, an enum variant, a map's key) it cannot
    // be left out without what is around it: refused, not left out with the whole field.
    let notes = vec![Marked("x")];
    let error = crate::key::encode_value(&WithSeq { to: "ann", notes }).unwrap_err();
    assert!(
        error.to_string().contains("an element of a sequence"),
        "{error}"
    );
    #[derive(Serialize)]
    struct Line(u64, Marked);
    let error = crate::key::encode_value(&vec![Line(1, Marked("x"))]).unwrap_err();
    assert!(
        error
            .to_string()
            .contains("an element of a sequence or tuple"),
        "{error}"
    );
    #[derive(Serialize)]
    enum Note {
        Text(Marked),
    }
    let error = crate::key::encode_value(&To2 {
        note: Note::Text(Marked("x")),
    })
    .unwrap_err();
    assert!(error.to_string().contains("enum variant"), "{error}");
    #[derive(Serialize)]
    struct To2 {
        note: Note,
    }
    // A field of a flattened struct, which serde writes as a map entry.
    let inner = Inner {
        to: "ann",
        memo: "reworded",
    };
    assert_eq!(enc(&Flattened { inner }), enc(&To { to: "ann" }));
    let error = crate::key::encode_value(&Marked("x"))
        .unwrap_err()
        .to_string();
    assert!(
        error.contains("not inside a struct field or map entry"),
        "{error}"
    );
    let mut args = crate::key::ArgsDigest::new("tool");
    assert!(
        args.arg("memo", &Marked("x")).is_err(),
        "a whole argument: `ignore(..)`"
    );
    // The text of a serde_json token (a number, a raw value) is the value the token stands
    // for: marked, it cannot be left out without its field, whose value would be lost.
    for token in [super::json::NUMBER_TOKEN, super::json::RAW_VALUE_TOKEN] {
        struct Tok(&'static str, Option<Marked>);
        impl Serialize for Tok {
            fn serialize<S: serde::Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
                use serde::ser::SerializeStruct;
                let mut st = s.serialize_struct(self.0, 1)?;
                match &self.1 {
                    Some(marked) => st.serialize_field(self.0, &Some(marked))?,
                    None => st.serialize_field(self.0, "5")?,
                }
                st.end()
            }
        }
        #[derive(Serialize)]
        struct Amount {
            a: Tok,
            b: u8,
        }
        let plain = Amount {
            a: Tok(token, None),
            b: 1,
        };
        assert!(crate::key::encode_value(&plain).is_ok(), "{token}");
        let marked = Amount {
            a: Tok(token, Some(Marked("5"))),
            b: 1,
        };
        let error = crate::key::encode_value(&marked).unwrap_err().to_string();
        assert!(error.contains(&format!("the text of `{token}`")), "{error}");
    }
}

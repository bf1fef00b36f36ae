//! Unit tests of [`ArgsDigest`]: records, caller keys, fingerprint-only arguments, errors and
//! the reuse of the thread's buffer.

use std::collections::BTreeMap;

use serde::Serialize;

use super::*;

fn key<T: Serialize + ?Sized>(args: &T) -> Key {
    derive_key("ns", "turn", "tool", 1, args).expect("encodes")
}

fn enc<T: Serialize + ?Sized>(v: &T) -> Vec<u8> {
    encode_value(v).expect("encodes")
}

#[test]
fn caller_key_mode() {
    let run = |turn: &str, to: &str, ck: Option<&str>| {
        let mut d = ArgsDigest::new("send");
        d.arg("to", to).unwrap();
        if let Some(ck) = ck {
            d.caller_key(ck);
        }
        d.finish("ns", turn, "send", 1)
    };
    let (k1, f1) = run("t1", "ann", Some("order-1"));
    let (k2, f2) = run("t2", "bob", Some("order-1"));
    assert_eq!(k1, k2, "caller key ignores turn id and args");
    assert_ne!(f1, f2, "fingerprint still covers args");
    let (k3, f3) = run("t1", "ann", Some("order-2"));
    assert_ne!(k1, k3);
    assert_eq!(f1, f3, "caller key is not in the fingerprint");
    let (k4, f4) = run("t1", "ann", None);
    assert_ne!(k1, k4);
    assert_eq!(f1, f4);
    // Tool, version and namespace still matter.
    let mut d = ArgsDigest::new("send");
    d.caller_key("order-1");
    assert_ne!(d.clone().finish("ns", "t", "send", 2).0, k1);
    assert_ne!(d.clone().finish("ns2", "t", "send", 1).0, k1);
    assert_ne!(d.finish("ns", "t", "send2", 1).0, k1);
}

#[test]
fn fingerprint_arg_changes_fingerprint_not_key() {
    let run = |memo: &str| {
        let mut d = ArgsDigest::new("send");
        d.arg("to", "ann").unwrap();
        d.fingerprint_arg("memo", memo).unwrap();
        d.finish("ns", "t", "send", 1)
    };
    let (k1, f1) = run("a");
    let (k2, f2) = run("b");
    assert_eq!(k1, k2);
    assert_ne!(f1, f2);
    #[derive(Serialize)]
    struct To<'a> {
        to: &'a str,
    }
    #[derive(Serialize)]
    struct All<'a> {
        to: &'a str,
        memo: &'a str,
    }
    assert_eq!(
        k1,
        derive_key("ns", "t", "send", 1, &To { to: "ann" }).unwrap()
    );
    assert_eq!(
        f1,
        fingerprint(
            "send",
            1,
            &All {
                to: "ann",
                memo: "a"
            }
        )
        .unwrap()
    );
}

#[test]
fn args_digest_with_many_args_matches_derive_key() {
    let map: BTreeMap<String, u32> = (0..50).map(|i| (format!("a{i}"), i)).collect();
    let mut d = ArgsDigest::new("t");
    for (k, v) in map.iter().rev() {
        d.arg(k, v).unwrap();
    }
    let (k, fp) = d.finish("ns", "turn", "tool", 1);
    assert_eq!(k, key(&map));
    assert_eq!(fp, fingerprint("tool", 1, &map).unwrap());
}

struct Failing;
impl Serialize for Failing {
    fn serialize<S: serde::Serializer>(&self, _: S) -> Result<S::Ok, S::Error> {
        Err(serde::ser::Error::custom("nope"))
    }
}

#[test]
fn serialize_errors_become_encode_errors() {
    let mut d = ArgsDigest::new("send");
    d.arg("to", "ann").unwrap();
    let before = d.clone().finish("ns", "t", "send", 1);
    match d.arg("body", &Failing) {
        Err(Error::Encode {
            tool,
            what,
            message,
        }) => {
            assert_eq!(tool, "send");
            assert_eq!(what, "argument `body`");
            assert_eq!(message, "nope");
        }
        other => panic!("unexpected {other:?}"),
    }
    assert!(d.fingerprint_arg("body", &vec![Failing]).is_err());
    assert_eq!(
        d.finish("ns", "t", "send", 1),
        before,
        "failed args leave no trace"
    );
    assert!(matches!(
        derive_key("n", "t", "x", 1, &Some(Failing)),
        Err(Error::Encode {
            tool: "<unknown>",
            ..
        })
    ));
    assert!(fingerprint("x", 1, &[Failing]).is_err());
    assert!(encode_value(&Failing).is_err());
}

#[test]
fn args_digest_of_large_arguments_matches_derive_key() {
    // Entries beyond the copy limit are hashed in place: same result.
    let big = "x".repeat(10_000);
    let other = "y".repeat(5_000);
    let map = BTreeMap::from([("a", big.as_str()), ("b", "small"), ("c", other.as_str())]);
    let mut d = ArgsDigest::new("t");
    d.arg("c", &other).unwrap();
    d.arg("a", &big).unwrap();
    d.arg("b", "small").unwrap();
    let (k, fp) = d.finish("ns", "turn", "tool", 1);
    assert_eq!(k, key(&map));
    assert_eq!(fp, fingerprint("tool", 1, &map).unwrap());
    // With a fingerprint-only argument, the key covers the others only.
    let mut d = ArgsDigest::new("t");
    d.arg("a", &big).unwrap();
    d.fingerprint_arg("c", &other).unwrap();
    d.arg("b", "small").unwrap();
    let (k, fp) = d.finish("ns", "turn", "tool", 1);
    let keyed = BTreeMap::from([("a", big.as_str()), ("b", "small")]);
    assert_eq!(k, key(&keyed));
    assert_eq!(fp, fingerprint("tool", 1, &map).unwrap());
}

#[test]
fn digests_reuse_the_thread_buffer_without_leaking_state() {
    // A digest dropped half-way, a failed argument and a caller key leave nothing behind.
    let mut d = ArgsDigest::new("t");
    d.arg("a", &1u8).unwrap();
    d.caller_key("ck");
    assert!(d.arg("b", &Failing).is_err());
    drop(d);
    let mut d = ArgsDigest::new("t");
    d.arg("z", &2u8).unwrap();
    let (k, fp) = d.finish("ns", "turn", "tool", 1);
    #[derive(Serialize)]
    struct Z {
        z: u8,
    }
    assert_eq!(k, key(&Z { z: 2 }));
    assert_eq!(fp, fingerprint("tool", 1, &Z { z: 2 }).unwrap());
    // A Serialize impl that derives a key itself (nested use of the thread buffer).
    struct Nested;
    impl Serialize for Nested {
        fn serialize<S: serde::Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
            let inner =
                derive_key("n", "t", "x", 1, &[1u8, 2]).map_err(serde::ser::Error::custom)?;
            s.serialize_str(&inner.to_hex())
        }
    }
    let expected = derive_key("n", "t", "x", 1, &[1u8, 2]).unwrap().to_hex();
    assert_eq!(enc(&Nested), enc(&expected));
    let mut d = ArgsDigest::new("t");
    d.arg("n", &Nested).unwrap();
    d.arg("z", &2u8).unwrap();
    let (k2, _) = d.finish("ns", "turn", "tool", 1);
    #[derive(Serialize)]
    struct Nz {
        n: String,
        z: u8,
    }
    assert_eq!(k2, key(&Nz { n: expected, z: 2 }));
}

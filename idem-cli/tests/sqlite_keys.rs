//! KEY resolved across namespaces when `--namespace` is not given, and refused with the
//! candidates' namespaces when it is ambiguous, against real SQLite files.

mod common;

use std::sync::atomic::AtomicU32;
use std::time::Duration;

use common::{SEND, TempDir, call, claim_key, idem, key_of, open_sqlite as open, short, turn};
use idem_tools_runtime::{Fingerprint, Key};

#[tokio::test]
async fn keys_are_resolved_across_namespaces_unless_ambiguous() {
    let dir = TempDir::new("namespaces");
    let db = dir.file("idem.db");
    let store = open(&db);
    let runs = AtomicU32::new(0);
    let tenant = turn("turn-1", "tenant-2");
    call(&store, &SEND, &tenant, "a@x", &runs).await.unwrap();
    let a = key_of(&SEND, &tenant, "a@x").0;
    // Three keys sharing the prefix abcd, in three namespaces. (A key is one row: the namespace
    // is part of what a key hashes, so one key cannot be in two namespaces.)
    let key = |third: u8| {
        let mut bytes = [0u8; 32];
        bytes[..3].copy_from_slice(&[0xab, 0xcd, third]);
        Key::from_bytes(bytes)
    };
    let (one, two, three) = (key(1), key(2), key(3));
    let fp = Fingerprint::from_bytes([9; 32]);
    let lease = Duration::from_secs(600);
    claim_key(&*store, "", "send_email", &one, &fp, lease).await;
    claim_key(&*store, "tenant-2", "refund", &two, &fp, lease).await;
    claim_key(&*store, "tenant 3", "send_email", &three, &fp, lease).await;

    // Unambiguous in another namespace: found without --namespace.
    let shown = idem(&["--sqlite", &db, "show", &short(&a)]).expect_code(0);
    assert!(
        shown.stdout.contains("namespace    tenant-2\n"),
        "{}",
        shown.stdout
    );
    let shown = idem(&["--sqlite", &db, "show", "abcd02"]).expect_code(0);
    assert!(
        shown.stdout.contains("tool         refund"),
        "{}",
        shown.stdout
    );

    // Ambiguous across namespaces: refused, the candidates listed with their namespaces.
    let refused = idem(&["--sqlite", &db, "show", "abcd"]).expect_code(1);
    let said = &refused.stderr;
    assert!(said.contains("ambiguous: it matches 3 records"), "{said}");
    assert!(said.contains("--namespace"), "{said}");
    for (key, namespace) in [(one, "\"\""), (two, "tenant-2"), (three, "tenant 3")] {
        assert!(
            said.contains(&format!("{key}  namespace {namespace}  ")),
            "{key} in {namespace}: {said}"
        );
    }
    idem(&["--sqlite", &db, "remove", "abcd", "--yes"]).expect_code(1);
    assert_eq!(
        store.list(None, 10).await.unwrap().len(),
        4,
        "nothing removed"
    );

    // --namespace narrows the search.
    let shown = idem(&["--sqlite", &db, "--namespace", "tenant-2", "show", "abcd"]).expect_code(0);
    assert!(shown.stdout.contains(&two.to_hex()), "{}", shown.stdout);
    let removed = idem(&[
        "--sqlite",
        &db,
        "--namespace",
        "tenant 3",
        "remove",
        &three.to_hex(),
        "--yes",
    ])
    .expect_code(0);
    assert!(
        removed.stdout.contains("in namespace tenant 3"),
        "{}",
        removed.stdout
    );
    assert!(store.get("tenant 3", &three).await.unwrap().is_none());
    assert!(
        store.get("", &one).await.unwrap().is_some(),
        "only tenant 3's"
    );
    // The key is unambiguous now, and `remove` finds it in its namespace.
    let removed = idem(&["--sqlite", &db, "remove", &short(&a), "--yes"]).expect_code(0);
    assert!(
        removed.stdout.contains("in namespace tenant-2"),
        "{}",
        removed.stdout
    );
    assert!(store.get("tenant-2", &a).await.unwrap().is_none());

    // Not found: in any namespace, or in the one named, pointing at where it is.
    let missing = idem(&["--sqlite", &db, "show", "0000"]).expect_code(1);
    assert!(
        missing.stderr.contains("in any namespace"),
        "{}",
        missing.stderr
    );
    let elsewhere =
        idem(&["--sqlite", &db, "--namespace", "tenant-2", "show", "abcd01"]).expect_code(1);
    assert!(
        elsewhere
            .stderr
            .contains("it is in namespace \"\": pass --namespace ''"),
        "{}",
        elsewhere.stderr
    );
}

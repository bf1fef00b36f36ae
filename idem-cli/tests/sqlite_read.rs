//! `idem list`, `show` and `stats` against real SQLite files, prepared by the engine and the
//! store.

mod common;

use std::sync::atomic::AtomicU32;
use std::time::Duration;

use common::{
    REFUND, SEND, STATS_HEADER, TempDir, call, claim, claim_key, idem, key_of, listed_keys,
    open_sqlite as open, short, table_rows, turn,
};
use idem_tools_runtime::{Fingerprint, Key};

#[tokio::test]
async fn list_shows_live_records_newest_first_and_filters_them() {
    let dir = TempDir::new("list");
    let db = dir.file("idem.db");
    let store = open(&db);
    let runs = AtomicU32::new(0);
    let t = turn("turn-1", "");
    let other = turn("turn-1", "tenant-2");
    let pause = || tokio::time::sleep(Duration::from_millis(5));
    call(&store, &SEND, &t, "a@x", &runs).await.unwrap();
    pause().await;
    call(&store, &REFUND, &t, "b@x", &runs).await.unwrap();
    pause().await;
    let (c, _) = claim(&*store, &SEND, &t, "c@x", Duration::from_secs(600)).await;
    pause().await;
    call(&store, &SEND, &other, "d@x", &runs).await.unwrap();
    let (a, b, d) = (
        key_of(&SEND, &t, "a@x").0,
        key_of(&REFUND, &t, "b@x").0,
        key_of(&SEND, &other, "d@x").0,
    );

    let all = idem(&["--sqlite", &db, "list"]).expect_code(0);
    assert!(all.stdout.starts_with("KEY "), "{}", all.stdout);
    assert_eq!(
        listed_keys(&all.stdout),
        [short(&d), short(&c), short(&b), short(&a)]
    );
    let c_line = all.stdout.lines().nth(2).unwrap();
    assert!(
        c_line.contains("in-progress") && c_line.contains("send_email") && c_line.contains("\"\"")
    );
    assert!(all.stdout.lines().nth(1).unwrap().contains("tenant-2"));

    let in_progress = idem(&["--sqlite", &db, "list", "--state", "in-progress"]).expect_code(0);
    assert_eq!(listed_keys(&in_progress.stdout), [short(&c)]);
    let completed = idem(&["--sqlite", &db, "list", "--state", "completed"]).expect_code(0);
    assert_eq!(
        listed_keys(&completed.stdout),
        [short(&d), short(&b), short(&a)]
    );
    let refunds = idem(&["--sqlite", &db, "list", "--tool", "refund"]).expect_code(0);
    assert_eq!(listed_keys(&refunds.stdout), [short(&b)]);
    let tenant = idem(&["--sqlite", &db, "--namespace", "tenant-2", "list"]).expect_code(0);
    assert_eq!(listed_keys(&tenant.stdout), [short(&d)]);
    let limited = idem(&["--sqlite", &db, "list", "--limit", "2"]).expect_code(0);
    assert_eq!(listed_keys(&limited.stdout), [short(&d), short(&c)]);
    assert!(limited.stderr.contains("--limit 4"), "{}", limited.stderr);
    let none = idem(&["--sqlite", &db, "list", "--tool", "nope"]).expect_code(0);
    assert_eq!(none.stdout, "no live records match\n");

    let json = idem(&["--sqlite", &db, "list", "--json"])
        .expect_code(0)
        .json();
    let items = json.as_array().expect("an array");
    let keys: Vec<&str> = items.iter().map(|i| i["key"].as_str().unwrap()).collect();
    assert_eq!(keys, [d.to_hex(), c.to_hex(), b.to_hex(), a.to_hex()]);
    let first = &items[0];
    assert_eq!(first["namespace"], "tenant-2");
    assert_eq!(first["tool"], "send_email");
    assert_eq!(first["state"], "completed");
    assert_eq!(first["fingerprint"].as_str().unwrap().len(), 64);
    let created_ms = first["created_at_ms"].as_u64().expect("ms");
    let expires_ms = first["expires_at_ms"].as_u64().expect("ms");
    // The TTL runs from completion, a few ms after the claim.
    let ttl = expires_ms - created_ms;
    assert!(
        (86_400_000..86_460_000).contains(&ttl),
        "the default TTL: {ttl}"
    );
    let created = first["created_at"].as_str().unwrap();
    assert!(created.ends_with('Z') && created.contains('T'), "{created}");
    assert_eq!(
        humantime::parse_rfc3339(created).unwrap(),
        std::time::UNIX_EPOCH + Duration::from_millis(created_ms)
    );
    let result = first["result"]
        .as_str()
        .expect("a completed record's result");
    assert!(result.contains("\"sent_to\": \"d@x\""), "{result}");
    assert_eq!(items[1]["state"], "in-progress");
    assert!(items[1]["result"].is_null());
    let created: Vec<u64> = items
        .iter()
        .map(|i| i["created_at_ms"].as_u64().unwrap())
        .collect();
    assert!(
        created.windows(2).all(|w| w[0] >= w[1]),
        "newest first: {created:?}"
    );
}

#[tokio::test]
async fn show_renders_the_result_by_short_key_prefix_or_full_key() {
    let dir = TempDir::new("show");
    let db = dir.file("idem.db");
    let store = open(&db);
    let runs = AtomicU32::new(0);
    let t = turn("turn-1", "");
    call(&store, &SEND, &t, "a@x", &runs).await.unwrap();
    let key = key_of(&SEND, &t, "a@x").0;

    let full = key.to_hex();
    let upper = short(&key).to_uppercase();
    for given in [short(&key), full.clone(), full[..4].to_owned(), upper] {
        let shown = idem(&["--sqlite", &db, "show", &given]).expect_code(0);
        let out = &shown.stdout;
        assert!(out.contains(&format!("key          {full}")), "{out}");
        assert!(out.contains("tool         send_email"), "{out}");
        assert!(out.contains("state        completed"), "{out}");
        assert!(out.contains("namespace    \"\""), "{out}");
        // The record rendered for a person: its kind, then the value over several lines.
        assert!(out.contains("result\nOk({\n"), "{out}");
        assert!(out.contains("  \"sent_to\": \"a@x\""), "{out}");
    }

    let json = idem(&["--sqlite", &db, "--json", "show", &short(&key)])
        .expect_code(0)
        .json();
    assert_eq!(json["key"], full);
    assert_eq!(json["state"], "completed");
    let result = json["result"].as_str().expect("the rendered record");
    let value = result
        .strip_prefix("Ok(")
        .and_then(|r| r.strip_suffix(')'))
        .expect("an Ok record");
    let value: serde_json::Value = serde_json::from_str(value).expect("plain JSON inside");
    assert_eq!(value["sent_to"], "a@x");
    assert_eq!(value["run"], 1);

    let (stuck, _) = claim(&*store, &SEND, &t, "b@x", Duration::from_secs(600)).await;
    let shown = idem(&["--sqlite", &db, "show", &short(&stuck)]).expect_code(0);
    assert!(
        shown.stdout.contains("state        in-progress"),
        "{}",
        shown.stdout
    );
    assert!(
        shown.stdout.contains("lease ends in 9m"),
        "{}",
        shown.stdout
    );
    assert!(
        shown
            .stdout
            .contains(&format!("idem --sqlite {db} remove {}", short(&stuck))),
        "{}",
        shown.stdout
    );
}

#[tokio::test]
async fn ambiguous_and_unknown_keys_are_refused_with_what_to_do() {
    let dir = TempDir::new("ambiguous");
    let db = dir.file("idem.db");
    let store = open(&db);
    let mut bytes = [0u8; 32];
    bytes[..2].copy_from_slice(&[0xab, 0xcd]);
    bytes[2] = 1;
    let one = Key::from_bytes(bytes);
    bytes[2] = 2;
    let two = Key::from_bytes(bytes);
    let fp = Fingerprint::from_bytes([9; 32]);
    let lease = Duration::from_secs(600);
    claim_key(&*store, "", "send_email", &one, &fp, lease).await;
    claim_key(&*store, "", "refund", &two, &fp, lease).await;

    let refused = idem(&["--sqlite", &db, "show", "abcd"]).expect_code(1);
    assert!(refused.stderr.contains("ambiguous"), "{}", refused.stderr);
    assert!(refused.stderr.contains(&one.to_hex()), "{}", refused.stderr);
    assert!(refused.stderr.contains(&two.to_hex()), "{}", refused.stderr);
    idem(&["--sqlite", &db, "remove", "abcd", "--yes"]).expect_code(1);
    assert_eq!(
        store.list(None, 10).await.unwrap().len(),
        2,
        "nothing removed"
    );

    let shown = idem(&["--sqlite", &db, "show", "abcd02"]).expect_code(0);
    assert!(
        shown.stdout.contains("tool         refund"),
        "{}",
        shown.stdout
    );

    let missing = idem(&["--sqlite", &db, "show", "0000"]).expect_code(1);
    assert!(
        missing.stderr.contains("no live record"),
        "{}",
        missing.stderr
    );

    // A key in another namespace than the one named: the message says which flag finds it.
    let runs = AtomicU32::new(0);
    let t = turn("turn-1", "tenant-2");
    call(&store, &SEND, &t, "a@x", &runs).await.unwrap();
    let key = key_of(&SEND, &t, "a@x").0;
    let elsewhere =
        idem(&["--sqlite", &db, "--namespace", "", "show", &short(&key)]).expect_code(1);
    assert!(
        elsewhere.stderr.contains("pass --namespace tenant-2"),
        "{}",
        elsewhere.stderr
    );
    idem(&[
        "--sqlite",
        &db,
        "--namespace",
        "tenant-2",
        "show",
        &short(&key),
    ])
    .expect_code(0);
    // Without --namespace, every namespace is searched.
    idem(&["--sqlite", &db, "show", &short(&key)]).expect_code(0);

    for bad in ["xyz1", "abc", &"a".repeat(65)] {
        let run = idem(&["--sqlite", &db, "show", bad]).expect_code(2);
        assert!(run.stderr.contains("KEY"), "{}", run.stderr);
    }
}

#[tokio::test]
async fn stats_counts_by_state_and_tool() {
    let dir = TempDir::new("stats");
    let db = dir.file("idem.db");
    let store = open(&db);
    let runs = AtomicU32::new(0);
    let t = turn("turn-1", "");
    call(&store, &SEND, &t, "a", &runs).await.unwrap();
    call(&store, &SEND, &t, "b", &runs).await.unwrap();
    call(&store, &REFUND, &turn("turn-1", "tenant-2"), "c", &runs)
        .await
        .unwrap();
    claim(&*store, &SEND, &t, "d", Duration::from_secs(600)).await;

    let table = idem(&["--sqlite", &db, "stats"]).expect_code(0).stdout;
    let rows = table_rows(&table);
    assert_eq!(rows[0], STATS_HEADER);
    assert_eq!(rows[1], ["refund", "0", "1", "0", "0", "0", "0", "1"]);
    assert_eq!(rows[2], ["send_email", "1", "2", "0", "0", "0", "0", "3"]);
    assert_eq!(
        rows[3],
        ["(all", "tools)", "1", "3", "0", "0", "0", "0", "4"]
    );

    let json = idem(&["--sqlite", &db, "--json", "stats"])
        .expect_code(0)
        .json();
    assert_eq!(json["by_state"]["in-progress"], 1);
    assert_eq!(json["by_state"]["completed"], 3);
    assert_eq!(json["by_state"]["total"], 4);
    assert_eq!(json["by_tool"]["send_email"]["total"], 3);
    assert_eq!(json["by_tool"]["refund"]["completed"], 1);

    let tenant = idem(&[
        "--sqlite",
        &db,
        "--namespace",
        "tenant-2",
        "--json",
        "stats",
    ])
    .expect_code(0)
    .json();
    assert_eq!(tenant["by_state"]["total"], 1);
    assert!(tenant["by_tool"]["send_email"].is_null());
}

//! The `idem` binary against real SQLite files, prepared by the engine and the store.

mod common;

use std::sync::Arc;
use std::sync::atomic::{AtomicU32, Ordering};
use std::time::Duration;

use common::{
    REFUND, SEND, SHORT_LIVED, TempDir, call, claim, claim_key, idem, idem_on_terminal, key_of,
    turn,
};
use idem_runtime::clock::ManualClock;
use idem_runtime::store::{RecordState, SqliteStore, Store};
use idem_runtime::{Error, Fingerprint, Key};

fn open(db: &str) -> Arc<dyn Store> {
    Arc::new(SqliteStore::open(db).expect("a new SQLite store"))
}

/// The short keys of a `list` table, top to bottom.
fn listed_keys(stdout: &str) -> Vec<String> {
    stdout
        .lines()
        .skip(1)
        .filter_map(|line| line.split_whitespace().next().map(str::to_owned))
        .collect()
}

fn short(key: &Key) -> String {
    key.short().to_hex()
}

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
        // The result envelope, pretty-printed over several lines.
        assert!(out.contains("result\n{\n  \"ok\": {\n"), "{out}");
        assert!(out.contains("    \"sent_to\": \"a@x\""), "{out}");
    }

    let json = idem(&["--sqlite", &db, "--json", "show", &short(&key)])
        .expect_code(0)
        .json();
    assert_eq!(json["key"], full);
    assert_eq!(json["state"], "completed");
    let result: serde_json::Value =
        serde_json::from_str(json["result"].as_str().unwrap()).expect("the rendered envelope");
    assert_eq!(result["ok"]["sent_to"], "a@x");
    assert_eq!(result["ok"]["run"], 1);

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
            .contains(&format!("idem remove {}", short(&stuck))),
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

    // A key in another namespace: the message says which flag finds it.
    let runs = AtomicU32::new(0);
    let t = turn("turn-1", "tenant-2");
    call(&store, &SEND, &t, "a@x", &runs).await.unwrap();
    let key = key_of(&SEND, &t, "a@x").0;
    let elsewhere = idem(&["--sqlite", &db, "show", &short(&key)]).expect_code(1);
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

    for bad in ["xyz1", "abc", &"a".repeat(65)] {
        let run = idem(&["--sqlite", &db, "show", bad]).expect_code(2);
        assert!(run.stderr.contains("KEY"), "{}", run.stderr);
    }
}

#[tokio::test]
async fn remove_needs_yes_without_a_terminal_then_the_tool_runs_again() {
    let dir = TempDir::new("remove");
    let db = dir.file("idem.db");
    let store = open(&db);
    let runs = AtomicU32::new(0);
    let t = turn("turn-1", "");
    call(&store, &SEND, &t, "a@x", &runs).await.unwrap();
    let replay = call(&store, &SEND, &turn("turn-1", ""), "a@x", &runs)
        .await
        .unwrap();
    assert_eq!(
        (replay["run"].as_u64(), runs.load(Ordering::SeqCst)),
        (Some(1), 1)
    );
    let key = short(&key_of(&SEND, &t, "a@x").0);

    let refused = idem(&["--sqlite", &db, "remove", &key]).expect_code(1);
    assert!(refused.stderr.contains("pass --yes"), "{}", refused.stderr);
    assert!(
        refused.stderr.contains("not a terminal"),
        "{}",
        refused.stderr
    );
    call(&store, &SEND, &turn("turn-1", ""), "a@x", &runs)
        .await
        .unwrap();
    assert_eq!(
        runs.load(Ordering::SeqCst),
        1,
        "still replayed after a refused remove"
    );

    let removed = idem(&["--sqlite", &db, "remove", &key, "--yes"]).expect_code(0);
    assert!(
        removed
            .stdout
            .starts_with("removed the completed record of tool `send_email`")
    );
    let again = call(&store, &SEND, &turn("turn-1", ""), "a@x", &runs)
        .await
        .unwrap();
    assert_eq!(
        again["run"], 2,
        "the tool ran again after the record was removed"
    );

    idem(&["--sqlite", &db, "remove", &key, "--yes", "--json"]).expect_code(0);
    idem(&["--sqlite", &db, "remove", &key, "--yes"]).expect_code(1);
}

#[tokio::test]
async fn remove_releases_a_stuck_claim() {
    let dir = TempDir::new("stuck");
    let db = dir.file("idem.db");
    let store = open(&db);
    let runs = AtomicU32::new(0);
    let t = turn("turn-1", "");
    // A caller claimed the key, then crashed: its lease has ten minutes to go.
    let (key, _) = claim(&*store, &SEND, &t, "a@x", Duration::from_secs(600)).await;
    let blocked = call(&store, &SEND, &t, "a@x", &runs).await;
    assert!(
        matches!(blocked, Err(Error::InFlight { .. })),
        "{blocked:?}"
    );

    let listed = idem(&["--sqlite", &db, "list", "--state", "in-progress"]).expect_code(0);
    assert_eq!(listed_keys(&listed.stdout), [short(&key)]);
    let json = idem(&["--sqlite", &db, "--json", "remove", &short(&key), "-y"]).expect_code(0);
    assert_eq!(json.json()["removed"], true);
    assert_eq!(json.json()["key"], key.to_hex());

    // The released key is free: the retry runs the tool instead of waiting for the dead caller.
    let ran = call(&store, &SEND, &turn("turn-1", ""), "a@x", &runs)
        .await
        .unwrap();
    assert_eq!(ran["sent_to"], "a@x");
    assert_eq!(runs.load(Ordering::SeqCst), 1);
    let record = store.get("", &key).await.unwrap().expect("recorded now");
    assert_eq!(record.state, RecordState::Completed);
}

#[tokio::test]
async fn remove_asks_on_a_terminal() {
    let dir = TempDir::new("terminal");
    let db = dir.file("idem.db");
    let store = open(&db);
    let runs = AtomicU32::new(0);
    let t = turn("turn-1", "");
    call(&store, &SEND, &t, "a@x", &runs).await.unwrap();
    let key = key_of(&SEND, &t, "a@x").0;
    let args = ["--sqlite", &db, "remove", &short(&key)];

    let declined = idem_on_terminal(&args, "n\n").expect_code(1);
    assert!(declined.stderr.contains("[y/N]"), "{}", declined.stderr);
    assert!(
        declined.stderr.contains("runs it AGAIN"),
        "{}",
        declined.stderr
    );
    assert!(
        declined.stderr.contains("not removed"),
        "{}",
        declined.stderr
    );
    assert!(store.get("", &key).await.unwrap().is_some());

    let accepted = idem_on_terminal(&args, "y\n").expect_code(0);
    assert!(
        accepted.stdout.starts_with("removed "),
        "{}",
        accepted.stdout
    );
    assert!(store.get("", &key).await.unwrap().is_none());
}

#[tokio::test]
async fn purge_deletes_expired_records_only() {
    let dir = TempDir::new("purge");
    let db = dir.file("idem.db");
    let store = open(&db);
    let now = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .unwrap()
        .as_millis() as u64;
    // A store whose clock is two hours behind: its one-hour record expired an hour ago.
    let past: Arc<dyn Store> = Arc::new(
        SqliteStore::open(&db)
            .unwrap()
            .with_clock(Arc::new(ManualClock::new(now - 2 * 3600 * 1000))),
    );
    let runs = AtomicU32::new(0);
    let t = turn("turn-1", "");
    call(&past, &SHORT_LIVED, &t, "old", &runs).await.unwrap();
    call(&store, &SEND, &t, "new", &runs).await.unwrap();
    assert_eq!(
        past.list(None, 10).await.unwrap().len(),
        2,
        "both rows are there"
    );

    let listed = idem(&["--sqlite", &db, "list"]).expect_code(0);
    assert_eq!(
        listed_keys(&listed.stdout),
        [short(&key_of(&SEND, &t, "new").0)]
    );
    let purged = idem(&["--sqlite", &db, "purge"]).expect_code(0);
    assert_eq!(purged.stdout, "purged 1 expired record\n");
    let left = past.list(None, 10).await.unwrap();
    assert_eq!(left.len(), 1, "the expired row is gone");
    assert_eq!(left[0].tool, "send_email");
    let again = idem(&["--sqlite", &db, "--json", "purge"]).expect_code(0);
    assert_eq!(again.json()["purged"], 0);
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
    let rows: Vec<Vec<&str>> = table
        .lines()
        .map(|l| l.split_whitespace().collect())
        .collect();
    assert_eq!(rows[0], ["TOOL", "IN-PROGRESS", "COMPLETED", "TOTAL"]);
    assert_eq!(rows[1], ["refund", "0", "1", "1"]);
    assert_eq!(rows[2], ["send_email", "1", "2", "3"]);
    assert_eq!(rows[3], ["(all", "tools)", "1", "3", "4"]);

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

#[tokio::test]
async fn a_corrupt_record_is_reported_and_removable_by_full_key() {
    let dir = TempDir::new("corrupt");
    let db = dir.file("idem.db");
    let store = open(&db);
    let runs = AtomicU32::new(0);
    let t = turn("turn-1", "");
    call(&store, &SEND, &t, "a", &runs).await.unwrap();
    let key = key_of(&SEND, &t, "a").0;
    let conn = rusqlite::Connection::open(&db).unwrap();
    conn.execute("UPDATE idem_records SET fingerprint = x'010203'", [])
        .unwrap();

    let listed = idem(&["--sqlite", &db, "list"]).expect_code(0);
    assert!(listed.stderr.contains("corrupt"), "{}", listed.stderr);
    let shown = idem(&["--sqlite", &db, "show", &key.to_hex()]).expect_code(1);
    assert!(
        shown.stderr.contains("fingerprint is 3 bytes"),
        "{}",
        shown.stderr
    );
    assert!(
        shown.stderr.contains(&format!("idem remove {key} --yes")),
        "{}",
        shown.stderr
    );
    let removed = idem(&["--sqlite", &db, "remove", &key.to_hex(), "--yes"]).expect_code(0);
    assert!(
        removed.stdout.contains("corrupt record"),
        "{}",
        removed.stdout
    );
    let count: i64 = conn
        .query_row("SELECT count(*) FROM idem_records", [], |row| row.get(0))
        .unwrap();
    assert_eq!(count, 0);
}

#[test]
fn a_missing_file_is_not_created() {
    let dir = TempDir::new("missing");
    let db = dir.file("nope.db");
    let run = idem(&["--sqlite", &db, "list"]).expect_code(2);
    assert!(run.stderr.contains("does not exist"), "{}", run.stderr);
    assert!(!std::path::Path::new(&db).exists(), "the CLI created {db}");
}

#[test]
fn a_newer_schema_is_refused_with_advice() {
    let dir = TempDir::new("newer");
    let db = dir.file("idem.db");
    drop(SqliteStore::open(&db).unwrap());
    let conn = rusqlite::Connection::open(&db).unwrap();
    conn.pragma_update(None, "user_version", 99).unwrap();
    let run = idem(&["--sqlite", &db, "stats"]).expect_code(2);
    assert!(run.stderr.contains("schema version 99"), "{}", run.stderr);
    assert!(run.stderr.contains("upgrade idem"), "{}", run.stderr);
}

#[test]
fn another_applications_database_is_left_alone() {
    let dir = TempDir::new("foreign");
    let db = dir.file("app.db");
    let conn = rusqlite::Connection::open(&db).unwrap();
    conn.execute("CREATE TABLE notes (body TEXT)", []).unwrap();
    let run = idem(&["--sqlite", &db, "list"]).expect_code(2);
    assert!(
        run.stderr.contains("not an idem database"),
        "{}",
        run.stderr
    );
    let tables: i64 = conn
        .query_row(
            "SELECT count(*) FROM sqlite_master WHERE name = 'idem_records'",
            [],
            |row| row.get(0),
        )
        .unwrap();
    assert_eq!(tables, 0, "no idem table was added");
}

#[test]
fn usage_errors_exit_with_2() {
    let dir = TempDir::new("usage");
    let db = dir.file("idem.db");
    drop(SqliteStore::open(&db).unwrap());
    let no_store = idem(&["list"]).expect_code(2);
    assert!(
        no_store.stderr.contains("--sqlite PATH"),
        "{}",
        no_store.stderr
    );
    idem(&["--sqlite", &db, "frobnicate"]).expect_code(2);
    idem(&["--sqlite", &db, "list", "--state", "done"]).expect_code(2);
    idem(&["--sqlite", &db, "--redis", "redis://127.0.0.1:1", "list"]).expect_code(2);
    let prefix = idem(&["--sqlite", &db, "--prefix", "p", "list"]).expect_code(2);
    assert!(prefix.stderr.contains("--prefix"), "{}", prefix.stderr);
    idem(&["--sqlite", &db, "list"]).expect_code(0);
}

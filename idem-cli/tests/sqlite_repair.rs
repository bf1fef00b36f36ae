//! `idem remove` and `purge` against real SQLite files: their effect on the store and on the
//! engine's next call.

mod common;

use std::sync::Arc;
use std::sync::atomic::{AtomicU32, Ordering};
use std::time::Duration;

use common::{
    Prompted, SEND, SHORT_LIVED, TempDir, call, claim, idem, idem_on_terminal, idem_prompted,
    key_of, listed_keys, open_sqlite as open, run_as_printed, short, turn,
};
use idem_tools_runtime::Error;
use idem_tools_runtime::clock::ManualClock;
use idem_tools_runtime::key::Key;
use idem_tools_runtime::store::{Lease, LeaseToken, RecordState, SqliteStore, Store};

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
    // The command to run again is this one, store and all, with --yes.
    let again = format!("idem --sqlite {db} remove {key} --yes");
    assert!(
        refused.stderr.contains(&again),
        "{again}: {}",
        refused.stderr
    );
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
    assert_eq!(json.json()["live"], true, "its lease had ten minutes to go");
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

/// A key claimed in a fresh file (a lease of `lease_ms`) and `idem remove` asking whether to
/// remove it: the directory, the store, the key and its claim's token, the waiting process.
async fn remove_asking(
    label: &str,
    lease_ms: u64,
) -> (TempDir, Arc<dyn Store>, (Key, LeaseToken), Prompted) {
    let dir = TempDir::new(label);
    let db = dir.file("idem.db");
    let store = open(&db);
    let t = turn("turn-1", "");
    let claimed = claim(&*store, &SEND, &t, "a@x", Duration::from_millis(lease_ms)).await;
    let asking = idem_prompted(&["--sqlite", &db, "remove", &short(&claimed.0)], "[y/N]");
    (dir, store, claimed, asking)
}

/// What the operator confirmed is what is removed: a stuck claim that completes while `remove`
/// waits for the answer is kept (removing it would run the tool again on the next retry).
#[tokio::test]
async fn remove_keeps_a_record_that_changed_while_it_asked() {
    let (_dir, store, (key, token), asking) = remove_asking("changed", 600_000).await;
    assert!(
        asking.shown().contains("the in-progress record"),
        "{}",
        asking.shown()
    );
    // The holder was slow, not gone: it records its result before the operator answers.
    let lease = Lease {
        namespace: Arc::from(""),
        key,
        token,
    };
    store
        .complete(&lease, b"sent", Duration::from_secs(3600))
        .await
        .unwrap();

    let refused = asking.answer("y\n").expect_code(1);
    assert!(
        refused.stderr.contains("not removed: key") && refused.stderr.contains("changed since"),
        "{}",
        refused.stderr
    );
    let kept = store.get("", &key).await.unwrap().expect("kept");
    assert_eq!(kept.state, RecordState::Completed);
    assert_eq!(kept.result.as_deref(), Some(&b"sent"[..]));
}

/// A claim its call gives back while `remove` asks left no record: nothing is removed, the
/// operator is told so (exit 1), and the key's attempt count stays.
#[tokio::test]
async fn remove_of_a_claim_given_back_while_it_asked_removes_nothing() {
    let (_dir, store, (key, token), asking) = remove_asking("given back", 600_000).await;
    let lease = Lease {
        namespace: Arc::from(""),
        key,
        token,
    };
    store.release(&lease).await.unwrap();

    let refused = asking.answer("y\n").expect_code(1);
    assert!(
        refused.stderr.contains("holds no record to remove")
            && refused.stderr.contains("given back")
            && !refused.stdout.contains("removed"),
        "{}\n{}",
        refused.stdout,
        refused.stderr
    );
    let t = turn("turn-1", "");
    let again = claim(&*store, &SEND, &t, "a@x", Duration::from_secs(60)).await;
    assert_eq!(again.0, key);
    let record = store.get("", &key).await.unwrap().expect("claimed");
    assert_eq!(
        record.attempts, 2,
        "the attempt count of the claim given back is kept"
    );
}

/// A stuck claim whose lease runs out while `remove` asks is still the claim shown: removed
/// (its attempt count with it), and said so.
#[tokio::test]
async fn remove_of_a_claim_that_expired_while_it_asked_removes_it() {
    let (_dir, store, _, asking) = remove_asking("expired", 300).await;
    tokio::time::sleep(Duration::from_millis(400)).await;

    let removed = asking.answer("y\n").expect_code(0);
    assert!(
        removed
            .stdout
            .contains("its lease had run out since it was shown"),
        "{}",
        removed.stdout
    );
    let ran = store.list(Some(""), 10).await.unwrap();
    assert!(ran.is_empty(), "{ran:?}");
    let t = turn("turn-1", "");
    let attempts = claim(&*store, &SEND, &t, "a@x", Duration::from_secs(60)).await;
    let record = store.get("", &attempts.0).await.unwrap().expect("claimed");
    assert_eq!(record.attempts, 1, "its attempt count was deleted with it");
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
    // The command it suggests runs as printed.
    let suggested = shown
        .stderr
        .split_once("to delete it: ")
        .and_then(|(_, rest)| rest.lines().next())
        .unwrap_or_else(|| panic!("a suggested command: {}", shown.stderr));
    assert_eq!(suggested, format!("idem --sqlite {db} remove {key} --yes"));
    let removed = run_as_printed(suggested).expect_code(0);
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

/// What `show` suggests for a stuck claim runs as printed (adding `--yes`, as stdin is no
/// terminal here): the store's options come with it, quoted for the shell, as is the namespace.
#[tokio::test]
async fn the_removal_show_suggests_runs_as_printed() {
    let dir = TempDir::new("suggested");
    let db = dir.file("the agent's store.db");
    let store = open(&db);
    let t = turn("turn-1", "tenant 1");
    let (stuck, _) = claim(&*store, &SEND, &t, "a@x", Duration::from_secs(600)).await;
    let shown = idem(&["--sqlite", &db, "show", &short(&stuck)]).expect_code(0);
    let suggested = shown
        .stdout
        .lines()
        .find(|line| line.trim_start().starts_with("idem "))
        .unwrap_or_else(|| panic!("a suggested command: {}", shown.stdout));
    let removed = run_as_printed(&format!("{suggested} --yes")).expect_code(0);
    assert!(removed.stdout.contains("removed"), "{}", removed.stdout);
    assert!(store.get("tenant 1", &stuck).await.unwrap().is_none());
}

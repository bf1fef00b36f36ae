//! What the CLI says about each state a key can be in — in progress, completed, failed (a
//! recorded error), interrupted, not replayable — and what `remove` resets, against real SQLite
//! files prepared by the engine.

mod common;

use std::sync::atomic::{AtomicU32, Ordering};
use std::time::Duration;

use common::{
    SEND, STATS_HEADER, TempDir, assert_no_debug_text, call, call_interrupted, check_turn_view,
    claim_key, every_state, idem, idem_on_terminal, key_of, listed_keys, open_sqlite as open,
    short, table_rows, turn,
};
use idem_tools_runtime::{Error, Key};
use serde_json::Value;

/// `idem turn` shows one turn's records in the order it claimed them, with each outcome, and
/// nothing of another turn; `list --turn` says the same as JSON.
#[tokio::test]
async fn turn_shows_a_turns_records_in_claim_order_with_their_outcomes() {
    let dir = TempDir::new("states-turn");
    let db = dir.file("idem.db");
    let store = open(&db);
    let p = every_state(&store).await;
    let runs = AtomicU32::new(0);
    call(&store, &SEND, &turn("turn-2", ""), "done@x", &runs)
        .await
        .expect("another turn's call");
    let other = key_of(&SEND, &turn("turn-2", ""), "done@x").0;
    check_turn_view(&["--sqlite", &db], &p, &other);
}

#[tokio::test]
async fn list_and_stats_name_every_state() {
    let dir = TempDir::new("states-list");
    let db = dir.file("idem.db");
    let store = open(&db);
    let p = every_state(&store).await;
    let by_state = [
        ("in-progress", p.in_progress),
        ("completed", p.completed),
        ("failed", p.failed),
        ("interrupted", p.interrupted),
        ("not-replayable", p.unrecorded),
    ];

    let all = idem(&["--sqlite", &db, "list"]).expect_code(0);
    assert_no_debug_text(&all);
    for (state, key) in by_state {
        let line = all
            .stdout
            .lines()
            .find(|l| l.starts_with(&short(&key)))
            .unwrap_or_else(|| panic!("{state} not listed:\n{}", all.stdout));
        let shown: Vec<&str> = line.split_whitespace().collect();
        assert_eq!(shown[3], state, "{line}");
        let only = idem(&["--sqlite", &db, "list", "--state", state]).expect_code(0);
        assert_eq!(listed_keys(&only.stdout), [short(&key)], "--state {state}");
    }
    let none = idem(&["--sqlite", &db, "list", "--state", "unreadable"]).expect_code(0);
    assert_eq!(none.stdout, "no live records match\n");

    let json = idem(&["--sqlite", &db, "--json", "list"]).expect_code(0);
    assert_no_debug_text(&json);
    let items = json.json();
    let item = |key: &Key| -> Value {
        items
            .as_array()
            .unwrap()
            .iter()
            .find(|i| i["key"] == key.to_hex())
            .cloned()
            .unwrap_or_else(|| panic!("{key} not in {items}"))
    };
    for (state, key) in by_state {
        assert_eq!(item(&key)["state"], state);
    }
    assert_eq!(item(&p.in_progress)["attempts"], 1, "claimed once");
    assert_eq!(
        item(&p.completed)["attempts"],
        0,
        "a recorded result resets"
    );
    assert!(item(&p.completed)["marker"].is_null());
    assert!(item(&p.in_progress)["result"].is_null());
    assert_eq!(
        item(&p.interrupted)["marker"],
        serde_json::json!({ "kind": "interrupted" })
    );
    assert!(item(&p.interrupted)["result"].is_null());
    let unrecorded = item(&p.unrecorded);
    assert_eq!(unrecorded["marker"]["kind"], "not-replayable");
    let reason = unrecorded["marker"]["reason"].as_str().expect("a reason");
    assert!(reason.contains("refuses to be serialized"), "{reason}");
    assert!(unrecorded["result"].is_null());
    let failed = item(&p.failed);
    let result = failed["result"].as_str().expect("the recorded error");
    assert!(
        result.starts_with("Err(") && result.contains("mailbox full"),
        "{result}"
    );

    let stats = idem(&["--sqlite", &db, "stats"]).expect_code(0).stdout;
    let rows = table_rows(&stats);
    assert_eq!(rows[0], STATS_HEADER);
    assert_eq!(rows[1], ["refund", "0", "0", "1", "0", "0", "0", "1"]);
    assert_eq!(rows[2], ["send_email", "1", "1", "0", "1", "1", "0", "4"]);
    let json = idem(&["--sqlite", &db, "--json", "stats"])
        .expect_code(0)
        .json();
    for (state, _) in by_state {
        assert_eq!(json["by_state"][state], 1, "{state}: {json}");
    }
    assert_eq!(json["by_state"]["unreadable"], 0);
    assert_eq!(json["by_state"]["total"], 5);
    assert_eq!(json["by_tool"]["send_email"]["interrupted"], 1);
}

#[tokio::test]
async fn show_explains_markers_and_recorded_errors() {
    let dir = TempDir::new("states-show");
    let db = dir.file("idem.db");
    let store = open(&db);
    let p = every_state(&store).await;
    let show = |key: &Key, json: bool| {
        let short = short(key);
        let mut args = vec!["--sqlite", db.as_str(), "show", short.as_str()];
        if json {
            args.push("--json");
        }
        let run = idem(&args).expect_code(0);
        assert_no_debug_text(&run);
        run
    };

    let out = show(&p.interrupted, false).stdout;
    assert!(out.contains("state        interrupted\n"), "{out}");
    assert!(out.contains("attempts     0 "), "{out}");
    assert!(out.contains("whether it took effect is not known"), "{out}");
    assert!(out.contains("Check whether the action happened"), "{out}");
    assert!(
        out.contains(&format!(
            "idem --sqlite {db} remove {}",
            short(&p.interrupted)
        )),
        "{out}"
    );
    let json = show(&p.interrupted, true).json();
    assert_eq!(json["state"], "interrupted");
    assert_eq!(json["marker"]["kind"], "interrupted");
    assert!(json["result"].is_null());

    let out = show(&p.unrecorded, false).stdout;
    assert!(out.contains("state        not-replayable\n"), "{out}");
    assert!(out.contains("the tool ran"), "{out}");
    assert!(out.contains("refuses to be serialized"), "{out}");
    let json = show(&p.unrecorded, true).json();
    assert_eq!(json["state"], "not-replayable");
    assert_eq!(json["marker"]["kind"], "not-replayable");

    let out = show(&p.failed, false).stdout;
    assert!(out.contains("state        failed\n"), "{out}");
    assert!(out.contains("result\nErr(Rejected {\n"), "{out}");
    assert!(out.contains("\"reason\": \"mailbox full\""), "{out}");
    assert!(out.contains("cache_errors"), "{out}");
    assert_eq!(show(&p.failed, true).json()["state"], "failed");

    let out = show(&p.in_progress, false).stdout;
    assert!(out.contains("state        in-progress\n"), "{out}");
    assert!(out.contains("attempts     1 "), "{out}");
    let out = show(&p.completed, false).stdout;
    assert!(out.contains("state        completed\n"), "{out}");
    assert!(out.contains("result\nOk({\n"), "{out}");
}

#[tokio::test]
async fn remove_says_what_it_deletes_and_what_the_next_call_does() {
    let dir = TempDir::new("states-remove");
    let db = dir.file("idem.db");
    let store = open(&db);
    let p = every_state(&store).await;
    // (key, state, attempts since the last recorded result, what the next call does)
    let next = [
        (
            p.in_progress,
            "in-progress",
            1,
            "may run the tool a second time",
        ),
        (
            p.completed,
            "completed",
            0,
            "runs it AGAIN instead of replaying its result",
        ),
        (
            p.failed,
            "failed",
            0,
            "runs the tool again instead of getting the recorded error",
        ),
        (
            p.interrupted,
            "interrupted",
            0,
            "check first whether the interrupted call took effect",
        ),
        (
            p.unrecorded,
            "not-replayable",
            0,
            "The tool has run (its result could not be recorded)",
        ),
    ];
    for (key, state, attempts, consequence) in next {
        // Without a terminal: refused, saying what it would do.
        let refused = idem(&["--sqlite", &db, "remove", &short(&key)]).expect_code(1);
        assert!(refused.stderr.contains(consequence), "{}", refused.stderr);
        assert!(
            refused
                .stderr
                .contains("deletes the record and the key's attempt count"),
            "{}",
            refused.stderr
        );
        let removed = idem(&["--sqlite", &db, "remove", &short(&key), "--yes"]).expect_code(0);
        assert_no_debug_text(&removed);
        let out = &removed.stdout;
        assert!(
            out.starts_with(&format!("removed the {state} record of tool `")),
            "{out}"
        );
        assert!(
            out.contains(&format!(
                "deleted: the record and the key's attempt count ({attempts} before removal); \
                 kept: the turn's count of started actions"
            )),
            "{out}"
        );
        assert!(out.contains(consequence), "{out}");
        assert!(store.get("", &key).await.unwrap().is_none(), "{state}");
    }

    // The interrupted key runs again: the marker no longer refuses it.
    let before = p.runs.load(Ordering::SeqCst);
    let t = turn("turn-1", "");
    let ran = call(&store, &SEND, &t, "cut@x", &p.runs).await.unwrap();
    assert_eq!(ran["sent_to"], "cut@x");
    assert_eq!(p.runs.load(Ordering::SeqCst), before + 1);
}

#[tokio::test]
async fn removing_an_interrupted_key_on_a_terminal_asks_to_check_first() {
    let dir = TempDir::new("states-terminal");
    let db = dir.file("idem.db");
    let store = open(&db);
    let runs = AtomicU32::new(0);
    let key = call_interrupted(&store, &SEND, &turn("turn-1", ""), "cut@x", &runs).await;
    let declined =
        idem_on_terminal(&["--sqlite", &db, "remove", &short(&key)], "n\n").expect_code(1);
    let asked = &declined.stderr;
    assert!(
        asked.contains("About to remove the interrupted record of tool `send_email`"),
        "{asked}"
    );
    assert!(
        asked.contains("the turn's count of started actions is kept"),
        "{asked}"
    );
    assert!(
        asked.contains("check first whether the interrupted call took effect"),
        "{asked}"
    );
    assert!(!asked.contains("The tool has run"), "not known: {asked}");
    assert!(store.get("", &key).await.unwrap().is_some(), "not removed");
}

#[tokio::test]
async fn remove_deletes_the_keys_attempt_count_and_keeps_the_turns_count() {
    let dir = TempDir::new("states-counts");
    let db = dir.file("idem.db");
    let store = open(&db);
    let runs = AtomicU32::new(0);

    // A key claimed twice by callers that never finished: its second claim is live.
    let t = turn("turn-1", "").with_max_attempts_per_key(2);
    let (key, fingerprint) = key_of(&SEND, &t, "a@x");
    claim_key(
        &*store,
        "",
        "send_email",
        &key,
        &fingerprint,
        Duration::from_millis(10),
    )
    .await;
    tokio::time::sleep(Duration::from_millis(30)).await;
    claim_key(
        &*store,
        "",
        "send_email",
        &key,
        &fingerprint,
        Duration::from_secs(600),
    )
    .await;
    let shown = idem(&["--sqlite", &db, "show", &short(&key)]).expect_code(0);
    assert!(shown.stdout.contains("attempts     2 "), "{}", shown.stdout);
    let json = idem(&["--sqlite", &db, "--json", "remove", &short(&key), "-y"])
        .expect_code(0)
        .json();
    assert_eq!(
        (json["state"].as_str(), json["attempts_deleted"].as_u64()),
        (Some("in-progress"), Some(2))
    );
    // Two claims used the key's budget of two: kept, the count would refuse this call.
    call(&store, &SEND, &t, "a@x", &runs)
        .await
        .expect("the attempt count was deleted with the record");
    assert_eq!(runs.load(Ordering::SeqCst), 1);

    // A turn that may start two actions started both: removing one record gives none back.
    let capped = turn("turn-2", "").with_max_calls(2);
    call(&store, &SEND, &capped, "b@x", &runs).await.unwrap();
    call(&store, &SEND, &capped, "c@x", &runs).await.unwrap();
    let b = key_of(&SEND, &capped, "b@x").0;
    let removed = idem(&["--sqlite", &db, "remove", &short(&b), "--yes"]).expect_code(0);
    assert!(
        removed
            .stdout
            .contains("kept: the turn's count of started actions"),
        "{}",
        removed.stdout
    );
    let refused = call(&store, &SEND, &capped, "b@x", &runs).await;
    assert!(
        matches!(refused, Err(Error::TurnBudgetExhausted { .. })),
        "{refused:?}"
    );
    assert_eq!(runs.load(Ordering::SeqCst), 3, "b ran once, not again");
}

#[tokio::test]
async fn a_result_this_idem_cannot_read_is_unreadable_not_completed() {
    let dir = TempDir::new("states-unreadable");
    let db = dir.file("idem.db");
    let store = open(&db);
    let runs = AtomicU32::new(0);
    let t = turn("turn-1", "");
    call(&store, &SEND, &t, "a@x", &runs).await.unwrap();
    let key = key_of(&SEND, &t, "a@x").0;
    // What a future record format (version byte 0xff) would look like to this idem.
    let conn = rusqlite::Connection::open(&db).unwrap();
    conn.execute("UPDATE idem_records SET result = x'ff0102'", [])
        .unwrap();

    let listed = idem(&["--sqlite", &db, "list", "--state", "unreadable"]).expect_code(0);
    assert_eq!(listed_keys(&listed.stdout), [short(&key)]);
    let completed = idem(&["--sqlite", &db, "list", "--state", "completed"]).expect_code(0);
    assert_eq!(completed.stdout, "no live records match\n");
    let shown = idem(&["--sqlite", &db, "show", &short(&key)]).expect_code(0);
    assert!(
        shown.stdout.contains("state        unreadable\n"),
        "{}",
        shown.stdout
    );
    assert!(
        shown.stdout.contains("result\nhex:ff0102\n"),
        "{}",
        shown.stdout
    );
    let json = idem(&["--sqlite", &db, "--json", "show", &short(&key)])
        .expect_code(0)
        .json();
    assert_eq!(
        (json["state"].as_str(), json["result"].as_str()),
        (Some("unreadable"), Some("hex:ff0102"))
    );
    let removed = idem(&["--sqlite", &db, "remove", &short(&key), "--yes"]).expect_code(0);
    assert!(
        removed
            .stdout
            .contains("whether the tool ran is not known here"),
        "{}",
        removed.stdout
    );
}

/// `show` of a claim whose process is gone (it exited, or was killed, while its tool ran) says
/// so, and that the next call takes the key at once; not that a caller runs the tool and the
/// claim frees itself when its lease ends. Found by a review of the SQLite store.
#[cfg(target_os = "linux")]
#[tokio::test]
async fn show_says_when_the_process_that_claimed_a_key_is_gone() {
    use idem_tools_runtime::key::Fingerprint;
    use idem_tools_runtime::store::holder::Holder;
    let dir = TempDir::new("states-gone");
    let db = dir.file("idem.db");
    let store = open(&db);
    let key = Key::from_bytes([7; 32]);
    let fp = Fingerprint::from_bytes([1; 32]);
    claim_key(
        &*store,
        "",
        "send_email",
        &key,
        &fp,
        Duration::from_secs(600),
    )
    .await;
    // The claim's holder made a process that has exited: this one's identity, with the pid and
    // start time of a child that ran and was reaped.
    let mut child = std::process::Command::new("true")
        .spawn()
        .expect("spawn true");
    let stat = std::fs::read_to_string(format!("/proc/{}/stat", child.id())).expect("its stat");
    let start = stat[stat.rfind(')').expect("stat's command") + 1..]
        .split_whitespace()
        .nth(19)
        .expect("its start time")
        .to_owned();
    child.wait().expect("reaped");
    let me = Holder::this_process().expect("this process").encode();
    let mut parts: Vec<String> = me.split(':').map(str::to_owned).collect();
    parts[4] = child.id().to_string();
    parts[5] = start;
    let gone = parts.join(":");
    assert!(Holder::text_is_gone(Some(&gone)), "{gone}");
    rusqlite::Connection::open(&db)
        .expect("open")
        .execute("UPDATE idem_records SET holder = ?1", [&gone])
        .expect("the holder is gone");
    let shown = idem(&["--sqlite", &db, "show", &key.to_hex()]).expect_code(0);
    assert!(
        shown
            .stdout
            .contains("the process that claimed the key is gone")
            && shown.stdout.contains("claims it again at once"),
        "{}",
        shown.stdout
    );
    assert!(
        !shown.stdout.contains("a caller holds the claim"),
        "{}",
        shown.stdout
    );
}

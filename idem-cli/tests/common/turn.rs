//! The check of `idem turn` shared by the tests of every store.

use idem_tools_runtime::Key;

use super::{Prepared, assert_no_debug_text, idem, short, table_rows};

/// Checks `idem <store> turn turn-1` and `list --turn turn-1` on a store prepared by
/// [`every_state`] (its records in turn `turn-1` of namespace `""`, claimed in the order of
/// [`Prepared`]'s fields), plus `extra`, a record of another turn that must not be shown.
pub fn check_turn_view(store: &[&str], p: &Prepared, extra: &Key) {
    let run = |rest: &[&str]| {
        let args: Vec<&str> = store.iter().chain(rest).copied().collect();
        idem(&args)
    };
    let shown = run(&["turn", "turn-1"]).expect_code(0);
    assert_no_debug_text(&shown);
    assert!(
        shown.stderr.contains("gave its key back") && shown.stderr.contains("not listed"),
        "the table says what it cannot show: {}",
        shown.stderr
    );
    let table = table_rows(&shown.stdout);
    assert_eq!(
        table.first().map(|h| h.join(" ")).as_deref(),
        Some("KEY TOOL STATE OUTCOME ATTEMPTS CLAIMED EXPIRES"),
        "{}",
        shown.stdout
    );
    let rows = &table[1..];
    let expected = [
        (p.completed, "send_email", "completed", "ok", "0"),
        (p.failed, "refund", "completed", "err", "0"),
        (p.interrupted, "send_email", "completed", "interrupted", "0"),
        (
            p.unrecorded,
            "send_email",
            "completed",
            "not replayable",
            "0",
        ),
        (
            p.in_progress,
            "send_email",
            "in_progress",
            "in progress",
            "1",
        ),
    ];
    assert_eq!(rows.len(), expected.len(), "{}", shown.stdout);
    for (row, (key, tool, state, outcome, attempts)) in rows.iter().zip(expected) {
        let line = row.join(" ");
        assert_eq!(row[0], short(&key), "claim order: {}", shown.stdout);
        assert_eq!((row[1], row[2]), (tool, state), "{line}");
        assert!(line.contains(&format!(" {outcome} {attempts} ")), "{line}");
    }
    assert!(!shown.stdout.contains(&short(extra)), "{}", shown.stdout);
    let listed = run(&["--json", "list", "--turn", "turn-1"])
        .expect_code(0)
        .json();
    let items = listed.as_array().expect("an array");
    let keys: Vec<&str> = items.iter().filter_map(|i| i["key"].as_str()).collect();
    let hex: Vec<String> = expected.iter().map(|e| e.0.to_hex()).collect();
    assert_eq!(
        keys, hex,
        "list --turn: the same records, in the same order"
    );
    assert!(items.iter().all(|i| i["turn"] == "turn-1"), "{listed}");
    assert_eq!(items[1]["outcome"], "err", "{listed}");
    let none = run(&["turn", "no-such-turn"]).expect_code(0);
    assert!(
        none.stdout.contains("no live records of turn"),
        "{}",
        none.stdout
    );
    let elsewhere = run(&["--namespace", "tenant-9", "turn", "turn-1"]).expect_code(0);
    assert!(
        elsewhere.stdout.contains("no live records"),
        "another namespace: {}",
        elsewhere.stdout
    );
}

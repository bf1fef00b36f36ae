//! `idem bench` on a SQLite file: it measures idem and the floor, reports both as JSON, and
//! leaves the file as it found it (its records removed, the floor's table dropped), with
//! worker processes too; `--exact` makes the calls it is told to.
#![cfg(feature = "sqlite")]

mod common;

use common::{TempDir, idem, short_bench};

/// Rows of idem's records and tables of the file, after a run.
fn leftovers(db: &str) -> (i64, Vec<String>) {
    let conn = rusqlite::Connection::open(db).unwrap();
    let rows = conn
        .query_row("SELECT count(*) FROM idem_records", [], |row| row.get(0))
        .unwrap();
    let mut tables = conn
        .prepare("SELECT name FROM sqlite_master WHERE type = 'table' ORDER BY name")
        .unwrap();
    let tables = tables
        .query_map([], |row| row.get(0))
        .unwrap()
        .collect::<Result<Vec<String>, _>>()
        .unwrap();
    (rows, tables)
}

#[test]
fn bench_reports_idem_next_to_the_floor_and_cleans_up() {
    let dir = TempDir::new("bench-report");
    let db = dir.file("bench.db");
    short_bench(&["--sqlite", &db]);
    assert_eq!(
        leftovers(&db),
        (
            0,
            vec!["idem_budgets".to_owned(), "idem_records".to_owned()]
        ),
        "the run left records or a floor table behind"
    );
}

#[test]
fn exact_makes_the_calls_it_is_told_to_and_nothing_else() {
    let dir = TempDir::new("bench-exact");
    let db = dir.file("bench.db");
    idem(&["--sqlite", &db, "bench", "--exact", "first:25"]).expect_code(0);
    // First executions need nothing recorded before them: the 25 records, and nothing else.
    let (rows, tables) = leftovers(&db);
    assert_eq!(rows, 25, "{tables:?}");
    let run = idem(&["--sqlite", &db, "bench", "--exact", "sideways:3"]).expect_code(2);
    assert!(run.stderr.contains("KIND one of replay"), "{}", run.stderr);
}

/// On Redis (when `IDEM_REDIS_URL` names a server): the report says what the server ran per
/// call, and nothing of the run is left under its prefixes.
#[cfg(feature = "redis")]
#[test]
fn bench_on_redis_counts_the_servers_commands_and_cleans_up() {
    let Ok(url) = std::env::var("IDEM_REDIS_URL") else {
        assert!(
            std::env::var_os("IDEM_REQUIRE_REDIS").is_none(),
            "IDEM_REQUIRE_REDIS is set (as in CI) but IDEM_REDIS_URL is not"
        );
        eprintln!("SKIPPED bench_on_redis_…: IDEM_REDIS_URL is not set");
        return;
    };
    let run = idem(&[
        "--redis",
        &url,
        "--prefix",
        "idem-bench-test",
        "--json",
        "bench",
        "--calls",
        "20",
        "--seconds",
        "0.2",
        "--concurrency",
        "2",
    ])
    .expect_code(0);
    let report = run.json();
    let commands = &report["commands_per_call"];
    let names = |kind: &str, side: &str| -> Vec<String> {
        commands[kind][side]
            .as_array()
            .unwrap_or_else(|| panic!("no command counts: {report}"))
            .iter()
            .map(|pair| pair[0].as_str().unwrap_or_default().to_owned())
            .collect()
    };
    assert!(
        names("replay", "floor").contains(&"GET".to_owned()),
        "{report}"
    );
    assert!(
        names("replay", "idem").contains(&"EVALSHA".to_owned()),
        "{report}"
    );
    let client = redis::Client::open(url.as_str()).unwrap();
    let mut conn = client.get_connection().unwrap();
    // idem's records under the prefix, the floor's keys under `<prefix>-bench-floor:`.
    let left: Vec<String> = redis::cmd("KEYS")
        .arg("idem-bench-test*")
        .query(&mut conn)
        .unwrap();
    assert!(
        left.is_empty(),
        "{} keys left behind: {:?}",
        left.len(),
        left.first()
    );
}

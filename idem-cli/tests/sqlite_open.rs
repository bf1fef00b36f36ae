//! Opening SQLite files: missing, newer, foreign files and usage errors, each with its exit
//! code and advice.

mod common;

use common::{TempDir, idem};
use idem_tools_runtime::store::SqliteStore;

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

//! The `idem` binary against a real PostgreSQL server (`IDEM_POSTGRES_URL`, as
//! `scripts/postgres-test-server.sh run cargo test ...` provides), with records prepared by the
//! engine: `list`, `show`, `stats` and `remove`, in a schema of the test's own, and `bench`. Without a
//! server the tests print a skip notice, unless `IDEM_REQUIRE_POSTGRES` is set (as in CI).

mod common;

use std::sync::Arc;
use std::sync::atomic::{AtomicU32, Ordering};
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use common::{
    REFUND, SEND, call, check_turn_view, claim, every_state, idem, key_of, listed_keys,
    short_bench, turn,
};
use idem_tools_runtime::store::{PostgresStore, Store};

fn postgres_url(test: &str) -> Option<String> {
    match std::env::var("IDEM_POSTGRES_URL") {
        Ok(url) if !url.is_empty() => Some(url),
        _ => {
            assert!(
                std::env::var_os("IDEM_REQUIRE_POSTGRES").is_none(),
                "{test}: IDEM_REQUIRE_POSTGRES is set (as in CI) but IDEM_POSTGRES_URL is not"
            );
            eprintln!("SKIPPED {test}: IDEM_POSTGRES_URL is not set");
            None
        }
    }
}

fn unique_schema(tag: &str) -> String {
    let nanos = SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map_or(0, |d| d.as_nanos());
    format!("idem_cli_{tag}_{}_{nanos}", std::process::id())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn list_show_stats_and_remove_on_a_postgres_store() {
    let Some(url) = postgres_url("list_show_stats_and_remove_on_a_postgres_store") else {
        return;
    };
    let schema = unique_schema("all");
    // The CLI never creates tables: before the agents ran, there is nothing to open.
    let missing = idem(&["--postgres", &url, "--schema", &schema, "list"]).expect_code(2);
    assert!(
        missing.stderr.contains("no idem tables"),
        "{}",
        missing.stderr
    );

    let pg = PostgresStore::builder()
        .schema(&schema)
        .connect(&url)
        .await
        .expect("connect");
    let store: Arc<dyn Store> = Arc::new(pg.clone());
    let runs = AtomicU32::new(0);
    let t = turn("turn-1", "");
    call(&store, &SEND, &t, "a@x", &runs).await.unwrap();
    call(&store, &REFUND, &t, "b@x", &runs).await.unwrap();
    let (stuck, _) = claim(&*store, &SEND, &t, "c@x", Duration::from_secs(600)).await;
    let a = key_of(&SEND, &t, "a@x").0;

    let base = ["--postgres", url.as_str(), "--schema", schema.as_str()];
    let run = |extra: &[&str]| {
        let args: Vec<&str> = base.iter().copied().chain(extra.iter().copied()).collect();
        idem(&args)
    };
    let listed = run(&["list"]).expect_code(0);
    let mut keys = listed_keys(&listed.stdout);
    keys.sort();
    let mut expected = vec![
        a.short().to_hex(),
        key_of(&REFUND, &t, "b@x").0.short().to_hex(),
        stuck.short().to_hex(),
    ];
    expected.sort();
    assert_eq!(keys, expected, "{}", listed.stdout);

    let shown = run(&["show", &a.short().to_hex()]).expect_code(0);
    assert!(shown.stdout.contains(&a.to_hex()), "{}", shown.stdout);
    assert!(
        shown.stdout.contains("\"sent_to\": \"a@x\""),
        "{}",
        shown.stdout
    );

    let json = run(&["--json", "stats"]).expect_code(0).json();
    assert_eq!(json["by_state"]["total"], 3);
    assert_eq!(json["by_state"]["in-progress"], 1);

    // Removing the stuck claim frees the key for the engine at once.
    run(&["remove", &stuck.to_hex(), "--yes"]).expect_code(0);
    call(&store, &SEND, &t, "c@x", &runs)
        .await
        .expect("runs now");
    assert_eq!(runs.load(Ordering::SeqCst), 3);

    // --prefix is Redis's.
    let wrong = run(&["--prefix", "x", "list"]).expect_code(2);
    assert!(wrong.stderr.contains("--schema"), "{}", wrong.stderr);

    cleanup(&pg, &schema).await;
}

/// `idem turn` on PostgreSQL: the turn's records through its index, in claim order.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn turn_shows_a_turns_records_on_postgres() {
    let Some(url) = postgres_url("turn_shows_a_turns_records_on_postgres") else {
        return;
    };
    let schema = unique_schema("turn");
    let pg = PostgresStore::builder()
        .schema(&schema)
        .connect(&url)
        .await
        .expect("connect");
    let store: Arc<dyn Store> = Arc::new(pg.clone());
    let p = every_state(&store).await;
    let runs = AtomicU32::new(0);
    let other_turn = turn("turn-2", "");
    call(&store, &SEND, &other_turn, "done@x", &runs)
        .await
        .expect("another turn's call");
    let other = key_of(&SEND, &other_turn, "done@x").0;
    check_turn_view(&["--postgres", &url, "--schema", &schema], &p, &other);
    cleanup(&pg, &schema).await;
}

/// Removes the test's records (its schema stays on the throwaway server).
async fn cleanup(store: &PostgresStore, schema: &str) {
    for record in store.list(None, usize::MAX).await.expect("list") {
        store
            .remove(&record.namespace, &record.key)
            .await
            .expect("remove");
    }
    let _ = schema;
}

/// `idem bench` on PostgreSQL, with a worker process: idem and the floor side by side for
/// replays and first executions, idem's tables created in a fresh schema, and nothing of the
/// run left behind (no records, no floor table).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn bench_on_postgres_reports_idem_next_to_the_floor_and_cleans_up() {
    let Some(url) = postgres_url("bench_on_postgres_reports_idem_next_to_the_floor_and_cleans_up")
    else {
        return;
    };
    let schema = unique_schema("bench");
    let report = short_bench(&["--postgres", &url, "--schema", &schema]);
    assert!(
        report["store"]
            .as_str()
            .is_some_and(|s| s.starts_with("PostgreSQL")),
        "{report}"
    );
    assert!(
        report["floor"]
            .as_str()
            .is_some_and(|s| s.contains("ON CONFLICT")),
        "{report}"
    );

    // The bench created idem's tables in the schema; the run's records and both processes'
    // floor tables are gone.
    let store = PostgresStore::builder()
        .schema(&schema)
        .max_connections(1)
        .open_existing(&url)
        .await
        .expect("the bench created idem's tables");
    let rows: i64 = sqlx::query_scalar(&format!("SELECT count(*) FROM {}", store.records_table()))
        .fetch_one(store.pool())
        .await
        .expect("count");
    assert_eq!(rows, 0, "the run left records behind");
    let mut tables: Vec<String> = sqlx::query_scalar(
        "SELECT table_name::text FROM information_schema.tables WHERE table_schema = $1",
    )
    .bind(&schema)
    .fetch_all(store.pool())
    .await
    .expect("tables");
    tables.sort();
    assert_eq!(
        tables,
        ["idem_budgets", "idem_records", "idem_schema"],
        "the run left a floor table behind"
    );

    // Without a store, the bench names all three.
    let none = idem(&["bench"]).expect_code(2);
    for option in ["--sqlite PATH", "--redis URL", "--postgres URL"] {
        assert!(none.stderr.contains(option), "{}", none.stderr);
    }
}

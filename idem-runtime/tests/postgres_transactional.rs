//! Transactional calls on a real PostgreSQL server (`IDEM_POSTGRES_URL`): the claim, the
//! tool's rows and the recorded result commit together or not at all (the tool under test:
//! `postgres_common::ledger`).
#![cfg(feature = "postgres")]

mod postgres_common;

use std::sync::Arc;
use std::sync::atomic::{AtomicU32, Ordering};
use std::time::Duration;

use idem_tools_runtime::engine::transactional;
use idem_tools_runtime::key::ArgsDigest;
use idem_tools_runtime::store::{MemoryStore, PostgresStore, RecordState, Store};
use idem_tools_runtime::turn::{MAX_NAMESPACE_LEN, MAX_TURN_ID_LEN};
use idem_tools_runtime::{Call, Codec, Error, Outcome, ToolInfo, Turn};
use postgres_common::ledger::{
    call, create_ledger, insert, ledger, record_state, rows, setup, transfer,
};
use postgres_common::{Cut, Failure, cleanup, postgres_url, proxy, unique_schema};
use sqlx::postgres::PgConnectOptions;
use sqlx::{Connection, PgConnection};

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_first_call_commits_its_row_and_its_record_and_a_retry_replays() {
    let Some(store) = setup("tx_commit").await else {
        return;
    };
    let turn = Turn::new("turn-commit");
    let first = transfer(&store, &turn, "a").await.expect("runs");
    assert_eq!(rows(&store, "a").await, 1);
    assert_eq!(
        record_state(&store, &turn, "a").await,
        Some(RecordState::Completed)
    );
    let retry = transfer(&store, &turn, "a").await.expect("replays");
    assert_eq!(retry, first, "the retry gets the first result");
    assert_eq!(rows(&store, "a").await, 1, "the retry did not run the tool");
    assert_eq!(turn.stats().get(Outcome::Replayed), 1);
    cleanup(&store).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_err_rolls_back_the_rows_and_the_claim_and_a_retry_runs_afresh() {
    let Some(store) = setup("tx_err").await else {
        return;
    };
    let turn = Turn::new("turn-err");
    let shared: Arc<dyn Store> = Arc::new(store.clone());
    let table = ledger(&store);
    let failed = transactional::execute(
        call(&turn, &shared, "b"),
        Codec::ok_only(),
        async |conn: &mut PgConnection| -> Result<i64, Failure> {
            insert(conn, &table, "b").await?;
            Err(Failure::Tool("declined"))
        },
    )
    .await;
    assert!(matches!(failed, Err(Failure::Tool("declined"))));
    assert_eq!(rows(&store, "b").await, 0, "the row was rolled back");
    assert_eq!(
        record_state(&store, &turn, "b").await,
        None,
        "so was the claim"
    );
    transfer(&store, &turn, "b").await.expect("the retry runs");
    assert_eq!(rows(&store, "b").await, 1);
    cleanup(&store).await;
}

/// A tool with `cache_errors` whose `Err` would not replay as returned (two untagged variants
/// that serialize alike): its `Err` was recorded as a not-replayable marker, and the body's
/// rows committed with it, though the tool failed. It rolls back like every `Err`.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_err_that_would_not_replay_rolls_back_too() {
    #[derive(Debug, serde::Serialize, serde::Deserialize)]
    struct Declined {
        text: String,
    }
    #[derive(Debug, serde::Serialize, serde::Deserialize)]
    struct Refused {
        text: String,
    }
    /// Untagged: `Card` replays as `Idem`, a type of another name (the check refuses it).
    #[derive(Debug, serde::Serialize, serde::Deserialize)]
    #[serde(untagged)]
    enum Lossy {
        Idem(Refused),
        Card(Declined),
    }
    impl From<Error> for Lossy {
        fn from(error: Error) -> Self {
            Lossy::Idem(Refused {
                text: error.to_string(),
            })
        }
    }
    let Some(store) = setup("tx_lossy_err").await else {
        return;
    };
    let turn = Turn::new("turn-lossy-err");
    let shared: Arc<dyn Store> = Arc::new(store.clone());
    let table = ledger(&store);
    let failed = transactional::execute(
        call(&turn, &shared, "l"),
        Codec::ok_and_err(),
        async |conn: &mut PgConnection| -> Result<i64, Lossy> {
            insert(conn, &table, "l").await.expect("inserts");
            Err(Lossy::Card(Declined {
                text: "declined".to_owned(),
            }))
        },
    )
    .await;
    assert!(matches!(failed, Err(Lossy::Card(_))), "{failed:?}");
    assert_eq!(rows(&store, "l").await, 0, "the row was rolled back");
    assert_eq!(
        record_state(&store, &turn, "l").await,
        None,
        "so was the claim"
    );
    transfer(&store, &turn, "l").await.expect("the retry runs");
    assert_eq!(rows(&store, "l").await, 1);
    cleanup(&store).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_panic_rolls_back_and_the_connection_goes_back_clean() {
    let Some(url) = postgres_url("tx_panic") else {
        return;
    };
    // One connection: if it went back to the pool inside the rolled-back transaction, the
    // next call would run in it.
    let store = PostgresStore::builder()
        .schema(postgres_common::unique_schema("tx_panic"))
        .max_connections(1)
        .connect(&url)
        .await
        .expect("connect");
    create_ledger(&store).await;
    let turn = Turn::new("turn-panic");
    let shared: Arc<dyn Store> = Arc::new(store.clone());
    let table = ledger(&store);
    let (store2, turn2, table2) = (store.clone(), turn.clone(), table.clone());
    let panicked = tokio::spawn(async move {
        let shared: Arc<dyn Store> = Arc::new(store2.clone());
        transactional::execute(
            call(&turn2, &shared, "c"),
            Codec::ok_only(),
            async |conn: &mut PgConnection| -> Result<i64, Failure> {
                insert(conn, &table2, "c").await?;
                panic!("the tool panics after its write");
            },
        )
        .await
    })
    .await;
    assert!(panicked.is_err_and(|e| e.is_panic()));
    assert_eq!(turn.stats().get(Outcome::Panicked), 1);
    let in_tx: bool = sqlx::query_scalar("SELECT txid_current_if_assigned() IS NOT NULL")
        .fetch_one(store.pool())
        .await
        .expect("query");
    assert!(!in_tx, "the pooled connection is outside any transaction");
    assert_eq!(rows(&store, "c").await, 0);
    let again = transactional::execute(
        call(&turn, &shared, "c"),
        Codec::ok_only(),
        async |conn: &mut PgConnection| insert(conn, &table, "c").await,
    )
    .await;
    assert!(again.is_ok(), "the retry runs: {again:?}");
    assert_eq!(rows(&store, "c").await, 1);
    cleanup(&store).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_caller_that_times_out_mid_body_rolls_back_and_is_never_interrupted() {
    let Some(store) = setup("tx_timeout").await else {
        return;
    };
    let turn = Turn::new("turn-timeout");
    let shared: Arc<dyn Store> = Arc::new(store.clone());
    let table = ledger(&store);
    let wrote = AtomicU32::new(0);
    let cut = tokio::time::timeout(
        Duration::from_millis(300),
        transactional::execute(
            call(&turn, &shared, "d"),
            Codec::ok_only(),
            async |conn: &mut PgConnection| -> Result<i64, Failure> {
                let id = insert(conn, &table, "d").await?;
                wrote.fetch_add(1, Ordering::SeqCst);
                tokio::time::sleep(Duration::from_secs(30)).await;
                Ok(id)
            },
        ),
    )
    .await;
    assert!(cut.is_err(), "the caller gave up");
    assert_eq!(
        wrote.load(Ordering::SeqCst),
        1,
        "the body had written its row"
    );
    assert_eq!(turn.stats().get(Outcome::Cancelled), 1);
    assert_eq!(turn.stats().get(Outcome::Interrupted), 0);
    // The retry runs at once (the rollback frees the key; no lease to wait for) and is not
    // told "interrupted".
    let retry = tokio::time::timeout(Duration::from_secs(5), transfer(&store, &turn, "d"))
        .await
        .expect("the retry does not wait for a lease");
    assert!(retry.is_ok(), "{retry:?}");
    assert_eq!(
        rows(&store, "d").await,
        1,
        "one row: the cut-off attempt's rolled back"
    );
    cleanup(&store).await;
}

/// A caller that gives up while its body reads a `COPY … TO STDOUT` (a statement whose rows
/// `sqlx` does not count as an answer it still owes): the call rolls back, and the connection
/// does not go back to the pool with the rest of that answer unread — else every later query
/// on it would read the answer of the query before it.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_caller_that_gives_up_mid_copy_leaves_no_connection_answering_late() {
    let Some(url) = postgres_url("tx_copy_out") else {
        return;
    };
    // One connection: the next query runs on the one the call used.
    let store = PostgresStore::builder()
        .schema(unique_schema("tx_copy_out"))
        .max_connections(1)
        .connect(&url)
        .await
        .expect("connect");
    create_ledger(&store).await;
    let turn = Turn::new("turn-copy-out");
    let shared: Arc<dyn Store> = Arc::new(store.clone());
    let table = ledger(&store);
    let cut = tokio::time::timeout(
        Duration::from_millis(500),
        transactional::execute(
            call(&turn, &shared, "copy"),
            Codec::ok_only(),
            async |conn: &mut PgConnection| -> Result<i64, Failure> {
                let id = insert(conn, &table, "copy").await?;
                let _rows = conn
                    .copy_out_raw("COPY (SELECT g FROM generate_series(1, 1000) g) TO STDOUT")
                    .await?;
                std::future::pending::<()>().await;
                Ok(id)
            },
        ),
    )
    .await;
    assert!(cut.is_err(), "the caller gave up");
    // A statement the server refuses is refused (not answered by the tail of another answer).
    let refused = sqlx::raw_sql("SELECT 1 / 0").execute(store.pool()).await;
    assert!(refused.is_err(), "1 / 0 answered {refused:?}");
    for n in 1..=3_i64 {
        let answer = sqlx::query_scalar::<_, i64>(&format!("SELECT {n}::bigint"))
            .fetch_one(store.pool())
            .await;
        assert_eq!(answer.ok(), Some(n), "query {n} got its own answer");
    }
    assert_eq!(rows(&store, "copy").await, 0, "rolled back");
    transfer(&store, &turn, "copy")
        .await
        .expect("the retry runs");
    assert_eq!(rows(&store, "copy").await, 1);
    cleanup(&store).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_concurrent_duplicate_waits_for_the_transaction_and_replays_its_result() {
    let Some(store) = setup("tx_dup").await else {
        return;
    };
    let turn = Turn::new("turn-dup");
    let table = ledger(&store);
    // Two handles, as two processes: single-flight (per handle) does not join them, the
    // database does.
    let (a, b): (Arc<dyn Store>, Arc<dyn Store>) =
        (Arc::new(store.clone()), Arc::new(store.clone()));
    let started = tokio::sync::Notify::new();
    let holder = transactional::execute(
        call(&turn, &a, "e"),
        Codec::ok_only(),
        async |conn: &mut PgConnection| -> Result<i64, Failure> {
            let id = insert(conn, &table, "e").await?;
            started.notify_one();
            tokio::time::sleep(Duration::from_millis(500)).await;
            Ok(id)
        },
    );
    let duplicate = async {
        started.notified().await;
        transactional::execute(
            call(&turn, &b, "e"),
            Codec::ok_only(),
            async |conn: &mut PgConnection| insert(conn, &table, "e").await,
        )
        .await
    };
    let (first, second) = tokio::join!(holder, duplicate);
    let (first, second) = (first.expect("runs"), second.expect("replays"));
    assert_eq!(first, second, "the duplicate got the holder's result");
    assert_eq!(rows(&store, "e").await, 1);
    assert_eq!(turn.stats().get(Outcome::Replayed), 1);
    cleanup(&store).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_duplicate_waits_at_most_its_turns_in_flight_wait() {
    let Some(store) = setup("tx_wait").await else {
        return;
    };
    let turn = Turn::new("turn-wait").with_in_flight_wait(Duration::from_millis(200));
    let table = ledger(&store);
    let (a, b): (Arc<dyn Store>, Arc<dyn Store>) =
        (Arc::new(store.clone()), Arc::new(store.clone()));
    let started = tokio::sync::Notify::new();
    let holder = transactional::execute(
        call(&turn, &a, "f"),
        Codec::ok_only(),
        async |conn: &mut PgConnection| -> Result<i64, Failure> {
            let id = insert(conn, &table, "f").await?;
            started.notify_one();
            tokio::time::sleep(Duration::from_millis(1500)).await;
            Ok(id)
        },
    );
    let duplicate = async {
        started.notified().await;
        let at = std::time::Instant::now();
        let answer = transactional::execute(
            call(&turn, &b, "f"),
            Codec::ok_only(),
            async |conn: &mut PgConnection| insert(conn, &table, "f").await,
        )
        .await;
        (answer, at.elapsed())
    };
    let (first, (second, waited)) = tokio::join!(holder, duplicate);
    first.expect("the holder commits");
    assert!(
        matches!(second, Err(Failure::Idem(Error::InFlight { .. }))),
        "{second:?}"
    );
    assert!(waited < Duration::from_millis(1200), "waited {waited:?}");
    assert_eq!(rows(&store, "f").await, 1);
    cleanup(&store).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_tool_that_keeps_failing_exhausts_its_budget_though_each_attempt_rolls_back() {
    let Some(store) = setup("tx_budget").await else {
        return;
    };
    let turn = Turn::new("turn-budget").with_max_attempts_per_key(3);
    let shared: Arc<dyn Store> = Arc::new(store.clone());
    let table = ledger(&store);
    let ran = AtomicU32::new(0);
    let mut last = None;
    for _ in 0..5 {
        last = Some(
            transactional::execute(
                call(&turn, &shared, "g"),
                Codec::ok_only(),
                async |conn: &mut PgConnection| -> Result<i64, Failure> {
                    ran.fetch_add(1, Ordering::SeqCst);
                    insert(conn, &table, "g").await?;
                    Err(Failure::Tool("always"))
                },
            )
            .await,
        );
    }
    assert_eq!(
        ran.load(Ordering::SeqCst),
        3,
        "three attempts, then refused"
    );
    assert!(
        matches!(
            last,
            Some(Err(Failure::Idem(Error::BudgetExhausted {
                attempts: 3,
                ..
            })))
        ),
        "{last:?}"
    );
    assert_eq!(rows(&store, "g").await, 0);
    cleanup(&store).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_savepoint_inside_the_body_commits_nothing_on_its_own() {
    let Some(store) = setup("tx_savepoint").await else {
        return;
    };
    let turn = Turn::new("turn-savepoint");
    let shared: Arc<dyn Store> = Arc::new(store.clone());
    let table = ledger(&store);
    let failed = transactional::execute(
        call(&turn, &shared, "h"),
        Codec::ok_only(),
        async |conn: &mut PgConnection| -> Result<i64, Failure> {
            // Helper code that opens "its own" transaction gets a savepoint.
            let mut inner = conn.begin().await?;
            let id = insert(&mut inner, &table, "h").await?;
            inner.commit().await?;
            let _ = id;
            Err(Failure::Tool("after the helper committed"))
        },
    )
    .await;
    assert!(matches!(failed, Err(Failure::Tool(_))));
    assert_eq!(
        rows(&store, "h").await,
        0,
        "the helper's commit was a savepoint's"
    );
    cleanup(&store).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_connection_terminated_mid_body_rolls_back_and_a_retry_runs() {
    let Some(store) = setup("tx_terminate").await else {
        return;
    };
    let turn = Turn::new("turn-terminate");
    let shared: Arc<dyn Store> = Arc::new(store.clone());
    let table = ledger(&store);
    let killer = store.pool().clone();
    let failed = transactional::execute(
        call(&turn, &shared, "i"),
        Codec::ok_only(),
        async |conn: &mut PgConnection| -> Result<i64, Failure> {
            let id = insert(conn, &table, "i").await?;
            let pid: i32 = sqlx::query_scalar("SELECT pg_backend_pid()")
                .fetch_one(&mut *conn)
                .await?;
            sqlx::query("SELECT pg_terminate_backend($1)")
                .bind(pid)
                .execute(&killer)
                .await?;
            // The next statement finds the connection gone.
            sqlx::query("SELECT 1").execute(&mut *conn).await?;
            Ok(id)
        },
    )
    .await;
    assert!(matches!(failed, Err(Failure::Sql(_))), "{failed:?}");
    assert_eq!(rows(&store, "i").await, 0);
    assert_eq!(record_state(&store, &turn, "i").await, None);
    transfer(&store, &turn, "i").await.expect("the retry runs");
    assert_eq!(rows(&store, "i").await, 1);
    cleanup(&store).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_store_that_is_not_postgres_is_a_clear_error() {
    let turn = Turn::new("turn-memory");
    let memory: Arc<dyn Store> = Arc::new(MemoryStore::new());
    let answer = transactional::execute(
        call(&turn, &memory, "j"),
        Codec::ok_only(),
        async |_: &mut PgConnection| -> Result<i64, Failure> { Ok(1) },
    )
    .await;
    match answer {
        Err(Failure::Idem(Error::Config(message))) => {
            assert!(message.contains("PostgresStore"), "{message}");
        }
        other => panic!("expected a configuration error, got {other:?}"),
    }
}

/// The future of a transactional call is `Send` when its body's is: it can be spawned.
#[allow(dead_code)]
fn the_call_is_send(store: PostgresStore, turn: Turn) {
    fn spawnable<F: std::future::Future + Send + 'static>(_: F) {}
    spawnable(async move { transfer(&store, &turn, "k").await });
}

/// A store on `url`'s database reached through a proxy that cuts the next `COMMIT`.
async fn cut_store(url: &str, schema: &str, cut: Cut) -> PostgresStore {
    let (options, _) = proxy(url, Some(cut)).await;
    let pool = sqlx::postgres::PgPoolOptions::new()
        .max_connections(2)
        .connect_lazy_with(options);
    PostgresStore::builder()
        .schema(schema)
        .from_pool(pool)
        .await
        .expect("open through the proxy")
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_commit_whose_answer_is_lost_is_replayed_by_the_retry() {
    let Some(store) = setup("tx_lost_commit").await else {
        return;
    };
    let url = postgres_url("tx_lost_commit").expect("set");
    let schema = store.schema().expect("a schema").to_owned();
    let cut = cut_store(&url, &schema, Cut::AfterCommit).await;
    let turn = Turn::new("turn-lost-commit");
    let unknown = transfer(&cut, &turn, "l").await;
    assert!(
        matches!(&unknown, Err(Failure::Idem(Error::CommitFailed { .. }))),
        "the caller is told the outcome is unknown, not Ok: {unknown:?}"
    );
    assert_eq!(rows(&store, "l").await, 1, "the transaction did commit");
    let retry = transfer(&store, &turn, "l")
        .await
        .expect("the retry replays");
    let id: i64 = sqlx::query_scalar(&format!(
        "SELECT id FROM {} WHERE memo = 'l'",
        ledger(&store)
    ))
    .fetch_one(store.pool())
    .await
    .expect("read");
    assert_eq!(retry, id, "the replayed result is the committed row's");
    assert_eq!(rows(&store, "l").await, 1, "exactly once");
    assert_eq!(turn.stats().get(Outcome::Replayed), 1);
    cleanup(&store).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_commit_that_never_arrived_is_run_afresh_by_the_retry() {
    let Some(store) = setup("tx_no_commit").await else {
        return;
    };
    let url = postgres_url("tx_no_commit").expect("set");
    let schema = store.schema().expect("a schema").to_owned();
    let cut = cut_store(&url, &schema, Cut::BeforeCommit).await;
    let turn = Turn::new("turn-no-commit");
    let unknown = transfer(&cut, &turn, "m").await;
    assert!(
        matches!(&unknown, Err(Failure::Idem(Error::CommitFailed { .. }))),
        "{unknown:?}"
    );
    // The server rolls back once it notices the client is gone.
    let mut waited = Duration::ZERO;
    while record_state(&store, &turn, "m").await.is_some() && waited < Duration::from_secs(5) {
        tokio::time::sleep(Duration::from_millis(50)).await;
        waited += Duration::from_millis(50);
    }
    assert_eq!(rows(&store, "m").await, 0, "nothing committed");
    transfer(&store, &turn, "m").await.expect("the retry runs");
    assert_eq!(rows(&store, "m").await, 1, "exactly once");
    cleanup(&store).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_namespace_with_quotes_and_backslashes_is_a_literal() {
    let Some(store) = setup("tx_literal").await else {
        return;
    };
    // The claim and the record spell the namespace as a literal in SQL text.
    let turn = Turn::new("turn-literal").with_namespace(r"o'brien\'; DROP TABLE x; --");
    let first = transfer(&store, &turn, "n").await.expect("runs");
    assert_eq!(transfer(&store, &turn, "n").await.expect("replays"), first);
    assert_eq!(rows(&store, "n").await, 1);
    assert_eq!(
        record_state(&store, &turn, "n").await,
        Some(RecordState::Completed)
    );
    cleanup(&store).await;
}

/// Pieces of SQL and of text that an escaper could get wrong, assembled by
/// [`hostile_strings`].
const PIECES: &[&str] = &[
    "'",
    "\\",
    "''",
    "\\'",
    "$$",
    "$1",
    "$tag$",
    ";",
    "--",
    "/*",
    "*/",
    "E'",
    "U&'",
    "\n",
    "\r",
    "\t",
    "é",
    "🦀",
    "\u{202e}",
    "\u{feff}",
    "%",
    "_",
    "{",
    "}",
    ":",
    "\"",
    "x",
    " ",
    "\\x27",
    "\\u0027",
    "); DROP TABLE x; --",
    "' OR '1'='1",
];

/// `n` strings of up to 12 pieces each (from a fixed seed), the empty string and one of
/// `longest` bytes, of pieces in no order (it does not compress: a repeated one fit in an index
/// row where a varied one of its length did not).
fn hostile_strings(n: usize, mut seed: u64, longest: usize) -> Vec<String> {
    let mut next = move || {
        seed ^= seed << 13;
        seed ^= seed >> 7;
        seed ^= seed << 17;
        seed
    };
    let mut long = String::new();
    loop {
        let piece = PIECES[(next() % PIECES.len() as u64) as usize];
        if long.len() + piece.len() > longest {
            break;
        }
        long.push_str(piece);
    }
    long.extend(std::iter::repeat_n('x', longest - long.len()));
    let mut out = vec![String::new(), long];
    for _ in 0..n {
        let len = next() % 13;
        out.push(
            (0..len)
                .map(|_| PIECES[(next() % PIECES.len() as u64) as usize])
                .collect(),
        );
    }
    out
}

/// Namespaces and turn ids come from callers (an MCP client's headers): every one of them, the
/// transactional claim and record spell as literals, and they mean themselves.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn hostile_namespaces_and_turn_ids_are_literals() {
    let Some(store) = setup("tx_hostile").await else {
        return;
    };
    hostile_literals(&store).await;
    cleanup(&store).await;
}

/// A tool whose name holds what an escaper could get wrong.
static ODD_TOOL: ToolInfo = ToolInfo::idempotent("o'brien\\'s $$tool$$ E'\\x27' 🦀");

/// The same literals on a server whose DBA set `backslash_quote = off` (a quote written `\'`
/// is refused: every transactional call with a quote in its namespace failed at `BEGIN`) and
/// `standard_conforming_strings = off` (backslashes in plain literals are escapes), and a tool
/// name of such pieces too.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn literals_mean_themselves_under_every_quoting_setting() {
    let Some(url) = postgres_url("tx_quoting") else {
        return;
    };
    let options = url.parse::<PgConnectOptions>().expect("a URL").options([
        ("backslash_quote", "off"),
        ("standard_conforming_strings", "off"),
    ]);
    let pool = sqlx::postgres::PgPoolOptions::new()
        .max_connections(4)
        .connect_lazy_with(options);
    let store = PostgresStore::builder()
        .schema(unique_schema("tx_quoting"))
        .from_pool(pool)
        .await
        .expect("opens");
    let setting: String = sqlx::query_scalar("SHOW backslash_quote")
        .fetch_one(store.pool())
        .await
        .expect("show");
    assert_eq!(setting, "off");
    create_ledger(&store).await;
    hostile_literals(&store).await;
    // A tool whose name is hostile too.
    let shared: Arc<dyn Store> = Arc::new(store.clone());
    let table = ledger(&store);
    let turn = Turn::new("o'brien\\' $$ 🦀").with_namespace("it''s \\\\ $q$");
    let odd = async || {
        let mut args = ArgsDigest::new(ODD_TOOL.name);
        args.arg("memo", "odd").expect("a string encodes");
        let (key, fingerprint) = args.finish(turn.namespace(), turn.id(), ODD_TOOL.name, 1);
        let call = Call::new(&ODD_TOOL, &turn, key, fingerprint).with_store(&shared);
        transactional::execute(call, Codec::ok_only(), async |conn: &mut PgConnection| {
            insert(conn, &table, "odd").await
        })
        .await
    };
    let first = odd().await.expect("runs");
    assert_eq!(odd().await.expect("replays"), first);
    assert_eq!(rows(&store, "odd").await, 1);
    let records = store
        .list_turn(turn.namespace(), turn.id(), 10)
        .await
        .expect("list");
    assert!(
        records.len() == 1 && records[0].tool == ODD_TOOL.name,
        "{records:?}"
    );
    cleanup(&store).await;
}

/// Every hostile namespace and turn id, each in a transactional call that runs once and
/// replays.
async fn hostile_literals(store: &PostgresStore) {
    let store = store.clone();
    let (namespaces, turns) = (
        hostile_strings(40, 0x9e37_79b9, MAX_NAMESPACE_LEN),
        hostile_strings(40, 0x85eb_ca6b, MAX_TURN_ID_LEN),
    );
    for (i, (namespace, id)) in namespaces.iter().zip(&turns).enumerate() {
        let turn = Turn::new(id.as_str()).with_namespace(namespace.as_str());
        let memo = format!("hostile-{i}");
        // (The long string shown by its start.)
        let case = format!(
            "case {i}: namespace {:?}, turn {:?}",
            namespace.chars().take(60).collect::<String>(),
            id.chars().take(60).collect::<String>()
        );
        let first = transfer(&store, &turn, &memo)
            .await
            .unwrap_or_else(|e| panic!("{case}: {e:?}"));
        let again = transfer(&store, &turn, &memo).await.expect("replays");
        assert_eq!(again, first, "{case}");
        assert_eq!(rows(&store, &memo).await, 1, "{case}");
        let shared: Arc<dyn Store> = Arc::new(store.clone());
        let key = call(&turn, &shared, &memo).key();
        let record = store
            .get(namespace, &key)
            .await
            .expect("get")
            .unwrap_or_else(|| panic!("{case}: no record"));
        assert_eq!(record.state, RecordState::Completed, "{case}");
        assert!(
            &record.namespace == namespace && &record.turn == id,
            "{case}"
        );
    }
    // PostgreSQL text cannot hold a NUL: refused, nothing written.
    let turn = Turn::new("turn-nul").with_namespace("a\0b");
    assert!(transfer(&store, &turn, "nul").await.is_err());
    assert_eq!(rows(&store, "nul").await, 0);
    // Longer than a store keeps: refused before the store, as on every store.
    let turn = Turn::new("x".repeat(MAX_TURN_ID_LEN + 1));
    assert!(matches!(
        transfer(&store, &turn, "long").await,
        Err(Failure::Idem(Error::Config(_)))
    ));
    assert_eq!(rows(&store, "long").await, 0);
}

/// The longest in-flight wait (what `Duration::MAX` is taken as) is a lock timeout PostgreSQL
/// takes: a longer one (25 days) failed every transactional call.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_longest_in_flight_wait_is_a_lock_timeout_postgres_takes() {
    let Some(store) = setup("tx_longest_wait").await else {
        return;
    };
    let turn = Turn::new("turn-longest-wait").with_in_flight_wait(Duration::MAX);
    let first = transfer(&store, &turn, "w").await.expect("runs");
    assert_eq!(transfer(&store, &turn, "w").await.expect("replays"), first);
    assert_eq!(rows(&store, "w").await, 1);
    cleanup(&store).await;
}

/// A transactional call polled on a runtime until its body has written, then dropped on a
/// thread outside any runtime (kept past the `block_on` that polled it): no panic, the
/// transaction rolls back, and a retry runs afresh.
#[test]
fn a_call_dropped_outside_its_runtime_rolls_back_without_a_panic() {
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .expect("a runtime");
    let Some(store) = runtime.block_on(setup("tx_dropped_outside")) else {
        return;
    };
    let turn = Turn::new("turn-dropped-outside");
    let shared: Arc<dyn Store> = Arc::new(store.clone());
    let table = ledger(&store);
    let wrote = AtomicU32::new(0);
    let mut cut = Box::pin(transactional::execute(
        call(&turn, &shared, "e"),
        Codec::ok_only(),
        async |conn: &mut PgConnection| -> Result<i64, Failure> {
            let id = insert(conn, &table, "e").await?;
            wrote.fetch_add(1, Ordering::SeqCst);
            tokio::time::sleep(Duration::from_secs(30)).await;
            Ok(id)
        },
    ));
    runtime.block_on(async {
        let waited = tokio::time::timeout(
            Duration::from_millis(300),
            std::future::poll_fn(|cx| cut.as_mut().poll(cx)),
        )
        .await;
        assert!(waited.is_err(), "the body was still running");
    });
    assert_eq!(
        wrote.load(Ordering::SeqCst),
        1,
        "the body had written its row"
    );
    let dropped = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| drop(cut)));
    assert!(
        dropped.is_ok(),
        "dropping the call outside a runtime panicked"
    );
    runtime.block_on(async {
        let retry = tokio::time::timeout(Duration::from_secs(5), transfer(&store, &turn, "e"))
            .await
            .expect("the retry does not wait for a lease");
        assert!(retry.is_ok(), "{retry:?}");
        assert_eq!(
            rows(&store, "e").await,
            1,
            "one row: the dropped attempt's rolled back"
        );
        cleanup(&store).await;
    });
}

/// The server process of the connection a body runs on.
async fn backend(conn: &mut PgConnection) -> Result<i32, Failure> {
    Ok(sqlx::query_scalar("SELECT pg_backend_pid()")
        .fetch_one(&mut *conn)
        .await?)
}

/// A store of one connection, in a schema of its own, with the ledger.
async fn pool_of_one(url: &str, tag: &str) -> PostgresStore {
    let store = PostgresStore::builder()
        .schema(unique_schema(tag))
        .max_connections(1)
        .connect(url)
        .await
        .expect("connect");
    create_ledger(&store).await;
    store
}

/// Calls that return (`Ok` or `Err`) give their connection back to the pool: on a pool of one,
/// fifty of them run on one server process. A body that panics, a caller that gives up and a
/// body that overruns its lease close it (the next call runs on a new one).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn calls_that_return_keep_their_connection_and_cut_off_ones_close_it() {
    let Some(url) = postgres_url("tx_pooled") else {
        return;
    };
    let store = pool_of_one(&url, "tx_pooled").await;
    let turn = Turn::new("turn-pooled");
    let shared: Arc<dyn Store> = Arc::new(store.clone());
    let table = ledger(&store);
    let pids = std::sync::Mutex::new(std::collections::BTreeSet::new());
    for n in 0..50 {
        let memo = format!("p{n}");
        let fails = n % 2 == 1;
        // A turn each: a turn's budget allows a handful of calls of a tool.
        let turn = Turn::new(format!("turn-pooled-{n}"));
        let answer = transactional::execute(
            call(&turn, &shared, &memo),
            Codec::ok_only(),
            async |conn: &mut PgConnection| -> Result<i64, Failure> {
                let pid = backend(conn).await?;
                pids.lock().unwrap().insert(pid);
                let id = insert(conn, &table, &memo).await?;
                if fails {
                    return Err(Failure::Tool("declined"));
                }
                Ok(id)
            },
        )
        .await;
        assert_eq!(answer.is_ok(), !fails, "{memo}: {answer:?}");
    }
    let pids = pids.into_inner().unwrap();
    assert_eq!(pids.len(), 1, "one connection for fifty calls: {pids:?}");
    let first = *pids.iter().next().unwrap();
    let next_pid = async || -> i32 {
        sqlx::query_scalar("SELECT pg_backend_pid()")
            .fetch_one(store.pool())
            .await
            .expect("a query")
    };
    assert_eq!(next_pid().await, first, "still pooled");

    // Cut off by its caller: closed.
    let cut = tokio::time::timeout(
        Duration::from_millis(300),
        transactional::execute(
            call(&turn, &shared, "cut"),
            Codec::ok_only(),
            async |conn: &mut PgConnection| -> Result<i64, Failure> {
                insert(conn, &table, "cut").await?;
                std::future::pending().await
            },
        ),
    )
    .await;
    assert!(cut.is_err());
    let after_cut = next_pid().await;
    assert_ne!(after_cut, first, "the cut-off call's connection was closed");

    // Overran its lease: closed.
    let overran = transactional::execute(
        call(&turn, &shared, "overrun").with_lease(Duration::from_millis(300)),
        Codec::ok_only(),
        async |conn: &mut PgConnection| -> Result<i64, Failure> {
            insert(conn, &table, "overrun").await?;
            std::future::pending().await
        },
    )
    .await;
    assert!(
        matches!(overran, Err(Failure::Idem(Error::LeaseLost { .. }))),
        "{overran:?}"
    );
    let after_overrun = next_pid().await;
    assert_ne!(
        after_overrun, after_cut,
        "the overrun call's connection was closed"
    );

    // Panicked: closed.
    let (store2, turn2, table2) = (store.clone(), turn.clone(), table.clone());
    let panicked = tokio::spawn(async move {
        let shared: Arc<dyn Store> = Arc::new(store2);
        transactional::execute(
            call(&turn2, &shared, "panics"),
            Codec::ok_only(),
            async |conn: &mut PgConnection| -> Result<i64, Failure> {
                insert(conn, &table2, "panics").await?;
                panic!("the tool panics");
            },
        )
        .await
    })
    .await;
    assert!(panicked.is_err_and(|e| e.is_panic()));
    assert_ne!(
        next_pid().await,
        after_overrun,
        "the panicked call's connection was closed"
    );
    assert_eq!(rows(&store, "cut").await + rows(&store, "overrun").await, 0);
    assert_eq!(rows(&store, "panics").await, 0);
    cleanup(&store).await;
}

/// On a pool of one, a call whose caller gives up mid-body closes the pool's only connection:
/// the next call gets a new one at once, every time.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_pool_of_one_serves_the_next_call_at_once_after_a_caller_gives_up() {
    let Some(url) = postgres_url("tx_one_cut") else {
        return;
    };
    let store = pool_of_one(&url, "tx_one_cut").await;
    let turn = Turn::new("turn-one-cut");
    let shared: Arc<dyn Store> = Arc::new(store.clone());
    let table = ledger(&store);
    for n in 0..5 {
        let memo = format!("c{n}");
        let cut = tokio::time::timeout(
            Duration::from_millis(200),
            transactional::execute(
                call(&turn, &shared, &memo),
                Codec::ok_only(),
                async |conn: &mut PgConnection| -> Result<i64, Failure> {
                    insert(conn, &table, &memo).await?;
                    std::future::pending().await
                },
            ),
        )
        .await;
        assert!(cut.is_err(), "the caller gave up");
        let started = tokio::time::Instant::now();
        let next = transfer(&store, &turn, &memo).await;
        let took = started.elapsed();
        assert!(next.is_ok(), "{memo}: {next:?}");
        assert!(took < Duration::from_secs(1), "{memo}: took {took:?}");
        assert_eq!(rows(&store, &memo).await, 1);
    }
    cleanup(&store).await;
}

/// A body that drops a `COPY … TO STDOUT` midway and then returns: the call does not say its
/// result was committed unless it was, an `Err` rolls back, and the pool's only connection
/// answers each later query with its own answer.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_body_that_drops_a_copy_midway_and_returns_leaves_no_connection_answering_late() {
    let Some(url) = postgres_url("tx_copy_dropped") else {
        return;
    };
    let store = pool_of_one(&url, "tx_copy_dropped").await;
    let turn = Turn::new("turn-copy-dropped");
    let shared: Arc<dyn Store> = Arc::new(store.clone());
    let table = ledger(&store);
    for (memo, fails) in [("copy-ok", false), ("copy-err", true)] {
        let answer = transactional::execute(
            call(&turn, &shared, memo),
            Codec::ok_only(),
            async |conn: &mut PgConnection| -> Result<i64, Failure> {
                let id = insert(conn, &table, memo).await?;
                // Begun (its first answer read), then dropped with its rows unread.
                let copy = conn
                    .copy_out_raw("COPY (SELECT g FROM generate_series(1, 1000) g) TO STDOUT")
                    .await?;
                drop(copy);
                if fails {
                    return Err(Failure::Tool("declined"));
                }
                Ok(id)
            },
        )
        .await;
        let refused = sqlx::raw_sql("SELECT 1 / 0").execute(store.pool()).await;
        assert!(refused.is_err(), "{memo}: 1 / 0 answered {refused:?}");
        for n in 1..=3_i64 {
            let got = sqlx::query_scalar::<_, i64>(&format!("SELECT {n}::bigint"))
                .fetch_one(store.pool())
                .await;
            assert_eq!(got.ok(), Some(n), "{memo}: query {n} got its own answer");
        }
        if fails {
            assert!(matches!(answer, Err(Failure::Tool(_))), "{answer:?}");
            assert_eq!(rows(&store, memo).await, 0, "rolled back");
        } else if answer.is_ok() {
            assert_eq!(rows(&store, memo).await, 1, "told Ok: committed");
        } else {
            assert!(
                matches!(answer, Err(Failure::Idem(Error::CommitFailed { .. }))),
                "{answer:?}"
            );
        }
        let retry = transfer(&store, &turn, memo).await;
        assert!(
            retry.is_ok(),
            "{memo}: the retry replays or runs: {retry:?}"
        );
        assert_eq!(rows(&store, memo).await, 1, "{memo}: exactly once");
    }
    cleanup(&store).await;
}

/// A call whose pool keeps a connection open (`min_connections`: closing one spawns the pool's
/// refill on the runtime), dropped mid-body outside its runtime, and one dropped as its runtime
/// shuts down: the connection is closed (the call rolls back) without a panic.
#[test]
fn a_call_closing_its_connection_as_its_runtime_goes_away_does_not_panic() {
    let Some(url) = postgres_url("tx_closed_outside") else {
        return;
    };
    let schema = unique_schema("tx_closed_outside");
    let runtime = || {
        tokio::runtime::Builder::new_multi_thread()
            .worker_threads(2)
            .enable_all()
            .build()
            .expect("a runtime")
    };
    let connect = async |url: &str, schema: &str| {
        let pool = sqlx::postgres::PgPoolOptions::new()
            .min_connections(1)
            .max_connections(2)
            .connect(url)
            .await
            .expect("a pool");
        PostgresStore::builder()
            .schema(schema)
            .from_pool(pool)
            .await
            .expect("a store")
    };
    // Dropped outside its runtime, which goes on.
    let first = runtime();
    let store = first.block_on(connect(&url, &schema));
    first.block_on(create_ledger(&store));
    let turn = Turn::new("turn-closed-outside");
    let shared: Arc<dyn Store> = Arc::new(store.clone());
    let table = ledger(&store);
    let mut cut = Box::pin(transactional::execute(
        call(&turn, &shared, "o"),
        Codec::ok_only(),
        async |conn: &mut PgConnection| -> Result<i64, Failure> {
            insert(conn, &table, "o").await?;
            std::future::pending().await
        },
    ));
    first.block_on(async {
        let waited = tokio::time::timeout(
            Duration::from_millis(300),
            std::future::poll_fn(|cx| cut.as_mut().poll(cx)),
        )
        .await;
        assert!(waited.is_err(), "the body was still running");
    });
    let dropped = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| drop(cut)));
    assert!(
        dropped.is_ok(),
        "dropping the call outside its runtime panicked"
    );
    first.block_on(async {
        assert_eq!(rows(&store, "o").await, 0, "rolled back");
    });

    // Dropped as its runtime shuts down (a task of it), and after it did (kept by the caller).
    let second = runtime();
    let store = second.block_on(connect(&url, &schema));
    let shared: Arc<dyn Store> = Arc::new(store.clone());
    let (turn2, table2, shared2) = (turn.clone(), table.clone(), shared.clone());
    let task = second.spawn(async move {
        transactional::execute(
            call(&turn2, &shared2, "s"),
            Codec::ok_only(),
            async |conn: &mut PgConnection| -> Result<i64, Failure> {
                insert(conn, &table2, "s").await?;
                std::future::pending().await
            },
        )
        .await
    });
    let mut kept = Box::pin(transactional::execute(
        call(&turn, &shared, "k"),
        Codec::ok_only(),
        async |conn: &mut PgConnection| -> Result<i64, Failure> {
            insert(conn, &table, "k").await?;
            std::future::pending().await
        },
    ));
    second.block_on(async {
        let waited = tokio::time::timeout(
            Duration::from_millis(300),
            std::future::poll_fn(|cx| kept.as_mut().poll(cx)),
        )
        .await;
        assert!(waited.is_err(), "the body was still running");
    });
    let shut = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| drop(second)));
    assert!(shut.is_ok(), "shutting the runtime down panicked");
    drop(task);
    let dropped = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| drop(kept)));
    assert!(
        dropped.is_ok(),
        "dropping the call after its runtime shut down panicked"
    );
    drop((store, shared));

    first.block_on(async {
        let store = connect(&url, &schema).await;
        for memo in ["s", "k"] {
            assert_eq!(rows(&store, memo).await, 0, "{memo}: rolled back");
        }
        cleanup(&store).await;
    });
}

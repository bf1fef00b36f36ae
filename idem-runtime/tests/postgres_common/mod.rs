//! Helpers shared by the PostgreSQL tests.
//!
//! The PostgreSQL tests run when `IDEM_POSTGRES_URL` names a server
//! (`postgres://user@127.0.0.1:PORT/database`); `scripts/postgres-test-server.sh run …` starts a
//! throwaway one and sets it (CI does). Without it each test prints a skip notice and passes,
//! unless `IDEM_REQUIRE_POSTGRES` is set (CI sets it), when it fails. Each test keeps its tables
//! in a schema of its own, dropped at the end, so tests share one server. Tests that restart
//! a server start their own with the same script.
#![allow(dead_code)]

pub mod ledger;

use std::path::PathBuf;
use std::process::Command;
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{SystemTime, UNIX_EPOCH};

use idem_tools_runtime::store::PostgresStore;

/// The shared test server's URL, or `None` (after a skip notice) when `IDEM_POSTGRES_URL` is
/// unset.
pub fn postgres_url(test: &str) -> Option<String> {
    match std::env::var("IDEM_POSTGRES_URL") {
        Ok(url) if !url.is_empty() => Some(url),
        _ => {
            assert!(
                std::env::var_os("IDEM_REQUIRE_POSTGRES").is_none(),
                "{test}: IDEM_REQUIRE_POSTGRES is set (as in CI) but IDEM_POSTGRES_URL is not"
            );
            eprintln!(
                "SKIPPED {test}: IDEM_POSTGRES_URL is not set; run the tests under \
                 scripts/postgres-test-server.sh run cargo test ... to run the PostgreSQL tests"
            );
            None
        }
    }
}

/// A schema name no other test run uses.
pub fn unique_schema(tag: &str) -> String {
    static COUNTER: AtomicU64 = AtomicU64::new(0);
    let nanos = SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map_or(0, |d| d.as_nanos());
    let n = COUNTER.fetch_add(1, Ordering::Relaxed);
    format!("idem_test_{tag}_{}_{nanos}_{n}", std::process::id())
}

/// A store in a fresh schema of `url`'s database.
pub async fn store(url: &str, tag: &str) -> PostgresStore {
    PostgresStore::builder()
        .schema(unique_schema(tag))
        .connect(url)
        .await
        .expect("the test server is reachable")
}

/// Drops the store's schema and everything in it.
pub async fn cleanup(store: &PostgresStore) {
    if let Some(schema) = store.schema() {
        sqlx::query(&format!("DROP SCHEMA IF EXISTS \"{schema}\" CASCADE"))
            .execute(store.pool())
            .await
            .expect("drop the test schema");
    }
}

/// `scripts/postgres-test-server.sh`.
pub fn server_script() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../scripts/postgres-test-server.sh")
}

/// A server of the test's own (it may be restarted or stopped), stopped when dropped.
pub struct OwnServer {
    pub url: String,
    pub dir: String,
}

impl OwnServer {
    /// Starts one with the script.
    pub fn start() -> OwnServer {
        let out = Command::new("bash")
            .arg(server_script())
            .arg("start")
            .output()
            .expect("run the server script");
        assert!(
            out.status.success(),
            "the server script failed: {}",
            String::from_utf8_lossy(&out.stderr)
        );
        let text = String::from_utf8_lossy(&out.stdout);
        let value = |name: &str| {
            text.lines()
                .find_map(|l| l.strip_prefix(&format!("export {name}=")))
                .map(str::to_owned)
                .unwrap_or_else(|| panic!("no {name} in {text}"))
        };
        OwnServer {
            url: value("IDEM_POSTGRES_URL"),
            dir: value("IDEM_POSTGRES_DIR"),
        }
    }

    /// Freezes it (SIGSTOP): connections stay open, nothing answers, what is sent is kept.
    #[allow(dead_code)] // not every test binary freezes one
    pub fn freeze(&self) {
        self.script("freeze");
    }

    /// Thaws it (SIGCONT): what was sent while it was frozen runs now.
    #[allow(dead_code)] // not every test binary freezes one
    pub fn thaw(&self) {
        self.script("thaw");
    }

    /// Runs the server script's `command` on it.
    fn script(&self, command: &str) {
        let status = Command::new("bash")
            .arg(server_script())
            .arg(command)
            .arg(&self.dir)
            .status()
            .expect("run the server script");
        assert!(status.success(), "the server script's {command} failed");
    }

    /// Restarts it (connections are cut; data and port stay).
    pub fn restart(&self) {
        let status = Command::new("bash")
            .arg(server_script())
            .arg("restart")
            .arg(&self.dir)
            .status()
            .expect("run the server script");
        assert!(status.success(), "the server did not restart");
    }
}

impl Drop for OwnServer {
    fn drop(&mut self) {
        let _ = Command::new("bash")
            .arg(server_script())
            .arg("stop")
            .arg(&self.dir)
            .status();
    }
}

/// The error of the test tools: idem's, the database's, or the tool's own.
#[derive(Debug)]
pub enum Failure {
    Idem(idem_tools_runtime::Error),
    Sql(#[allow(dead_code)] sqlx::Error),
    Tool(&'static str),
}

impl From<idem_tools_runtime::Error> for Failure {
    fn from(e: idem_tools_runtime::Error) -> Self {
        Failure::Idem(e)
    }
}

impl From<sqlx::Error> for Failure {
    fn from(e: sqlx::Error) -> Self {
        Failure::Sql(e)
    }
}

/// What a [`proxy`] does to the first `COMMIT` it sees.
#[derive(Clone, Copy, PartialEq, Eq)]
pub enum Cut {
    /// Forward it, let the server commit, then drop the connection before the answer.
    AfterCommit,
    /// Drop the connection instead of forwarding it.
    BeforeCommit,
}

/// A TCP proxy in front of the server at `url`: it counts round trips (each time the client
/// sends after the server last spoke, or first, is one) and, with `cut`, cuts the connection
/// around the first `COMMIT` it sees. Returns the connect options through it and the counter.
pub async fn proxy(
    url: &str,
    cut: Option<Cut>,
) -> (sqlx::postgres::PgConnectOptions, Arc<AtomicU64>) {
    use std::sync::atomic::AtomicBool;
    use tokio::io::{AsyncReadExt, AsyncWriteExt};
    let options: sqlx::postgres::PgConnectOptions = url.parse().expect("a URL");
    let server = tokio::net::lookup_host((options.get_host(), options.get_port()))
        .await
        .expect("resolve")
        .next()
        .expect("an address");
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0")
        .await
        .expect("bind");
    let port = listener.local_addr().expect("address").port();
    let trips = Arc::new(AtomicU64::new(0));
    let counter = Arc::clone(&trips);
    let armed = Arc::new(AtomicBool::new(cut.is_some()));
    tokio::spawn(async move {
        while let Ok((client, _)) = listener.accept().await {
            let Ok(upstream) = tokio::net::TcpStream::connect(server).await else {
                continue;
            };
            let _ = client.set_nodelay(true);
            let _ = upstream.set_nodelay(true);
            let (mut client_rx, mut client_tx) = client.into_split();
            let (mut server_rx, mut server_tx) = upstream.into_split();
            // Whether the client spoke last; whether the connection is being cut.
            let client_last = Arc::new(AtomicBool::new(false));
            let cutting = Arc::new(AtomicBool::new(false));
            let (trips, last, armed, cutting_up) = (
                Arc::clone(&counter),
                Arc::clone(&client_last),
                Arc::clone(&armed),
                Arc::clone(&cutting),
            );
            tokio::spawn(async move {
                let mut buf = vec![0u8; 1 << 16];
                while let Ok(n @ 1..) = client_rx.read(&mut buf).await {
                    if !last.swap(true, Ordering::SeqCst) {
                        trips.fetch_add(1, Ordering::SeqCst);
                    }
                    let chunk = &buf[..n];
                    let commit = chunk.windows(6).any(|w| w == b"COMMIT");
                    if commit && armed.swap(false, Ordering::SeqCst) {
                        cutting_up.store(true, Ordering::SeqCst);
                        if cut == Some(Cut::AfterCommit) {
                            let _ = server_tx.write_all(chunk).await;
                            tokio::time::sleep(std::time::Duration::from_millis(300)).await;
                        }
                        return; // drops both halves it holds: the client sees EOF
                    }
                    if server_tx.write_all(chunk).await.is_err() {
                        return;
                    }
                }
            });
            tokio::spawn(async move {
                let mut buf = vec![0u8; 1 << 16];
                while let Ok(n @ 1..) = server_rx.read(&mut buf).await {
                    if cutting.load(Ordering::SeqCst) {
                        return; // the answer to COMMIT never reaches the client
                    }
                    client_last.store(false, Ordering::SeqCst);
                    if client_tx.write_all(&buf[..n]).await.is_err() {
                        return;
                    }
                }
            });
        }
    });
    (options.host("127.0.0.1").port(port), trips)
}

//! Helpers shared by the PostgreSQL tests.
//!
//! The PostgreSQL tests run when `IDEM_POSTGRES_URL` names a server
//! (`postgres://user@127.0.0.1:PORT/database`); `scripts/postgres-test-server.sh run …` starts a
//! throwaway one and sets it (CI does). Without it each test prints a skip notice and passes,
//! unless `IDEM_REQUIRE_POSTGRES` is set (CI sets it), when it fails. Each test keeps its tables
//! in a schema of its own, dropped at the end, so tests share one server. Tests that restart
//! a server start their own with the same script.
#![allow(dead_code)]

use std::path::PathBuf;
use std::process::Command;
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

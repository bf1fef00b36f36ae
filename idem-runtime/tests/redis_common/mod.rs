//! Helpers shared by the Redis tests.
//!
//! The Redis tests run when `IDEM_REDIS_URL` names a server (`redis://127.0.0.1:PORT`); CI sets
//! it whenever it runs `--all-features` (see `scripts/redis-test-server.sh`). Without it each
//! test prints a skip notice and passes, unless `IDEM_REQUIRE_REDIS` is set (CI sets it), when it
//! fails. Tests that kill and restart a server start their own
//! `redis-server` (from `IDEM_REDIS_SERVER`, else `PATH`) on a free loopback port, so they never
//! disturb the shared one.
#![allow(dead_code)]

use std::io::{Read, Write};
use std::net::{TcpListener, TcpStream};
use std::path::PathBuf;
use std::process::{Child, Command, Stdio};
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

use idem_tools_runtime::Key;
use idem_tools_runtime::key::Fingerprint;

/// The shared test server's URL, or `None` (after a skip notice) when `IDEM_REDIS_URL` is unset.
pub fn redis_url(test: &str) -> Option<String> {
    match std::env::var("IDEM_REDIS_URL") {
        Ok(url) if !url.is_empty() => Some(url),
        _ => {
            assert!(
                std::env::var_os("IDEM_REQUIRE_REDIS").is_none(),
                "{test}: IDEM_REQUIRE_REDIS is set (as in CI) but IDEM_REDIS_URL is not"
            );
            eprintln!(
                "SKIPPED {test}: IDEM_REDIS_URL is not set; run scripts/redis-test-server.sh \
                 or export IDEM_REDIS_URL=redis://127.0.0.1:PORT to run the Redis tests"
            );
            None
        }
    }
}

/// The seed URLs of the test cluster (`IDEM_REDIS_CLUSTER_URLS`, comma-separated, as
/// `scripts/redis-cluster.sh` exports it), or `None` (after a skip notice) when unset.
pub fn cluster_urls(test: &str) -> Option<Vec<String>> {
    match std::env::var("IDEM_REDIS_CLUSTER_URLS") {
        Ok(urls) if !urls.is_empty() => Some(urls.split(',').map(str::to_owned).collect()),
        _ => {
            assert!(
                std::env::var_os("IDEM_REQUIRE_REDIS").is_none(),
                "{test}: IDEM_REQUIRE_REDIS is set (as in CI) but IDEM_REDIS_CLUSTER_URLS is not; \
                 run the tests under scripts/redis-cluster.sh"
            );
            eprintln!(
                "SKIPPED {test}: IDEM_REDIS_CLUSTER_URLS is not set; run \
                 scripts/redis-cluster.sh run cargo test ... to run the Redis Cluster tests"
            );
            None
        }
    }
}

/// Deletes every key under `prefix` on each node of a cluster, one key at a time (a multi-key
/// `DEL` would cross slots).
pub async fn cleanup_cluster(urls: &[String], prefix: &str) {
    for url in urls {
        let mut conn = raw(url).await;
        let mut cursor: u64 = 0;
        loop {
            let (next, keys): (u64, Vec<String>) = redis::cmd("SCAN")
                .arg(cursor)
                .arg("MATCH")
                .arg(format!("{prefix}:*"))
                .arg("COUNT")
                .arg(1000)
                .query_async(&mut conn)
                .await
                .expect("SCAN");
            for key in keys {
                let _: u64 = redis::cmd("DEL")
                    .arg(&key)
                    .query_async(&mut conn)
                    .await
                    .expect("DEL");
            }
            if next == 0 {
                break;
            }
            cursor = next;
        }
    }
}

/// A prefix no other test run uses, so tests can share one server.
pub fn unique_prefix(tag: &str) -> String {
    static COUNTER: AtomicU64 = AtomicU64::new(0);
    let nanos = SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map_or(0, |d| d.as_nanos());
    let n = COUNTER.fetch_add(1, Ordering::Relaxed);
    format!("idem-test:{tag}:{}-{nanos}-{n}", std::process::id())
}

/// A key and fingerprint derived from a label.
pub fn key(label: &str) -> Key {
    Key::from_bytes(*blake3::hash(label.as_bytes()).as_bytes())
}

/// A fingerprint derived from a label.
pub fn fingerprint(label: &str) -> Fingerprint {
    Fingerprint::from_bytes(*blake3::hash(format!("fp:{label}").as_bytes()).as_bytes())
}

/// A raw connection for poking at the server.
pub async fn raw(url: &str) -> redis::aio::MultiplexedConnection {
    redis::Client::open(url)
        .expect("valid URL")
        .get_multiplexed_async_connection()
        .await
        .expect("the test server is reachable")
}

/// Deletes every key under `prefix`.
pub async fn cleanup(url: &str, prefix: &str) {
    let mut conn = raw(url).await;
    let mut cursor: u64 = 0;
    loop {
        let (next, keys): (u64, Vec<String>) = redis::cmd("SCAN")
            .arg(cursor)
            .arg("MATCH")
            .arg(format!("{prefix}:*"))
            .arg("COUNT")
            .arg(1000)
            .query_async(&mut conn)
            .await
            .expect("SCAN");
        if !keys.is_empty() {
            let _: u64 = redis::cmd("DEL")
                .arg(&keys)
                .query_async(&mut conn)
                .await
                .expect("DEL");
        }
        if next == 0 {
            break;
        }
        cursor = next;
    }
}

/// A `redis-server` of this test's own on a free loopback port, killed on drop.
pub struct PrivateServer {
    child: Option<Child>,
    port: u16,
    dir: PathBuf,
    persistent: bool,
    extra: Vec<String>,
}

impl PrivateServer {
    /// Starts a server. `persistent`: append-only file fsynced on every write (`appendfsync
    /// always`) in a fresh directory, so acknowledged writes survive `SIGKILL`.
    pub fn start(persistent: bool) -> PrivateServer {
        Self::start_with(persistent, &[])
    }

    /// Starts a server with extra command-line arguments (`--enable-debug-command yes`, ...).
    pub fn start_with(persistent: bool, extra: &[&str]) -> PrivateServer {
        let port = TcpListener::bind("127.0.0.1:0")
            .and_then(|l| l.local_addr())
            .expect("a free loopback port")
            .port();
        let dir = std::env::temp_dir().join(format!(
            "idem-redis-{}-{port}-{}",
            std::process::id(),
            SystemTime::now()
                .duration_since(UNIX_EPOCH)
                .map_or(0, |d| d.as_nanos())
        ));
        std::fs::create_dir_all(&dir).expect("a temporary directory");
        let mut server = PrivateServer {
            child: None,
            port,
            dir,
            persistent,
            extra: extra.iter().map(|a| (*a).to_owned()).collect(),
        };
        server.spawn();
        server
    }

    /// `redis://127.0.0.1:PORT`.
    pub fn url(&self) -> String {
        format!("redis://127.0.0.1:{}", self.port)
    }

    fn spawn(&mut self) {
        let binary = std::env::var("IDEM_REDIS_SERVER").unwrap_or_else(|_| "redis-server".into());
        let mut command = Command::new(&binary);
        command
            .arg("--port")
            .arg(self.port.to_string())
            .args(["--bind", "127.0.0.1", "--save", "", "--daemonize", "no"])
            .arg("--dir")
            .arg(&self.dir);
        if self.persistent {
            command.args(["--appendonly", "yes", "--appendfsync", "always"]);
        } else {
            command.args(["--appendonly", "no"]);
        }
        command.args(&self.extra);
        let child = command
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn()
            .unwrap_or_else(|e| {
                panic!(
                    "could not start `{binary}` ({e}): install it (apt-get install -y \
                     redis-server) or point IDEM_REDIS_SERVER at the binary"
                )
            });
        self.child = Some(child);
        self.wait_ready();
    }

    fn wait_ready(&self) {
        let deadline = Instant::now() + Duration::from_secs(10);
        while Instant::now() < deadline {
            if let Ok(mut stream) = TcpStream::connect(("127.0.0.1", self.port)) {
                let _ = stream.set_read_timeout(Some(Duration::from_millis(500)));
                let mut reply = [0u8; 7];
                if stream.write_all(b"PING\r\n").is_ok()
                    && stream.read_exact(&mut reply).is_ok()
                    && &reply == b"+PONG\r\n"
                {
                    return;
                }
            }
            std::thread::sleep(Duration::from_millis(20));
        }
        panic!("redis-server on port {} did not come up", self.port);
    }

    /// Kills the server with `SIGKILL` (no chance to save anything).
    pub fn kill(&mut self) {
        if let Some(mut child) = self.child.take() {
            let _ = child.kill();
            let _ = child.wait();
        }
    }

    /// Starts the server again on the same port and directory.
    pub fn restart(&mut self) {
        self.kill();
        self.spawn();
    }
}

impl Drop for PrivateServer {
    fn drop(&mut self) {
        self.kill();
        let _ = std::fs::remove_dir_all(&self.dir);
    }
}

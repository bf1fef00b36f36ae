//! Durable turns across real processes: an agent loop in a child process, killed with SIGKILL
//! at random instants and restarted on the same turn ids, on SQLite and on PostgreSQL.
//!
//! The child runs turn after turn of a generic agent loop on `Conversation` (`agent.rs`): a
//! scripted model whose wording depends on a seed drawn by each process asks to charge one to
//! three accounts, with memos it rewords every time it is asked; `charge` has the memo in its
//! key, as in issue #28, so a restarted run that asked the model again would charge under a new
//! key. The parent kills the child at a random instant, probes the store, and starts another on
//! the first unfinished turn (and the one before it, as an orchestrator that missed its
//! acknowledgement), until it has killed it `IDEM_DURABLE_KILLS` times (default 200); then one
//! last child runs every turn from the first without kills. The checks (`check.rs`): no
//! logical action charged under two keys (re-executions of one key, the documented crash
//! window, are deduplicated downstream by the key they carry and counted apart); no model
//! request for a step recorded before it was sent; every turn finished, with the answer a run
//! without kills gives. `IDEM_DURABLE_SELF_TEST` runs the same loop asking the model directly:
//! the checks must find duplicates.
#![cfg(all(feature = "sqlite", unix))]

mod agent;
mod check;
#[cfg(feature = "postgres")]
#[path = "../postgres_common/mod.rs"]
mod postgres_common;

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::process::ExitStatus;
use std::sync::Arc;
use std::time::{Duration, Instant};

use idem_test_support::{Kid, TempDir};
use idem_tools_runtime::store::{MemoryStore, SqliteStore, Store};
use idem_tools_runtime::{Error, Turn};
use rand::Rng;

use agent::{IN_FLIGHT_WAIT, Logs, Model, append, run_turn, turn_id};
use check::{Found, check, probe};

const CHILD_ENV: &str = "IDEM_DURABLE_CHILD";

/// Where the turns are recorded.
#[derive(Clone, Debug)]
enum Backend {
    Sqlite(PathBuf),
    #[cfg_attr(not(feature = "postgres"), allow(dead_code))]
    Postgres {
        url: String,
        schema: String,
    },
}

impl Backend {
    fn env(&self) -> Vec<(&'static str, String)> {
        match self {
            Backend::Sqlite(db) => vec![("IDEM_DURABLE_SQLITE", db.display().to_string())],
            Backend::Postgres { url, schema } => vec![
                ("IDEM_DURABLE_PG_URL", url.clone()),
                ("IDEM_DURABLE_PG_SCHEMA", schema.clone()),
            ],
        }
    }

    fn from_env() -> Backend {
        match std::env::var("IDEM_DURABLE_SQLITE") {
            Ok(db) => Backend::Sqlite(PathBuf::from(db)),
            Err(_) => Backend::Postgres {
                url: std::env::var("IDEM_DURABLE_PG_URL").expect("a URL"),
                schema: std::env::var("IDEM_DURABLE_PG_SCHEMA").expect("a schema"),
            },
        }
    }

    async fn open(&self) -> Arc<dyn Store> {
        match self {
            Backend::Sqlite(db) => Arc::new(SqliteStore::open(db).expect("open the file")),
            #[cfg(feature = "postgres")]
            Backend::Postgres { url, schema } => Arc::new(
                idem_tools_runtime::store::PostgresStore::builder()
                    .schema(schema.clone())
                    .max_connections(2)
                    .connect(url)
                    .await
                    .expect("connect"),
            ),
            #[cfg(not(feature = "postgres"))]
            Backend::Postgres { .. } => unreachable!("built without postgres"),
        }
    }
}

/// A turn as every run starts it: its store, a restarted run's wait, and a per-key budget no
/// kill loop exhausts (every kill while a key is claimed counts one attempt). Without
/// recording (the self-test), every restart charges a reworded memo as a new action, which the
/// tool's cap of actions (5 by default) would stop for good: the self-test lifts it to count
/// the duplicates it lets through.
fn turn(n: u32, store: &Arc<dyn Store>, recorded: bool) -> Turn {
    let turn = Turn::new(turn_id(n))
        .with_store(Arc::clone(store))
        .with_in_flight_wait(IN_FLIGHT_WAIT)
        .with_max_attempts_per_key(1_000_000);
    if recorded {
        turn
    } else {
        turn.with_actions_per_tool(1_000_000)
    }
}

/// The child: runs turns `IDEM_DURABLE_FROM..IDEM_DURABLE_UNTIL` (forever without an end),
/// each until it finishes, saying where it is on stdout. Does nothing unless run by a parent.
#[test]
fn child() {
    let Ok(dir) = std::env::var(CHILD_ENV) else {
        return;
    };
    let var = |name: &str| std::env::var(name).ok().and_then(|v| v.parse::<u32>().ok());
    let (from, until) = (
        var("IDEM_DURABLE_FROM").unwrap_or(0),
        var("IDEM_DURABLE_UNTIL"),
    );
    let recorded = std::env::var_os("IDEM_DURABLE_SELF_TEST").is_none();
    let logs = Logs::in_dir(Path::new(&dir));
    let model = Model {
        seed: rand::random(),
        requests: logs.requests.clone(),
    };
    // After libtest's `test child ... `, which has no newline.
    println!();
    let runtime = tokio::runtime::Runtime::new().expect("a runtime");
    runtime.block_on(async {
        let store = Backend::from_env().open().await;
        println!("ready");
        let at = |place: &str| println!("at {place}");
        for n in from..until.unwrap_or(u32::MAX) {
            append(&logs.requests, &format!("start {n} {}", std::process::id()));
            loop {
                match run_turn(&turn(n, &store, recorded), n, &model, &logs, recorded, &at).await {
                    Ok(answer) => {
                        let pid = std::process::id();
                        append(&logs.finals, &format!("final {n} {pid} {answer}"));
                        break;
                    }
                    Err(error @ Error::ModelStepDiverged { .. }) => {
                        println!("diverged {n} {error}");
                        std::process::exit(3);
                    }
                    // Restarted from the top in this process, as an orchestrator would.
                    Err(error) => {
                        println!("retry {n} {}", format!("{error:?}").replace('\n', " "));
                        tokio::time::sleep(Duration::from_millis(20)).await;
                    }
                }
            }
        }
    });
}

/// A child process running the agent, and where it says it is.
struct Agent {
    kid: Kid,
    /// The last place it said it was.
    at: String,
    retries: Vec<String>,
}

impl Agent {
    fn spawn(
        backend: &Backend,
        dir: &Path,
        from: u32,
        until: Option<u32>,
        recorded: bool,
    ) -> Agent {
        let mut env = backend.env();
        env.push((CHILD_ENV, dir.display().to_string()));
        env.push(("IDEM_DURABLE_FROM", from.to_string()));
        if let Some(until) = until {
            env.push(("IDEM_DURABLE_UNTIL", until.to_string()));
        }
        if !recorded {
            env.push(("IDEM_DURABLE_SELF_TEST", "1".to_owned()));
        }
        Agent {
            kid: Kid::spawn("child", env, Duration::from_secs(600)),
            at: "startup".to_owned(),
            retries: Vec::new(),
        }
    }

    /// Reads a line of what it says, waiting at most `wait`.
    fn read(&mut self, wait: Duration) -> Option<String> {
        let line = self.kid.try_line(wait)?;
        if let Some(at) = line.strip_prefix("at ") {
            self.at = at.split(' ').next().unwrap_or_default().to_owned();
        } else if line.ends_with("ready") {
            self.at = "ready".to_owned();
        } else if line.starts_with("retry ") || line.starts_with("diverged ") {
            self.retries.push(line.clone());
        }
        Some(line)
    }

    fn drain(&mut self) {
        while self.read(Duration::ZERO).is_some() {}
    }

    /// Waits until it has opened its store.
    fn wait_ready(&mut self) {
        let deadline = Instant::now() + Duration::from_secs(60);
        while self.at == "startup" {
            assert!(Instant::now() < deadline, "the child never got ready");
            if let Some(status) = self.kid.exited() {
                panic!("the child exited before it was ready: {status}");
            }
            self.read(Duration::from_millis(50));
        }
    }

    /// SIGKILL; where it was. It must still be running.
    fn kill(&mut self) -> String {
        self.drain();
        if let Some(status) = self.kid.exited() {
            self.drain();
            panic!("the child ended on its own ({status}): {:?}", self.retries);
        }
        self.kid.kill();
        self.at.clone()
    }

    /// Waits for it to end on its own.
    fn finish(&mut self, timeout: Duration) -> ExitStatus {
        let deadline = Instant::now() + timeout;
        loop {
            self.drain();
            if let Some(status) = self.kid.exited() {
                self.drain();
                return status;
            }
            assert!(Instant::now() < deadline, "the last run did not finish");
            self.read(Duration::from_millis(20));
        }
    }
}

/// The turns with a final answer, and the highest turn started.
fn progress(logs: &Logs) -> (std::collections::BTreeSet<u32>, Option<u32>) {
    let read = |file: &Path, what: &str| -> Vec<u32> {
        std::fs::read_to_string(file)
            .unwrap_or_default()
            .lines()
            .filter_map(|line| {
                let mut words = line.split(' ');
                (words.next() == Some(what))
                    .then(|| words.next()?.parse().ok())
                    .flatten()
            })
            .collect()
    };
    let finished = read(&logs.finals, "final").into_iter().collect();
    (finished, read(&logs.requests, "start").into_iter().max())
}

/// The answers of turns `0..turns` in one run without kills (in this process, on a memory
/// store, with a seed of its own).
fn reference(turns: u32, dir: &TempDir) -> Vec<String> {
    let logs = Logs::in_dir(&dir.path("reference"));
    std::fs::create_dir_all(dir.path("reference")).expect("a directory");
    let model = Model {
        seed: rand::random(),
        requests: logs.requests.clone(),
    };
    let runtime = tokio::runtime::Runtime::new().expect("a runtime");
    runtime.block_on(async {
        let store: Arc<dyn Store> = Arc::new(MemoryStore::new());
        let mut answers = Vec::new();
        for n in 0..turns {
            let answer = run_turn(&turn(n, &store, true), n, &model, &logs, true, &|_| {}).await;
            answers.push(answer.expect("a run without kills finishes"));
        }
        answers
    })
}

/// Kills the agent `kills` times at random instants, restarting it each time, then lets one
/// last run finish every turn; returns the figures line and what the checks found.
fn chaos(name: &str, backend: &Backend, recorded: bool, kills: usize) -> (String, Found) {
    let dir = TempDir::new(&format!("durable-{name}"));
    let logs = Logs::in_dir(&dir.0);
    let runtime = tokio::runtime::Runtime::new().expect("a runtime");
    let store = runtime.block_on(backend.open());
    let started = Instant::now();
    let mut rng = rand::rng();
    let mut kills_at: BTreeMap<String, usize> = BTreeMap::new();
    let mut retries = Vec::new();
    for _ in 0..kills {
        let (finished, _) = progress(&logs);
        let first_unfinished = (0..).find(|n| !finished.contains(n)).unwrap_or(0);
        let from = first_unfinished.saturating_sub(1);
        let mut agent = Agent::spawn(backend, &dir.0, from, None, recorded);
        // One kill in ten while the child starts; the others once it has opened its store.
        if rng.random_bool(0.9) {
            agent.wait_ready();
            std::thread::sleep(Duration::from_micros(rng.random_range(0..400_000)));
        } else {
            std::thread::sleep(Duration::from_micros(rng.random_range(0..30_000)));
        }
        *kills_at.entry(agent.kill()).or_default() += 1;
        retries.append(&mut agent.retries);
        runtime.block_on(probe(&store, &logs));
    }
    let chaos_seconds = started.elapsed().as_secs_f64();
    let (_, last_started) = progress(&logs);
    let turns = last_started.map_or(0, |n| n + 1);
    let mut last = Agent::spawn(backend, &dir.0, 0, Some(turns), recorded);
    let status = last.finish(Duration::from_secs(600));
    retries.append(&mut last.retries);
    assert!(
        status.success(),
        "the last run failed ({status}): {retries:?}"
    );
    let reference = reference(turns, &dir);
    let found = runtime.block_on(check(&store, &logs, &reference));
    let divergences = retries.iter().filter(|r| r.starts_with("diverged")).count();
    let at = |place: &str| kills_at.get(place).copied().unwrap_or(0);
    let line = format!(
        "fault-suite durable-{name}: kills={kills} (startup={} ready={} model={} charge={}) \
         seconds={chaos_seconds:.0} turns={turns} requests={} re_requests={} \
         requests_for_recorded_steps={} executions={} charges={} actions={} duplicates={} \
         missing={} finals={} unfinished={} wrong_finals={} retries={} divergences={divergences} \
         probe_misses={}",
        at("startup"),
        at("ready"),
        at("model"),
        at("charge"),
        found.requests,
        found.re_requests,
        found.requests_for_recorded,
        found.executions,
        found.charges,
        found.actions,
        found.duplicates,
        found.missing,
        found.finals,
        found.unfinished,
        found.wrong_finals,
        retries.len() - divergences,
        found.probe_misses,
    );
    println!("{line}");
    for example in &found.examples {
        println!("  {example}");
    }
    for retry in retries.iter().take(5) {
        println!("  {retry}");
    }
    (line, found)
}

/// How many kills: `IDEM_DURABLE_KILLS`, else 200.
fn kills() -> usize {
    std::env::var("IDEM_DURABLE_KILLS")
        .ok()
        .and_then(|k| k.parse().ok())
        .unwrap_or(200)
}

/// The checks every recorded run must pass.
fn assert_clean(found: &Found, line: &str) {
    assert_eq!(
        (
            found.duplicates,
            found.requests_for_recorded,
            found.unfinished,
            found.wrong_finals,
            found.missing,
            found.probe_misses,
        ),
        (0, 0, 0, 0, 0, 0),
        "{line}\n{:#?}",
        found.examples
    );
    assert!(
        found.finals > 0 && found.charges > 0,
        "the run did something: {line}"
    );
}

#[test]
fn durable_turns_survive_kills_on_sqlite() {
    if std::env::var_os(CHILD_ENV).is_some() {
        return;
    }
    let dir = TempDir::new("durable-sqlite-db");
    let (line, found) = chaos("sqlite", &Backend::Sqlite(dir.db()), true, kills());
    assert_clean(&found, &line);
}

#[cfg(feature = "postgres")]
#[test]
fn durable_turns_survive_kills_on_postgres() {
    if std::env::var_os(CHILD_ENV).is_some() {
        return;
    }
    let Some(url) = postgres_common::postgres_url("durable_turns_survive_kills_on_postgres") else {
        return;
    };
    let schema = postgres_common::unique_schema("durable");
    let backend = Backend::Postgres { url, schema };
    let (line, found) = chaos("postgres", &backend, true, kills());
    assert_clean(&found, &line);
}

/// The checks can fail: the same agent loop asking the model directly (nothing recorded) is
/// killed until a restarted run has charged a reworded memo under a new key.
#[test]
fn durable_self_test_without_recording_charges_twice() {
    if std::env::var_os(CHILD_ENV).is_some() {
        return;
    }
    let dir = TempDir::new("durable-unrecorded-db");
    let (line, found) = chaos(
        "self-test-unrecorded",
        &Backend::Sqlite(dir.db()),
        false,
        20,
    );
    assert!(
        found.duplicates > 0 && found.requests_for_recorded > 0,
        "the checks found no duplicate without recording: {line}"
    );
}

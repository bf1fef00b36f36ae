//! What `idem bench` measures on a store: idem's calls (an `#[idempotent]` tool's, through the
//! engine) and the floor's, on the same arguments.

use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Duration;

use idem_tools_runtime::engine::{Call, Codec, execute};
use idem_tools_runtime::key::{ArgsDigest, Fingerprint, Key};
use idem_tools_runtime::{Store, ToolInfo, Turn};
use serde::Serialize;

use super::floor::{Floor, TTL};
use crate::args::Cli;
use crate::error::CliError;

/// The tool measured: a body that returns at once, so only idem and the store are timed.
static TOOL: ToolInfo = ToolInfo::idempotent("idem_bench").with_ttl(TTL);

/// The measured tool's arguments: a 20-character string, a number (a fresh key per call) and
/// three short strings, as in the criterion benches.
#[derive(Serialize)]
pub struct Args<'a> {
    to: &'a str,
    /// Which call of the run these are.
    pub n: u64,
    subject: &'static str,
    lang: &'static str,
    priority: &'static str,
}

/// What the tool returns (and the floor records): 19 bytes as idem records it.
#[derive(Serialize, serde::Deserialize)]
struct Receipt {
    id: u64,
    len: u64,
}

/// A store opened for benchmarking, its floor, and the arguments of every call.
pub struct Target {
    /// What was opened, for the report.
    pub label: String,
    /// What the floor is, for the report.
    pub floor_label: &'static str,
    pub store: Arc<dyn Store>,
    pub floor: Box<dyn Floor>,
    turn: Turn,
    /// Distinguishes this run's (and this process's) arguments from every other's: the
    /// first argument of every call.
    run: String,
    next: AtomicU64,
    /// Counts the server's commands (Redis), if it lets us.
    pub commands: Option<super::stats::CommandStats>,
}

/// A unique name for this run: the process id and the time.
pub fn run_id() -> String {
    let nanos = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| d.as_nanos());
    format!("{:x}{:x}", std::process::id(), nanos % (1 << 48))
}

/// The id of the turn of run `run`.
fn turn_id(run: &str) -> String {
    format!("idem-bench-{run}")
}

impl Target {
    /// Opens the store chosen on the command line and its floor; `run` names this run and
    /// process (its records and the floor's table or keys).
    pub async fn open(cli: &Cli, run: &str) -> Result<Target, CliError> {
        let namespace = cli
            .namespace
            .clone()
            .unwrap_or_else(|| "idem-bench".to_owned());
        let (label, floor_label, store, floor, commands) =
            match (&cli.sqlite, &cli.redis, &cli.postgres) {
                (Some(path), None, None) => sqlite(path, run)?,
                (None, Some(url), None) => {
                    redis(url, cli.prefix.as_deref(), run, (&namespace, &turn_id(run))).await?
                }
                (None, None, Some(url)) => {
                    if cli.prefix.is_some() {
                        return Err(CliError::usage(
                            "--prefix applies to Redis stores only: for PostgreSQL, use --schema",
                        ));
                    }
                    postgres(url, cli.schema.as_deref(), run).await?
                }
                _ => {
                    let cluster = if cli.redis_cluster.is_empty() {
                        ""
                    } else {
                        " (bench does not run on a Redis Cluster: give one of its nodes \
                         with --redis)"
                    };
                    return Err(CliError::usage(format!(
                        "say which store to measure: --sqlite PATH, --redis URL or \
                         --postgres URL{cluster}"
                    )));
                }
            };
        // Every first execution of the run is a new action of one tool in one turn: the cap on
        // a tool's actions is lifted, but its count is kept (and measured) as in production.
        let turn = Turn::new(turn_id(run))
            .with_namespace(namespace)
            .with_actions_per_tool(u32::MAX)
            .with_store(Arc::clone(&store));
        Ok(Target {
            label,
            floor_label,
            store,
            floor,
            turn,
            run: {
                let mut to = format!("{run:0>20}");
                to.truncate(20);
                to
            },
            next: AtomicU64::new(0),
            commands,
        })
    }

    /// Fresh arguments: a key no call has used.
    pub fn fresh(&self) -> Args<'_> {
        self.args(self.next.fetch_add(1, Ordering::Relaxed))
    }

    /// The arguments numbered `n` in this run.
    pub fn args(&self, n: u64) -> Args<'_> {
        Args {
            to: &self.run,
            n,
            subject: "hello",
            lang: "en-GB",
            priority: "high",
        }
    }

    /// The key and fingerprint idem derives from `args` (as `#[idempotent]` does).
    fn key(&self, args: &Args<'_>) -> Result<(Key, Fingerprint), String> {
        let mut digest = ArgsDigest::new(TOOL.name);
        digest.arg("args", args).map_err(|e| e.to_string())?;
        Ok(digest.finish(
            self.turn.namespace(),
            self.turn.id(),
            TOOL.name,
            TOOL.version,
        ))
    }

    /// The tool called through idem: executed the first time, replayed after.
    pub async fn idem(&self, args: &Args<'_>) -> Result<(), String> {
        let (key, fingerprint) = self.key(args)?;
        let receipt = Receipt {
            id: args.n,
            len: args.to.len() as u64,
        };
        execute(
            Call::new(&TOOL, &self.turn, key, fingerprint),
            Codec::ok_only(),
            async move { Ok::<_, idem_tools_runtime::Error>(receipt) },
        )
        .await
        .map(drop)
        .map_err(|e| e.to_string())
    }

    /// The floor's first execution of `args`: their digest claimed, then the result recorded.
    pub async fn floor_first(&self, args: &Args<'_>) -> Result<(), String> {
        let key = digest(args)?;
        let receipt = Receipt {
            id: args.n,
            len: args.to.len() as u64,
        };
        let result = serde_json::to_vec(&receipt).map_err(|e| e.to_string())?;
        self.floor.first(&key, &result).await
    }

    /// The floor's replay of `args`: their digest's result read back and decoded.
    pub async fn floor_replay(&self, args: &Args<'_>) -> Result<(), String> {
        let key = digest(args)?;
        let result = self.floor.replay(&key).await?;
        serde_json::from_slice::<Receipt>(&result)
            .map(drop)
            .map_err(|e| e.to_string())
    }

    /// Deletes what this run recorded: idem's records (every key [`fresh`](Self::fresh)
    /// handed out), with `concurrency` tasks, and the floor's.
    pub async fn clean(self: &Arc<Self>, concurrency: usize) -> Result<(), String> {
        let (calls, next) = (self.used(), Arc::new(AtomicU64::new(0)));
        let tasks: Vec<_> = (0..concurrency.max(1))
            .map(|_| {
                let (this, next) = (Arc::clone(self), Arc::clone(&next));
                tokio::spawn(async move {
                    loop {
                        let n = next.fetch_add(1, Ordering::Relaxed);
                        if n >= calls {
                            return Ok::<_, String>(());
                        }
                        let (key, _) = this.key(&this.args(n))?;
                        this.store
                            .remove(this.turn.namespace(), &key)
                            .await
                            .map_err(|e| e.to_string())?;
                    }
                })
            })
            .collect();
        for task in tasks {
            task.await.map_err(|e| e.to_string())??;
        }
        self.floor.clean().await
    }

    /// How many fresh arguments this run handed out.
    pub fn used(&self) -> u64 {
        self.next.load(Ordering::Relaxed)
    }
}

/// The floor's key: the BLAKE3 digest of the arguments' `serde_json` bytes.
fn digest(args: &Args<'_>) -> Result<[u8; 32], String> {
    let bytes = serde_json::to_vec(args).map_err(|e| e.to_string())?;
    Ok(*blake3::hash(&bytes).as_bytes())
}

type Opened = (
    String,
    &'static str,
    Arc<dyn Store>,
    Box<dyn Floor>,
    Option<super::stats::CommandStats>,
);

#[cfg(feature = "sqlite")]
fn sqlite(path: &std::path::Path, run: &str) -> Result<Opened, CliError> {
    let store = idem_tools_runtime::SqliteStore::open(path).map_err(|e| {
        CliError::connection(format!(
            "cannot open {} for benchmarking: {e}",
            path.display()
        ))
    })?;
    let floor = super::floor::SqliteFloor::open(path, &format!("idem_bench_floor_{run}"))
        .map_err(CliError::connection)?;
    Ok((
        format!("SQLite {}", path.display()),
        "hand-written SQL on the same file (WITHOUT ROWID table, one connection, WAL, \
         synchronous=NORMAL)",
        Arc::new(store),
        Box::new(floor),
        None,
    ))
}

#[cfg(not(feature = "sqlite"))]
fn sqlite(_path: &std::path::Path, _run: &str) -> Result<Opened, CliError> {
    Err(CliError::usage(
        "this idem was built without SQLite support: reinstall it with the `sqlite` feature",
    ))
}

#[cfg(feature = "redis")]
async fn redis(
    url: &str,
    prefix: Option<&str>,
    run: &str,
    (namespace, turn): (&str, &str),
) -> Result<Opened, CliError> {
    use idem_tools_runtime::RedisStore;
    let shown = crate::open::redact(url);
    let store = RedisStore::connect(url)
        .await
        .map_err(|e| CliError::connection(format!("cannot reach {shown}: {e}")))?;
    let store = match prefix {
        Some(prefix) => store.with_prefix(prefix),
        None => store,
    };
    let floor_prefix = format!("{}-bench-floor:{run}", prefix.unwrap_or("idem"));
    // `remove` keeps a turn's counts: the run's turn hash goes with the floor's keys.
    let floor = super::floor::RedisFloor::connect(url, &floor_prefix)
        .await
        .map_err(CliError::connection)?
        .also_cleaning(vec![store.turn_key(namespace, turn)]);
    let commands = super::stats::CommandStats::connect(url).await;
    Ok((
        format!("Redis {shown}"),
        "GET; SET NX PX + SET XX PX (same client crate, one multiplexed connection)",
        Arc::new(store),
        Box::new(floor),
        commands,
    ))
}

#[cfg(not(feature = "redis"))]
async fn redis(
    _url: &str,
    _prefix: Option<&str>,
    _run: &str,
    _turn: (&str, &str),
) -> Result<Opened, CliError> {
    Err(CliError::usage(
        "this idem was built without Redis support: reinstall it with the `redis` feature",
    ))
}

/// Connects to the PostgreSQL database at `url` with a pool of `PostgresStore`'s default size,
/// creating idem's tables (in `schema`, else the connection's `search_path`) if they are not
/// there, as the SQLite bench creates its file; the floor's table `idem_bench_floor_<run>` goes
/// next to them, with a pool of the same size and settings.
#[cfg(feature = "postgres")]
async fn postgres(url: &str, schema: Option<&str>, run: &str) -> Result<Opened, CliError> {
    use idem_tools_runtime::PostgresStore;
    let shown = crate::open::redact(url);
    let builder = match schema {
        Some(schema) => PostgresStore::builder().schema(schema),
        None => PostgresStore::builder(),
    };
    let store = builder.connect(url).await.map_err(|error| {
        CliError::connection(format!(
            "cannot open the PostgreSQL database at {shown} for benchmarking: {}",
            match &error {
                idem_tools_runtime::Error::Store { source, .. } => source.to_string(),
                other => other.to_string(),
            }
        ))
    })?;
    let floor = super::floor::PostgresFloor::create(
        store.pool(),
        schema,
        &format!("idem_bench_floor_{run}"),
    )
    .await
    .map_err(CliError::connection)?;
    let place = schema.map_or_else(String::new, |s| format!(", schema {s}"));
    Ok((
        format!("PostgreSQL {shown}{place}"),
        "SELECT by primary key; INSERT … ON CONFLICT DO UPDATE … WHERE expired + UPDATE \
         (sqlx, a pool of the store's size and settings)",
        Arc::new(store),
        Box::new(floor),
        None,
    ))
}

#[cfg(not(feature = "postgres"))]
async fn postgres(_url: &str, _schema: Option<&str>, _run: &str) -> Result<Opened, CliError> {
    Err(CliError::usage(
        "this idem was built without PostgreSQL support: reinstall it with the `postgres` \
         feature",
    ))
}

/// How long to let a worker process start before the shared schedule begins.
pub const STARTUP: Duration = Duration::from_secs(2);

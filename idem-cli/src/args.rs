//! The command line, as `clap` parses it.

use std::path::PathBuf;

use clap::{Parser, Subcommand};

use crate::keyarg::shell_word;
use crate::state::State;

/// Inspect and repair an idem dedup store: did this action happen, what did the agent get back,
/// and release a claim that is stuck.
///
/// Open a store with `--sqlite PATH`, `--redis URL`, `--redis-cluster URL,…` (plus `--prefix` if
/// the agents use `RedisStore::with_prefix`) or `--postgres URL` (plus `--schema` if the agents
/// use one). KEY is the full 64-hex key or any unambiguous prefix of at least 4 hex digits, such
/// as the 12 digits the logs print, looked up in every namespace unless `--namespace` is given.
///
/// Exit codes: 0 ok, 1 not found or refused, 2 usage or connection error.
#[derive(Debug, Parser)]
#[command(name = "idem", version, max_term_width = 100)]
pub struct Cli {
    /// The SQLite database file of a `SqliteStore` (never created: it must exist).
    #[arg(long, value_name = "PATH", global = true, conflicts_with = "redis")]
    pub sqlite: Option<PathBuf>,

    /// The Redis server of a `RedisStore`: `redis://[user:password@]host:port[/db]`.
    #[arg(long, value_name = "URL", global = true)]
    pub redis: Option<String>,

    /// The nodes of a Redis Cluster holding a `RedisStore` (`RedisStore::connect_cluster`):
    /// one or more `redis://host:port` URLs, comma-separated.
    #[arg(long, value_name = "URLS", global = true, value_delimiter = ',', conflicts_with_all = ["sqlite", "redis"])]
    pub redis_cluster: Vec<String>,

    /// The PostgreSQL database of a `PostgresStore`:
    /// `postgres://[user[:password]@]host[:port]/database` (its idem tables must exist, except
    /// for `bench`, which creates them).
    #[arg(long, value_name = "URL", global = true, conflicts_with_all = ["sqlite", "redis", "redis_cluster"])]
    pub postgres: Option<String>,

    /// The schema of the agents' `PostgresStore` (`PostgresStoreBuilder::schema`); default:
    /// the connection's search path.
    #[arg(long, value_name = "SCHEMA", global = true, requires = "postgres")]
    pub schema: Option<String>,

    /// The key prefix the agents' `RedisStore` uses (`with_prefix`); default `idem`.
    #[arg(long, value_name = "PREFIX", global = true)]
    pub prefix: Option<String>,

    /// The namespace: filters `list` and `stats`; for `show` and `remove`, the namespace of KEY
    /// (default: every namespace, refused if KEY matches keys in more than one); for `turn` and
    /// `list --turn`, the turn's namespace (default: the empty namespace, a `Turn` without
    /// `with_namespace`).
    #[arg(long, value_name = "NAMESPACE", global = true)]
    pub namespace: Option<String>,

    /// Print JSON for scripts instead of tables.
    #[arg(long, global = true)]
    pub json: bool,

    /// What to do.
    #[command(subcommand)]
    pub command: Command,
}

impl Cli {
    /// `idem` with the options that open this store again (`--sqlite`, `--redis`,
    /// `--redis-cluster`, `--postgres`, `--schema`, `--prefix`), quoted for a POSIX shell: the
    /// start of a command this process suggests, so that it runs as printed.
    pub fn reopen(&self) -> String {
        let mut words = vec!["idem".to_owned()];
        let mut option = |name: &str, value: &str| {
            words.push(name.to_owned());
            words.push(shell_word(value));
        };
        if let Some(path) = &self.sqlite {
            option("--sqlite", &path.to_string_lossy());
        }
        if let Some(url) = &self.redis {
            option("--redis", url);
        }
        if !self.redis_cluster.is_empty() {
            option("--redis-cluster", &self.redis_cluster.join(","));
        }
        if let Some(url) = &self.postgres {
            option("--postgres", url);
        }
        if let Some(schema) = &self.schema {
            option("--schema", schema);
        }
        if let Some(prefix) = &self.prefix {
            option("--prefix", prefix);
        }
        words.join(" ")
    }
}

/// The subcommands.
#[derive(Debug, Subcommand)]
pub enum Command {
    /// List live records, newest first.
    List {
        /// Only records of this tool.
        #[arg(long)]
        tool: Option<String>,
        /// Only records in this state.
        #[arg(long, value_enum)]
        state: Option<State>,
        /// Show at most this many records.
        #[arg(long, value_name = "N", default_value_t = 100)]
        limit: usize,
        /// Only the records of this turn, in the order it claimed them (as `idem turn ID`).
        #[arg(long, value_name = "ID", conflicts_with_all = ["tool", "state"])]
        turn: Option<String>,
    },
    /// Show one turn: its records (the tools it called), in the order it claimed them, with
    /// their outcomes, attempts and times.
    Turn {
        /// The turn id, as the agent gave it to `Turn::new` (or `_meta["idem/turnId"]`).
        id: String,
        /// Show at most this many records.
        #[arg(long, value_name = "N", default_value_t = 1000)]
        limit: usize,
    },
    /// Show one record, with its result.
    Show {
        /// The key: 64 hex digits, or an unambiguous prefix of at least 4.
        key: String,
    },
    /// Delete one record and its key's attempt count, whatever its state, if the key still holds
    /// the record shown: the next identical call runs the tool (the turn's count of started
    /// actions is kept).
    Remove {
        /// The key: 64 hex digits, or an unambiguous prefix of at least 4.
        key: String,
        /// Do not ask for confirmation (required when stdin is not a terminal).
        #[arg(long, short = 'y')]
        yes: bool,
    },
    /// Delete expired records and print how many.
    Purge,
    /// Count live records by state and by tool.
    Stats,
    /// Measure idem on this store next to the least the store can do (replay and first
    /// execution latency, throughput at a concurrency); creates the SQLite file, or idem's
    /// PostgreSQL tables, if needed.
    Bench(crate::commands::bench::Options),
}

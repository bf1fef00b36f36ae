//! Opening the store named on the command line, with errors that say what to do.

use std::sync::Arc;

use idem_tools_runtime::Store;

use crate::args::Cli;
use crate::error::CliError;

/// Which kind of store was opened.
#[cfg_attr(
    not(all(feature = "sqlite", feature = "redis", feature = "postgres")),
    allow(dead_code)
)]
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Backend {
    /// A `SqliteStore` file.
    Sqlite,
    /// A `RedisStore` server.
    Redis,
    /// A `PostgresStore` database.
    Postgres,
}

/// An open store.
pub struct Opened {
    /// The store.
    pub store: Arc<dyn Store>,
    /// Its kind.
    pub backend: Backend,
}

/// Opens the store chosen by `--sqlite` or `--redis`.
///
/// # Errors
/// A usage error if neither or both are given, or `--prefix` without `--redis`; a connection
/// error if the store cannot be opened or reached.
pub async fn open(cli: &Cli) -> Result<Opened, CliError> {
    if let Some(url) = &cli.postgres {
        if cli.prefix.is_some() {
            return Err(CliError::usage(
                "--prefix applies to Redis stores only: for PostgreSQL, use --schema",
            ));
        }
        return open_postgres(url, cli.schema.as_deref()).await;
    }
    if !cli.redis_cluster.is_empty() {
        return open_redis_cluster(&cli.redis_cluster, cli.prefix.as_deref()).await;
    }
    match (&cli.sqlite, &cli.redis) {
        (Some(path), None) => {
            if cli.prefix.is_some() {
                return Err(CliError::usage(
                    "--prefix applies to Redis stores only: drop it, or use --redis URL",
                ));
            }
            open_sqlite(path)
        }
        (None, Some(url)) => open_redis(url, cli.prefix.as_deref()).await,
        (Some(_), Some(_)) => Err(CliError::usage(
            "give one store: --sqlite PATH or --redis URL, not both",
        )),
        (None, None) => Err(CliError::usage(
            "say which store to open: --sqlite PATH (a SqliteStore file), --redis URL \
             (a RedisStore server, e.g. redis://127.0.0.1:6379), --redis-cluster URL,URL,... \
             (a RedisStore on a Redis Cluster) or --postgres URL (a PostgresStore database, \
             e.g. postgres://app@127.0.0.1/app)",
        )),
    }
}

#[cfg(feature = "sqlite")]
fn open_sqlite(path: &std::path::Path) -> Result<Opened, CliError> {
    use idem_tools_runtime::SqliteStore;
    if !path.exists() {
        return Err(CliError::connection(format!(
            "{} does not exist: check the path to the agents' SQLite file (idem does not create \
             one here)",
            path.display()
        )));
    }
    let store = SqliteStore::open_existing(path).map_err(|error| match error {
        // Already says what to do: a newer schema, or not an idem database.
        idem_tools_runtime::Error::Config(message) => CliError::connection(message),
        other => CliError::connection(format!(
            "could not open {} as an idem SQLite database ({}): check the path and its \
             permissions",
            path.display(),
            store_source(&other)
        )),
    })?;
    Ok(Opened {
        store: Arc::new(store),
        backend: Backend::Sqlite,
    })
}

#[cfg(not(feature = "sqlite"))]
fn open_sqlite(_path: &std::path::Path) -> Result<Opened, CliError> {
    Err(CliError::usage(
        "this idem was built without SQLite support: reinstall it with \
         `cargo install --path idem-cli --features sqlite`",
    ))
}

#[cfg(feature = "redis")]
async fn open_redis(url: &str, prefix: Option<&str>) -> Result<Opened, CliError> {
    use idem_tools_runtime::RedisStore;
    use idem_tools_runtime::store::redis::DEFAULT_PREFIX;
    let shown = redact(url);
    let store = RedisStore::connect(url)
        .await
        .map_err(|error| match error {
            idem_tools_runtime::Error::Config(message) => CliError::usage(format!(
                "{message} ({shown}): write it as redis://[user:password@]host:port[/db]"
            )),
            other => CliError::connection(format!(
                "cannot reach the Redis server at {shown} ({}): check the URL and that the \
                 server is running",
                store_source(&other)
            )),
        })?
        .with_prefix(prefix.unwrap_or(DEFAULT_PREFIX));
    Ok(Opened {
        store: Arc::new(store),
        backend: Backend::Redis,
    })
}

/// Opens a `RedisStore` over a Redis Cluster: `list`, `stats` and prefix lookups scan every
/// master.
#[cfg(feature = "redis")]
async fn open_redis_cluster(seeds: &[String], prefix: Option<&str>) -> Result<Opened, CliError> {
    use idem_tools_runtime::RedisStore;
    use idem_tools_runtime::store::redis::DEFAULT_PREFIX;
    let shown: Vec<String> = seeds.iter().map(|url| redact(url)).collect();
    let store = RedisStore::connect_cluster(seeds)
        .await
        .map_err(|error| {
            CliError::connection(format!(
                "cannot reach the Redis Cluster at {} ({}): check the URLs and that the \
                 cluster is up",
                shown.join(","),
                store_source(&error)
            ))
        })?
        .with_prefix(prefix.unwrap_or(DEFAULT_PREFIX));
    Ok(Opened {
        store: Arc::new(store),
        backend: Backend::Redis,
    })
}

#[cfg(not(feature = "redis"))]
async fn open_redis_cluster(_seeds: &[String], _prefix: Option<&str>) -> Result<Opened, CliError> {
    open_redis("", None).await
}

#[cfg(not(feature = "redis"))]
async fn open_redis(_url: &str, _prefix: Option<&str>) -> Result<Opened, CliError> {
    Err(CliError::usage(
        "this idem was built without Redis support: reinstall it with \
         `cargo install --path idem-cli --features redis`",
    ))
}

/// Opens a `PostgresStore` whose tables exist (never creates them).
#[cfg(feature = "postgres")]
async fn open_postgres(url: &str, schema: Option<&str>) -> Result<Opened, CliError> {
    use idem_tools_runtime::PostgresStore;
    let shown = redact(url);
    let builder = match schema {
        Some(schema) => PostgresStore::builder().schema(schema),
        None => PostgresStore::builder(),
    };
    let store = builder
        .max_connections(2)
        .open_existing(url)
        .await
        .map_err(|error| match error {
            idem_tools_runtime::Error::Config(message) => {
                CliError::connection(format!("{message} ({shown})"))
            }
            other => CliError::connection(format!(
                "cannot reach the PostgreSQL database at {shown} ({}): check the URL and that \
                 the server is running",
                store_source(&other)
            )),
        })?;
    Ok(Opened {
        store: Arc::new(store),
        backend: Backend::Postgres,
    })
}

#[cfg(not(feature = "postgres"))]
async fn open_postgres(_url: &str, _schema: Option<&str>) -> Result<Opened, CliError> {
    Err(CliError::usage(
        "this idem was built without PostgreSQL support: reinstall it with \
         `cargo install --path idem-cli --features postgres`",
    ))
}

/// The underlying cause of a store error, without the engine's advice about tool calls.
#[cfg(any(feature = "sqlite", feature = "redis", feature = "postgres"))]
fn store_source(error: &idem_tools_runtime::Error) -> String {
    match error {
        idem_tools_runtime::Error::Store { source, .. } => source.to_string(),
        other => other.to_string(),
    }
}

/// `url` with any password replaced by `***`, fit for messages.
#[cfg(any(feature = "redis", feature = "postgres"))]
pub fn redact(url: &str) -> String {
    let Some((scheme, rest)) = url.split_once("://") else {
        return url.to_owned();
    };
    let authority_end = rest.find('/').unwrap_or(rest.len());
    match rest[..authority_end].rfind('@') {
        Some(at) => {
            let userinfo = &rest[..at];
            let user = userinfo.split_once(':').map_or(userinfo, |(user, _)| user);
            let hidden = if userinfo.contains(':') {
                format!("{user}:***")
            } else {
                "***".to_owned()
            };
            format!("{scheme}://{hidden}{}", &rest[at..])
        }
        None => url.to_owned(),
    }
}

#[cfg(all(test, any(feature = "redis", feature = "postgres")))]
mod tests {
    use super::redact;

    #[test]
    fn passwords_are_hidden_from_messages() {
        assert_eq!(
            redact("redis://user:secret@host:6379/0"),
            "redis://user:***@host:6379/0"
        );
        assert_eq!(redact("redis://secret@host:6379"), "redis://***@host:6379");
        assert_eq!(redact("redis://host:6379/2"), "redis://host:6379/2");
        assert_eq!(redact("not a url"), "not a url");
    }
}

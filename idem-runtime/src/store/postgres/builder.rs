//! [`PostgresStoreBuilder`]: how a [`PostgresStore`] connects.

use std::str::FromStr;
use std::time::Duration;

use sqlx::PgPool;
use sqlx::postgres::{PgConnectOptions, PgPoolOptions};

use super::conn::Conn;

use super::entered::entered;
use super::{DEFAULT_LOCK_TIMEOUT, DEFAULT_REPLY_TIMEOUT, MAX_TIMEOUT, PostgresStore, schema};
use crate::{Error, Result};

/// How to connect a [`PostgresStore`]: [`PostgresStore::builder`].
#[derive(Debug, Clone)]
pub struct PostgresStoreBuilder {
    schema: Option<String>,
    max_connections: u32,
    connect_timeout: Duration,
    lock_timeout: Duration,
    reply_timeout: Duration,
}

impl Default for PostgresStoreBuilder {
    fn default() -> Self {
        PostgresStoreBuilder {
            schema: None,
            max_connections: 10,
            connect_timeout: Duration::from_secs(5),
            lock_timeout: DEFAULT_LOCK_TIMEOUT,
            reply_timeout: DEFAULT_REPLY_TIMEOUT,
        }
    }
}

impl PostgresStoreBuilder {
    /// Keeps idem's tables and functions in the schema `name` (created if missing), instead
    /// of the connection's `search_path`.
    #[must_use]
    pub fn schema(mut self, name: impl Into<String>) -> Self {
        self.schema = Some(name.into());
        self
    }

    /// The size of the pool [`connect`](Self::connect) opens (default 10).
    #[must_use]
    pub fn max_connections(mut self, n: u32) -> Self {
        self.max_connections = n.max(1);
        self
    }

    /// How long [`connect`](Self::connect) waits for a connection (default 5 s; at most
    /// [`MAX_TIMEOUT`], which a longer one is taken as), and opening a store on any pool
    /// ([`from_pool`](Self::from_pool)) waits for its first (or the reply timeout, if longer).
    #[must_use]
    pub fn connect_timeout(mut self, timeout: Duration) -> Self {
        self.connect_timeout = timeout.min(MAX_TIMEOUT);
        self
    }

    /// How long a store call waits for a key's row held by a transactional tool's transaction
    /// before it fails with [`Error::Store`] (default [`DEFAULT_LOCK_TIMEOUT`]; from 1 ms to
    /// [`MAX_TIMEOUT`], PostgreSQL's longest `lock_timeout`). Transactional calls wait for their
    /// turn's in-flight wait instead.
    #[must_use]
    pub fn lock_timeout(mut self, timeout: Duration) -> Self {
        self.lock_timeout = timeout.clamp(Duration::from_millis(1), MAX_TIMEOUT);
        self
    }

    /// How long the server has to answer each request of the store, beyond the lock wait a
    /// claim is allowed ([`lock_timeout`](Self::lock_timeout)), and each step of a
    /// transactional call beyond its turn's in-flight wait (default [`DEFAULT_REPLY_TIMEOUT`]).
    ///
    /// A server that stops answering without resetting its connections — a frozen primary, a
    /// partition after a DNS or virtual-IP switch — would otherwise keep every call, and every
    /// connection of the pool, waiting forever: past this bound the operation fails with
    /// [`Error::Store`], the connection is closed rather than returned to the pool, and the
    /// next call opens a new one, to whatever host the address names by then. The pool's own
    /// check of a connection handed back (a round trip) gets the same bound, and so does each
    /// wait for a connection of the pool, whatever the pool's acquire timeout. Keep it well above
    /// the server's slowest answer to a healthy request (from 1 ms to [`MAX_TIMEOUT`]).
    #[must_use]
    pub fn reply_timeout(mut self, timeout: Duration) -> Self {
        self.reply_timeout = timeout.clamp(Duration::from_millis(1), MAX_TIMEOUT);
        self
    }

    /// Connects to `url` with a pool of its own and creates or migrates idem's tables.
    ///
    /// # Errors
    /// [`Error::Config`] for an invalid URL or tables of a newer idem; [`Error::Store`] if the
    /// server cannot be reached or the tables cannot be created.
    pub async fn connect(self, url: &str) -> Result<PostgresStore> {
        let pool = self.pool(url)?;
        self.from_pool(pool).await
    }

    /// Uses `pool` and creates or migrates idem's tables.
    ///
    /// # Errors
    /// As [`connect`](Self::connect).
    pub async fn from_pool(self, pool: PgPool) -> Result<PostgresStore> {
        // Dropped unfinished anywhere, it drops its pooled connection inside the runtime.
        entered(async move {
            let (store, mut conn) = self.store(pool).await?;
            let (schema, prefix) = (store.schema(), &store.inner.sql.prefix);
            // It may wait for another process's migration (an advisory lock).
            let bound = store.inner.lock_timeout + store.reply_timeout();
            conn.run_idem("open", bound, async |conn| {
                schema::migrate(conn, schema, prefix).await
            })
            .await?;
            drop(conn);
            Ok(store)
        })
        .await
    }

    /// Connects to `url` only if idem's tables are there already: never creates or migrates
    /// anything (for tools that inspect and repair a store, the `idem` CLI).
    ///
    /// # Errors
    /// [`Error::Config`] if there are no idem tables (in the schema chosen) or they are of
    /// another version; [`Error::Store`] if the server cannot be reached.
    pub async fn open_existing(self, url: &str) -> Result<PostgresStore> {
        let pool = self.pool(url)?;
        // Dropped unfinished anywhere, it drops its pooled connection inside the runtime.
        entered(self.check_existing(pool)).await
    }

    /// [`open_existing`](Self::open_existing) on `pool`.
    async fn check_existing(self, pool: PgPool) -> Result<PostgresStore> {
        let (store, mut conn) = self.store(pool).await?;
        let place = store.schema().map_or_else(
            || "the connection's search_path".to_owned(),
            |s| format!("schema {s:?}"),
        );
        let (prefix, bound) = (&store.inner.sql.prefix, store.reply_timeout());
        let version = conn
            .run_idem("open", bound, async |conn| {
                schema::existing_version(conn, prefix).await
            })
            .await?;
        drop(conn);
        match version {
            Some(schema::SCHEMA_VERSION) => Ok(store),
            None => Err(Error::Config(format!(
                "this database has no idem tables in {place}: check the URL (and --schema)"
            ))),
            Some(other) => Err(Error::Config(format!(
                "the idem tables in {place} have schema version {other}, and this build of \
                 idem knows version {}: use the idem build that wrote them",
                schema::SCHEMA_VERSION
            ))),
        }
    }

    /// The store on `pool`, and a connection of it (the server reached).
    async fn store(self, pool: PgPool) -> Result<(PostgresStore, Conn)> {
        // The server may still be starting: opening waits for a connection as long as the
        // connect timeout allows, not only a reply timeout (as `connect`'s own pool did).
        let bound = self.connect_timeout.max(self.reply_timeout);
        let store = PostgresStore::new(pool, self.schema, self.lock_timeout, self.reply_timeout);
        let conn = store.conn_within("open", bound).await?;
        Ok((store, conn))
    }

    fn pool(&self, url: &str) -> Result<PgPool> {
        let options = PgConnectOptions::from_str(url).map_err(|e| {
            Error::Config(format!(
                "invalid PostgreSQL URL ({e}); write postgres://user:password@host:port/database"
            ))
        })?;
        Ok(PgPoolOptions::new()
            .max_connections(self.max_connections)
            .acquire_timeout(self.connect_timeout)
            // A connection that broke is found by its next query; testing every connection
            // before use would cost a round trip per call.
            .test_before_acquire(false)
            .connect_lazy_with(options))
    }
}

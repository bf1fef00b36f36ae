//! [`RedisStoreBuilder`]: how a [`RedisStore`] connects, to one server or to a cluster.

use std::fmt;
use std::sync::Arc;
use std::time::Duration;

use ::redis::aio::{ConnectionManager, ConnectionManagerConfig};
use ::redis::cluster::ClusterClient;

use super::conn::{self, Conn};
use super::{DEFAULT_PREFIX, RedisStore};
use crate::{Error, Result};

/// How long an operation waits for a reply by default.
pub(super) const DEFAULT_RESPONSE_TIMEOUT: Duration = Duration::from_secs(2);

/// How to connect a [`RedisStore`]: [`RedisStore::builder`].
#[derive(Clone)]
pub struct RedisStoreBuilder {
    prefix: String,
    allow_eviction: bool,
    connection_timeout: Duration,
    response_timeout: Duration,
    retries: usize,
}

impl fmt::Debug for RedisStoreBuilder {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("RedisStoreBuilder")
            .field("prefix", &self.prefix)
            .field("allow_eviction", &self.allow_eviction)
            .field("connection_timeout", &self.connection_timeout)
            .field("response_timeout", &self.response_timeout)
            .field("retries", &self.retries)
            .finish()
    }
}

impl Default for RedisStoreBuilder {
    fn default() -> Self {
        RedisStoreBuilder {
            prefix: DEFAULT_PREFIX.to_owned(),
            allow_eviction: false,
            connection_timeout: Duration::from_secs(1),
            response_timeout: DEFAULT_RESPONSE_TIMEOUT,
            retries: 2,
        }
    }
}

impl RedisStoreBuilder {
    /// The first component of every Redis key (default [`DEFAULT_PREFIX`]); see
    /// [`RedisStore::with_prefix`].
    #[must_use]
    pub fn prefix(mut self, prefix: impl Into<String>) -> Self {
        self.prefix = prefix.into();
        self
    }

    /// Connects even if `maxmemory-policy` is not `noeviction`, with a loud warning: Redis may
    /// then evict a live claim or record, and the tool runs again (default `false`).
    #[must_use]
    pub fn allow_eviction(mut self, allow: bool) -> Self {
        self.allow_eviction = allow;
        self
    }

    /// How long to wait for a connection (default 1 s).
    #[must_use]
    pub fn connection_timeout(mut self, timeout: Duration) -> Self {
        self.connection_timeout = timeout;
        self
    }

    /// How long to wait for each reply before failing the operation with [`Error::Store`]
    /// (default 2 s).
    #[must_use]
    pub fn response_timeout(mut self, timeout: Duration) -> Self {
        self.response_timeout = timeout;
        self
    }

    /// Reconnection attempts before an operation gives up (default 2).
    #[must_use]
    pub fn retries(mut self, retries: usize) -> Self {
        self.retries = retries;
        self
    }

    /// The connection manager's settings these options give.
    fn manager_config(&self) -> ConnectionManagerConfig {
        ConnectionManagerConfig::new()
            .set_connection_timeout(Some(self.connection_timeout))
            .set_response_timeout(Some(self.response_timeout))
            .set_number_of_retries(self.retries)
            .set_max_delay(Duration::from_millis(500))
    }

    /// Connects to the Redis server at `url` (`redis://[user:password@]host:port[/db]`),
    /// checks its eviction policy, and loads the store's scripts.
    ///
    /// # Errors
    /// [`Error::Config`] if `url` is not a Redis URL or the server may evict keys;
    /// [`Error::Store`] if it cannot be reached.
    pub async fn connect(self, url: &str) -> Result<RedisStore> {
        let config = self.manager_config();
        self.connect_with_config(url, config).await
    }

    pub(super) async fn connect_with_config(
        self,
        url: &str,
        config: ConnectionManagerConfig,
    ) -> Result<RedisStore> {
        let client = ::redis::Client::open(url)
            .map_err(|e| Error::Config(format!("invalid Redis URL: {e}")))?;
        let conn = ConnectionManager::new_with_config(client, config)
            .await
            .map_err(|e| Error::store("connect", e))?;
        self.finish(Conn::Single(conn)).await
    }

    /// Connects to the Redis Cluster that `seeds` (URLs of some of its nodes) belong to,
    /// checks the eviction policy of every master, and loads the store's scripts on every
    /// node.
    ///
    /// # Errors
    /// [`Error::Config`] if a URL is invalid or a master may evict keys; [`Error::Store`] if
    /// the cluster cannot be reached.
    pub async fn connect_cluster<S: AsRef<str>>(self, seeds: &[S]) -> Result<RedisStore> {
        let seeds: Vec<&str> = seeds.iter().map(AsRef::as_ref).collect();
        if seeds.is_empty() {
            return Err(Error::Config(
                "RedisStore::connect_cluster needs the URL of at least one cluster node".into(),
            ));
        }
        let client = ClusterClient::builder(seeds)
            .connection_timeout(self.connection_timeout)
            .response_timeout(self.response_timeout)
            .retries(u32::try_from(self.retries).unwrap_or(u32::MAX))
            .build()
            .map_err(|e| Error::Config(format!("invalid Redis Cluster URLs: {e}")))?;
        let conn = client
            .get_async_connection()
            .await
            .map_err(|e| Error::store("connect", e))?;
        let cluster =
            conn::Cluster::new(client, conn, self.connection_timeout, self.response_timeout);
        self.finish(Conn::Cluster(Arc::new(cluster))).await
    }

    async fn finish(self, mut conn: Conn) -> Result<RedisStore> {
        conn::check_eviction_policy(&mut conn, self.allow_eviction).await?;
        let store = RedisStore {
            conn,
            prefix: Arc::from(self.prefix),
            holder_grace: self.response_timeout,
        };
        store.load_scripts().await?;
        Ok(store)
    }
}

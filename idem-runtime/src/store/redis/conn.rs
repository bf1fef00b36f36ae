//! One connection type for a standalone server and for a Redis Cluster, plus the per-node
//! commands the store needs (`SCAN`, `CONFIG GET`) on every master.

use std::sync::{Arc, Mutex, PoisonError};
use std::time::{Duration, Instant};

use ::redis::aio::{ConnectionLike, ConnectionManager};
use ::redis::cluster::ClusterClient;
use ::redis::cluster_async::ClusterConnection;
use ::redis::cluster_routing::{RoutingInfo, SingleNodeRoutingInfo};
use ::redis::{Cmd, Pipeline, RedisError, RedisFuture, RedisResult, Value};

use crate::{Error, Result};

/// A connection to a standalone server (or a proxy), or to a cluster.
#[derive(Clone)]
pub(super) enum Conn {
    /// A reconnecting connection to one endpoint.
    Single(ConnectionManager),
    /// The cluster client: routes each command to the master of its key's slot, following
    /// `MOVED`/`ASK` redirections; made again when it stops answering ([`Cluster`]).
    Cluster(Arc<Cluster>),
}

/// A cluster connection, made again from its client when it has answered nothing for a while
/// and a request times out: redis-rs's cluster client (1.8) can stop answering for good once
/// the server drops its connections while requests are in flight — every later request
/// times out — and only a new connection answers again (`redis_cluster_wedge`).
pub(super) struct Cluster {
    client: ClusterClient,
    /// How long without any answer before a timed-out request makes the connection again
    /// (and between two attempts to make it).
    stall: Duration,
    /// How long making the connection again may take before the attempt is given up.
    remake_bound: Duration,
    state: Mutex<ClusterState>,
    /// Wakes the requests that wait for a new connection when an attempt to make one ends.
    remade: tokio::sync::Notify,
}

struct ClusterState {
    conn: ClusterConnection,
    /// Counts the connections made: a request's answer concerns the one it was sent on.
    generation: u64,
    /// When a request on this connection was last answered (an error reply counts), or an
    /// attempt to make a new one failed.
    answered: Instant,
    /// A new connection is being made.
    remaking: bool,
}

impl Cluster {
    pub(super) fn new(
        client: ClusterClient,
        conn: ClusterConnection,
        connection_timeout: Duration,
        reply_timeout: Duration,
    ) -> Self {
        Cluster {
            client,
            stall: reply_timeout,
            // A connection to each seed, then `CLUSTER SLOTS` (node by node if need be), then
            // a connection to each master.
            remake_bound: 2 * connection_timeout + 4 * reply_timeout,
            state: Mutex::new(ClusterState {
                conn,
                generation: 0,
                answered: Instant::now(),
                remaking: false,
            }),
            remade: tokio::sync::Notify::new(),
        }
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, ClusterState> {
        self.state.lock().unwrap_or_else(PoisonError::into_inner)
    }

    /// The connection to send a request on, and its generation: while a new connection is
    /// being made, the new one once it is made (or the attempt ends) — the old one answers
    /// nothing, so a request sent on it would only wait for its reply timeout.
    async fn current(&self) -> (ClusterConnection, u64) {
        {
            let state = self.lock();
            if !state.remaking {
                return (state.conn.clone(), state.generation);
            }
        }
        let remade = self.remade.notified();
        tokio::pin!(remade);
        remade.as_mut().enable();
        {
            // Looked at again once enabled: an attempt that ended in between is not missed.
            let state = self.lock();
            if !state.remaking {
                return (state.conn.clone(), state.generation);
            }
        }
        let _ = tokio::time::timeout(self.remake_bound, remade).await;
        let state = self.lock();
        (state.conn.clone(), state.generation)
    }

    /// Notes how a request sent on connection `generation` ended; after a timeout on a
    /// connection that has answered nothing for [`stall`](Self::stall), starts making it again
    /// in a task of its own: the caller gets its answer at once (it does not wait for the new
    /// connection, nor can it cut the making short by giving up), and the making is bounded
    /// by [`remake_bound`](Self::remake_bound).
    fn after<T>(self: &Arc<Self>, generation: u64, answer: &RedisResult<T>) {
        let silent = match answer {
            Ok(_) => false,
            Err(error) => {
                error.is_timeout() || error.is_io_error() || error.is_connection_dropped()
            }
        };
        let Ok(runtime) = tokio::runtime::Handle::try_current() else {
            return;
        };
        {
            let mut state = self.lock();
            if state.generation != generation {
                return;
            }
            if !silent {
                state.answered = Instant::now();
                return;
            }
            if state.remaking || state.answered.elapsed() < self.stall {
                return;
            }
            state.remaking = true;
        }
        runtime.spawn(Arc::clone(self).remake(generation));
    }

    /// Makes the connection again (after [`after`](Self::after) marked it as being made).
    async fn remake(self: Arc<Self>, generation: u64) {
        // Cleared however this ends (the runtime shutting down drops the task), unless the
        // end below clears it under the same lock that installs the new connection.
        struct Remaking<'a>(&'a Cluster, bool);
        impl Drop for Remaking<'_> {
            fn drop(&mut self) {
                if self.1 {
                    self.0.lock().remaking = false;
                }
                self.0.remade.notify_waiters();
            }
        }
        let mut remaking = Remaking(&self, true);
        let made =
            tokio::time::timeout(self.remake_bound, self.client.get_async_connection()).await;
        let mut state = self.lock();
        state.remaking = false;
        remaking.1 = false;
        debug_assert_eq!(state.generation, generation);
        match made {
            Ok(Ok(conn)) => {
                tracing::warn!(target: "idem", "the Redis Cluster connection answered nothing \
                    for {:?}: made it again", state.answered.elapsed());
                state.conn = conn;
                state.generation += 1;
                state.answered = Instant::now();
            }
            failed => {
                let error = match failed {
                    Ok(Err(error)) => error.to_string(),
                    _ => format!("no connection within {:?}", self.remake_bound),
                };
                // The next attempt waits for another stall: no back-to-back attempts while
                // the cluster cannot be reached.
                state.answered = Instant::now();
                tracing::warn!(target: "idem", %error, "the Redis Cluster connection answers \
                    nothing, and a new one could not be made");
            }
        }
    }
}

impl ConnectionLike for Conn {
    fn req_packed_command<'a>(&'a mut self, cmd: &'a Cmd) -> RedisFuture<'a, Value> {
        match self {
            Conn::Single(conn) => conn.req_packed_command(cmd),
            Conn::Cluster(cluster) => {
                let cluster = &*cluster;
                Box::pin(async move {
                    let (mut conn, generation) = cluster.current().await;
                    let answer = conn.req_packed_command(cmd).await;
                    cluster.after(generation, &answer);
                    answer
                })
            }
        }
    }

    fn req_packed_commands<'a>(
        &'a mut self,
        pipeline: &'a Pipeline,
        offset: usize,
        count: usize,
    ) -> RedisFuture<'a, Vec<Value>> {
        match self {
            Conn::Single(conn) => conn.req_packed_commands(pipeline, offset, count),
            Conn::Cluster(cluster) => {
                let cluster = &*cluster;
                Box::pin(async move {
                    let (mut conn, generation) = cluster.current().await;
                    let answer = conn.req_packed_commands(pipeline, offset, count).await;
                    cluster.after(generation, &answer);
                    answer
                })
            }
        }
    }

    fn get_db(&self) -> i64 {
        match self {
            Conn::Single(conn) => conn.get_db(),
            Conn::Cluster(cluster) => cluster.lock().conn.get_db(),
        }
    }
}

/// A master: the one endpoint of a standalone connection, or a cluster master's address.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(super) enum Node {
    /// The endpoint of a [`Conn::Single`].
    Endpoint,
    /// A cluster master.
    Master {
        /// Host as the cluster announces it.
        host: String,
        /// Port.
        port: u16,
    },
}

impl std::fmt::Display for Node {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Node::Endpoint => f.write_str("the server"),
            Node::Master { host, port } => write!(f, "master {host}:{port}"),
        }
    }
}

impl Conn {
    /// Every master: the endpoint alone, or each master of the cluster (from `CLUSTER SLOTS`).
    pub(super) async fn masters(&mut self) -> RedisResult<Vec<Node>> {
        let Conn::Cluster(cluster) = self else {
            return Ok(vec![Node::Endpoint]);
        };
        let (mut conn, generation) = cluster.current().await;
        let slots: RedisResult<Value> = ::redis::cmd("CLUSTER")
            .arg("SLOTS")
            .query_async(&mut conn)
            .await;
        cluster.after(generation, &slots);
        let slots = slots?;
        let mut masters = Vec::new();
        let Value::Array(ranges) = slots else {
            return Err(malformed("CLUSTER SLOTS"));
        };
        for range in ranges {
            // [start, end, [host, port, id, ...], replicas...]
            let Value::Array(range) = range else {
                return Err(malformed("CLUSTER SLOTS"));
            };
            let Some(Value::Array(master)) = range.get(2) else {
                return Err(malformed("CLUSTER SLOTS"));
            };
            let host = match master.first() {
                Some(Value::BulkString(host)) => String::from_utf8_lossy(host).into_owned(),
                Some(Value::SimpleString(host)) => host.clone(),
                _ => return Err(malformed("CLUSTER SLOTS")),
            };
            let port = match master.get(1) {
                Some(Value::Int(port)) => u16::try_from(*port).map_err(|_| malformed("port"))?,
                _ => return Err(malformed("CLUSTER SLOTS")),
            };
            let node = Node::Master { host, port };
            if !masters.contains(&node) {
                masters.push(node);
            }
        }
        Ok(masters)
    }

    /// Runs `cmd` on `node`.
    pub(super) async fn on_node(&mut self, node: &Node, cmd: &Cmd) -> RedisResult<Value> {
        match (self, node) {
            (Conn::Cluster(cluster), Node::Master { host, port }) => {
                let route = SingleNodeRoutingInfo::ByAddress {
                    host: host.clone(),
                    port: *port,
                };
                let (mut conn, generation) = cluster.current().await;
                let answer = conn
                    .route_command(cmd.clone(), RoutingInfo::SingleNode(route))
                    .await;
                cluster.after(generation, &answer);
                answer
            }
            (conn, _) => cmd.query_async(conn).await,
        }
    }
}

fn malformed(what: &'static str) -> RedisError {
    RedisError::from((
        ::redis::ErrorKind::Client,
        "unexpected reply from Redis",
        what.to_owned(),
    ))
}

/// The eviction policies under which Redis never drops a key to free memory.
const SAFE_POLICY: &str = "noeviction";

/// Checks `maxmemory-policy` on every master: anything but `noeviction` can evict a live claim
/// or record (every key of the store carries a TTL), so it is refused unless `allow` — then a
/// loud warning. Where `CONFIG` is not permitted (managed Redis), warns and goes on.
pub(super) async fn check_eviction_policy(conn: &mut Conn, allow: bool) -> Result<()> {
    let masters = match conn.masters().await {
        Ok(masters) => masters,
        Err(error) if unreachable(&error) => return Err(Error::store("connect", error)),
        Err(error) => {
            cannot_check(&Node::Endpoint, &error);
            return Ok(());
        }
    };
    let mut get = ::redis::cmd("CONFIG");
    get.arg("GET").arg("maxmemory-policy");
    for node in masters {
        let policy = match conn.on_node(&node, &get).await {
            Ok(reply) => policy_of(&reply),
            Err(error) if unreachable(&error) => return Err(Error::store("connect", error)),
            Err(error) => {
                cannot_check(&node, &error);
                continue;
            }
        };
        let Some(policy) = policy else {
            tracing::warn!(target: "idem", %node, "CONFIG GET maxmemory-policy gave no policy; \
                make sure it is `noeviction`");
            continue;
        };
        if policy == SAFE_POLICY {
            continue;
        }
        if allow {
            tracing::warn!(target: "idem", %node, policy,
                "EVICTION ALLOWED: Redis may evict idem's claims and records under memory \
                 pressure, and an evicted key runs its tool again; set `maxmemory-policy \
                 noeviction` to make that impossible");
            continue;
        }
        return Err(Error::Config(format!(
            "Redis {node} has maxmemory-policy `{policy}`: every idem key carries a TTL, so an \
             eviction policy can drop a live claim or a recorded result under memory pressure, \
             and the tool then runs a second time. Set `CONFIG SET maxmemory-policy noeviction` \
             (and in redis.conf), or give idem its own Redis; to accept the risk, connect with \
             `RedisStore::builder().allow_eviction(true)`"
        )));
    }
    Ok(())
}

/// Whether an error means the server could not be reached (as opposed to a refused command).
fn unreachable(error: &RedisError) -> bool {
    error.is_io_error()
        || error.is_timeout()
        || error.is_connection_refusal()
        || error.is_connection_dropped()
}

fn cannot_check(node: &Node, error: &RedisError) {
    tracing::warn!(target: "idem", %node, %error,
        "cannot read maxmemory-policy (CONFIG is not permitted here?); make sure it is \
         `noeviction`, or Redis may evict live claims and run tools twice");
}

/// The policy in a `CONFIG GET maxmemory-policy` reply (`[name, value]`, or a map in RESP3).
fn policy_of(reply: &Value) -> Option<String> {
    let text = |value: &Value| match value {
        Value::BulkString(bytes) => Some(String::from_utf8_lossy(bytes).into_owned()),
        Value::SimpleString(text) => Some(text.clone()),
        _ => None,
    };
    match reply {
        Value::Array(items) => items.get(1).and_then(text),
        Value::Map(pairs) => pairs.first().and_then(|(_, value)| text(value)),
        _ => None,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_policy_is_read_from_either_protocol() {
        let name = Value::BulkString(b"maxmemory-policy".to_vec());
        let value = Value::BulkString(b"allkeys-lru".to_vec());
        let resp2 = Value::Array(vec![name.clone(), value.clone()]);
        let resp3 = Value::Map(vec![(name, value)]);
        assert_eq!(policy_of(&resp2).as_deref(), Some("allkeys-lru"));
        assert_eq!(policy_of(&resp3).as_deref(), Some("allkeys-lru"));
        assert_eq!(policy_of(&Value::Array(vec![])), None);
    }
}

//! A dedup store in Redis, shared by every worker process and host that can reach it: one
//! server, or a Redis Cluster.

mod builder;
mod call;
mod claim;
mod conn;
mod layout;
mod ops;
mod reply;

use std::fmt;
use std::sync::{Arc, LazyLock};
use std::time::Duration;

use ::redis::aio::{ConnectionManager, ConnectionManagerConfig};
use ::redis::{Script, ToRedisArgs, Value};

pub use self::builder::RedisStoreBuilder;
use self::conn::Conn;
use self::reply::{Reply, corrupt, decode_record, unexpected, wrong_type};
use crate::clock::duration_ms;
use crate::key::Key;
use crate::store::Record;
use crate::{Error, Result};

/// The key prefix used unless [`RedisStore::with_prefix`] chooses another.
pub const DEFAULT_PREFIX: &str = "idem";

/// Leases, TTLs and budget windows are capped at [`MAX_DURATION`](super::MAX_DURATION), so
/// that `now + duration` stays exact in Lua's doubles and within what `PEXPIREAT` accepts.
const MAX_DURATION_MS: u64 = super::MAX_DURATION.as_secs() * 1000;

/// Keys asked for per `SCAN` step of [`Store::list`](super::Store::list).
const SCAN_COUNT: usize = 500;

macro_rules! lua {
    ($($file:literal),+) => {
        concat!(include_str!("redis/prelude.lua"), $(include_str!($file)),+)
    };
}

/// The Lua scripts, one per state transition, each prefixed with `prelude.lua` (and
/// `counts.lua` for those that charge a turn's count): their code ([`LUA`]) and [`SCRIPTS`],
/// named, from one list.
macro_rules! scripts {
    ($($name:ident: $($file:literal),+;)+) => {
        struct Scripts {
            $($name: Script,)+
        }

        const LUA: &[&str] = &[$(lua!($($file),+)),+];

        static SCRIPTS: LazyLock<Scripts> = LazyLock::new(|| Scripts {
            $($name: Script::new(lua!($($file),+)),)+
        });
    };
}

scripts! {
    begin: "redis/counts.lua", "redis/begin.lua";
    turn: "redis/counts.lua", "redis/turn.lua";
    get: "redis/get.lua";
    complete: "redis/complete.lua";
    renew: "redis/renew.lua";
    release: "redis/release.lua";
    remove: "redis/remove.lua";
    remove_shown: "redis/remove_shown.lua";
}

/// A dedup store in Redis: one store for many worker processes and hosts.
///
/// ```no_run
/// # extern crate idem_tools_runtime as idem_tools;
/// use std::sync::Arc;
/// use idem_tools::{RedisStore, Store};
///
/// # async fn demo() -> idem_tools::Result<()> {
/// let store: Arc<dyn Store> =
///     Arc::new(RedisStore::connect("redis://127.0.0.1:6379").await?.with_prefix("billing"));
/// idem_tools::set_default_store(store)?;
///
/// // A Redis Cluster: any of its nodes as seeds.
/// let cluster = RedisStore::builder()
///     .prefix("billing")
///     .connect_cluster(&["redis://10.0.0.1:6379", "redis://10.0.0.2:6379"])
///     .await?;
/// # let _ = cluster;
/// # Ok(()) }
/// ```
///
/// # Layout
///
/// Each idempotency key is one Redis hash at `<prefix>:<namespace>:{<key as 64 hex digits>}`
/// (prefix [`DEFAULT_PREFIX`] unless [`with_prefix`](Self::with_prefix) says otherwise). Tool
/// arguments never appear in Redis keys, only their digest. The hash holds the record — `state`
/// (`in_progress` or `completed`), `tok` (the fencing token of the claim that holds or
/// completed it), `fp` (the 32-byte argument fingerprint), `tool`, `turn` (the id of the turn that
/// claimed it), `hold` (the process that claimed it, [`Holder`](super::holder::Holder); empty
/// where it cannot be named), `created` and `exp` (ms since the Unix epoch; 0 once a claim was
/// given back: no record, the hash kept for its count) and `res` (the encoded result, once
/// completed) — and the
/// key's attempt count (claims by `turn`), `att` and `aexp` (when it expires), so `HGETALL` shows
/// both by hand. Redis expires the hash at the later of `exp` and `aexp`. A record written before
/// records carried their turn has no `turn`: its count belongs to no turn.
///
/// Each turn has a hash at `<prefix>:<namespace>:t:{<turn counter id in hex>}`
/// ([`TurnIdentity::turn_counter`](super::budget::TurnIdentity::turn_counter)), written by the
/// claims that start a new action: its count of started actions (`n`, `ne`; for turns with
/// `max_calls`), each tool's (`a<tool>`, `e<tool>`), its index of records (a field `k` + the
/// key's 32 bytes per action it started, worth the claim time), on a Cluster where the turn's
/// hash and the record are in different slots each charge of a claim (`c`, the key's 32 bytes
/// and the claim's token: `1` while counted, empty once given back, so that a charge or a refund
/// the cluster client sends again, after a dropped connection lost its reply, is not made twice,
/// whatever duplicates of the call charged meanwhile) and `x`, how long the hash is
/// kept: at least the budget window, the lease and the TTL past the turn's last new action, so
/// that the index names its records as long as they live, unless a tool ran, or was retried, for
/// longer than the budget window. [`Store::list_turn`](super::Store::list_turn) reads the index
/// and then each record it names.
///
/// # Redis Cluster
///
/// [`connect_cluster`](RedisStoreBuilder::connect_cluster) talks to a cluster natively (the
/// `redis` crate's cluster client: slot routing, `MOVED`/`ASK` redirections). A record and its
/// per-key count share one hash, so a claim and its budget charge run in one atomic script on
/// one master. The `{…}` around the key's hex is a hash tag. Keys are uniform BLAKE3
/// hashes, so records spread evenly over the 16384 slots and the masters. If the namespace
/// contains a hash tag (`{tenant-42}`), the first tag wins for the record, its count and the
/// turn count alike: one tenant's keys then live on one slot (useful to keep a tenant's data
/// together, at the price of balance). [`Store::list`](super::Store::list) scans every master.
///
/// On a cluster the turn's hash lives in its turn's own slot, so a `begin` whose record lies in
/// another slot takes more script calls than one: a check of the record (a replay or a wait is
/// answered there, at once); for a retry the claim; for a new action a script that counts it
/// and indexes its key (or refuses it), then the claim. Every new action writes the turn's
/// index, so a **first execution there is four round trips** (check, count, claim, complete),
/// as one in a turn with `max_calls` was before; a retry three. Per-key counting stays atomic
/// with the claim. The steps are not one transaction: a claim that then does not happen as a
/// new action (the key was claimed or completed meanwhile, or refused by its per-key limit) or
/// whose script call fails gives its counts back with one more script call, and meanwhile a
/// concurrent call in the same turn may see a count one too high; a count whose own reply is
/// lost stays counted. On a standalone server (and when the turn's hash shares the record's
/// slot, as a namespace hash tag makes it) the claim script does it all, atomically.
///
/// The cluster client sends a script again when its connection drops before the reply came
/// (`retries`), so a script may run twice for one call. Each answers the second run as it
/// answered the first: a claim that finds its own token on the key answers "claimed" (not
/// "running": the call would never learn that it holds the key, which would stay held by
/// nobody for its lease), and a turn's charge or refund made with the claim's token is not made
/// again (it counted one action twice, or gave one back twice and let the turn past its cap)
/// (`tests/redis_cluster_resends.rs`). A standalone server's connection does not send again.
///
/// A slot left half-migrated (`MIGRATING` on its master, `IMPORTING` on another, as a
/// resharding leaves it mid-way): a script call naming one key is served, by the source or,
/// for a key not there, by the target (`ASK`); a script naming two keys of the slot (the record
/// and its turn's hash, when they share the slot as a namespace hash tag makes them, whatever
/// the turn's caps) is served while both are on the source (a replay, a retry); a new action,
/// whose record is not there, is refused by Redis with `TRYAGAIN`, which the cluster client
/// retries until the reply timeout (2 s by default): the call fails closed with
/// [`Error::Store`] until the migration finishes (`tests/redis_cluster_migration.rs`).
///
/// # Time and expiry
///
/// `created_at_ms` and `expires_at_ms` are read from the Redis server's clock (`TIME` inside
/// the scripts, replicated by effects, Redis ≥ 5), and a record is live while
/// `now < expires_at_ms`, as in every store. Redis expires a key only *after* its
/// `PEXPIREAT` instant, so the scripts treat a record whose `exp` has come as absent (the next
/// claim overwrites it); Redis drops the rest by itself, so
/// [`Store::purge_expired`](super::Store::purge_expired) has nothing to do and returns 0
/// without contacting Redis. This store does not use a
/// [`Clock`](crate::clock::Clock): tests of lease and TTL expiry use short real durations.
/// Leases, TTLs and budget windows are capped at 100 years.
///
/// # Eviction
///
/// Every key the store writes carries a TTL, so any eviction policy (`volatile-*` as much as
/// `allkeys-*`) may drop a live claim or a recorded result under memory pressure, and the tool
/// then runs a second time. Connecting therefore runs `CONFIG GET maxmemory-policy` on every
/// master and fails with [`Error::Config`] unless it is `noeviction`, or the builder says
/// [`allow_eviction(true)`](RedisStoreBuilder::allow_eviction) (then it logs a loud warning).
/// Where `CONFIG` is not permitted (managed Redis), it logs a warning and connects.
///
/// # Cost per call
///
/// One round trip per store operation, each an `EVALSHA` of a cached script that runs the
/// fewest commands its step needs: a **replay** (or a wait) is `TIME` and one `HMGET`, and
/// writes nothing; a **first execution** is two round trips, the claim (`TIME`, `HMGET`,
/// `HSET`, `PEXPIREAT`, and for a new action the turn hash's `HMGET`, `HSET`, `PEXPIREAT`: its
/// counts and its index) and the completion (`TIME`, `HMGET`, `HSET`, `PEXPIREAT`); a lease
/// renewal (every quarter of the lease while the tool runs) is one more. On a cluster, where the
/// turn's hash lies in another slot, a first execution takes two more round trips (above). Calls are written straight into the command's buffer (keys spelled out piece by
/// piece, numbers in place). The scripts are loaded when connecting; after a server restart
/// empties the script cache, the first call of each script costs one extra `SCRIPT LOAD` round
/// trip. A script costs the server several times what a plain `GET` does (each command inside
/// one costs about as much as the script's own start): BENCHMARKS.md has the numbers.
///
/// # What it survives, and what it does not
///
/// - **Worker restarts and many workers:** records live in Redis, so a restarted process, or any
///   number of processes on any number of hosts, see the same keys, and exactly one of them
///   claims a free key (each transition is one atomic script). A claim whose process is
///   certainly gone — a call on the host (and in the pid namespace) where it ran finds no
///   process with its pid and start time — ends a reply timeout later (the builder's
///   `response_timeout`, 2 s by default; sooner if its lease does), so that a result the process
///   sent before it died lands first, and is then claimed again; any other holder's claim waits
///   for its lease.
/// - **Redis restarts:** only with persistence. With `appendonly yes` and `appendfsync always`
///   every acknowledged claim and completion survives a crash; `appendfsync everysec` may lose
///   the last second of them, and those keys can run again. Without persistence a restart
///   forgets every key, records, attempt counts, turn counts and claims alike, so a retry runs
///   the tool again. A call whose tool is running across the restart loses its lease at its
///   next renewal ([`Error::LeaseLost`], the body stopped), or, if its body finishes first,
///   returns its result (`Ok`) to its caller; `complete` finds no claim, so the engine records
///   the result under a new claim (outcome `lease_lost`), unless another call took the key
///   meanwhile: then a retry may run the tool again.
/// - **Redis unreachable or too slow:** every operation fails with [`Error::Store`] and the
///   engine does not run the tool (idem fails closed). The connection reconnects in the
///   background. A `begin` whose reply timed out may still have claimed: the engine gives the
///   claim back with the token it chose before sending, so no orphaned claim blocks the key.
/// - **Not survived: failover with asynchronous replication.** A replica promoted before it
///   received a claim or a completion lets a second caller claim the same key, so the tool can
///   run twice. `WAIT` does not make Redis replication synchronous; if that matters, use one
///   durable primary, or a store with synchronous replication.
/// - **Not closable by any store: a crash between the side effect and `complete`.** The tool ran
///   but its result was never recorded, so once the lease expires a retry runs it again. Forward
///   [`current_key`](crate::current_key) to downstream APIs that deduplicate to close that
///   window.
///
/// # Errors
///
/// Every Redis error (connection refused, timeout, script error) is returned as
/// [`Error::Store`] naming the operation. A key that holds something other than a well-formed
/// record (written by hand, or by something else sharing the prefix) is
/// [`Error::CorruptRecord`]; remove it with [`Store::remove`](super::Store::remove).
#[derive(Clone)]
pub struct RedisStore {
    conn: Conn,
    prefix: Arc<str>,
    /// How long a claim whose process is certainly gone is left before it is freed, so that a
    /// request that process sent before it died lands first: the reply timeout.
    holder_grace: Duration,
}

impl RedisStore {
    /// Options for connecting: prefix, timeouts, cluster, eviction policy.
    pub fn builder() -> RedisStoreBuilder {
        RedisStoreBuilder::default()
    }

    /// Connects to the Redis server at `url` (`redis://[user:password@]host:port[/db]`) with
    /// the default settings, checks its eviction policy, and loads the store's scripts.
    ///
    /// The defaults: 1 s to connect, 2 s for a reply, and two reconnection attempts before an
    /// operation gives up with [`Error::Store`]. Use [`builder`](Self::builder) to change them.
    ///
    /// # Errors
    /// [`Error::Config`] if `url` is not a Redis URL or the server may evict keys
    /// (`maxmemory-policy` other than `noeviction`); [`Error::Store`] if the server cannot be
    /// reached.
    pub async fn connect(url: &str) -> Result<Self> {
        Self::builder().connect(url).await
    }

    /// Like [`connect`](Self::connect), with the connection manager's timeouts and
    /// reconnection policy given by `config`.
    ///
    /// # Errors
    /// As [`connect`](Self::connect).
    pub async fn connect_with_config(url: &str, config: ConnectionManagerConfig) -> Result<Self> {
        Self::builder().connect_with_config(url, config).await
    }

    /// Connects to a Redis Cluster with the default settings; see
    /// [`RedisStoreBuilder::connect_cluster`].
    ///
    /// # Errors
    /// As [`RedisStoreBuilder::connect_cluster`].
    pub async fn connect_cluster<S: AsRef<str>>(seeds: &[S]) -> Result<Self> {
        Self::builder().connect_cluster(seeds).await
    }

    /// A store over an existing connection manager. Its scripts are loaded on first use, and
    /// the eviction policy is not checked.
    pub fn from_connection_manager(conn: ConnectionManager) -> Self {
        RedisStore {
            conn: Conn::Single(conn),
            prefix: Arc::from(DEFAULT_PREFIX),
            holder_grace: builder::DEFAULT_RESPONSE_TIMEOUT,
        }
    }

    /// Uses `prefix` as the first component of every Redis key instead of [`DEFAULT_PREFIX`].
    ///
    /// Stores with different prefixes do not see each other's records. Avoid a prefix that is
    /// another prefix followed by `:`, or [`Store::list`](super::Store::list) on the shorter
    /// one reports the longer one's records too.
    #[must_use]
    pub fn with_prefix(mut self, prefix: impl Into<String>) -> Self {
        self.prefix = Arc::from(prefix.into());
        self
    }

    /// The prefix of this store's Redis keys.
    pub fn prefix(&self) -> &str {
        &self.prefix
    }

    /// Whether this store talks to a Redis Cluster.
    pub fn is_cluster(&self) -> bool {
        matches!(self.conn, Conn::Cluster(..))
    }

    /// The Redis key that holds the record of `key` in `namespace`:
    /// `<prefix>:<namespace>:{<key in hex>}`.
    pub fn redis_key(&self, namespace: &str, key: &Key) -> String {
        self.record_key(namespace, key).text()
    }

    /// The Redis key of the hash of turn `turn` in `namespace` (its counts of started actions
    /// and its index of records): `<prefix>:<namespace>:t:{<turn counter id in hex>}`.
    pub fn turn_key(&self, namespace: &str, turn: &str) -> String {
        let id = super::budget::TurnIdentity::new(namespace, turn).turn_counter();
        layout::TurnKey {
            prefix: &self.prefix,
            namespace,
            id: &id,
        }
        .text()
    }

    /// Loads every script into the script cache of every node.
    async fn load_scripts(&self) -> Result<()> {
        let mut conn = self.conn.clone();
        let loaded = match &conn {
            // One round trip.
            Conn::Single(_) => {
                let mut pipe = ::redis::pipe();
                for code in LUA {
                    pipe.cmd("SCRIPT").arg("LOAD").arg(code).ignore();
                }
                pipe.exec_async(&mut conn).await
            }
            // The cluster client sends `SCRIPT LOAD` to every node.
            Conn::Cluster(_) => {
                let mut loaded = Ok(());
                for code in LUA {
                    loaded = ::redis::cmd("SCRIPT")
                        .arg("LOAD")
                        .arg(code)
                        .exec_async(&mut conn)
                        .await;
                    if loaded.is_err() {
                        break;
                    }
                }
                loaded
            }
        };
        loaded.map_err(|e| Error::store("connect", e))
    }

    /// A fenced transition (`complete`, `renew`, `release`) of `script` on `key`, whose
    /// arguments are the lease's token and then `args`: 1 done, 0 lease lost (as is a key of
    /// another type: no claim of ours is there).
    async fn fenced(
        &self,
        operation: &'static str,
        script: &Script,
        lease: &crate::store::Lease,
        args: impl FnOnce(&mut ::redis::Cmd),
        bytes: usize,
    ) -> Result<()> {
        let key = self.record_key(&lease.namespace, &lease.key);
        let mut cmd = call::evalsha(script, 1, 4, key.len() + 20 + bytes);
        cmd.arg(key).arg(call::Token(lease.token.0));
        args(&mut cmd);
        let lost = || Error::LeaseLost {
            key: lease.key.short(),
        };
        match self.eval_raw(script, &cmd).await {
            Ok(Value::Int(1)) => Ok(()),
            Ok(Value::Int(0)) => Err(lost()),
            Ok(other) => Err(unexpected(operation, &other)),
            Err(error) if call::wrong_type(&error) => Err(lost()),
            Err(error) => Err(Error::store(operation, error)),
        }
    }

    /// The record at `redis_key`, which holds `key` of `namespace`.
    async fn read(
        &self,
        operation: &'static str,
        redis_key: impl ToRedisArgs + Copy,
        namespace: &str,
        key: &Key,
    ) -> Result<Option<Record>> {
        let mut cmd = call::evalsha(&SCRIPTS.get, 1, 1, namespace.len() + 100);
        cmd.arg(redis_key);
        let reply = match self.eval_raw(&SCRIPTS.get, &cmd).await {
            Ok(reply) => reply,
            Err(error) if call::wrong_type(&error) => {
                return Err(wrong_type(key, &self.kind_of(redis_key).await));
            }
            Err(error) => return Err(Error::store(operation, error)),
        };
        match Reply::parse(operation, reply)? {
            Reply::None => Ok(None),
            Reply::Record(fields) => decode_record(namespace, key, &fields).map(Some),
            Reply::Corrupt(what) => Err(corrupt(key, what)),
            _ => Err(Error::store(operation, "unexpected reply from Redis")),
        }
    }
}

impl fmt::Debug for RedisStore {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("RedisStore")
            .field("prefix", &self.prefix)
            .field("cluster", &self.is_cluster())
            .finish_non_exhaustive()
    }
}

/// A duration in ms as a script argument, capped at [`MAX_DURATION_MS`].
fn script_ms(duration: Duration) -> u64 {
    duration_ms(duration).min(MAX_DURATION_MS)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn script_durations_are_capped() {
        assert_eq!(script_ms(Duration::MAX), MAX_DURATION_MS);
        assert_eq!(script_ms(Duration::from_millis(1500)), 1500);
    }
}

//! A dedup store in Redis, shared by every worker process and host that can reach it.

use std::collections::HashSet;
use std::fmt;
use std::sync::{Arc, LazyLock};
use std::time::Duration;

use ::redis::aio::{ConnectionManager, ConnectionManagerConfig};
use ::redis::{Script, ScriptInvocation, Value};

use super::{Begin, BeginRequest, LeaseToken, Record, RecordState, Store, StoreFuture};
use crate::clock::duration_ms;
use crate::key::{Fingerprint, Key};
use crate::{Error, Result};

/// The key prefix used unless [`RedisStore::with_prefix`] chooses another.
pub const DEFAULT_PREFIX: &str = "idem";

/// Leases and TTLs are capped at about a hundred years, so that `now + duration` stays exact in
/// Lua's doubles and within what `PEXPIREAT` accepts.
const MAX_DURATION_MS: u64 = 100 * 365 * 24 * 60 * 60 * 1000;

/// Keys asked for per `SCAN` step of [`Store::list`].
const SCAN_COUNT: usize = 500;

/// Length of a key in hex, the last component of every store key.
const KEY_HEX_LEN: usize = 64;

/// The Lua scripts, one per state transition; each touches exactly one Redis key (`KEYS[1]`).
struct Scripts {
    begin: Script,
    get: Script,
    complete: Script,
    renew: Script,
    release: Script,
}

const BEGIN_LUA: &str = include_str!("redis/begin.lua");
const GET_LUA: &str = include_str!("redis/get.lua");
const COMPLETE_LUA: &str = include_str!("redis/complete.lua");
const RENEW_LUA: &str = include_str!("redis/renew.lua");
const RELEASE_LUA: &str = include_str!("redis/release.lua");

static SCRIPTS: LazyLock<Scripts> = LazyLock::new(|| Scripts {
    begin: Script::new(BEGIN_LUA),
    get: Script::new(GET_LUA),
    complete: Script::new(COMPLETE_LUA),
    renew: Script::new(RENEW_LUA),
    release: Script::new(RELEASE_LUA),
});

/// A dedup store in Redis: one store for many worker processes and hosts.
///
/// ```no_run
/// use std::sync::Arc;
/// use idem_runtime::store::{RedisStore, Store};
///
/// # async fn demo() -> idem_runtime::Result<()> {
/// let store: Arc<dyn Store> =
///     Arc::new(RedisStore::connect("redis://127.0.0.1:6379").await?.with_prefix("billing"));
/// idem_runtime::set_default_store(store)?;
/// # Ok(()) }
/// ```
///
/// # Layout
///
/// Each idempotency key is one Redis hash at `<prefix>:<namespace>:<key as 64 hex digits>`
/// (prefix [`DEFAULT_PREFIX`] unless [`with_prefix`](Self::with_prefix) says otherwise). Tool
/// arguments never appear in Redis keys, only their digest. The hash holds the fields `state`
/// (`in_progress` or `completed`), `tok` (the fencing token, while in progress), `fp` (the
/// 32-byte argument fingerprint), `tool`, `created` and `exp` (ms since the Unix epoch) and
/// `res` (the encoded result, once completed), so `HGETALL` shows a record by hand.
///
/// A hash rather than one encoded string: either way each operation is a single `EVALSHA`, but
/// with a hash the scripts compare and update the `state` and `tok` fields directly instead of
/// parsing a binary format in Lua, `complete` sends only the result (not the metadata again), and
/// the record stays readable with `redis-cli`.
///
/// Every script touches exactly one Redis key, so the layout suits Redis Cluster: put a hash tag
/// in the namespace (`{tenant-42}`) to keep one tenant's keys on one slot. `RedisStore` itself
/// talks to one endpoint through a [`ConnectionManager`] (a standalone server, or a proxy in
/// front of a cluster); [`Store::list`] scans that endpoint only.
///
/// # Time and expiry
///
/// Redis expires records itself: an in-progress record's `PEXPIREAT` is its lease, a completed
/// record's is its TTL. `created_at_ms` and `expires_at_ms` are read from the Redis server's
/// clock (`TIME` inside the scripts, replicated by effects, Redis ≥ 5), the same clock that
/// expires the keys, so `expires_at_ms` is exactly when Redis drops the record. This store does
/// not use a [`Clock`](crate::clock::Clock): a `ManualClock` cannot move its time, so tests of
/// lease and TTL expiry use short real durations. [`Store::purge_expired`] has nothing to do
/// and returns 0 without contacting Redis. Leases and TTLs are capped at 100 years.
///
/// # Cost per call
///
/// One round trip per store operation, each an `EVALSHA` of a cached script: a first execution
/// costs two (`begin`, `complete`) plus one `renew` per third of the lease the tool runs, a replay
/// costs one. The scripts are loaded when connecting; after a server restart empties the script
/// cache, the first call of each script costs one extra `SCRIPT LOAD` round trip.
///
/// # What it survives, and what it does not
///
/// - **Worker restarts and many workers:** records live in Redis, so a restarted process, or any
///   number of processes on any number of hosts, see the same keys, and exactly one of them
///   claims a free key (each transition is one atomic script).
/// - **Redis restarts:** only with persistence. With `appendonly yes` and `appendfsync always`
///   every acknowledged claim and completion survives a crash; `appendfsync everysec` may lose
///   the last second of them, and those keys can run again. Without persistence a restart
///   forgets every key.
/// - **Redis unreachable:** every operation fails with [`Error::Store`] and the engine does not
///   run the tool (idem fails closed). The connection manager reconnects in the background.
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
/// [`Error::CorruptRecord`]; remove it with [`Store::remove`].
#[derive(Clone)]
pub struct RedisStore {
    conn: ConnectionManager,
    prefix: Arc<str>,
}

impl RedisStore {
    /// Connects to the Redis server at `url` (`redis://[user:password@]host:port[/db]`) with
    /// the default connection settings, and loads the store's scripts.
    ///
    /// The defaults: 1 s to connect, 2 s for a reply, and two reconnection attempts before an
    /// operation gives up with [`Error::Store`]. Use
    /// [`connect_with_config`](Self::connect_with_config) to change them.
    ///
    /// # Errors
    /// [`Error::Config`] if `url` is not a Redis URL; [`Error::Store`] if the server cannot be
    /// reached.
    pub async fn connect(url: &str) -> Result<Self> {
        Self::connect_with_config(url, default_config()).await
    }

    /// Like [`connect`](Self::connect), with the connection manager's timeouts and
    /// reconnection policy given by `config`.
    ///
    /// # Errors
    /// As [`connect`](Self::connect).
    pub async fn connect_with_config(url: &str, config: ConnectionManagerConfig) -> Result<Self> {
        let client = ::redis::Client::open(url)
            .map_err(|e| Error::Config(format!("invalid Redis URL: {e}")))?;
        let conn = ConnectionManager::new_with_config(client, config)
            .await
            .map_err(|e| Error::store("connect", e))?;
        let store = Self::from_connection_manager(conn);
        store.load_scripts().await?;
        Ok(store)
    }

    /// A store over an existing connection manager. Its scripts are loaded on first use.
    pub fn from_connection_manager(conn: ConnectionManager) -> Self {
        RedisStore {
            conn,
            prefix: Arc::from(DEFAULT_PREFIX),
        }
    }

    /// Uses `prefix` as the first component of every Redis key instead of [`DEFAULT_PREFIX`].
    ///
    /// Stores with different prefixes do not see each other's records. Avoid a prefix that is
    /// another prefix followed by `:`, or [`Store::list`] on the shorter one reports the longer
    /// one's records too.
    pub fn with_prefix(mut self, prefix: impl Into<String>) -> Self {
        self.prefix = Arc::from(prefix.into());
        self
    }

    /// The prefix of this store's Redis keys.
    pub fn prefix(&self) -> &str {
        &self.prefix
    }

    /// The Redis key that holds the record of `key` in `namespace`:
    /// `<prefix>:<namespace>:<key in hex>`.
    pub fn redis_key(&self, namespace: &str, key: &Key) -> String {
        format!("{}:{namespace}:{}", self.prefix, key.to_hex())
    }

    /// Loads every script into the server's script cache in one round trip.
    async fn load_scripts(&self) -> Result<()> {
        let mut pipe = ::redis::pipe();
        for code in [BEGIN_LUA, GET_LUA, COMPLETE_LUA, RENEW_LUA, RELEASE_LUA] {
            pipe.cmd("SCRIPT").arg("LOAD").arg(code).ignore();
        }
        let mut conn = self.conn.clone();
        pipe.exec_async(&mut conn)
            .await
            .map_err(|e| Error::store("connect", e))
    }

    /// Runs a script: `EVALSHA`, plus `SCRIPT LOAD` and a second `EVALSHA` if the server lost
    /// its script cache.
    async fn invoke(
        &self,
        operation: &'static str,
        invocation: ScriptInvocation<'static>,
    ) -> Result<Value> {
        let mut conn = self.conn.clone();
        invocation
            .invoke_async(&mut conn)
            .await
            .map_err(|e| Error::store(operation, e))
    }

    /// A fenced transition (`complete`, `renew`, `release`): 1 done, 0 lease lost.
    async fn fenced(
        &self,
        operation: &'static str,
        invocation: ScriptInvocation<'static>,
        key: &Key,
    ) -> Result<()> {
        match self.invoke(operation, invocation).await? {
            Value::Int(1) => Ok(()),
            Value::Int(0) => Err(Error::LeaseLost { key: key.short() }),
            other => Err(unexpected(operation, &other)),
        }
    }

    /// The record at `redis_key`, which holds `key` of `namespace`.
    async fn read(
        &self,
        operation: &'static str,
        redis_key: &str,
        namespace: &str,
        key: &Key,
    ) -> Result<Option<Record>> {
        let mut invocation = SCRIPTS.get.prepare_invoke();
        invocation.key(redis_key);
        let reply = self.invoke(operation, invocation).await?;
        match Reply::parse(operation, reply)? {
            Reply::Tag(tag) if tag == b"none" => Ok(None),
            Reply::Record(fields) => decode_record(namespace, key, &fields).map(Some),
            Reply::WrongType(kind) => Err(wrong_type(key, &kind)),
            Reply::Tag(_) => Err(Error::store(operation, "unexpected reply from Redis")),
        }
    }
}

/// Splits a Redis key `<prefix>:<namespace>:<key in hex>` into its namespace and key.
fn parse_redis_key(prefix: &str, raw: &[u8]) -> Option<(String, Key)> {
    let text = std::str::from_utf8(raw).ok()?;
    let rest = text.strip_prefix(prefix)?.strip_prefix(':')?;
    let split = rest.len().checked_sub(KEY_HEX_LEN + 1)?;
    let (namespace, tail) = (rest.get(..split)?, rest.get(split..)?);
    let hex = tail.strip_prefix(':')?;
    Some((namespace.to_owned(), Key::from_hex(hex).ok()?))
}

/// The connection settings of [`RedisStore::connect`].
fn default_config() -> ConnectionManagerConfig {
    ConnectionManagerConfig::new()
        .set_connection_timeout(Some(Duration::from_secs(1)))
        .set_response_timeout(Some(Duration::from_secs(2)))
        .set_number_of_retries(2)
        .set_max_delay(Duration::from_millis(500))
}

impl fmt::Debug for RedisStore {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("RedisStore")
            .field("prefix", &self.prefix)
            .finish_non_exhaustive()
    }
}

/// A duration in ms as a script argument, capped at [`MAX_DURATION_MS`].
fn script_ms(duration: Duration) -> u64 {
    duration_ms(duration).min(MAX_DURATION_MS)
}

/// The replies of the `begin` and `get` scripts.
enum Reply {
    /// `{'claimed'}` or `{'none'}`.
    Tag(Vec<u8>),
    /// `{'record', state, fp, tool, created, exp, res}`: the six fields, `None` where absent.
    Record(Vec<Option<Vec<u8>>>),
    /// `{'wrongtype', type}`: the key holds another Redis type.
    WrongType(String),
}

impl Reply {
    fn parse(operation: &'static str, reply: Value) -> Result<Reply> {
        let Value::Array(items) = reply else {
            return Err(unexpected(operation, &reply));
        };
        let mut items = items.into_iter();
        let tag = match items.next() {
            Some(Value::BulkString(tag)) => tag,
            _ => return Err(Error::store(operation, "unexpected reply from Redis")),
        };
        match tag.as_slice() {
            b"record" => {
                let fields = items
                    .map(|item| match item {
                        Value::BulkString(bytes) => Ok(Some(bytes)),
                        Value::Nil => Ok(None),
                        other => Err(unexpected(operation, &other)),
                    })
                    .collect::<Result<Vec<_>>>()?;
                Ok(Reply::Record(fields))
            }
            b"wrongtype" => {
                let kind = match items.next() {
                    Some(Value::BulkString(kind)) => String::from_utf8_lossy(&kind).into_owned(),
                    _ => "unknown".to_owned(),
                };
                Ok(Reply::WrongType(kind))
            }
            _ => Ok(Reply::Tag(tag)),
        }
    }
}

/// A reply of an unexpected shape (never data from the record: it may be large or private).
fn unexpected(operation: &'static str, value: &Value) -> Error {
    let shape = match value {
        Value::Nil => "nil",
        Value::Int(_) => "an integer",
        Value::BulkString(_) => "a string",
        Value::Array(_) => "an array",
        Value::ServerError(_) => "an error",
        _ => "an unexpected type",
    };
    Error::store(operation, format!("unexpected reply from Redis: {shape}"))
}

fn corrupt(key: &Key, message: impl Into<String>) -> Error {
    Error::CorruptRecord {
        key: key.short(),
        message: message.into(),
    }
}

fn wrong_type(key: &Key, kind: &str) -> Error {
    corrupt(
        key,
        format!("the Redis key holds a {kind}, not an idem record (a hash)"),
    )
}

/// Builds a [`Record`] from the fields `state, fp, tool, created, exp, res`.
fn decode_record(namespace: &str, key: &Key, fields: &[Option<Vec<u8>>]) -> Result<Record> {
    let [state, fp, tool, created, exp, res] = fields else {
        return Err(corrupt(
            key,
            format!("expected 6 fields, got {}", fields.len()),
        ));
    };
    let field = |value: &Option<Vec<u8>>, name: &str| -> Result<Vec<u8>> {
        value
            .clone()
            .ok_or_else(|| corrupt(key, format!("field `{name}` is missing")))
    };
    let millis = |value: &Option<Vec<u8>>, name: &str| -> Result<u64> {
        let bytes = field(value, name)?;
        std::str::from_utf8(&bytes)
            .ok()
            .and_then(|text| text.parse().ok())
            .ok_or_else(|| corrupt(key, format!("field `{name}` is not a number of ms")))
    };
    let state = match field(state, "state")?.as_slice() {
        b"in_progress" => RecordState::InProgress,
        b"completed" => RecordState::Completed,
        _ => {
            return Err(corrupt(
                key,
                "field `state` is neither in_progress nor completed",
            ));
        }
    };
    let fingerprint = <[u8; 32]>::try_from(field(fp, "fp")?.as_slice())
        .map(Fingerprint::from_bytes)
        .map_err(|_| corrupt(key, "field `fp` is not 32 bytes"))?;
    let tool = String::from_utf8(field(tool, "tool")?)
        .map_err(|_| corrupt(key, "field `tool` is not UTF-8"))?;
    let result = match state {
        RecordState::Completed => Some(field(res, "res")?),
        RecordState::InProgress => None,
    };
    Ok(Record {
        namespace: namespace.to_owned(),
        key: *key,
        tool,
        state,
        fingerprint,
        result,
        created_at_ms: millis(created, "created")?,
        expires_at_ms: millis(exp, "exp")?,
    })
}

/// Escapes the glob characters of `text` for `SCAN MATCH`.
fn glob_escape(text: &str) -> String {
    let mut out = String::with_capacity(text.len());
    for c in text.chars() {
        if matches!(c, '*' | '?' | '[' | ']' | '\\') {
            out.push('\\');
        }
        out.push(c);
    }
    out
}

impl Store for RedisStore {
    fn begin<'a>(&'a self, req: BeginRequest<'a>) -> StoreFuture<'a, Begin> {
        Box::pin(async move {
            const OP: &str = "begin";
            let token = LeaseToken::generate();
            let mut invocation = SCRIPTS.begin.prepare_invoke();
            invocation
                .key(self.redis_key(req.namespace, req.key))
                .arg(token.0.to_string())
                .arg(req.fingerprint.as_bytes().as_slice())
                .arg(req.tool)
                .arg(script_ms(req.lease));
            let reply = self.invoke(OP, invocation).await?;
            match Reply::parse(OP, reply)? {
                Reply::Tag(tag) if tag == b"claimed" => Ok(Begin::Claimed(token)),
                Reply::Record(fields) => {
                    let record = decode_record(req.namespace, req.key, &fields)?;
                    Ok(match record.state {
                        RecordState::Completed => Begin::Completed(record),
                        RecordState::InProgress => Begin::InFlight(record),
                    })
                }
                Reply::WrongType(kind) => Err(wrong_type(req.key, &kind)),
                Reply::Tag(_) => Err(Error::store(OP, "unexpected reply from Redis")),
            }
        })
    }

    fn renew<'a>(
        &'a self,
        namespace: &'a str,
        key: &'a Key,
        token: LeaseToken,
        lease: Duration,
    ) -> StoreFuture<'a, ()> {
        Box::pin(async move {
            let mut invocation = SCRIPTS.renew.prepare_invoke();
            invocation
                .key(self.redis_key(namespace, key))
                .arg(token.0.to_string())
                .arg(script_ms(lease));
            self.fenced("renew", invocation, key).await
        })
    }

    fn complete<'a>(
        &'a self,
        namespace: &'a str,
        key: &'a Key,
        token: LeaseToken,
        result: &'a [u8],
        ttl: Duration,
    ) -> StoreFuture<'a, ()> {
        Box::pin(async move {
            let mut invocation = SCRIPTS.complete.prepare_invoke();
            invocation
                .key(self.redis_key(namespace, key))
                .arg(token.0.to_string())
                .arg(script_ms(ttl))
                .arg(result);
            self.fenced("complete", invocation, key).await
        })
    }

    fn release<'a>(
        &'a self,
        namespace: &'a str,
        key: &'a Key,
        token: LeaseToken,
    ) -> StoreFuture<'a, ()> {
        Box::pin(async move {
            let mut invocation = SCRIPTS.release.prepare_invoke();
            invocation
                .key(self.redis_key(namespace, key))
                .arg(token.0.to_string());
            self.fenced("release", invocation, key).await
        })
    }

    fn get<'a>(&'a self, namespace: &'a str, key: &'a Key) -> StoreFuture<'a, Option<Record>> {
        Box::pin(async move {
            self.read("get", &self.redis_key(namespace, key), namespace, key)
                .await
        })
    }

    /// Redis expires records itself (`PEXPIREAT`), so there is nothing to purge: returns 0
    /// without contacting the server.
    fn purge_expired(&self) -> StoreFuture<'_, u64> {
        Box::pin(std::future::ready(Ok(0)))
    }

    /// `SCAN`s `<prefix>:<namespace>:*` (or `<prefix>:*`) and reads each record with one
    /// script call: an admin operation, not for hot paths. Records that fail to decode are
    /// skipped with a warning, so that one corrupt key does not hide the others.
    fn list<'a>(
        &'a self,
        namespace: Option<&'a str>,
        limit: usize,
    ) -> StoreFuture<'a, Vec<Record>> {
        Box::pin(async move {
            const OP: &str = "list";
            let mut out = Vec::new();
            if limit == 0 {
                return Ok(out);
            }
            let pattern = match namespace {
                Some(ns) => format!(
                    "{}:{}:{}",
                    glob_escape(&self.prefix),
                    glob_escape(ns),
                    "?".repeat(KEY_HEX_LEN)
                ),
                None => format!("{}:*", glob_escape(&self.prefix)),
            };
            let mut conn = self.conn.clone();
            let mut seen = HashSet::new();
            let mut cursor: u64 = 0;
            loop {
                let (next, batch): (u64, Vec<Vec<u8>>) = ::redis::cmd("SCAN")
                    .arg(cursor)
                    .arg("MATCH")
                    .arg(&pattern)
                    .arg("COUNT")
                    .arg(SCAN_COUNT)
                    .query_async(&mut conn)
                    .await
                    .map_err(|e| Error::store(OP, e))?;
                for raw in batch {
                    let Some((ns, key)) = parse_redis_key(&self.prefix, &raw) else {
                        continue;
                    };
                    if namespace.is_some_and(|wanted| wanted != ns) || !seen.insert(raw.clone()) {
                        continue;
                    }
                    let redis_key = String::from_utf8_lossy(&raw);
                    match self.read(OP, &redis_key, &ns, &key).await {
                        Ok(Some(record)) => out.push(record),
                        Ok(None) => {} // expired or removed since the scan saw it
                        Err(error @ Error::CorruptRecord { .. }) => {
                            tracing::warn!(target: "idem", redis_key = %redis_key, %error,
                                "skipping a corrupt record");
                        }
                        Err(error) => return Err(error),
                    }
                    if out.len() >= limit {
                        return Ok(out);
                    }
                }
                if next == 0 {
                    return Ok(out);
                }
                cursor = next;
            }
        })
    }

    fn remove<'a>(&'a self, namespace: &'a str, key: &'a Key) -> StoreFuture<'a, bool> {
        Box::pin(async move {
            let mut conn = self.conn.clone();
            let removed: u64 = ::redis::cmd("DEL")
                .arg(self.redis_key(namespace, key))
                .query_async(&mut conn)
                .await
                .map_err(|e| Error::store("remove", e))?;
            Ok(removed > 0)
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn glob_characters_are_escaped() {
        assert_eq!(glob_escape(r"a*b?c[d]e\f"), r"a\*b\?c\[d\]e\\f");
    }

    #[test]
    fn redis_keys_split_into_namespace_and_key() {
        let key = Key::from_bytes([0xab; 32]);
        let raw = format!("idem:a:b:{}", key.to_hex());
        assert_eq!(
            parse_redis_key("idem", raw.as_bytes()),
            Some(("a:b".to_owned(), key))
        );
        let empty = format!("idem::{}", key.to_hex());
        assert_eq!(
            parse_redis_key("idem", empty.as_bytes()),
            Some((String::new(), key))
        );
        assert_eq!(parse_redis_key("other", raw.as_bytes()), None);
        assert_eq!(parse_redis_key("idem", b"idem:ns:not-a-key"), None);
    }

    #[test]
    fn script_durations_are_capped() {
        assert_eq!(script_ms(Duration::MAX), MAX_DURATION_MS);
        assert_eq!(script_ms(Duration::from_millis(1500)), 1500);
    }

    #[test]
    fn records_with_missing_or_bad_fields_are_corrupt() {
        let key = Key::from_bytes([7; 32]);
        let good = |state: &str| {
            vec![
                Some(state.as_bytes().to_vec()),
                Some(vec![1; 32]),
                Some(b"send".to_vec()),
                Some(b"1000".to_vec()),
                Some(b"2000".to_vec()),
                Some(b"result".to_vec()),
            ]
        };
        let record = decode_record("ns", &key, &good("completed")).ok();
        assert_eq!(record.and_then(|r| r.result), Some(b"result".to_vec()));
        let running = decode_record("ns", &key, &good("in_progress")).ok();
        assert_eq!(running.map(|r| r.result), Some(None));

        let mut bad_state = good("completed");
        bad_state[0] = Some(b"zzz".to_vec());
        let mut short_fp = good("completed");
        short_fp[1] = Some(vec![1; 31]);
        let mut no_result = good("completed");
        no_result[5] = None;
        let mut bad_time = good("completed");
        bad_time[3] = Some(b"soon".to_vec());
        for fields in [bad_state, short_fp, no_result, bad_time, vec![None]] {
            assert!(matches!(
                decode_record("ns", &key, &fields),
                Err(Error::CorruptRecord { .. })
            ));
        }
    }
}

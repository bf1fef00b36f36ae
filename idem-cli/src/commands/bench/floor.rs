//! The floors `idem bench` measures idem against: the least a deduplicating tool call has to
//! ask of the same store, hand-written with the same driver and settings.
//!
//! - a **replay** is one read of the key's result (SQLite and PostgreSQL: one `SELECT` by
//!   primary key; Redis: one `GET`);
//! - a **first execution** is a claim and a completion (SQLite and PostgreSQL: an `INSERT …
//!   ON CONFLICT DO UPDATE … WHERE` that takes an expired row over, then an `UPDATE` of the
//!   result, each its own autocommit transaction; Redis: `SET NX PX`, then `SET XX PX`).
//!
//! The key is the BLAKE3 digest of the arguments' `serde_json` bytes, computed by the caller.
//! No namespace, tool name, fingerprint, budget, lease renewal or fencing beyond the claim's
//! token: what idem does on top of this is what the comparison shows.
//!
//! Each floor names only the crate of its store's driver (`rusqlite`, `redis`, `sqlx`), behind
//! the CLI feature of that store.
#![allow(dead_code)] // each user (the CLI, a bench target) uses part of it

use std::future::Future;
use std::pin::Pin;
use std::time::{Duration, SystemTime, UNIX_EPOCH};

/// A floor operation's future.
pub type FloorFuture<'a, T> = Pin<Box<dyn Future<Output = Result<T, String>> + Send + 'a>>;

/// How long a floor's claim and record last (as idem's defaults).
pub const LEASE: Duration = Duration::from_secs(30);
/// See [`LEASE`].
pub const TTL: Duration = Duration::from_secs(24 * 60 * 60);

/// The hand-written minimum on one store.
pub trait Floor: Send + Sync {
    /// Claims `key` (fails if it is claimed or recorded), then records `result` under it.
    fn first<'a>(&'a self, key: &'a [u8; 32], result: &'a [u8]) -> FloorFuture<'a, ()>;
    /// The result recorded under `key` (fails if there is none).
    fn replay<'a>(&'a self, key: &'a [u8; 32]) -> FloorFuture<'a, Vec<u8>>;
    /// Deletes what the floor wrote.
    fn clean(&self) -> FloorFuture<'_, ()>;
}

fn now_ms() -> i64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map_or(0, |d| i64::try_from(d.as_millis()).unwrap_or(i64::MAX))
}

fn ms(d: Duration) -> i64 {
    i64::try_from(d.as_millis()).unwrap_or(i64::MAX)
}

/// A claim's token: unique enough for a floor.
fn token() -> i64 {
    use std::sync::atomic::{AtomicI64, Ordering};
    static NEXT: AtomicI64 = AtomicI64::new(1);
    NEXT.fetch_add(1, Ordering::Relaxed)
}

/// SQLite: one connection per process (WAL, `synchronous = NORMAL`, a 5 s busy timeout, as
/// idem's), used by every task in turn, its statements prepared once and cached; each call runs
/// on the calling thread.
#[cfg(feature = "sqlite")]
pub struct SqliteFloor {
    conn: std::sync::Mutex<rusqlite::Connection>,
    table: String,
    /// The statements' text (their prepared forms are cached by the connection).
    claim: String,
    record: String,
    read: String,
}

#[cfg(feature = "sqlite")]
impl SqliteFloor {
    /// Opens `path` (creating it if needed) and the floor's table `table` in it (a `WITHOUT
    /// ROWID` table keyed by the digest, like idem's records).
    ///
    /// # Errors
    /// If the file cannot be opened or the table created.
    pub fn open(path: &std::path::Path, table: &str) -> Result<SqliteFloor, String> {
        let fail = |e: rusqlite::Error| format!("SQLite floor: {e}");
        let conn = rusqlite::Connection::open(path).map_err(fail)?;
        conn.busy_timeout(Duration::from_secs(5)).map_err(fail)?;
        let _: String = conn
            .pragma_update_and_check(None, "journal_mode", "wal", |row| row.get(0))
            .map_err(fail)?;
        conn.pragma_update(None, "synchronous", "NORMAL")
            .map_err(fail)?;
        conn.execute_batch(&format!(
            "CREATE TABLE IF NOT EXISTS {table} (key BLOB NOT NULL PRIMARY KEY, \
             token INTEGER NOT NULL, result BLOB, expires_at_ms INTEGER NOT NULL) \
             STRICT, WITHOUT ROWID"
        ))
        .map_err(fail)?;
        Ok(SqliteFloor {
            conn: std::sync::Mutex::new(conn),
            table: table.to_owned(),
            claim: format!(
                "INSERT INTO {table} (key, token, result, expires_at_ms) \
                 VALUES (?1, ?2, NULL, ?3) ON CONFLICT (key) DO UPDATE SET \
                 token = excluded.token, result = NULL, expires_at_ms = excluded.expires_at_ms \
                 WHERE {table}.expires_at_ms <= ?4"
            ),
            record: format!(
                "UPDATE {table} SET result = ?1, expires_at_ms = ?2 WHERE key = ?3 AND token = ?4"
            ),
            read: format!("SELECT result, expires_at_ms FROM {table} WHERE key = ?1"),
        })
    }

    fn with<T>(
        &self,
        f: impl FnOnce(&rusqlite::Connection) -> rusqlite::Result<T>,
    ) -> Result<T, String> {
        let conn = self
            .conn
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner);
        f(&conn).map_err(|e| format!("SQLite floor: {e}"))
    }
}

#[cfg(feature = "sqlite")]
impl Floor for SqliteFloor {
    fn first<'a>(&'a self, key: &'a [u8; 32], result: &'a [u8]) -> FloorFuture<'a, ()> {
        Box::pin(async move {
            let (now, token) = (now_ms(), token());
            self.with(|conn| {
                let claimed = conn
                    .prepare_cached(&self.claim)?
                    .execute(rusqlite::params![&key[..], token, now + ms(LEASE), now])?;
                let recorded = conn
                    .prepare_cached(&self.record)?
                    .execute(rusqlite::params![result, now + ms(TTL), &key[..], token])?;
                Ok((claimed, recorded))
            })
            .and_then(|changed| match changed {
                (1, 1) => Ok(()),
                other => Err(format!("SQLite floor: claim and record changed {other:?}")),
            })
        })
    }

    fn replay<'a>(&'a self, key: &'a [u8; 32]) -> FloorFuture<'a, Vec<u8>> {
        Box::pin(async move {
            let (result, expires): (Option<Vec<u8>>, i64) = self.with(|conn| {
                conn.prepare_cached(&self.read)?
                    .query_row([&key[..]], |row| Ok((row.get(0)?, row.get(1)?)))
            })?;
            match result {
                Some(result) if expires > now_ms() => Ok(result),
                _ => Err("SQLite floor: no live result".to_owned()),
            }
        })
    }

    fn clean(&self) -> FloorFuture<'_, ()> {
        Box::pin(async move {
            let table = &self.table;
            self.with(|conn| conn.execute_batch(&format!("DROP TABLE IF EXISTS {table}")))
        })
    }
}

#[cfg(feature = "redis")]
const HEX: &[u8; 16] = b"0123456789abcdef";

/// Redis: the same connection manager idem uses (`redis` crate, multiplexed), keys
/// `<prefix>:{<digest in hex>}`.
#[cfg(feature = "redis")]
pub struct RedisFloor {
    conn: redis::aio::ConnectionManager,
    prefix: String,
    /// Keys of idem's deleted with the floor's (the run's turn hash, which `remove` keeps).
    also: Vec<String>,
}

#[cfg(feature = "redis")]
impl RedisFloor {
    /// Connects to `url`; the floor's keys start with `prefix`.
    ///
    /// # Errors
    /// If the server cannot be reached.
    pub async fn connect(url: &str, prefix: &str) -> Result<RedisFloor, String> {
        let client = redis::Client::open(url).map_err(|e| format!("Redis floor: {e}"))?;
        let conn = redis::aio::ConnectionManager::new(client)
            .await
            .map_err(|e| format!("Redis floor: {e}"))?;
        Ok(RedisFloor {
            conn,
            prefix: prefix.to_owned(),
            also: Vec::new(),
        })
    }

    /// Deletes `keys` of idem's too when it cleans up.
    pub fn also_cleaning(mut self, keys: Vec<String>) -> Self {
        self.also = keys;
        self
    }

    /// `cmd` with the Redis key of `key`, `<prefix>:{<hex>}`, as its first argument, spelled
    /// out on the stack.
    fn command(&self, cmd: &str, key: &[u8; 32]) -> redis::Cmd {
        let mut buf = [0u8; 256];
        let prefix = self.prefix.as_bytes();
        let len = prefix.len() + 67;
        let mut out = redis::cmd(cmd);
        if len > buf.len() {
            let hex: String = key.iter().map(|b| format!("{b:02x}")).collect();
            out.arg(format!("{}:{{{hex}}}", self.prefix));
            return out;
        }
        buf[..prefix.len()].copy_from_slice(prefix);
        buf[prefix.len()..prefix.len() + 2].copy_from_slice(b":{");
        for (i, b) in key.iter().enumerate() {
            let at = prefix.len() + 2 + 2 * i;
            buf[at] = HEX[usize::from(b >> 4)];
            buf[at + 1] = HEX[usize::from(b & 15)];
        }
        buf[len - 1] = b'}';
        out.arg(&buf[..len]);
        out
    }
}

#[cfg(feature = "redis")]
impl Floor for RedisFloor {
    fn first<'a>(&'a self, key: &'a [u8; 32], result: &'a [u8]) -> FloorFuture<'a, ()> {
        Box::pin(async move {
            let mut conn = self.conn.clone();
            let claimed: Option<String> = self
                .command("SET", key)
                .arg(token())
                .arg("NX")
                .arg("PX")
                .arg(ms(LEASE))
                .query_async(&mut conn)
                .await
                .map_err(|e| format!("Redis floor: {e}"))?;
            let recorded: Option<String> = self
                .command("SET", key)
                .arg(result)
                .arg("XX")
                .arg("PX")
                .arg(ms(TTL))
                .query_async(&mut conn)
                .await
                .map_err(|e| format!("Redis floor: {e}"))?;
            match (claimed, recorded) {
                (Some(_), Some(_)) => Ok(()),
                _ => Err("Redis floor: the claim or the record did not take".to_owned()),
            }
        })
    }

    fn replay<'a>(&'a self, key: &'a [u8; 32]) -> FloorFuture<'a, Vec<u8>> {
        Box::pin(async move {
            let mut conn = self.conn.clone();
            let result: Option<Vec<u8>> = self
                .command("GET", key)
                .query_async(&mut conn)
                .await
                .map_err(|e| format!("Redis floor: {e}"))?;
            result.ok_or_else(|| "Redis floor: no result".to_owned())
        })
    }

    fn clean(&self) -> FloorFuture<'_, ()> {
        Box::pin(async move {
            let mut conn = self.conn.clone();
            let pattern = format!("{}:*", self.prefix);
            let mut cursor: u64 = 0;
            loop {
                let (next, keys): (u64, Vec<Vec<u8>>) = redis::cmd("SCAN")
                    .arg(cursor)
                    .arg("MATCH")
                    .arg(&pattern)
                    .arg("COUNT")
                    .arg(1000)
                    .query_async(&mut conn)
                    .await
                    .map_err(|e| format!("Redis floor: {e}"))?;
                if !keys.is_empty() {
                    let _: () = redis::cmd("UNLINK")
                        .arg(keys)
                        .query_async(&mut conn)
                        .await
                        .map_err(|e| format!("Redis floor: {e}"))?;
                }
                if next == 0 {
                    break;
                }
                cursor = next;
            }
            if !self.also.is_empty() {
                let _: () = redis::cmd("UNLINK")
                    .arg(&self.also)
                    .query_async(&mut conn)
                    .await
                    .map_err(|e| format!("Redis floor: {e}"))?;
            }
            Ok(())
        })
    }
}

/// PostgreSQL: a pool of its own with the store's settings (`sqlx`, the same size and options
/// as the `PostgresStore`'s pool, `test_before_acquire(false)`), statements prepared once per
/// connection (sqlx's cache, as idem's), on a table of the run's own:
///
/// ```sql
/// CREATE TABLE <table> (key bytea PRIMARY KEY, token bigint NOT NULL, result bytea,
///                       expires_at_ms bigint NOT NULL)
/// -- replay: one round trip
/// SELECT result, expires_at_ms FROM <table> WHERE key = $1
/// -- first execution: two round trips, each its own autocommit transaction
/// INSERT INTO <table> (key, token, result, expires_at_ms) VALUES ($1, $2, NULL, $3)
///     ON CONFLICT (key) DO UPDATE SET token = excluded.token, result = NULL,
///     expires_at_ms = excluded.expires_at_ms WHERE <table>.expires_at_ms <= $4
/// UPDATE <table> SET result = $1, expires_at_ms = $2 WHERE key = $3 AND token = $4
/// ```
///
/// That is what idem's store needs at the least too (a replay is one `idem_begin` that reads;
/// a first execution an `idem_begin` that claims and a `complete`), so the two sides make the
/// same round trips and the ratio is the price of what idem does inside them. Times come from
/// the client's clock (idem's from the server's, `clock_timestamp()`).
#[cfg(feature = "postgres")]
pub struct PostgresFloor {
    pool: sqlx::PgPool,
    /// The table, schema-qualified and quoted.
    table: String,
    claim: String,
    record: String,
    read: String,
}

/// `name` quoted as a PostgreSQL identifier.
#[cfg(feature = "postgres")]
fn quote_ident(name: &str) -> String {
    format!("\"{}\"", name.replace('"', "\"\""))
}

#[cfg(feature = "postgres")]
impl PostgresFloor {
    /// Creates the floor's table `table` (in `schema`, else the connection's `search_path`)
    /// with a pool of its own, sized and set as `like` (the store's pool).
    ///
    /// # Errors
    /// If the server cannot be reached or the table created.
    pub async fn create(
        like: &sqlx::PgPool,
        schema: Option<&str>,
        table: &str,
    ) -> Result<PostgresFloor, String> {
        let fail = |e: sqlx::Error| format!("PostgreSQL floor: {e}");
        let options = (*like.connect_options()).clone();
        let pool = like.options().clone().connect_lazy_with(options);
        let table = match schema {
            Some(schema) => format!("{}.{}", quote_ident(schema), quote_ident(table)),
            None => quote_ident(table),
        };
        sqlx::raw_sql(&format!(
            "CREATE TABLE IF NOT EXISTS {table} (key bytea NOT NULL PRIMARY KEY, \
             token bigint NOT NULL, result bytea, expires_at_ms bigint NOT NULL)"
        ))
        .execute(&pool)
        .await
        .map_err(fail)?;
        Ok(PostgresFloor {
            pool,
            claim: format!(
                "INSERT INTO {table} AS t (key, token, result, expires_at_ms) \
                 VALUES ($1, $2, NULL, $3) ON CONFLICT (key) DO UPDATE SET \
                 token = excluded.token, result = NULL, expires_at_ms = excluded.expires_at_ms \
                 WHERE t.expires_at_ms <= $4"
            ),
            record: format!(
                "UPDATE {table} SET result = $1, expires_at_ms = $2 WHERE key = $3 AND token = $4"
            ),
            read: format!("SELECT result, expires_at_ms FROM {table} WHERE key = $1"),
            table,
        })
    }
}

#[cfg(feature = "postgres")]
impl Floor for PostgresFloor {
    fn first<'a>(&'a self, key: &'a [u8; 32], result: &'a [u8]) -> FloorFuture<'a, ()> {
        Box::pin(async move {
            let fail = |e: sqlx::Error| format!("PostgreSQL floor: {e}");
            let (now, token) = (now_ms(), token());
            let claimed = sqlx::query(&self.claim)
                .bind(&key[..])
                .bind(token)
                .bind(now + ms(LEASE))
                .bind(now)
                .execute(&self.pool)
                .await
                .map_err(fail)?
                .rows_affected();
            let recorded = sqlx::query(&self.record)
                .bind(result)
                .bind(now + ms(TTL))
                .bind(&key[..])
                .bind(token)
                .execute(&self.pool)
                .await
                .map_err(fail)?
                .rows_affected();
            match (claimed, recorded) {
                (1, 1) => Ok(()),
                other => Err(format!(
                    "PostgreSQL floor: claim and record changed {other:?}"
                )),
            }
        })
    }

    fn replay<'a>(&'a self, key: &'a [u8; 32]) -> FloorFuture<'a, Vec<u8>> {
        Box::pin(async move {
            let (result, expires): (Option<Vec<u8>>, i64) = sqlx::query_as(&self.read)
                .bind(&key[..])
                .fetch_one(&self.pool)
                .await
                .map_err(|e| format!("PostgreSQL floor: {e}"))?;
            match result {
                Some(result) if expires > now_ms() => Ok(result),
                _ => Err("PostgreSQL floor: no live result".to_owned()),
            }
        })
    }

    fn clean(&self) -> FloorFuture<'_, ()> {
        Box::pin(async move {
            sqlx::raw_sql(&format!("DROP TABLE IF EXISTS {}", self.table))
                .execute(&self.pool)
                .await
                .map(drop)
                .map_err(|e| format!("PostgreSQL floor: {e}"))
        })
    }
}

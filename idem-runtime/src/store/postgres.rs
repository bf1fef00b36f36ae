//! A dedup store on PostgreSQL (feature `postgres`), and the database side of transactional
//! tools ([`engine::transactional`](crate::engine::transactional)).

pub(crate) mod begin;
mod builder;
pub(crate) mod conn;
pub(crate) mod entered;
mod functions;
pub(crate) mod ops;
mod row;
pub(crate) mod schema;
pub(crate) mod tx;

use std::collections::HashMap;
use std::fmt;
use std::sync::Arc;
use std::sync::atomic::AtomicU32;
use std::time::Duration;

use sqlx::PgPool;

use super::LeaseToken;

pub use self::builder::PostgresStoreBuilder;
pub use self::schema::SCHEMA_VERSION;
/// The connection a transactional tool's body gets (sqlx 0.8's): depend on `sqlx` 0.8 with
/// its `postgres` feature to name it in your code.
pub use sqlx::PgConnection;

/// How long a store call waits for a row held by another transaction (a transactional tool
/// running with the same key) before it fails, unless
/// [`PostgresStoreBuilder::lock_timeout`] says otherwise.
pub const DEFAULT_LOCK_TIMEOUT: Duration = Duration::from_secs(5);

/// How long the server has to answer a request of the store (beyond the lock wait a claim is
/// allowed) before the store closes the connection and fails the operation, unless
/// [`PostgresStoreBuilder::reply_timeout`] says otherwise.
pub const DEFAULT_REPLY_TIMEOUT: Duration = Duration::from_secs(5);

/// The longest connect, lock and reply timeouts (24 days, under PostgreSQL's longest
/// `lock_timeout`, an `int` of milliseconds): a longer one is taken as this.
pub const MAX_TIMEOUT: Duration = crate::turn::MAX_IN_FLIGHT_WAIT;

/// A dedup store on PostgreSQL: remembered keys survive restarts, and any number of processes
/// on any number of hosts can share the database.
///
/// ```no_run
/// use std::sync::Arc;
/// use idem_tools_runtime::store::{PostgresStore, Store};
///
/// # async fn f() -> Result<(), idem_tools_runtime::Error> {
/// let store = PostgresStore::connect("postgres://app@127.0.0.1/app").await?;
/// let shared: Arc<dyn Store> = Arc::new(store);
/// # Ok(()) }
/// ```
///
/// # Transactional tools
/// A tool that writes to the same database can run **inside one transaction with its claim
/// and its record** (`#[transaction] tx: &mut sqlx::PgConnection` on an `#[idempotent]` tool,
/// or [`engine::transactional::execute`](crate::engine::transactional::execute)): either the
/// tool's writes and its recorded result both commit, and a retry replays the result, or
/// neither does, and a retry runs the tool afresh. Open the store on the application's pool
/// ([`PostgresStore::from_pool`]) so that the idem tables live next to the application's.
///
/// # What it survives
/// - **A process crash** between any two steps: every transition commits before a call
///   returns. Each claim names the process that holds it
///   ([`Holder`](super::holder::Holder)): a call made on the host where that process ran, in
///   its pid namespace, that finds it certainly gone ends the claim a reply timeout later
///   ([`PostgresStoreBuilder::reply_timeout`](crate::store::postgres::PostgresStoreBuilder::reply_timeout),
///   5 s by default; sooner if its lease does), so that a result the process sent before it
///   died lands first, and a call after that claims the key. Otherwise —
///   the holder on another host or in another container, or still running — a claim whose
///   holder died stays in flight until its lease ends (a transactional claim never does: the
///   server rolls back the dead client's transaction at once).
/// - **A server restart, a failover, a dropped connection**: calls in flight fail closed
///   ([`Error::Store`](crate::Error::Store), the tool not run), the pool reconnects, and a
///   retry finds what committed. A failover keeps what the promoted standby had received: with
///   a **synchronous** standby, everything the store acknowledged; an asynchronous one loses
///   its last commits (recorded results, and a transactional tool's writes with them).
/// - **A server that stops answering** without resetting its connections (a frozen primary, a
///   partition after a DNS or virtual-IP switch): every request waits at most the reply timeout
///   ([`PostgresStoreBuilder::reply_timeout`]), then fails closed; the connection is closed, not
///   pooled again, and new ones reach whatever host the address names by then.
/// - **Several hosts**: leases and TTLs are measured on the database server's clock
///   (`clock_timestamp()`), so hosts whose clocks disagree still agree on when a lease ends.
///
/// # A `begin` given up
/// A `begin` runs to its end in a task of its own even if its caller drops it (a timeout), and
/// a `release` with its token waits for it: the claim it may make is given back after it
/// lands, never before (connections of a pool keep no order between them).
///
/// # Cost per call
/// A replay or a wait is one round trip that writes nothing (`idem_begin` reads the live
/// record and returns). A first execution is two write round trips (`idem_begin` charges and
/// claims in one server-side function; `complete` records), plus one per lease renewal.
///
/// # Storage
/// Tables `idem_records` (one row per key, with its attempt count and the id of the turn that
/// claimed it, indexed by namespace, turn and claim time), `idem_budgets` (turns' and tools'
/// counts of started actions) and `idem_schema` (the version, [`SCHEMA_VERSION`]), and four functions, created or
/// migrated on open under an advisory lock, in the connection's `search_path` or in a schema
/// of their own ([`PostgresStoreBuilder::schema`]). Expired rows are overwritten by the next
/// claim of their key, deleted in batches as the store is used, and all at once by
/// [`Store::purge_expired`](super::Store::purge_expired).
#[derive(Clone)]
pub struct PostgresStore {
    inner: Arc<Inner>,
}

pub(crate) struct Inner {
    pub(crate) pool: PgPool,
    pub(crate) schema: Option<String>,
    pub(crate) sql: Sql,
    pub(crate) lock_timeout: Duration,
    pub(crate) reply_timeout: Duration,
    pub(crate) claims: AtomicU32,
    /// The claims being made right now, by token: a `release` of one waits for it to land.
    pub(crate) pending: std::sync::Mutex<HashMap<u64, Arc<tokio::sync::Mutex<()>>>>,
}

/// The statements, with the schema's prefix in them.
pub(crate) struct Sql {
    pub(crate) prefix: String,
    pub(crate) begin: String,
    pub(crate) free_abandoned: String,
    renew: String,
    complete: String,
    completed_by: String,
    release: String,
    get: String,
    list: String,
    list_turn: String,
    remove: String,
    remove_shown: String,
    purge_records: String,
    purge_budgets: String,
}

impl Sql {
    fn new(prefix: &str) -> Self {
        use self::row::COLUMNS;
        let q = |sql: &str| schema::qualify(sql, prefix);
        let now = "WITH c AS (SELECT {s}idem_now_ms() AS now)";
        Sql {
            prefix: prefix.to_owned(),
            // A live record (a replay, a wait) is answered by the plain read, as `idem_begin`
            // itself would answer it but without a PL/pgSQL call: the function runs only when
            // the read found nothing (`NOT EXISTS` over the read is a one-time filter, so
            // PostgreSQL does not call it otherwise). One round trip either way. The function's
            // other arguments travel in three arrays (binding a parameter costs the client
            // more than the server's subscript): $3 text (tool, turn id, holder or ''), $4
            // bytea (fingerprint, turn counter, tool counter or ''), $5 bigint (lease, token,
            // max attempts, max calls or -1, window, lock timeout, max tool actions or -1),
            // and $6 whether to claim. (`PostgresStore::begin_query` binds them.)
            begin: q(
                "WITH live AS (SELECT 'live'::text, r.state, r.fingerprint, r.result, r.token, \
                 r.attempts, NULL::bigint, r.holder FROM {s}idem_records AS r \
                 WHERE r.namespace = $1 AND r.key = $2 AND r.expires_at_ms > {s}idem_now_ms()) \
                 SELECT * FROM live UNION ALL \
                 SELECT o_answer, o_state, o_fingerprint, o_result, o_token, o_n, o_lim, \
                 o_holder FROM {s}idem_begin($1, $2, ($3::text[])[1], ($4::bytea[])[1], \
                 ($5::bigint[])[1], ($5::bigint[])[2], ($5::bigint[])[3], ($4::bytea[])[2], \
                 NULLIF(($5::bigint[])[4], -1), ($5::bigint[])[5], $6, ($5::bigint[])[6], \
                 ($3::text[])[2], NULLIF(($4::bytea[])[3], ''::bytea), \
                 NULLIF(($5::bigint[])[7], -1), NULLIF(($3::text[])[3], '')) \
                 WHERE NOT EXISTS (SELECT 1 FROM live)",
            ),
            // A claim whose holder is gone ends within a grace ($5, ms; a lease that ends sooner
            // is left as it is), its attempt count kept, as a lease that ran out would — if it is
            // still the claim that was read.
            free_abandoned: q(&format!(
                "{now} UPDATE {{s}}idem_records AS r SET expires_at_ms = c.now + $5 FROM c \
                 WHERE r.namespace = $1 AND r.key = $2 AND r.token = $3 AND r.holder = $4 \
                 AND r.state = 'in_progress' AND r.expires_at_ms > c.now + $5"
            )),
            renew: q(&format!(
                "{now} UPDATE {{s}}idem_records AS r SET expires_at_ms = c.now + $1 FROM c \
                 WHERE r.namespace = $2 AND r.key = $3 AND r.token = $4 \
                 AND r.state = 'in_progress' AND r.expires_at_ms > c.now"
            )),
            complete: q(&format!(
                "{now} UPDATE {{s}}idem_records AS r SET state = 'completed', result = $1, \
                 expires_at_ms = c.now + $2, attempts = 0, attempts_expire_ms = 0 FROM c \
                 WHERE r.namespace = $3 AND r.key = $4 AND r.token = $5 \
                 AND r.state = 'in_progress' AND r.expires_at_ms > c.now"
            )),
            completed_by: q(&format!(
                "{now} SELECT 1 FROM {{s}}idem_records AS r, c WHERE r.namespace = $1 \
                 AND r.key = $2 AND r.token = $3 AND r.state = 'completed' \
                 AND r.expires_at_ms > c.now"
            )),
            release: q(&format!(
                "{now} UPDATE {{s}}idem_records AS r SET expires_at_ms = 0 FROM c \
                 WHERE r.namespace = $1 AND r.key = $2 AND r.token = $3 \
                 AND r.state = 'in_progress' AND r.expires_at_ms > c.now"
            )),
            get: q(&format!(
                "{now} SELECT {COLUMNS}, c.now FROM {{s}}idem_records, c \
                 WHERE namespace = $1 AND key = $2 AND expires_at_ms > c.now"
            )),
            list: q(&format!(
                "{now} SELECT {COLUMNS}, c.now FROM {{s}}idem_records, c \
                 WHERE expires_at_ms > c.now AND ($1::text IS NULL OR namespace = $1) LIMIT $2"
            )),
            list_turn: q(&format!(
                "{now} SELECT {COLUMNS}, c.now FROM {{s}}idem_records, c \
                 WHERE namespace = $1 AND turn = $2 AND expires_at_ms > c.now \
                 ORDER BY created_at_ms, key LIMIT $3"
            )),
            remove: q(
                "DELETE FROM {s}idem_records WHERE namespace = $1 AND key = $2 \
                 RETURNING expires_at_ms > {s}idem_now_ms()",
            ),
            // The `EXISTS` sees the statement's snapshot: the row, if the `DELETE` took it. A
            // claim given back (expiry 0) holds no record, only its attempt count, which stays.
            remove_shown: q(
                "WITH deleted AS (DELETE FROM {s}idem_records WHERE namespace = $1 AND key = $2 \
                 AND state = $3 AND created_at_ms = $4 AND expires_at_ms <> 0 \
                 RETURNING expires_at_ms > {s}idem_now_ms() AS live) \
                 SELECT (SELECT live FROM deleted), \
                 EXISTS (SELECT 1 FROM {s}idem_records WHERE namespace = $1 AND key = $2 \
                 AND expires_at_ms <> 0)",
            ),
            purge_records: q(&format!(
                "{now}, doomed AS (SELECT r.namespace, r.key FROM {{s}}idem_records AS r, c \
                 WHERE r.expires_at_ms <= c.now AND r.attempts_expire_ms <= c.now LIMIT $1 \
                 FOR UPDATE OF r SKIP LOCKED) \
                 DELETE FROM {{s}}idem_records AS r USING doomed AS d \
                 WHERE r.namespace = d.namespace AND r.key = d.key"
            )),
            purge_budgets: q(&format!(
                "{now}, doomed AS (SELECT b.id FROM {{s}}idem_budgets AS b, c \
                 WHERE b.expires_at_ms <= c.now LIMIT $1 FOR UPDATE OF b SKIP LOCKED) \
                 DELETE FROM {{s}}idem_budgets AS b USING doomed AS d WHERE b.id = d.id"
            )),
        }
    }
}

impl PostgresStore {
    /// How to connect: schema, pool size, lock timeout.
    pub fn builder() -> PostgresStoreBuilder {
        PostgresStoreBuilder::default()
    }

    /// Connects to `url` (`postgres://user:password@host:port/database`) with a pool of its
    /// own, creating or migrating idem's tables in the connection's `search_path`.
    ///
    /// # Errors
    /// [`Error::Store`](crate::Error::Store) if the server cannot be reached or the tables
    /// cannot be created; [`Error::Config`](crate::Error::Config) for an invalid URL or tables
    /// written by a newer version of idem.
    pub async fn connect(url: &str) -> crate::Result<Self> {
        Self::builder().connect(url).await
    }

    /// Uses the application's pool: transactional tools then run on the application's
    /// connections, and idem's tables (created or migrated here) live in its database.
    ///
    /// The pool's settings stay the application's; `test_before_acquire(false)` saves a round
    /// trip per call. The store bounds its own requests, and its waits for a connection of the
    /// pool (whatever the pool's acquire timeout), and sheds the connections that stop answering
    /// ([`PostgresStoreBuilder::reply_timeout`]); the application's own queries on the pool are
    /// `sqlx`'s.
    ///
    /// # Errors
    /// As [`PostgresStore::connect`].
    pub async fn from_pool(pool: PgPool) -> crate::Result<Self> {
        Self::builder().from_pool(pool).await
    }

    /// The pool this store talks through.
    pub fn pool(&self) -> &PgPool {
        &self.inner.pool
    }

    /// The schema idem's tables are in, if one was chosen ([`PostgresStoreBuilder::schema`]).
    pub fn schema(&self) -> Option<&str> {
        self.inner.schema.as_deref()
    }

    /// The name of idem's records table as a statement should write it (schema-qualified if a
    /// schema was chosen): for inspecting the store from SQL.
    pub fn records_table(&self) -> String {
        format!("{}idem_records", self.inner.sql.prefix)
    }

    fn new(
        pool: PgPool,
        schema: Option<String>,
        lock_timeout: Duration,
        reply_timeout: Duration,
    ) -> Self {
        let prefix = schema
            .as_deref()
            .map_or_else(String::new, |s| format!("{}.", schema::quote_ident(s)));
        PostgresStore {
            inner: Arc::new(Inner {
                pool,
                schema,
                sql: Sql::new(&prefix),
                lock_timeout,
                reply_timeout,
                claims: AtomicU32::new(0),
                pending: std::sync::Mutex::default(),
            }),
        }
    }
}

/// A token as PostgreSQL stores it (the same 64 bits, signed).
pub(crate) fn sql_token(token: LeaseToken) -> i64 {
    i64::from_le_bytes(token.0.to_le_bytes())
}

/// A duration in whole milliseconds, as PostgreSQL stores it, capped at
/// [`MAX_DURATION`](super::MAX_DURATION) (the server adds it to the time in a `bigint`).
pub(crate) fn sql_ms(d: Duration) -> i64 {
    i64::try_from(d.min(super::MAX_DURATION).as_millis()).unwrap_or(i64::MAX)
}

impl fmt::Debug for PostgresStore {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("PostgresStore")
            .field("schema", &self.inner.schema)
            .field("lock_timeout", &self.inner.lock_timeout)
            .field("reply_timeout", &self.inner.reply_timeout)
            .finish_non_exhaustive()
    }
}

//! [`Store`] for [`PostgresStore`]: each operation one statement (or one server-side function).

use std::sync::atomic::Ordering;
use std::time::Duration;

use sqlx::postgres::PgArguments;
use sqlx::query::Query;
use sqlx::{Postgres, Row as _};

use super::begin::lock;
use super::entered::entered;
use super::row::{self, Corrupt, corrupt};
use super::schema::LOCK_TIMEOUT;
use super::{PostgresStore, sql_ms, sql_token};
use crate::key::Key;
use crate::store::{Begin, BeginRequest, Lease, Record, Removed, Store, StoreFuture};
use crate::{Error, Result};

/// Expired rows deleted per statement by `purge_expired` and by housekeeping.
const PURGE_BATCH: i64 = 1000;

/// The store deletes a batch of expired rows (in a task of its own) after this many claims.
const HOUSEKEEPING_EVERY: u32 = 1024;

/// A lock wait that ran past its timeout: a transaction (a transactional tool running with the
/// same key) holds the key's row.
#[derive(Debug)]
pub(crate) struct LockTimedOut(sqlx::Error);

impl std::fmt::Display for LockTimedOut {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(
            f,
            "the key is held by a transaction (a transactional tool running with this key) for \
             longer than the lock timeout ({})",
            self.0
        )
    }
}

impl std::error::Error for LockTimedOut {}

/// `sqlx`'s error as idem's, a lock wait past its timeout named as such ([`lock_timed_out`]).
pub(crate) fn store_error(operation: &'static str, error: sqlx::Error) -> Error {
    if is_code(&error, LOCK_TIMEOUT) {
        return Error::store(operation, LockTimedOut(error));
    }
    Error::store(operation, error)
}

/// Whether `error` is a lock wait past its timeout.
pub(crate) fn lock_timed_out(error: &Error) -> bool {
    matches!(error, Error::Store { source, .. } if source.is::<LockTimedOut>())
}

/// Whether `error` is a database error with SQL state `code`.
pub(crate) fn is_code(error: &sqlx::Error, code: &str) -> bool {
    matches!(error, sqlx::Error::Database(db) if db.code().as_deref() == Some(code))
}

/// Room for `count` arguments of `bytes` bytes in all (with their length words), reserved at
/// once: sqlx grows the buffer as arguments are encoded, and a recorded result is copied into
/// it at every doubling otherwise.
pub(super) fn arguments(count: usize, bytes: usize) -> PgArguments {
    let mut arguments = PgArguments::default();
    sqlx::Arguments::reserve(&mut arguments, count, bytes + 4 * count);
    arguments
}

/// `query` with the lease's namespace, key and token bound next (a statement fenced by it).
pub(super) fn fenced<'q>(
    query: Query<'q, Postgres, PgArguments>,
    lease: &'q Lease,
) -> Query<'q, Postgres, PgArguments> {
    query
        .bind(&*lease.namespace)
        .bind(lease.key.as_bytes().as_slice())
        .bind(sql_token(lease.token))
}

/// `Ok` if a statement guarded by the lease token changed a row, else [`Error::LeaseLost`].
fn held(changed: u64, key: &Key) -> Result<()> {
    if changed == 0 {
        Err(Error::LeaseLost { key: key.short() })
    } else {
        Ok(())
    }
}

impl PostgresStore {
    /// Every [`HOUSEKEEPING_EVERY`] claims, deletes a batch of expired rows in a task of its
    /// own, so that the tables do not grow without bound when nobody calls `purge_expired`.
    pub(super) fn housekeeping(&self) {
        let claims = self.inner.claims.fetch_add(1, Ordering::Relaxed);
        if claims % HOUSEKEEPING_EVERY != HOUSEKEEPING_EVERY - 1 {
            return;
        }
        let Ok(runtime) = tokio::runtime::Handle::try_current() else {
            return;
        };
        let store = self.clone();
        runtime.spawn(async move {
            if let Err(error) = store.purge_batch().await {
                tracing::warn!(target: "idem", %error, "could not delete expired PostgreSQL records");
            }
        });
    }

    /// Deletes up to [`PURGE_BATCH`] expired records and as many expired turn counts; returns
    /// how many of each were deleted.
    async fn purge_batch(&self) -> Result<(u64, u64)> {
        let sql = &self.inner.sql;
        self.on_conn("purge_expired", async |conn| {
            let records = sqlx::query(&sql.purge_records)
                .bind(PURGE_BATCH)
                .execute(&mut *conn)
                .await?
                .rows_affected();
            let counts = sqlx::query(&sql.purge_budgets)
                .bind(PURGE_BATCH)
                .execute(&mut *conn)
                .await?
                .rows_affected();
            Ok((records, counts))
        })
        .await
    }
}

/// The records of `rows` (selected with the columns of [`row::read`]), in their order. One
/// corrupt row must not hide the others: it is skipped, and named in the log.
fn records(rows: Vec<sqlx::postgres::PgRow>) -> Vec<Record> {
    let mut out = Vec::with_capacity(rows.len());
    for row in rows {
        match row::read(&row) {
            Ok(record) => out.push(record),
            Err(Corrupt(message)) => {
                let namespace: String = row.try_get(0).unwrap_or_default();
                let key: Vec<u8> = row.try_get(1).unwrap_or_default();
                tracing::warn!(target: "idem", namespace, key = hex::encode(key), message,
                    "skipping a corrupt PostgreSQL record; remove it with `remove`");
            }
        }
    }
    out
}

impl Store for PostgresStore {
    fn begin<'a>(&'a self, req: BeginRequest<'a>) -> StoreFuture<'a, Begin> {
        self.begin_claim(req)
    }

    fn renew<'a>(&'a self, lease: &'a Lease, duration: Duration) -> StoreFuture<'a, ()> {
        entered(async move {
            let changed = self
                .on_conn("renew", async |conn| {
                    let renew = sqlx::query(&self.inner.sql.renew).bind(sql_ms(duration));
                    fenced(renew, lease).execute(conn).await
                })
                .await?
                .rows_affected();
            held(changed, &lease.key)
        })
    }

    fn complete<'a>(
        &'a self,
        lease: &'a Lease,
        result: &'a [u8],
        ttl: Duration,
    ) -> StoreFuture<'a, ()> {
        entered(async move {
            let (changed, completed) = self
                .on_conn("complete", async |conn| {
                    // The token stays in the row, so that a retried complete is recognised.
                    // The result, the TTL, then the fence: namespace, key (32) and token.
                    let bytes = result.len() + 8 + lease.namespace.len() + 32 + 8;
                    let complete = sqlx::query_with(&self.inner.sql.complete, arguments(5, bytes))
                        .bind(result)
                        .bind(sql_ms(ttl));
                    let changed = fenced(complete, lease)
                        .execute(&mut *conn)
                        .await?
                        .rows_affected();
                    if changed > 0 {
                        return Ok((changed, false));
                    }
                    let completed = fenced(sqlx::query(&self.inner.sql.completed_by), lease)
                        .fetch_optional(&mut *conn)
                        .await?;
                    Ok((changed, completed.is_some()))
                })
                .await?;
            if completed {
                return Ok(()); // completed by this lease already: a retried complete
            }
            held(changed, &lease.key)
        })
    }

    fn release<'a>(&'a self, lease: &'a Lease) -> StoreFuture<'a, ()> {
        entered(async move {
            // A claim with this token still on its way lands first.
            let landing = lock(&self.inner.pending).get(&lease.token.0).cloned();
            if let Some(landing) = landing {
                let _landed = landing.lock().await;
            }
            // The row stays, expired, with the key's attempt count.
            let changed = self
                .on_conn("release", async |conn| {
                    fenced(sqlx::query(&self.inner.sql.release), lease)
                        .execute(conn)
                        .await
                })
                .await?
                .rows_affected();
            held(changed, &lease.key)
        })
    }

    fn get<'a>(&'a self, namespace: &'a str, key: &'a Key) -> StoreFuture<'a, Option<Record>> {
        entered(async move {
            let row = self
                .on_conn("get", async |conn| {
                    sqlx::query(&self.inner.sql.get)
                        .bind(namespace)
                        .bind(key.as_bytes().as_slice())
                        .fetch_optional(conn)
                        .await
                })
                .await?;
            row.map(|row| row::read(&row).map_err(corrupt(key)))
                .transpose()
        })
    }

    fn purge_expired(&self) -> StoreFuture<'_, u64> {
        entered(async move {
            let mut total = 0u64;
            loop {
                let (records, counts) = self.purge_batch().await?;
                total = total.saturating_add(records);
                if records == 0 && counts == 0 {
                    return Ok(total);
                }
            }
        })
    }

    fn list<'a>(
        &'a self,
        namespace: Option<&'a str>,
        limit: usize,
    ) -> StoreFuture<'a, Vec<Record>> {
        entered(async move {
            let rows = self
                .on_conn("list", async |conn| {
                    sqlx::query(&self.inner.sql.list)
                        .bind(namespace)
                        .bind(i64::try_from(limit).unwrap_or(i64::MAX))
                        .fetch_all(conn)
                        .await
                })
                .await?;
            Ok(records(rows))
        })
    }

    /// Through the index on `(namespace, turn, created_at_ms)`.
    fn list_turn<'a>(
        &'a self,
        namespace: &'a str,
        turn: &'a str,
        limit: usize,
    ) -> StoreFuture<'a, Vec<Record>> {
        entered(async move {
            let rows = self
                .on_conn("list_turn", async |conn| {
                    sqlx::query(&self.inner.sql.list_turn)
                        .bind(namespace)
                        .bind(turn)
                        .bind(i64::try_from(limit).unwrap_or(i64::MAX))
                        .fetch_all(conn)
                        .await
                })
                .await?;
            Ok(records(rows))
        })
    }

    fn remove<'a>(&'a self, namespace: &'a str, key: &'a Key) -> StoreFuture<'a, bool> {
        entered(async move {
            let live: Option<bool> = self
                .on_conn("remove", async |conn| {
                    sqlx::query(&self.inner.sql.remove)
                        .bind(namespace)
                        .bind(key.as_bytes().as_slice())
                        .fetch_optional(conn)
                        .await
                })
                .await?
                .map(|row| row.try_get(0))
                .transpose()
                .map_err(|e| store_error("remove", e))?;
            Ok(live.unwrap_or(false))
        })
    }

    fn remove_shown<'a>(&'a self, shown: &'a Record) -> StoreFuture<'a, Removed> {
        entered(async move {
            let row = self
                .on_conn("remove", async |conn| {
                    sqlx::query(&self.inner.sql.remove_shown)
                        .bind(&shown.namespace)
                        .bind(shown.key.as_bytes().as_slice())
                        .bind(shown.state.as_str())
                        .bind(i64::try_from(shown.created_at_ms).unwrap_or(i64::MAX))
                        .fetch_one(conn)
                        .await
                })
                .await?;
            let read = || -> std::result::Result<(Option<bool>, bool), sqlx::Error> {
                Ok((row.try_get(0)?, row.try_get(1)?))
            };
            Ok(match read().map_err(|e| store_error("remove", e))? {
                (Some(live), _) => Removed::Deleted { live },
                (None, true) => Removed::Changed,
                (None, false) => Removed::Gone,
            })
        })
    }
}

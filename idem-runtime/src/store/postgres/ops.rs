//! [`Store`] for [`PostgresStore`]: each operation one statement (or one server-side function).

use std::sync::Arc;
use std::sync::atomic::Ordering;
use std::time::Duration;

use sqlx::postgres::{PgArguments, PgRow};
use sqlx::query::Query;
use sqlx::{PgConnection, Postgres, Row as _};

use super::row::{self, Corrupt, corrupt};
use super::schema::LOCK_TIMEOUT;
use super::{PostgresStore, sql_ms, sql_token};
use crate::key::Key;
use crate::store::{Begin, BeginRequest, Exhausted, Lease, Record, Store, StoreFuture};
use crate::{Error, Result};

/// Expired rows deleted per statement by `purge_expired` and by housekeeping.
const PURGE_BATCH: i64 = 1000;

/// The store deletes a batch of expired rows (in a task of its own) after this many claims.
const HOUSEKEEPING_EVERY: u32 = 1024;

/// What `idem_begin` answered.
pub(crate) enum Answer {
    /// A live record, a claim or a refusal: what [`Store::begin`] answers.
    Begin(Begin),
    /// Charged, not claimed (a transactional call's first step).
    Charged,
}

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

impl PostgresStore {
    /// The call of `idem_begin` for `req`: `claim` claims the key, else only charges it.
    fn begin_query<'q>(
        &'q self,
        req: &'q BeginRequest<'q>,
        turn: &'q [u8; 16],
        claim: bool,
        lock_timeout: Duration,
    ) -> Query<'q, Postgres, PgArguments> {
        let charge = &req.charge;
        sqlx::query(&self.inner.sql.begin)
            .bind(req.namespace)
            .bind(req.key.as_bytes().as_slice())
            .bind(req.tool)
            .bind(req.fingerprint.as_bytes().as_slice())
            .bind(sql_ms(req.lease).max(1))
            .bind(sql_token(req.token))
            .bind(i64::from(charge.max_attempts))
            .bind(turn.as_slice())
            .bind(charge.max_calls.map(i64::from))
            .bind(sql_ms(charge.window))
            .bind(claim)
            .bind(sql_ms(lock_timeout).max(1))
    }

    /// Charges `req` (without claiming) on `conn`, outside any transaction: the first step of
    /// a transactional call. (Boxed: a future generic over `sqlx`'s executors, held across an
    /// `.await` of a caller generic over a higher-ranked closure, trips rustc's `Send` check.)
    pub(crate) fn charge_on<'a>(
        &'a self,
        conn: &'a mut PgConnection,
        req: &'a BeginRequest<'a>,
        lock_timeout: Duration,
    ) -> StoreFuture<'a, Answer> {
        Box::pin(async move {
            let turn = req.charge.turn.turn_counter();
            let row = self
                .begin_query(req, &turn, false, lock_timeout)
                .fetch_one(conn)
                .await
                .map_err(|e| store_error("begin", e))?;
            answer(&row, req.key)
        })
    }
}

fn answer(row: &PgRow, key: &Key) -> Result<Answer> {
    let unreadable = |e: sqlx::Error| Error::store("begin", e);
    let kind: String = row.try_get(0).map_err(unreadable)?;
    let count = |i: usize| -> Result<u32> {
        let n: Option<i64> = row.try_get(i).map_err(unreadable)?;
        Ok(n.map_or(0, |n| u32::try_from(n.max(0)).unwrap_or(u32::MAX)))
    };
    Ok(match kind.as_str() {
        "live" => Answer::Begin(row::live(row, key)?),
        "claimed" => Answer::Begin(Begin::Claimed),
        "charged" => Answer::Charged,
        "refused_key" => Answer::Begin(Begin::Refused(Exhausted::Key {
            attempts: count(5)?,
            limit: count(6)?,
        })),
        "refused_turn" => Answer::Begin(Begin::Refused(Exhausted::Turn {
            calls: count(5)?,
            limit: count(6)?,
        })),
        other => {
            return Err(Error::store(
                "begin",
                format!(
                    "idem_begin answered {other:?}: the idem functions in the database are not this build's"
                ),
            ));
        }
    })
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
    fn housekeeping(&self) {
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
        let fail = |e| store_error("purge_expired", e);
        let records = sqlx::query(&self.inner.sql.purge_records)
            .bind(PURGE_BATCH)
            .execute(&self.inner.pool)
            .await
            .map_err(fail)?
            .rows_affected();
        let counts = sqlx::query(&self.inner.sql.purge_budgets)
            .bind(PURGE_BATCH)
            .execute(&self.inner.pool)
            .await
            .map_err(fail)?
            .rows_affected();
        Ok((records, counts))
    }
}

/// A [`BeginRequest`] that can move into a task of its own.
struct OwnedBegin {
    namespace: String,
    key: Key,
    tool: &'static str,
    fingerprint: crate::key::Fingerprint,
    lease: Duration,
    token: crate::store::LeaseToken,
    charge: crate::store::Charge,
}

impl From<&BeginRequest<'_>> for OwnedBegin {
    fn from(req: &BeginRequest<'_>) -> Self {
        OwnedBegin {
            namespace: req.namespace.to_owned(),
            key: *req.key,
            tool: req.tool,
            fingerprint: *req.fingerprint,
            lease: req.lease,
            token: req.token,
            charge: req.charge,
        }
    }
}

fn lock<T>(mutex: &std::sync::Mutex<T>) -> std::sync::MutexGuard<'_, T> {
    mutex
        .lock()
        .unwrap_or_else(std::sync::PoisonError::into_inner)
}

impl PostgresStore {
    /// `idem_begin` claiming `req`'s key.
    fn claim<'a>(&'a self, req: &'a OwnedBegin) -> StoreFuture<'a, Answer> {
        Box::pin(async move {
            let request = BeginRequest {
                namespace: &req.namespace,
                key: &req.key,
                tool: req.tool,
                fingerprint: &req.fingerprint,
                lease: req.lease,
                token: req.token,
                charge: req.charge,
            };
            let turn = req.charge.turn.turn_counter();
            let row = self
                .begin_query(&request, &turn, true, self.inner.lock_timeout)
                .fetch_one(&self.inner.pool)
                .await
                .map_err(|e| store_error("begin", e))?;
            answer(&row, &req.key)
        })
    }
}

impl Store for PostgresStore {
    fn begin<'a>(&'a self, req: BeginRequest<'a>) -> StoreFuture<'a, Begin> {
        // The claim runs in a task of its own, so that a caller giving up cannot cut it off
        // half-way; a `release` with its token waits for it (see `pending`). Nothing happens
        // before the first poll.
        let owned = OwnedBegin::from(&req);
        Box::pin(async move {
            let store = self.clone();
            let token = owned.token.0;
            let landing = Arc::new(tokio::sync::Mutex::new(()));
            let landed = Arc::clone(&landing).try_lock_owned();
            lock(&self.inner.pending).insert(token, landing);
            let claim = async move {
                let answer = store.claim(&owned).await;
                lock(&store.inner.pending).remove(&token);
                drop(landed);
                answer
            };
            let answer = match tokio::runtime::Handle::try_current() {
                Ok(runtime) => runtime
                    .spawn(claim)
                    .await
                    .map_err(|e| Error::store("begin", e))??,
                Err(_) => claim.await?,
            };
            match answer {
                Answer::Begin(begin) => {
                    if begin == Begin::Claimed {
                        self.housekeeping();
                    }
                    Ok(begin)
                }
                Answer::Charged => Err(Error::store(
                    "begin",
                    "idem_begin charged without claiming: the idem functions in the database \
                     are not this build's",
                )),
            }
        })
    }

    fn renew<'a>(&'a self, lease: &'a Lease, duration: Duration) -> StoreFuture<'a, ()> {
        Box::pin(async move {
            let changed = sqlx::query(&self.inner.sql.renew)
                .bind(sql_ms(duration))
                .bind(&*lease.namespace)
                .bind(lease.key.as_bytes().as_slice())
                .bind(sql_token(lease.token))
                .execute(&self.inner.pool)
                .await
                .map_err(|e| store_error("renew", e))?
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
        Box::pin(async move {
            let fail = |e| store_error("complete", e);
            // The token stays in the row, so that a retried complete is recognised.
            let changed = sqlx::query(&self.inner.sql.complete)
                .bind(result)
                .bind(sql_ms(ttl))
                .bind(&*lease.namespace)
                .bind(lease.key.as_bytes().as_slice())
                .bind(sql_token(lease.token))
                .execute(&self.inner.pool)
                .await
                .map_err(fail)?
                .rows_affected();
            if changed == 0 {
                let completed = sqlx::query(&self.inner.sql.completed_by)
                    .bind(&*lease.namespace)
                    .bind(lease.key.as_bytes().as_slice())
                    .bind(sql_token(lease.token))
                    .fetch_optional(&self.inner.pool)
                    .await
                    .map_err(fail)?;
                if completed.is_some() {
                    return Ok(()); // completed by this lease already: a retried complete
                }
            }
            held(changed, &lease.key)
        })
    }

    fn release<'a>(&'a self, lease: &'a Lease) -> StoreFuture<'a, ()> {
        Box::pin(async move {
            // A claim with this token still on its way lands first.
            let landing = lock(&self.inner.pending).get(&lease.token.0).cloned();
            if let Some(landing) = landing {
                let _landed = landing.lock().await;
            }
            // The row stays, expired, with the key's attempt count.
            let changed = sqlx::query(&self.inner.sql.release)
                .bind(&*lease.namespace)
                .bind(lease.key.as_bytes().as_slice())
                .bind(sql_token(lease.token))
                .execute(&self.inner.pool)
                .await
                .map_err(|e| store_error("release", e))?
                .rows_affected();
            held(changed, &lease.key)
        })
    }

    fn get<'a>(&'a self, namespace: &'a str, key: &'a Key) -> StoreFuture<'a, Option<Record>> {
        Box::pin(async move {
            let row = sqlx::query(&self.inner.sql.get)
                .bind(namespace)
                .bind(key.as_bytes().as_slice())
                .fetch_optional(&self.inner.pool)
                .await
                .map_err(|e| store_error("get", e))?;
            row.map(|row| row::read(&row).map_err(corrupt(key)))
                .transpose()
        })
    }

    fn purge_expired(&self) -> StoreFuture<'_, u64> {
        Box::pin(async move {
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
        Box::pin(async move {
            let rows = sqlx::query(&self.inner.sql.list)
                .bind(namespace)
                .bind(i64::try_from(limit).unwrap_or(i64::MAX))
                .fetch_all(&self.inner.pool)
                .await
                .map_err(|e| store_error("list", e))?;
            let mut out = Vec::with_capacity(rows.len());
            for row in rows {
                match row::read(&row) {
                    Ok(record) => out.push(record),
                    // One corrupt row must not hide the others: it is skipped, and named.
                    Err(Corrupt(message)) => {
                        let namespace: String = row.try_get(0).unwrap_or_default();
                        let key: Vec<u8> = row.try_get(1).unwrap_or_default();
                        tracing::warn!(target: "idem", namespace, key = hex::encode(key), message,
                            "skipping a corrupt PostgreSQL record; remove it with `remove`");
                    }
                }
            }
            Ok(out)
        })
    }

    fn remove<'a>(&'a self, namespace: &'a str, key: &'a Key) -> StoreFuture<'a, bool> {
        Box::pin(async move {
            let live: Option<bool> = sqlx::query(&self.inner.sql.remove)
                .bind(namespace)
                .bind(key.as_bytes().as_slice())
                .fetch_optional(&self.inner.pool)
                .await
                .map_err(|e| store_error("remove", e))?
                .map(|row| row.try_get(0))
                .transpose()
                .map_err(|e| store_error("remove", e))?;
            Ok(live.unwrap_or(false))
        })
    }
}

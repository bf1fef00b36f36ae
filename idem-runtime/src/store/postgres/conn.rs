//! Connections a server that stops answering cannot keep. A frozen primary, or a partition
//! after a DNS or virtual-IP switch, leaves connections open that never answer: nothing resets
//! them. So every request the store sends waits a bounded time for its answer; a connection
//! that did not answer in time, or whose request was given up midway, is closed instead of
//! going back to the pool; and a connection that does go back is checked by the pool (one round
//! trip, `sqlx`'s) within the same bound, or closed — `sqlx` itself waits for that check without
//! a limit, and a pool whose every connection waits on a frozen host answers nothing again. The
//! pool then opens new connections, which reach whatever host the address names now.

use std::fmt;
use std::future::Future;
use std::time::Duration;

use sqlx::pool::PoolConnection;
use sqlx::{PgConnection, Postgres};

use super::PostgresStore;
use super::entered::inside;
use super::ops::store_error;
use crate::{Error, Result};

/// A request that got no answer within its bound: the connection was closed.
#[derive(Debug)]
pub(crate) struct Unanswered(pub(crate) Duration);

impl fmt::Display for Unanswered {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(
            f,
            "the PostgreSQL server did not answer within {:?}, so the connection was closed \
             (a frozen or overloaded server, or one cut off by the network; the next call opens a \
             new connection — raise PostgresStoreBuilder::reply_timeout if the server is only slow)",
            self.0
        )
    }
}

impl std::error::Error for Unanswered {}

/// No connection of the pool within the bound: the pool's own acquire timeout (`sqlx`'s
/// default is 30 s, and an application's pool keeps its own) is not what bounds a call.
#[derive(Debug)]
pub(crate) struct NoConnection(pub(crate) Duration);

impl fmt::Display for NoConnection {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(
            f,
            "no connection of the pool within {:?}: the PostgreSQL server does not answer (a \
             frozen or overloaded server, or one cut off by the network), or every connection of \
             the pool is in use (raise PostgresStoreBuilder::reply_timeout, or the pool's size)",
            self.0
        )
    }
}

impl std::error::Error for NoConnection {}

/// A connection of `pool` for `operation`, waited for at most `bound` (else [`NoConnection`]),
/// whatever the pool's acquire timeout.
pub(crate) async fn acquire(
    pool: &sqlx::PgPool,
    operation: &'static str,
    bound: Duration,
) -> Result<PoolConnection<Postgres>> {
    match tokio::time::timeout(bound, pool.acquire()).await {
        Ok(acquired) => acquired.map_err(|e| store_error(operation, e)),
        Err(_) => Err(Error::store(operation, NoConnection(bound))),
    }
}

/// [`Unanswered`] as `sqlx`'s error, for the steps of a transactional call that handle `sqlx`'s.
pub(crate) fn unanswered(bound: Duration) -> sqlx::Error {
    sqlx::Error::Io(std::io::Error::new(
        std::io::ErrorKind::TimedOut,
        Unanswered(bound),
    ))
}

/// `request` on `conn`, answered within `bound` (else [`unanswered`]).
pub(crate) async fn within<T>(
    bound: Duration,
    request: impl Future<Output = std::result::Result<T, sqlx::Error>>,
) -> std::result::Result<T, sqlx::Error> {
    tokio::time::timeout(bound, request)
        .await
        .unwrap_or_else(|_| Err(unanswered(bound)))
}

/// Whether `error` leaves the connection in a state nobody knows (an answer not read, a broken
/// socket, a session the server ended): anything but an error the server sent for one
/// statement.
pub(crate) fn unsure(error: &sqlx::Error) -> bool {
    !matches!(error, sqlx::Error::Database(_)) || ended_the_session(error)
}

/// Whether `error` is the server ending the session (`FATAL`, `PANIC`: terminated by an
/// operator, shut down, out of resources) rather than refusing one statement. It can come at any
/// point of a request, after a `COMMIT` in it as well as before.
pub(crate) fn ended_the_session(error: &sqlx::Error) -> bool {
    use sqlx::postgres::{PgDatabaseError, PgSeverity};
    let sqlx::Error::Database(db) = error else {
        return false;
    };
    match db.try_downcast_ref::<PgDatabaseError>() {
        Some(pg) => matches!(pg.severity(), PgSeverity::Fatal | PgSeverity::Panic),
        // Not the server's own report: nothing says which statement it was.
        None => true,
    }
}

/// Hands `conn` back, inside `runtime` (where it was acquired): closed if `close` (a request
/// was sent and its answer not read), else returned to its pool through a task whose check of
/// the connection (`sqlx`'s, one round trip) must answer within `bound`, or the connection is
/// closed — never held by a pool waiting on a server that does not answer.
pub(crate) fn give_back(
    conn: PoolConnection<Postgres>,
    runtime: Option<&tokio::runtime::Handle>,
    close: bool,
    bound: Duration,
) {
    inside(runtime, conn, |mut conn| {
        if close {
            drop(conn.detach());
            return;
        }
        // `sqlx`'s own drop handler, run here so that it is bounded: dropped unfinished, it
        // closes the connection and frees its place in the pool.
        let back = conn.return_to_pool();
        drop(conn); // holds nothing any more
        match tokio::runtime::Handle::try_current() {
            Ok(runtime) => drop(runtime.spawn(async move {
                if tokio::time::timeout(bound, back).await.is_err() {
                    tracing::warn!(target: "idem",
                        "a PostgreSQL connection did not answer the pool's check within {bound:?}; \
                         it was closed");
                }
            })),
            Err(_) => drop(back),
        }
    });
}

/// A connection of the store's pool for one operation: see the module documentation.
pub(crate) struct Conn {
    conn: Option<PoolConnection<Postgres>>,
    runtime: Option<tokio::runtime::Handle>,
    /// A request was sent and its answer not read.
    busy: bool,
    reply: Duration,
}

impl PostgresStore {
    /// How long the server has to answer a request (beyond any lock wait it is allowed).
    pub(crate) fn reply_timeout(&self) -> Duration {
        self.inner.reply_timeout
    }

    /// A connection of the pool, waited for at most the reply timeout (or the pool's acquire
    /// timeout, if shorter).
    pub(crate) async fn conn(&self, operation: &'static str) -> Result<Conn> {
        self.conn_within(operation, self.inner.reply_timeout).await
    }

    /// A connection of the pool, waited for at most `bound` (or the pool's acquire timeout, if
    /// shorter).
    pub(crate) async fn conn_within(
        &self,
        operation: &'static str,
        bound: Duration,
    ) -> Result<Conn> {
        let conn = acquire(&self.inner.pool, operation, bound).await?;
        Ok(Conn {
            conn: Some(conn),
            runtime: tokio::runtime::Handle::try_current().ok(),
            busy: false,
            reply: self.inner.reply_timeout,
        })
    }

    /// `request` on a connection of the pool, answered within the reply timeout.
    pub(crate) async fn on_conn<T>(
        &self,
        operation: &'static str,
        request: impl AsyncFnOnce(&mut PgConnection) -> std::result::Result<T, sqlx::Error>,
    ) -> Result<T> {
        let mut conn = self.conn(operation).await?;
        let bound = self.inner.reply_timeout;
        conn.run(operation, bound, request).await
    }
}

impl Conn {
    /// `request` on the connection, answered within `bound`: else the connection is closed and
    /// the operation fails with [`Unanswered`].
    pub(crate) async fn run<T>(
        &mut self,
        operation: &'static str,
        bound: Duration,
        request: impl AsyncFnOnce(&mut PgConnection) -> std::result::Result<T, sqlx::Error>,
    ) -> Result<T> {
        match self.bounded(operation, bound, request, unsure).await? {
            Ok(answer) => Ok(answer),
            Err(error) => Err(store_error(operation, error)),
        }
    }

    /// [`run`](Self::run) for a request that answers idem's errors (opening the store): one that
    /// fails leaves the connection closed.
    pub(crate) async fn run_idem<T>(
        &mut self,
        operation: &'static str,
        bound: Duration,
        request: impl AsyncFnOnce(&mut PgConnection) -> Result<T>,
    ) -> Result<T> {
        self.bounded(operation, bound, request, |_| true).await?
    }

    /// `request`'s answer, or [`Unanswered`] after `bound`; `unsure` says which of its errors
    /// leave the connection in a state nobody knows.
    async fn bounded<T, E>(
        &mut self,
        operation: &'static str,
        bound: Duration,
        request: impl AsyncFnOnce(&mut PgConnection) -> std::result::Result<T, E>,
        unsure: impl Fn(&E) -> bool,
    ) -> Result<std::result::Result<T, E>> {
        let Some(conn) = self.conn.as_deref_mut() else {
            return Err(Error::store(operation, "the connection was closed"));
        };
        self.busy = true;
        let answer = tokio::time::timeout(bound, request(conn))
            .await
            .map_err(|_| Error::store(operation, Unanswered(bound)))?;
        self.busy = answer.as_ref().is_err_and(unsure);
        Ok(answer)
    }
}

impl Drop for Conn {
    fn drop(&mut self) {
        if let Some(conn) = self.conn.take() {
            give_back(conn, self.runtime.as_ref(), self.busy, self.reply);
        }
    }
}

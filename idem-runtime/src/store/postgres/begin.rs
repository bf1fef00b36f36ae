//! `idem_begin`: the claim of [`Store::begin`](crate::store::Store::begin) and the charge of a
//! transactional call, and how a claim whose caller gave up is given back after it lands.

use std::pin::Pin;
use std::sync::Arc;
use std::task::{Context, Poll};
use std::time::Duration;

use sqlx::postgres::{PgArguments, PgRow};
use sqlx::query::Query;
use sqlx::{PgConnection, Postgres, Row as _};

use super::conn::within;
use super::ops::{arguments, store_error};
use super::row;
use super::{PostgresStore, sql_ms, sql_token};
use crate::key::Key;
use crate::store::budget::CounterId;
use crate::store::{Begin, BeginRequest, Exhausted, StoreFuture};
use crate::{Error, Result};

/// What `idem_begin` answered.
pub(crate) enum Answer {
    /// A live record, a claim or a refusal: what [`Store::begin`] answers.
    Begin(Begin),
    /// Charged, not claimed (a transactional call's first step).
    Charged,
}

impl PostgresStore {
    /// The call of `idem_begin` for `req`: `claim` claims the key, else only charges it. Its
    /// arguments in the order of [`Sql::begin`](super::Sql)'s arrays.
    fn begin_query<'q>(
        &'q self,
        req: &'q BeginRequest<'q>,
        counters: &'q Counters,
        claim: bool,
        lock_timeout: Duration,
    ) -> Query<'q, Postgres, PgArguments> {
        let charge = &req.charge;
        let tool_counter = counters.tool.as_ref().map_or(&[][..], |id| id.as_slice());
        let holder = crate::store::holder::Holder::this_process_text().unwrap_or_default();
        let absent = -1; // a cap not set (caps are never negative)
        let text = req.namespace.len() + req.tool.len() + req.turn.len() + holder.len();
        let room = arguments(6, text + BEGIN_ARGUMENT_BYTES);
        sqlx::query_with(&self.inner.sql.begin, room)
            .bind(req.namespace)
            .bind(req.key.as_bytes().as_slice())
            .bind([req.tool, req.turn, holder])
            .bind([
                req.fingerprint.as_bytes().as_slice(),
                counters.turn.as_slice(),
                tool_counter,
            ])
            .bind([
                sql_ms(req.lease).max(1),
                sql_token(req.token),
                i64::from(charge.max_attempts),
                charge.max_calls.map_or(absent, i64::from),
                sql_ms(charge.window),
                sql_ms(lock_timeout).max(1),
                charge.max_tool_actions.map_or(absent, i64::from),
            ])
            .bind(claim)
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
        StoreFuture::new(async move {
            let counters = Counters::of(req);
            // The server may wait for the key's row up to the lock timeout, then answer.
            let bound = lock_timeout + self.reply_timeout();
            let query = self.begin_query(req, &counters, false, lock_timeout);
            let row = within(bound, query.fetch_one(conn))
                .await
                .map_err(|e| store_error("begin", e))?;
            answer(&row, req.key)
        })
    }
}

/// What `idem_begin`'s arguments take beyond their text, encoded (with room to spare): the key,
/// a fingerprint, two counter ids and seven numbers, with the arrays' headers and their
/// elements' length words.
const BEGIN_ARGUMENT_BYTES: usize = 384;

/// The names of the counts a request may be charged to: its turn's, and its tool's when the
/// per-tool cap is set.
struct Counters {
    turn: CounterId,
    tool: Option<CounterId>,
}

impl Counters {
    fn of(req: &BeginRequest<'_>) -> Self {
        let charge = &req.charge;
        Counters {
            turn: charge.turn.turn_counter(),
            tool: charge
                .max_tool_actions
                .map(|_| charge.turn.tool_counter(req.tool)),
        }
    }
}

fn answer(row: &PgRow, key: &Key) -> Result<Answer> {
    let unreadable = |e: sqlx::Error| Error::store("begin", e);
    let kind = row::text(row, 0).unwrap_or_default();
    let count = |i: usize| -> Result<u32> {
        let n: Option<i64> = row.try_get(i).map_err(unreadable)?;
        Ok(n.map_or(0, |n| u32::try_from(n.max(0)).unwrap_or(u32::MAX)))
    };
    Ok(match kind {
        b"live" => Answer::Begin(row::live(row, key)?),
        b"claimed" => Answer::Begin(Begin::Claimed),
        b"charged" => Answer::Charged,
        b"refused_key" => Answer::Begin(Begin::Refused(Exhausted::Key {
            attempts: count(5)?,
            limit: count(6)?,
        })),
        b"refused_turn" => Answer::Begin(Begin::Refused(Exhausted::Turn {
            calls: count(5)?,
            limit: count(6)?,
        })),
        b"refused_tool" => Answer::Begin(Begin::Refused(Exhausted::Tool {
            calls: count(5)?,
            limit: count(6)?,
        })),
        other => {
            return Err(Error::store(
                "begin",
                format!(
                    "idem_begin answered {:?}: the idem functions in the database are not this build's",
                    String::from_utf8_lossy(other)
                ),
            ));
        }
    })
}

/// A [`BeginRequest`] that can move into a task of its own.
struct OwnedBegin {
    namespace: String,
    key: Key,
    tool: &'static str,
    turn: String,
    fingerprint: crate::key::Fingerprint,
    lease: Duration,
    ttl: Duration,
    token: crate::store::LeaseToken,
    charge: crate::store::Charge,
}

impl From<&BeginRequest<'_>> for OwnedBegin {
    fn from(req: &BeginRequest<'_>) -> Self {
        OwnedBegin {
            namespace: req.namespace.to_owned(),
            key: *req.key,
            tool: req.tool,
            turn: req.turn.to_owned(),
            fingerprint: *req.fingerprint,
            lease: req.lease,
            ttl: req.ttl,
            token: req.token,
            charge: req.charge,
        }
    }
}

/// `mutex` locked, whatever a panic left in it.
pub(super) fn lock<T>(mutex: &std::sync::Mutex<T>) -> std::sync::MutexGuard<'_, T> {
    mutex
        .lock()
        .unwrap_or_else(std::sync::PoisonError::into_inner)
}

impl PostgresStore {
    /// `idem_begin` claiming `req`'s key.
    fn claim<'a>(&'a self, req: &'a OwnedBegin) -> StoreFuture<'a, Answer> {
        StoreFuture::new(async move {
            let request = BeginRequest {
                namespace: &req.namespace,
                key: &req.key,
                tool: req.tool,
                turn: &req.turn,
                fingerprint: &req.fingerprint,
                lease: req.lease,
                ttl: req.ttl,
                token: req.token,
                charge: req.charge,
            };
            let counters = Counters::of(&request);
            let lock_timeout = self.inner.lock_timeout;
            // The server may wait for the key's row up to the lock timeout, then answer.
            let bound = lock_timeout + self.reply_timeout();
            let mut conn = self.conn("begin").await?;
            let row = conn
                .run("begin", bound, async |conn| {
                    let row = self
                        .begin_query(&request, &counters, true, lock_timeout)
                        .fetch_one(&mut *conn)
                        .await?;
                    let Some((token, holder)) = row::abandoned(&row) else {
                        return Ok(row);
                    };
                    // Held by a process that is certainly gone: its claim ends a reply
                    // timeout from now (or sooner, with its lease), so that a request it sent
                    // before it died (its result) lands first; then the key is free. Claimed
                    // at once only if that is over (a second call finds it so).
                    let shortened = sqlx::query(&self.inner.sql.free_abandoned)
                        .bind(request.namespace)
                        .bind(request.key.as_bytes().as_slice())
                        .bind(token)
                        .bind(&holder)
                        .bind(sql_ms(self.reply_timeout()))
                        .execute(&mut *conn)
                        .await?
                        .rows_affected();
                    if shortened > 0 {
                        tracing::info!(target: "idem", key = %request.key.short(),
                            tool = request.tool, holder,
                            "a claim whose process is gone ends within a reply timeout");
                    }
                    self.begin_query(&request, &counters, true, lock_timeout)
                        .fetch_one(&mut *conn)
                        .await
                })
                .await?;
            answer(&row, &req.key)
        })
    }
}

impl PostgresStore {
    /// [`Store::begin`](crate::store::Store::begin): the claim runs in the caller's task while
    /// the caller waits for it, and in a task of its own if the caller gives up first.
    pub(super) fn begin_claim<'a>(&'a self, req: BeginRequest<'a>) -> StoreFuture<'a, Begin> {
        // A claim is never cut off half-way: a caller giving up hands the rest to a task of its
        // own (see `Landing`), and a `release` with its token waits for it (see `pending`).
        // Nothing happens before the first poll.
        let owned = OwnedBegin::from(&req);
        StoreFuture::new(async move {
            let store = self.clone();
            let token = owned.token.0;
            let landing = Arc::new(tokio::sync::Mutex::new(()));
            let held = Arc::clone(&landing).try_lock_owned().ok();
            lock(&self.inner.pending).insert(token, landing);
            let claim = async move {
                // Lets a waiting `release` go when the claim ends, however it ends.
                let _landed = Landed {
                    store: store.clone(),
                    token,
                    _held: held,
                };
                store.claim(&owned).await
            };
            let landing = Landing {
                claim: Some(Box::pin(claim)),
                runtime: tokio::runtime::Handle::try_current().ok(),
            };
            match landing.await? {
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
}

/// A claim on its way to the database, polled by the caller that waits for it. Dropped before
/// it answers (the caller gave up), it finishes in a task of its own on the runtime it started
/// on — wherever it is dropped, even on a thread outside any runtime: the claim lands, and the
/// `release` the engine sends for it (which waits for the landing) gives it back. Only if it
/// was never polled in a runtime is it dropped in place.
struct Landing {
    claim: Option<Pin<Box<dyn Future<Output = Result<Answer>> + Send>>>,
    runtime: Option<tokio::runtime::Handle>,
}

impl Future for Landing {
    type Output = Result<Answer>;

    fn poll(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Result<Answer>> {
        let Some(claim) = self.claim.as_mut() else {
            return Poll::Ready(Err(Error::store(
                "begin",
                "the claim was polled after it answered",
            )));
        };
        let answer = std::task::ready!(claim.as_mut().poll(cx));
        self.claim = None;
        Poll::Ready(answer)
    }
}

impl Drop for Landing {
    fn drop(&mut self) {
        if let (Some(rest), Some(runtime)) = (self.claim.take(), self.runtime.take()) {
            // Inside the runtime, so that what the claim drops on a runtime that is shutting
            // down (a pooled connection) finds the runtime it needs.
            super::entered::inside(Some(&runtime), rest, |rest| drop(runtime.spawn(rest)));
        }
    }
}

/// Held by a claim while it runs: when the claim ends (it answered, or it was dropped), its
/// entry in `pending` goes and a `release` waiting for the landing goes on.
struct Landed {
    store: PostgresStore,
    token: u64,
    _held: Option<tokio::sync::OwnedMutexGuard<()>>,
}

impl Drop for Landed {
    fn drop(&mut self) {
        lock(&self.store.inner.pending).remove(&self.token);
    }
}

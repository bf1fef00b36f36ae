//! Transactional calls (feature `postgres`): the claim, the tool's writes and its recorded
//! result commit in **one PostgreSQL transaction**, so either all of it happened — and a retry
//! replays the result — or none of it did, and a retry runs the tool afresh.
//!
//! A call's life, top to bottom:
//! 1. join an identical call running here (single-flight), as every call does;
//! 2. **charge** in one autocommit round trip (`idem_begin` without claiming): a recorded
//!    result answers at once, without a write (a replay is one round trip); a holder's
//!    transaction is waited for (its row lock), then its result replayed; otherwise the
//!    attempt is counted and committed on its own, so that it survives the rollback of the
//!    attempt — a tool that keeps failing, or keeps being killed, still exhausts its budget;
//! 3. **`BEGIN` and claim** in one round trip: the key's row is locked inside the new
//!    transaction, so a concurrent duplicate waits for this transaction (for at most its
//!    turn's in-flight wait, then [`Error::InFlight`]);
//! 4. the body runs with the transaction's connection;
//! 5. **record and `COMMIT`** in one round trip.
//!
//! Anything before the commit — an `Err`, a panic, the caller dropping the call or timing out,
//! the process killed, the connection lost — rolls everything back, the tool's rows and the
//! claim alike: a transactional call is never *interrupted*. A commit whose outcome the caller
//! cannot know (the connection drops during `COMMIT`) answers [`Error::Store`]; a retry finds
//! the record and replays it, or finds nothing and runs: exactly once either way.
//!
//! A SIGKILL between the charge and the claim leaves an attempt counted that never ran: the
//! budget errs towards refusing. Two duplicates that both charge before either claims count
//! one attempt too many against the turn's cap (the key's own count is reset when the first
//! commits); the later one then waits and replays.

use std::any::Any;
use std::future::{Future, poll_fn};
use std::ops::{Deref, DerefMut};
use std::pin::pin;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};

use sqlx::pool::PoolConnection;
use sqlx::{PgConnection, Postgres};
use tokio::time::Instant;
use tracing::{Instrument, Span};

use super::call::{
    Answer, FIRST_BACKOFF, MAX_BACKOFF, in_flight, mismatch, over_budget, recorded, refuse,
    store_id,
};
use super::guard::{Guard, ttl_of};
use super::port::{Finished, Port};
use super::report::Reporter;
use super::typed::answered;
use super::{Call, Codec, held, keeper, telemetry};
use crate::Error;
use crate::flight::{self, Role, Waited};
use crate::stats::Outcome;
use crate::store::postgres::begin::Answer as Charged;
use crate::store::postgres::conn::{give_back, unsure as unsure_after};
use crate::store::postgres::ops::{is_code, lock_timed_out};
use crate::store::postgres::schema::{CLAIM_GONE, KEY_IS_LIVE, LOCK_TIMEOUT};
use crate::store::postgres::tx::{self, raw};
use crate::store::{Begin, FirstResult, LeaseToken, PostgresStore, Store};

/// Runs `body` at most once per key **inside one PostgreSQL transaction** with its claim and
/// its recorded result: see [the module documentation](self).
///
/// The call's store (its own, its turn's, or the process default) must be a
/// [`PostgresStore`]: `body` gets a connection of that store's pool, inside the transaction.
/// Run every statement of the tool's side effect through it; don't `COMMIT` or `ROLLBACK` it
/// yourself (`conn.begin()` on it opens a savepoint, which is fine).
///
/// Only `Ok` results are recorded: an `Err` rolls the transaction back (a codec that records
/// errors, [`Codec::ok_and_err`], is treated like [`Codec::ok_only`] here), and a retry runs
/// the tool again.
///
/// A body that also calls the outside world (an HTTP API, an email) is not covered by the
/// transaction: if the process dies after that call and before the commit, a retry runs it
/// again. Forward [`current_key`](crate::current_key) to such APIs (an `Idempotency-Key`
/// header) so that they deduplicate the second call.
///
/// The returned future is `Send` when the body's is. Needs a Tokio runtime.
///
/// # Errors
/// The tool's own errors, and any [`Error`] of [`execute`](super::execute) converted with
/// `E: From<Error>`; [`Error::Config`] if the store is not a `PostgresStore`;
/// [`Error::Store`] if the transaction could not be opened or committed (nothing happened, or —
/// when the connection dropped during `COMMIT`, or the server did not answer it within the
/// store's reply timeout — the outcome is unknown: a retry finds out); [`Error::LeaseLost`] if
/// the body ran past the tool's lease (it was stopped, and everything rolled back).
pub async fn execute<T, E, F>(call: Call, codec: Codec<T, E>, body: F) -> Result<T, E>
where
    E: From<Error>,
    F: AsyncFnOnce(&mut PgConnection) -> Result<T, E>,
{
    let span = telemetry::span(&call);
    let report = Reporter::new(call, span.clone(), Span::current());
    run(report, codec, body).instrument(span).await
}

/// A connection of the store's pool. If the call ends while the connection's transaction
/// state is not known to `sqlx` (between sending `BEGIN` and learning whether it began, after a
/// failed claim and before its `ROLLBACK`, after a request the server did not answer in time),
/// the connection is closed instead of going back to the pool: the server rolls back whatever
/// it had open. Otherwise it goes back through the store's bounded give-back (a server that
/// stops answering cannot keep it). Either way it is dropped inside the runtime it was acquired
/// on (a pooled connection goes back through a task of the runtime), so a call dropped on a
/// thread outside any runtime does not panic.
struct Checkout<'u> {
    conn: Option<PoolConnection<Postgres>>,
    runtime: Option<tokio::runtime::Handle>,
    /// Outside the struct, so that it can change while a transaction borrows the connection.
    unsure: &'u AtomicBool,
    /// How long the server has to answer the pool's check of the connection handed back.
    reply: std::time::Duration,
}

impl Deref for Checkout<'_> {
    type Target = PgConnection;
    fn deref(&self) -> &PgConnection {
        self.conn
            .as_deref()
            .unwrap_or_else(|| unreachable!("the connection stays until the call ends"))
    }
}

impl DerefMut for Checkout<'_> {
    fn deref_mut(&mut self) -> &mut PgConnection {
        self.conn
            .as_deref_mut()
            .unwrap_or_else(|| unreachable!("the connection stays until the call ends"))
    }
}

impl Drop for Checkout<'_> {
    fn drop(&mut self) {
        let Some(conn) = self.conn.take() else {
            return;
        };
        let unsure = self.unsure.load(Ordering::Relaxed);
        give_back(conn, self.runtime.as_ref(), unsure, self.reply);
    }
}

/// The call's [`PostgresStore`], or the error that says it has none.
fn postgres_store(call: &Call) -> Result<PostgresStore, Error> {
    let store: &dyn Store = &**call.store();
    let any: &dyn Any = store;
    any.downcast_ref::<PostgresStore>().cloned().ok_or_else(|| {
        Error::Config(format!(
            "tool `{}` is transactional: it runs inside a transaction of its store's \
                 PostgreSQL database, so its store must be a PostgresStore (give it one with \
                 `store = …`, Turn::with_store or idem_tools::set_default_store)",
            call.tool.name
        ))
    })
}

/// What the first steps decided.
enum Opened {
    /// The call has its answer (a refusal, an error).
    Answer(Answer),
    /// A recorded result of these arguments: replay it.
    Replay(FirstResult),
    /// The caller must claim the key inside a transaction (step 3).
    Charged,
}

async fn run<T, E, F>(report: Reporter, codec: Codec<T, E>, body: F) -> Result<T, E>
where
    E: From<Error>,
    F: AsyncFnOnce(&mut PgConnection) -> Result<T, E>,
{
    let mut guard = Guard::new(report, Arc::new(Port::default()));
    let call = guard.report().call().clone();
    let store = match prepare(&call) {
        Ok(store) => store,
        Err((outcome, error)) => return answered(refuse(&mut guard, outcome, error), None, codec),
    };
    let wait_until = Instant::now() + call.turn.in_flight_wait();
    let token = LeaseToken::generate();
    let lease = call.lease(token);
    let unsure = AtomicBool::new(false);
    let reply = store.reply_timeout();
    let mut conn = Checkout {
        conn: None,
        runtime: None,
        unsure: &unsure,
        reply,
    };
    // Steps 1 to 3, until the key is claimed inside a transaction or the call has its answer.
    let (leader, mut tx) = 'claim: loop {
        let leader = match flight::join(store_id(call.store()), call.key) {
            Role::Done(shared) => {
                return answered(
                    recorded(&mut guard, &call, shared, Outcome::Joined),
                    None,
                    codec,
                );
            }
            Role::Follower(follower) => match follower.wait(wait_until).await {
                Waited::Done(shared) => {
                    let answer = recorded(&mut guard, &call, shared, Outcome::Joined);
                    return answered(answer, None, codec);
                }
                Waited::Abandoned => continue 'claim,
                Waited::TimedOut => {
                    return answered(in_flight(&mut guard, &call, wait_until), None, codec);
                }
            },
            Role::Leader(leader) => leader,
        };
        loop {
            if conn.conn.is_none() {
                match store.pool().acquire().await {
                    Ok(acquired) => {
                        conn.conn = Some(acquired);
                        conn.runtime = tokio::runtime::Handle::try_current().ok();
                    }
                    Err(e) => {
                        let error = Error::store("begin", e);
                        let answer = refuse(&mut guard, Outcome::StoreError, error);
                        return answered(answer, None, codec);
                    }
                }
            }
            match charge(&mut guard, &call, &store, &mut conn, token, wait_until).await {
                Opened::Answer(answer) => return answered(answer, None, codec),
                Opened::Replay(first) => {
                    leader.publish(|| first.clone());
                    let answer = recorded(&mut guard, &call, first, Outcome::Replayed);
                    return answered(answer, None, codec);
                }
                Opened::Charged => {}
            }
            let sql = store.begin_and_claim(
                &lease,
                call.tool.name,
                call.fingerprint.as_bytes(),
                keeper_duration(&call),
                call.turn.charge(call.tool.budget).window,
                remaining(wait_until),
            );
            unsure.store(true, Ordering::Relaxed);
            // The server may wait for the key's row for the rest of the wait, then answer.
            let bound = remaining(wait_until) + reply;
            let failed = match tx::begin(&mut conn, sql, bound).await {
                Ok(tx) => break 'claim (leader, tx),
                Err(error) => error,
            };
            // The claim failed inside the new transaction: roll it back before anything else.
            if raw(&mut conn, "ROLLBACK", reply).await.is_err() {
                drop(conn.conn.take().map(PoolConnection::detach));
            }
            unsure.store(false, Ordering::Relaxed);
            if is_code(&failed, KEY_IS_LIVE) {
                continue; // completed or held meanwhile: the charge step answers it
            }
            let answer = if is_code(&failed, LOCK_TIMEOUT) {
                in_flight(&mut guard, &call, wait_until)
            } else {
                refuse(
                    &mut guard,
                    Outcome::StoreError,
                    Error::store("begin", failed),
                )
            };
            return answered(answer, None, codec);
        }
    };
    // From here on the transaction is `sqlx`'s: dropped, it rolls back.
    unsure.store(false, Ordering::Relaxed);

    // Step 4: the body, with the call's held keys and turn around each poll, for at most the
    // tool's lease: a statement the server never answers must not hold the call forever.
    let result = {
        let (held, turn) = (held::with(call.key), call.turn.clone());
        let mut body = pin!(body(&mut *tx));
        let body = poll_fn(|cx| {
            held::sync_scope(held.clone(), || {
                turn.clone().sync_scope(|| body.as_mut().poll(cx))
            })
        });
        tokio::time::timeout(keeper_duration(&call), body).await
    };
    let Ok(result) = result else {
        return answered(past_the_lease(&mut guard, &call, tx, &unsure), None, codec);
    };

    // Step 5: record and commit, or roll back.
    let bytes = match codec.finished(call.tool.name, &result) {
        Finished::Record { bytes, ok: true } => bytes,
        Finished::Unreplayable { bytes, reason } => {
            tracing::error!(target: "idem", tool = call.tool.name, key = %call.key.short(),
                %reason, "the result cannot be replayed faithfully; retries will be told the \
                tool ran");
            bytes
        }
        Finished::Record { ok: false, .. } | Finished::Release => {
            drop(tx); // rolls back, the claim with the tool's writes
            drop(leader); // followers ask again, after the rollback was queued
            guard.report().report(Outcome::Failed);
            return answered(Answer::Ran, Some(result), codec);
        }
    };
    let sql = store.record_and_commit(&lease, &bytes, ttl_of(guard.report()));
    match raw(&mut tx, &sql, reply).await {
        Ok(_) => {
            let shared = FirstResult {
                fingerprint: call.fingerprint,
                result: bytes,
            };
            leader.publish(|| shared);
            guard.report().report(Outcome::Executed);
            answered(Answer::Ran, Some(result), codec)
        }
        Err(failed) => {
            drop(tx);
            // No answer, or a broken connection: its state is unknown, so it is closed.
            unsure.store(unsure_after(&failed), Ordering::Relaxed);
            drop(leader);
            let error = commit_error(failed);
            answered(refuse(&mut guard, Outcome::StoreError, error), None, codec)
        }
    }
}

/// A body still running at the end of its lease: it was dropped; the transaction rolls back and
/// its connection, whose state is unknown (a statement may be on the wire), is closed.
fn past_the_lease(
    guard: &mut Guard,
    call: &Call,
    tx: sqlx::Transaction<'_, Postgres>,
    unsure: &AtomicBool,
) -> Answer {
    drop(tx);
    unsure.store(true, Ordering::Relaxed);
    let error = Error::LeaseLost {
        key: call.key.short(),
    };
    refuse(guard, Outcome::LeaseLost, error)
}

/// Step 2: charges the attempt (autocommit), answering a live record instead; waits with
/// backoff for a holder outside a transaction.
async fn charge(
    guard: &mut Guard,
    call: &Call,
    store: &PostgresStore,
    conn: &mut PgConnection,
    token: LeaseToken,
    wait_until: Instant,
) -> Opened {
    let duration = keeper_duration(call);
    let mut backoff = FIRST_BACKOFF;
    loop {
        let request = call.begin_request(token, duration);
        let answer = store
            .charge_on(&mut *conn, &request, remaining(wait_until))
            .await;
        match answer {
            Ok(Charged::Charged) => return Opened::Charged,
            Ok(Charged::Begin(Begin::Completed(first))) => {
                if first.fingerprint != call.fingerprint {
                    return Opened::Answer(mismatch(guard, call));
                }
                return Opened::Replay(first);
            }
            Ok(Charged::Begin(Begin::InFlight { fingerprint })) => {
                if fingerprint != call.fingerprint {
                    return Opened::Answer(mismatch(guard, call));
                }
            }
            Ok(Charged::Begin(Begin::Refused(exhausted))) => {
                return Opened::Answer(over_budget(guard, call, exhausted));
            }
            Ok(Charged::Begin(Begin::Claimed)) => {
                let error = Error::store("begin", "idem_begin claimed when asked to charge");
                return Opened::Answer(refuse(guard, Outcome::StoreError, error));
            }
            Err(error) if lock_timed_out(&error) => {
                return Opened::Answer(in_flight(guard, call, wait_until));
            }
            Err(error) => return Opened::Answer(refuse(guard, Outcome::StoreError, error)),
        }
        // Held outside a transaction (a non-transactional call of this key): ask again.
        let now = Instant::now();
        if now >= wait_until {
            return Opened::Answer(in_flight(guard, call, wait_until));
        }
        tokio::time::sleep(backoff.min(wait_until - now)).await;
        backoff = (backoff * 2).min(MAX_BACKOFF);
    }
}

/// The call's store, checked; or the outcome and error that refuse it.
fn prepare(call: &Call) -> Result<PostgresStore, (Outcome, Error)> {
    if held::holds(&call.key) {
        let error = Error::Reentrant {
            tool: call.tool.name,
            key: call.key.short(),
        };
        return Err((Outcome::Reentrant, error));
    }
    keeper::duration(call.tool).map_err(|error| (Outcome::ConfigError, error))?;
    postgres_store(call).map_err(|error| (Outcome::ConfigError, error))
}

/// The tool's lease (checked by [`prepare`]): how long an in-progress row would count, were it
/// ever committed.
fn keeper_duration(call: &Call) -> std::time::Duration {
    keeper::duration(call.tool).unwrap_or(crate::store::DEFAULT_LEASE)
}

/// What is left of the in-flight wait (at least a millisecond: a lock timeout of zero would
/// mean no timeout).
fn remaining(wait_until: Instant) -> std::time::Duration {
    wait_until
        .saturating_duration_since(Instant::now())
        .max(std::time::Duration::from_millis(1))
}

/// The error of a record-and-commit that failed: rolled back if the server said why, else of
/// unknown outcome.
fn commit_error(failed: sqlx::Error) -> Error {
    if is_code(&failed, CLAIM_GONE) {
        return Error::store(
            "commit",
            "the tool's own statements changed idem's record of this call inside the \
             transaction, so nothing was committed: leave the idem tables to idem",
        );
    }
    if matches!(failed, sqlx::Error::Database(_)) {
        return Error::store("commit", failed);
    }
    Error::store(
        "commit",
        format!(
            "the connection failed while the result was recorded and committed ({failed}): \
             whether the transaction committed is unknown; a retry replays the result if it \
             did, and runs the tool if it did not"
        ),
    )
}

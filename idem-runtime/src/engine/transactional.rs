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
//! 4. the body runs with the transaction's connection (a tool it calls is refused: that tool's
//!    record would be kept outside the transaction, and outlive its rollback);
//! 5. **record and `COMMIT`** in one round trip.
//!
//! Anything before the commit — an `Err`, a panic, the caller dropping the call or timing out,
//! the process killed, the connection lost — rolls everything back, the tool's rows and the
//! claim alike: a transactional call is never *interrupted* — unless its body ended the
//! transaction itself, committing the claim with its writes (`ended`). A commit whose outcome
//! the caller cannot know (the connection drops during `COMMIT`, the server ends the session)
//! answers [`Error::CommitFailed`]; a retry finds the record and replays it, or finds nothing
//! and runs: exactly once either way.
//!
//! A SIGKILL between the charge and the claim leaves an attempt counted that never ran: the
//! budget errs towards refusing. Two duplicates that both charge before either claims count
//! one attempt too many against the turn's cap (the key's own count is reset when the first
//! commits); the later one then waits and replays.

use std::any::Any;
use std::future::poll_fn;
use std::ops::{Deref, DerefMut};
use std::panic;
use std::pin::pin;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};

use super::telemetry::in_span;
use sqlx::pool::PoolConnection;
use sqlx::{PgConnection, Postgres};
use tokio::time::Instant;

use super::call::Finished;
use super::call::{self, Asked, Asker, Granted, in_flight, refuse};
use super::guard::ttl_of;
use super::{Call, Codec, held};
use crate::Error;
use crate::stats::Outcome;
use crate::store::postgres::begin::Answer as Charged;
use crate::store::postgres::conn::{acquire, ended_the_session, give_back, unsure as unsure_after};
use crate::store::postgres::ops::{is_code, lock_timed_out};
use crate::store::postgres::schema::{CLAIM_GONE, KEY_IS_LIVE, LOCK_TIMEOUT};
use crate::store::postgres::tx::{self, raw};
use crate::store::{Begin, BeginRequest, FirstResult, PostgresStore, Store, StoreFuture};

mod ended;
use ended::{committed, ended_by_the_tool};

/// Runs `body` at most once per key **inside one PostgreSQL transaction** with its claim and
/// its recorded result: see [the module documentation](self).
///
/// The call's store (its own, its turn's, or the process default) must be a
/// [`PostgresStore`]: `body` gets a connection of that store's pool, inside the transaction.
/// Run every statement of the tool's side effect through it; don't `COMMIT` or `ROLLBACK` it
/// yourself (`conn.begin()` on it opens a savepoint, which is fine), and return a failed
/// statement's error rather than carry on (a savepoint begun after it fails, and `sqlx` rolls
/// back the whole transaction): a body that ended the transaction gets
/// [`Error::TransactionEnded`] and its key is kept interrupted.
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
/// [`Error::Store`] if the transaction could not be opened (nothing happened);
/// [`Error::CommitFailed`] if it could not be committed (the server refused it: nothing
/// happened; or — when the connection dropped during `COMMIT`, the server ended the session, or
/// did not answer within the store's reply timeout — the outcome is unknown: a retry finds
/// out); [`Error::LeaseLost`] if the body ran past the tool's lease (it was stopped, and its
/// transaction rolled back); [`Error::TransactionEnded`] if the body had ended the transaction
/// itself.
pub async fn execute<T, E, F>(call: Call, codec: Codec<T, E>, body: F) -> Result<T, E>
where
    T: Send,
    E: From<Error> + Send,
    F: AsyncFnOnce(&mut PgConnection) -> Result<T, E>,
{
    let store = match postgres_store(&call) {
        Ok(store) => store,
        Err(error) => {
            let error = super::refuse(call.tool, Some(&call.turn), error);
            return codec.answered(Err(error), None);
        }
    };
    let unsure = AtomicBool::new(false);
    let reply = store.reply_timeout();
    let mut asker = Charging {
        store: &store,
        conn: Checkout {
            conn: None,
            runtime: None,
            unsure: &unsure,
            reply,
        },
    };
    // Steps 1 to 3, until the key is claimed inside a transaction or the call has its answer.
    let mut replayed = None;
    let mut asked = call::ask(call, &mut asker, &mut codec.decoder(&mut replayed)).await;
    let (mut granted, mut tx) = loop {
        let mut granted = match asked {
            Asked::Answered(answer) => return codec.answered(answer, replayed),
            Asked::Granted(granted) => granted,
        };
        let marker = crate::replay::encode_interrupted(granted.call.tool.name);
        let sql = store.begin_and_claim(&tx::TxClaim {
            lease: &granted.claim.lease,
            tool: granted.call.tool.name,
            turn: granted.call.turn.id(),
            fingerprint: granted.call.fingerprint.as_bytes(),
            marker: &marker,
            ttl: ttl_of(granted.guard.report()),
            duration: granted.claim.duration,
            window: granted.call.turn.charge(granted.call.tool).window,
            lock_timeout: remaining(granted.wait_until),
        });
        let conn = &mut asker.conn;
        unsure.store(true, Ordering::Relaxed);
        // The server may wait for the key's row for the rest of the wait, then answer.
        let bound = remaining(granted.wait_until) + reply;
        let claimed = in_span(granted.span.clone(), tx::begin(conn, sql, bound));
        let failed = match claimed.await {
            Ok(tx) => break (granted, tx),
            Err(error) => error,
        };
        // The claim failed inside the new transaction: roll it back before anything else.
        if raw(conn, "ROLLBACK", reply).await.is_err() {
            drop(conn.conn.take().map(PoolConnection::detach));
        }
        unsure.store(false, Ordering::Relaxed);
        if is_code(&failed, KEY_IS_LIVE) {
            // Completed or held meanwhile: asking again answers it.
            asked = call::ask_again(granted, &mut asker, &mut codec.decoder(&mut replayed)).await;
            continue;
        }
        let Granted {
            mut guard,
            call,
            wait_until,
            ..
        } = *granted;
        let answer = if is_code(&failed, LOCK_TIMEOUT) {
            in_flight(&mut guard, &call, wait_until)
        } else {
            refuse(
                &mut guard,
                Outcome::StoreError,
                Error::store("begin", failed),
            )
        };
        return codec.answered(answer, None);
    };
    // From here on the transaction is `sqlx`'s: dropped, it rolls back.
    unsure.store(false, Ordering::Relaxed);
    let span = granted.span.clone();
    let duration = granted.claim.duration;
    let (call, lease) = (granted.call.clone(), granted.claim.lease.clone());

    // Step 4: the body, with the call's held keys and turn around each poll, for at most the
    // tool's lease: a statement the server never answers must not hold the call forever.
    let ttl = ttl_of(granted.guard.report());
    let open = OpenUntilDropped(held::State::running());
    // A body dropped mid-statement (its caller gave up, it panicked) may leave an answer on the
    // wire that `sqlx` does not know it owes (a `COPY … TO STDOUT` it was reading): pooled, the
    // connection would hand that answer's tail to the next query. Until the body returns, the
    // connection is closed rather than pooled.
    unsure.store(true, Ordering::Relaxed);
    let result = {
        let held =
            held::in_transaction_of(call.key, granted.caller, call.tool.name, open.0.clone());
        let turn = call.turn.clone();
        let mut body = pin!(body(&mut *tx));
        // The body's own panic is caught, told from another's that drops the call.
        let body = poll_fn(|cx| call::poll_body(body.as_mut(), &held, &turn, cx));
        in_span(span.clone(), tokio::time::timeout(duration, body)).await
    };
    if let Ok(Ok(_)) = &result {
        // The body returned: whatever it left unread, the next statement reads (or fails on).
        unsure.store(false, Ordering::Relaxed);
    }
    // The body panicked: reported, and the panic goes on to the caller; the transaction rolls
    // back as it unwinds, the claim with it (and the connection is closed).
    let result = result.map(|result| {
        result.unwrap_or_else(|panic| {
            granted.guard.report().report(Outcome::Panicked);
            panic::resume_unwind(panic)
        })
    });
    let leader = granted.leader.take();
    let guard = &mut granted.guard;
    let Ok(result) = result else {
        // Still running at the end of its lease: dropped; the transaction rolls back, and the
        // connection, a statement perhaps on the wire, is closed — unless the body ended the
        // transaction itself before: then its claim committed as an interrupted call's record.
        // (Whether the body had rolled the transaction back cannot be asked now: dropping it
        // may have queued a `ROLLBACK` of sqlx's own on the connection, a savepoint being
        // begun, say.)
        drop(tx);
        unsure.store(true, Ordering::Relaxed);
        // Closed now, not when the call returns: asking whether the claim committed needs a
        // connection of the pool, and this one may be its last.
        asker.conn.hang_up();
        drop(leader);
        if in_span(span.clone(), committed(&store, &call, &lease)).await {
            return codec.answered(ended_by_the_tool(guard, &call, true, duration).await, None);
        }
        let error = Error::LeaseLost {
            key: call.key.short(),
        };
        return codec.answered(refuse(guard, Outcome::LeaseLost, error), None);
    };

    // Step 5: record and commit, or roll back.
    // Nothing to roll back, and `sqlx`'s count of open transactions is wrong now: the
    // connection is closed rather than pooled.
    let close = |tx: sqlx::Transaction<'_, Postgres>| {
        drop(tx);
        unsure.store(true, Ordering::Relaxed);
    };
    let bytes = match codec.finished(call.tool.name, &result) {
        Finished::Record { bytes, ok: true } => bytes,
        Finished::Unreplayable { bytes, reason } => {
            tracing::error!(target: "idem", parent: span.get(), tool = call.tool.name,
                key = %call.key.short(), %reason, "the result cannot be replayed faithfully; \
                retries will be told the tool ran");
            bytes
        }
        Finished::Record { ok: false, .. } | Finished::Release => {
            // The body may have ended the transaction before its `Err`: then its writes (and
            // the claim) may have committed, and the key must not be left to expire.
            let open = store.still_open(&mut tx, &lease, reply).await;
            drop(leader); // followers ask again, after the rollback was queued
            if let Ok(false) = open {
                close(tx);
                asker.conn.hang_up(); // the pool's last connection, perhaps: see below
                let marked = in_span(span, committed(&store, &call, &lease)).await;
                return codec.answered(
                    ended_by_the_tool(guard, &call, marked, duration).await,
                    None,
                );
            }
            if open.is_err() {
                unsure.store(true, Ordering::Relaxed);
            } else {
                call.turn.run().gave_back(call.key);
                if let Some(watch) = &granted.watch {
                    watch.released(&call, &lease);
                }
            }
            drop(tx); // rolls back, the claim with the tool's writes
            guard.report().report(Outcome::Failed);
            return result;
        }
    };
    let sql = store.record_and_commit(&lease, &bytes, ttl);
    let recorded = in_span(span.clone(), raw(&mut tx, &sql, reply)).await;
    if tx::ended_by_the_tool(&recorded) {
        drop(leader);
        close(tx); // and with it what the body wrote after ending the transaction
        // Closed now, not when the call returns: asking whether the claim committed, and
        // marking the key, need connections of the pool, and this one may be its last.
        asker.conn.hang_up();
        let marked = in_span(span, committed(&store, &call, &lease)).await;
        return codec.answered(
            ended_by_the_tool(guard, &call, marked, duration).await,
            None,
        );
    }
    match recorded {
        Ok(_) => {
            let shared = FirstResult {
                fingerprint: call.fingerprint,
                result: bytes,
            };
            if let Some(leader) = leader {
                leader.publish(|| shared);
            }
            guard.report().report(Outcome::Executed);
            result
        }
        Err(failed) => {
            drop(tx);
            // No answer, or a broken connection: its state is unknown, so it is closed.
            unsure.store(unsure_after(&failed), Ordering::Relaxed);
            drop(leader);
            let error = commit_error(&call, failed);
            codec.answered(refuse(guard, Outcome::StoreError, error), None)
        }
    }
}

/// Whether the call's transaction is still open, for the tools its body calls (refused while it
/// is: `held::transaction`): over when dropped, at every return of [`execute`] and when its
/// future is dropped.
struct OpenUntilDropped(Arc<held::State>);

impl Drop for OpenUntilDropped {
    fn drop(&mut self) {
        self.0.end();
    }
}

/// A transactional call's [`Asker`]: charges the attempt on the call's own connection
/// (autocommit, so that it survives a rollback), answering a live record instead; the claim is
/// made afterwards, inside the call's transaction.
struct Charging<'s, 'u> {
    store: &'s PostgresStore,
    conn: Checkout<'u>,
}

impl Asker for Charging<'_, '_> {
    const CLAIMS: bool = false;

    fn begin<'a>(
        &'a mut self,
        _: &'a Arc<dyn Store>,
        request: BeginRequest<'a>,
        wait_until: Instant,
    ) -> StoreFuture<'a, Begin> {
        StoreFuture::new(async move {
            if self.conn.conn.is_none() {
                // Waited for at most the reply timeout, whatever the pool's acquire timeout.
                let reply = self.store.reply_timeout();
                let acquired = acquire(self.store.pool(), "begin", reply).await?;
                self.conn.conn = Some(acquired);
                self.conn.runtime = tokio::runtime::Handle::try_current().ok();
            }
            // Cut off mid-query (the engine bounds every ask), the connection is closed
            // rather than pooled: its state is unknown.
            self.conn.unsure.store(true, Ordering::Relaxed);
            let charged = self
                .store
                .charge_on(&mut self.conn, &request, remaining(wait_until))
                .await;
            self.conn.unsure.store(false, Ordering::Relaxed);
            match charged? {
                Charged::Charged => Ok(Begin::Claimed),
                Charged::Begin(Begin::Claimed) => Err(Error::store(
                    "begin",
                    "idem_begin claimed when asked to charge",
                )),
                Charged::Begin(answer) => Ok(answer),
            }
        })
    }

    fn held_too_long(error: &Error) -> bool {
        lock_timed_out(error)
    }
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

impl Checkout<'_> {
    /// Closes the connection now (its transaction was dropped, its state is not to be trusted),
    /// freeing its place in the pool for what the call still has to ask.
    fn hang_up(&mut self) {
        if let Some(conn) = self.conn.take() {
            give_back(conn, self.runtime.as_ref(), true, self.reply);
        }
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

/// What is left of the in-flight wait (at least a millisecond: a lock timeout of zero would
/// mean no timeout).
fn remaining(wait_until: Instant) -> std::time::Duration {
    wait_until
        .saturating_duration_since(Instant::now())
        .max(std::time::Duration::from_millis(1))
}

/// The error of a record-and-commit that failed: rolled back if the server refused a statement
/// of it, else of unknown outcome — the connection failed, or the server ended the session,
/// which it may do after the `COMMIT` as well as before.
fn commit_error(call: &Call, failed: sqlx::Error) -> Error {
    let message = if is_code(&failed, CLAIM_GONE) {
        "the tool's own statements changed idem's record of this call inside the transaction, \
         so nothing was committed; leave the idem tables to idem"
            .to_owned()
    } else if ended_the_session(&failed) {
        format!("the server ended the session, so whether it committed is unknown: {failed}")
    } else if matches!(failed, sqlx::Error::Database(_)) {
        format!("the server refused it, so nothing was committed: {failed}")
    } else {
        format!("the connection failed, so whether it committed is unknown: {failed}")
    };
    Error::CommitFailed {
        tool: call.tool.name,
        key: call.key.short(),
        message,
    }
}

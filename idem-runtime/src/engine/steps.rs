//! The steps of a call, as far as each goes without waiting.
//!
//! A replay from a store that answers at once (the memory store) runs [`start`] to the end in
//! one synchronous pass: no future is built for it. A call that has to wait — to run the tool,
//! to follow an identical call, to poll a key in flight elsewhere, or for a store that does
//! I/O — hands [`Wait`] to [`wait`], the one `async` part, which the engine boxes.

use std::future::Future;
use std::sync::Arc;
use std::time::Duration;

use tokio::time::Instant;

use super::Call;
use super::claimed::Claimed;
use super::held;
use super::lease::{self, PendingClaim};
use super::report::Reporter;
use crate::Error;
use crate::flight::{self, Follower, Leader, Role, Shared, Waited};
use crate::replay::ResultCodec;
use crate::stats::Outcome;
use crate::store::{
    Begin, BeginRequest, Exhausted, FirstResult, Lease, LeaseToken, Store, StoreFuture,
};

/// The longest pause between two polls of a key in flight elsewhere.
const MAX_BACKOFF: Duration = Duration::from_millis(250);

/// A store's identity for single-flight: its address.
fn store_id(store: &Arc<dyn Store>) -> usize {
    Arc::as_ptr(store).cast::<()>() as usize
}

/// What a call carries from step to step.
pub(super) struct Ctx {
    /// The lease it asks for.
    lease: Duration,
    /// How long it waits for the key to finish elsewhere, at most.
    wait: Duration,
    /// The call's first clock reading, which its wait counts from (a replay from a store that
    /// answers at once reads no clock).
    first: Option<Instant>,
    /// When the request in flight was sent, for a store that may answer late (`None`: the
    /// store answers at once, so a claim starts when its answer arrives).
    sent: Option<Instant>,
    /// The store, by address (single-flight is per store).
    store_id: usize,
    /// Whether the call has charged its attempt (only the first request charges).
    charged: bool,
    /// The pause before polling a key in flight elsewhere again.
    backoff: Duration,
}

impl Ctx {
    /// Reads the clock.
    fn now(&mut self) -> Instant {
        let now = Instant::now();
        self.first.get_or_insert(now);
        now
    }

    /// When the call stops waiting for the key to finish elsewhere.
    fn deadline(&mut self) -> Instant {
        let first = match self.first {
            Some(first) => first,
            None => self.now(),
        };
        first + self.wait
    }
}

/// How far a step got.
pub(super) enum Next<T, E> {
    /// The call is over (its outcome is reported).
    Done(Result<T, E>),
    /// The call has to wait.
    Wait(At),
}

/// Where a call that has to wait picks up. The call's reporter stays where it is until then:
/// the steps of a call that does not wait move nothing but small values.
pub(super) enum At {
    /// The key is claimed: run the tool.
    Run(Claim),
    /// Join the flight and ask the store (which may not answer at once).
    Lead(Ctx),
    /// Wait for the identical call running in this process.
    Follow(Follower, Ctx),
    /// Ask the store again after a pause: the key is in flight elsewhere.
    Poll(Leader, Ctx),
}

/// A claim the store granted, to be run.
pub(super) struct Claim {
    leader: Leader,
    lease: Lease,
    duration: Duration,
    sent: Instant,
}

impl Claim {
    /// The claimed key, ready to run the tool under (the reporter joins it here).
    fn claimed(self, report: Reporter) -> Claimed {
        let store = Arc::clone(report.call().store());
        Claimed::new(
            report,
            store,
            self.lease,
            self.duration,
            self.sent,
            self.leader,
        )
    }
}

/// Starts a call: the checks, then, with a store that answers at once, as far as the call
/// goes without waiting.
pub(super) fn start<C, T, E>(report: &mut Reporter) -> Next<T, E>
where
    C: ResultCodec<T, E>,
    E: From<Error>,
{
    let call = report.call();
    if held::holds(&call.key) {
        // Single-flight would make this call wait for the one it runs inside of.
        let error = Error::Reentrant {
            tool: call.tool.name,
            key: call.key.short(),
        };
        return Next::Done(report.fail(Outcome::Reentrant, error));
    }
    let lease = match lease::duration(call.tool) {
        Ok(lease) => lease,
        Err(error) => return Next::Done(report.fail(Outcome::ConfigError, error)),
    };
    let store = call.store();
    let ctx = Ctx {
        lease,
        wait: call.turn.in_flight_wait(),
        first: None,
        sent: None,
        store_id: store_id(store),
        charged: false,
        backoff: Duration::from_millis(5),
    };
    if !store.answers_at_once() {
        return Next::Wait(At::Lead(ctx));
    }
    match flight::join(ctx.store_id, call.key) {
        Role::Leader(leader) => begin_now::<C, T, E>(report, leader, ctx),
        Role::Done(shared) => Next::Done(joined::<C, T, E>(report, &shared)),
        Role::Follower(follower) => Next::Wait(At::Follow(follower, ctx)),
    }
}

/// Everything a call that has to wait still does: the only `async` part of a call.
pub(super) async fn wait<C, T, E, F, S, R>(
    mut report: Reporter,
    mut at: At,
    body: F,
    start: S,
) -> Result<T, E>
where
    C: ResultCodec<T, E>,
    E: From<Error>,
    S: FnOnce(Claimed, F) -> R,
    R: Future<Output = Result<T, E>>,
{
    loop {
        let next = match at {
            At::Run(claim) => return start(claim.claimed(report), body).await,
            At::Lead(ctx) => match flight::join(ctx.store_id, report.call().key) {
                Role::Leader(leader) => begin::<C, T, E>(&mut report, leader, ctx).await,
                Role::Done(shared) => return joined::<C, T, E>(&mut report, &shared),
                Role::Follower(follower) => Next::Wait(At::Follow(follower, ctx)),
            },
            At::Follow(follower, mut ctx) => {
                let deadline = ctx.deadline();
                match follower.wait(deadline).await {
                    Waited::Done(shared) => return joined::<C, T, E>(&mut report, &shared),
                    // The leader recorded nothing: maybe lead now.
                    Waited::Abandoned => Next::Wait(At::Lead(ctx)),
                    Waited::TimedOut => return in_flight(&mut report, deadline),
                }
            }
            At::Poll(leader, mut ctx) => {
                let left = ctx.deadline().saturating_duration_since(Instant::now());
                tokio::time::sleep(ctx.backoff.min(left)).await;
                ctx.backoff = (ctx.backoff * 2).min(MAX_BACKOFF);
                begin::<C, T, E>(&mut report, leader, ctx).await
            }
        };
        match next {
            Next::Done(result) => return result,
            Next::Wait(next) => at = next,
        }
    }
}

/// The request a leader sends, with its token.
fn request<'a>(call: &'a Call, ctx: &mut Ctx, token: LeaseToken) -> BeginRequest<'a> {
    BeginRequest {
        namespace: call.turn.namespace(),
        key: &call.key,
        tool: call.tool.name,
        fingerprint: &call.fingerprint,
        lease: ctx.lease,
        token,
        // Only the first request of a call is an attempt; polling again is not.
        charge: (!std::mem::replace(&mut ctx.charged, true))
            .then(|| call.turn.charge(call.tool.budget, call.counter)),
    }
}

/// Asks a store that answers at once: no clock is read, since a claim starts when the answer
/// arrives (an in-process store makes it during the call).
fn begin_now<C, T, E>(report: &mut Reporter, leader: Leader, mut ctx: Ctx) -> Next<T, E>
where
    C: ResultCodec<T, E>,
    E: From<Error>,
{
    let call = report.call();
    let token = LeaseToken::generate();
    ctx.sent = None;
    let answer = match call
        .store()
        .begin(request(call, &mut ctx, token))
        .into_ready()
    {
        Ok(answer) => answer,
        Err(pending) => {
            // The store said it answers at once and did not: it cannot be waited for here.
            drop(pending);
            Err(Error::store(
                "begin",
                "the store did not answer at once, as its `answers_at_once` says it does",
            ))
        }
    };
    answered::<C, T, E>(report, leader, ctx, token, answer)
}

/// Asks the store, waiting for its answer if need be.
async fn begin<C, T, E>(report: &mut Reporter, leader: Leader, mut ctx: Ctx) -> Next<T, E>
where
    C: ResultCodec<T, E>,
    E: From<Error>,
{
    let call = report.call();
    let store = call.store();
    let token = LeaseToken::generate();
    // Sent no earlier than now: the lease's conservative start.
    ctx.sent = Some(ctx.now());
    let answer = match store.begin(request(call, &mut ctx, token)).into_ready() {
        Ok(answer) => answer,
        Err(pending) => awaited(store, call.lease(token), pending, ctx.lease).await,
    };
    answered::<C, T, E>(report, leader, ctx, token, answer)
}

/// A `begin` the store did not answer at once, bounded by the lease it asks for (an answer
/// after that is of no use). If the caller drops it meanwhile, the claim it may have made is
/// given back; after an error, [`answered`] gives it back.
async fn awaited(
    store: &Arc<dyn Store>,
    claim: Lease,
    begin: StoreFuture<'_, Begin>,
    lease: Duration,
) -> Result<Begin, Error> {
    let pending = PendingClaim::new(store, claim);
    let answer = tokio::time::timeout(lease, begin).await;
    pending.answered();
    answer.unwrap_or_else(|_| Err(Error::store("begin", "no answer within the lease")))
}

/// What the store's answer to the request with `token` means for the call.
fn answered<C, T, E>(
    report: &mut Reporter,
    leader: Leader,
    mut ctx: Ctx,
    token: LeaseToken,
    answer: Result<Begin, Error>,
) -> Next<T, E>
where
    C: ResultCodec<T, E>,
    E: From<Error>,
{
    let call = report.call();
    let begun = match answer {
        Ok(begun) => begun,
        Err(error) => {
            // Gives back a claim that may have landed before the error.
            lease::release_in_background(Arc::clone(call.store()), call.lease(token));
            return Next::Done(report.fail(Outcome::StoreError, error));
        }
    };
    match begun {
        Begin::Claimed => {
            let (sent, in_time) = match ctx.sent {
                Some(sent) => (sent, Instant::now() < sent + ctx.lease),
                None => (ctx.now(), true), // answered at once: the claim starts now
            };
            if in_time {
                return Next::Wait(At::Run(Claim {
                    leader,
                    lease: call.lease(token),
                    duration: ctx.lease,
                    sent,
                }));
            }
            // The answer came after the lease it granted had run out: another caller may hold
            // the key by now. Give the claim back and ask again.
            lease::release_in_background(Arc::clone(call.store()), call.lease(token));
            poll_later(report, leader, ctx)
        }
        Begin::Completed(first) => Next::Done(replay::<C, T, E>(report, leader, first)),
        Begin::InFlight { fingerprint } if fingerprint != call.fingerprint => {
            Next::Done(mismatch(report))
        }
        Begin::InFlight { .. } => poll_later(report, leader, ctx),
        Begin::Exhausted(exhausted) => Next::Done(over_budget(report, exhausted)),
    }
}

/// The key is in flight elsewhere: poll again after a pause, unless the wait is over.
fn poll_later<T, E: From<Error>>(
    report: &mut Reporter,
    leader: Leader,
    mut ctx: Ctx,
) -> Next<T, E> {
    let deadline = ctx.deadline();
    if Instant::now() >= deadline {
        return Next::Done(in_flight(report, deadline));
    }
    Next::Wait(At::Poll(leader, ctx))
}

/// A completed key: the first result, without running the tool.
fn replay<C, T, E>(report: &mut Reporter, leader: Leader, first: FirstResult) -> Result<T, E>
where
    C: ResultCodec<T, E>,
    E: From<Error>,
{
    let call = report.call();
    if first.fingerprint != call.fingerprint {
        return mismatch(report);
    }
    match C::decode(call.tool.name, &call.key, &first.result) {
        Ok(result) => {
            leader.publish(|| first);
            report.report(Outcome::Replayed);
            result
        }
        Err(error) => decode_failed(report, error),
    }
}

/// The result of an identical call this one waited for.
fn joined<C, T, E>(report: &mut Reporter, shared: &Shared) -> Result<T, E>
where
    C: ResultCodec<T, E>,
    E: From<Error>,
{
    let call = report.call();
    if shared.fingerprint != call.fingerprint {
        return mismatch(report);
    }
    match C::decode(call.tool.name, &call.key, &shared.result) {
        Ok(result) => {
            report.report(Outcome::Joined);
            result
        }
        Err(error) => decode_failed(report, error),
    }
}

/// A record that does not decode: corrupt, or a marker (interrupted, not replayable) that
/// answers the call with its error.
fn decode_failed<T, E: From<Error>>(report: &mut Reporter, error: Error) -> Result<T, E> {
    let outcome = match error {
        Error::Interrupted { .. } | Error::NotReplayable { .. } => Outcome::Replayed,
        _ => Outcome::DecodeError,
    };
    report.fail(outcome, error)
}

fn mismatch<T, E: From<Error>>(report: &mut Reporter) -> Result<T, E> {
    let call = report.call();
    let error = Error::PayloadMismatch {
        tool: call.tool.name,
        key: call.key.short(),
    };
    report.fail(Outcome::PayloadMismatch, error)
}

fn in_flight<T, E: From<Error>>(report: &mut Reporter, deadline: Instant) -> Result<T, E> {
    let call = report.call();
    let error = Error::InFlight {
        tool: call.tool.name,
        key: call.key.short(),
        waited: call.turn.in_flight_wait() + Instant::now().saturating_duration_since(deadline),
    };
    report.fail(Outcome::InFlight, error)
}

fn over_budget<T, E: From<Error>>(report: &mut Reporter, exhausted: Exhausted) -> Result<T, E> {
    let call = report.call();
    let (tool, key) = (call.tool.name, call.key.short());
    let (outcome, error) = match exhausted {
        Exhausted::Key {
            attempts,
            completed: true,
            ..
        } => (
            Outcome::AlreadySucceeded,
            Error::AlreadySucceeded {
                tool,
                key,
                attempts,
            },
        ),
        Exhausted::Key {
            attempts, limit, ..
        } => (
            Outcome::BudgetExhausted,
            Error::BudgetExhausted {
                tool,
                key,
                attempts,
                limit,
            },
        ),
        Exhausted::Turn { calls, limit } => (
            Outcome::BudgetExhausted,
            Error::TurnBudgetExhausted {
                tool,
                turn: call.turn.id().to_owned(),
                calls,
                limit,
            },
        ),
    };
    report.fail(outcome, error)
}

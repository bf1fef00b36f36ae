//! A call's life, top to bottom, compiled once for every tool: [`ask`] — refusals that need no
//! store, then join an identical call running here or ask the store until there is an answer
//! or a claim — then [`run`] the body under the lease keeper, record its result, publish it to
//! the calls waiting here and report the outcome. The typed layer (`typed.rs`) hands the body
//! in, boxed, already encoding its result ([`Body`]), and decodes what comes back.

use std::future::Future;
use std::panic::{self, AssertUnwindSafe};
use std::pin::Pin;
use std::sync::Arc;
use std::task::{Context, Poll};
use std::time::Duration;

use bytes::Bytes;
use tokio::time::Instant;

use super::Call;
use super::background;
use super::guard::{self, Guard, Holding, Phase};
use super::held::{self, Held};
use super::keeper::{self, Claim, Keeper};
use super::report::Reporter;
use super::telemetry::{self, CallSpan, in_span};
use crate::Error;
use crate::conversation::overlap::Watch;
use crate::error::Earlier;
use crate::flight::{self, Leader, Role, Waited};
use crate::replay::decode_panicked;
use crate::stats::Outcome;
use crate::store::{Begin, BeginRequest, Exhausted, FirstResult, LeaseToken, Store, StoreFuture};
use crate::turn::Turn;

/// The first pause, and the longest, between two polls of a key in flight elsewhere.
pub(super) const FIRST_BACKOFF: Duration = Duration::from_millis(5);
pub(super) const MAX_BACKOFF: Duration = Duration::from_millis(250);

/// The tool's body as the engine runs it: the tool's future, which encodes its result for
/// recording when it finishes (the typed result stays with the typed layer).
pub(crate) type Body<'a> = Pin<Box<dyn Future<Output = Finished> + Send + 'a>>;

/// How the tool's body finished, as the engine needs to know it.
#[derive(Debug)]
pub(crate) enum Finished {
    /// Record these bytes (an `Ok`, or an `Err` of a tool that records errors).
    Record {
        /// The record.
        bytes: Bytes,
        /// Whether the result is an `Ok`.
        ok: bool,
    },
    /// The result cannot be replayed faithfully: record this marker instead, so that a retry
    /// is told the tool ran rather than running it again.
    Unreplayable {
        /// The marker.
        bytes: Bytes,
        /// Why, for the operator.
        reason: String,
    },
    /// An `Err` that is not recorded: give the key back so that a retry runs again.
    Release,
}

/// How a call ended, for the typed layer, its outcome reported: `Ok` when the typed layer
/// holds the result — the body's, or a recorded one the [`Decode`] turned into the tool's
/// result — or the error that refused or failed the call.
pub(super) type Answer = Result<(), Error>;

/// Turns a recorded result (replayed from the store, or shared by an identical call) into the
/// tool's result, kept by the typed layer; an error if it does not decode.
pub(super) type Decode<'d> = &'d mut (dyn FnMut(&Call, &[u8]) -> Result<(), Error> + Send);

/// What asking gave: an answer, or leave to go on.
pub(super) enum Asked {
    Answered(Answer),
    /// Boxed: a call that replays never gets one, and its future stays small.
    Granted(Box<Granted>),
}

/// A call the store let go on: a plain call holds its claim (in the guard, the body not
/// started); a transactional call was charged and claims in its own transaction, with
/// `claim`'s token, leading the flight of its key here.
pub(super) struct Granted {
    pub(super) guard: Guard,
    pub(super) call: Call,
    pub(super) store: Arc<dyn Store>,
    pub(super) span: CallSpan,
    pub(super) claim: Claim,
    /// The flight, unless the guard holds it with the claim.
    #[cfg_attr(not(feature = "postgres"), allow(dead_code))] // a transactional call's
    pub(super) leader: Option<Leader>,
    /// When the in-flight wait ends.
    #[cfg_attr(not(feature = "postgres"), allow(dead_code))] // a transactional call's
    pub(super) wait_until: Instant,
    /// Where the call was made (the held keys, the scope of conversations), taken in the
    /// caller's task: a detached body runs in a task of its own.
    pub(super) caller: held::Caller,
    /// The watch of the call a model made that this call is made in, if any.
    pub(super) watch: Option<Arc<Watch>>,
}

/// How [`ask`] asks the store: [`Claiming`] claims the key (every plain call); a
/// transactional call charges the attempt instead, and claims inside its own transaction.
pub(super) trait Asker: Send {
    /// Whether [`Begin::Claimed`] means the key is claimed in the store: the claim is then
    /// trusted for part of its lease only, and given back if the call ends before it runs.
    const CLAIMS: bool;

    /// Asks the store for `request`'s key; `wait_until` ends the in-flight wait.
    fn begin<'a>(
        &'a mut self,
        store: &'a Arc<dyn Store>,
        request: BeginRequest<'a>,
        wait_until: Instant,
    ) -> StoreFuture<'a, Begin>;

    /// Whether `error` means the key stayed held until the in-flight wait ended.
    fn held_too_long(_error: &Error) -> bool {
        false
    }
}

/// A plain call's [`Asker`]: [`Store::begin`].
pub(super) struct Claiming;

impl Asker for Claiming {
    const CLAIMS: bool = true;

    fn begin<'a>(
        &'a mut self,
        store: &'a Arc<dyn Store>,
        request: BeginRequest<'a>,
        _: Instant,
    ) -> StoreFuture<'a, Begin> {
        store.begin(request)
    }
}

/// Asks for `call`: its span, its reporter, then [`asking`].
pub(super) fn ask<'a, A: Asker>(
    call: Call,
    asker: &'a mut A,
    decode: Decode<'a>,
) -> impl Future<Output = Asked> + Send + 'a {
    let span = telemetry::span(&call);
    let guard = Guard::new(Reporter::new(call, span.clone(), telemetry::context()));
    in_span(span.clone(), asking(guard, span, None, asker, decode))
}

/// [`ask`] for a plain call. Not generic, so that its future is compiled in this crate, once,
/// and crates with tools link to it ([`compiled_here`]).
pub(super) fn ask_plain<'a>(
    call: Call,
    asker: &'a mut Claiming,
    decode: Decode<'a>,
) -> impl Future<Output = Asked> + Send + 'a {
    let asking = ask(call, asker, decode);
    #[cfg(debug_assertions)]
    compiled_here(&asking);
    asking
}

/// Has rustc compile `future`'s `poll` and drop glue in this crate. A crate with tools awaits
/// it from generic code, which rustc would otherwise compile there again, in every such crate;
/// with generic code shared across crates (`-Zshare-generics`, rustc's default in debug builds,
/// hence `debug_assertions`) it links to these instead. Costs two stores per call, in debug.
#[cfg(debug_assertions)]
fn compiled_here<F: Future>(_: &F) {
    std::hint::black_box(<F as Future>::poll as fn(Pin<&mut F>, &mut Context<'_>) -> _);
    std::hint::black_box(std::ptr::drop_in_place::<F> as unsafe fn(*mut F));
}

/// Asks again for a call whose grant did not hold (a transactional call found the key live
/// when it claimed it): its flight ends — the calls waiting on it ask too — and its in-flight
/// wait goes on.
#[cfg_attr(not(feature = "postgres"), allow(dead_code))] // a transactional call's
pub(super) fn ask_again<'a, A: Asker>(
    granted: Box<Granted>,
    asker: &'a mut A,
    decode: Decode<'a>,
) -> impl Future<Output = Asked> + Send + 'a {
    let Granted {
        guard,
        span,
        leader,
        wait_until,
        ..
    } = *granted;
    drop(leader);
    in_span(
        span.clone(),
        asking(guard, span, Some(wait_until), asker, decode),
    )
}

/// Refusals that need no store, then join an identical call running here or ask the store
/// until the call has an answer or leave to go on. Waiting — for the call here, or for a
/// holder elsewhere — charges nothing.
///
/// (An `async` block rather than an `async fn`, here and below: the block uses its captures in
/// place, where an `async fn` copies its arguments into locals, and a call's future is moved
/// several times on its way to being polled.)
#[allow(clippy::manual_async_fn)] // the reason is above
fn asking<'a, A: Asker>(
    mut guard: Guard,
    span: CallSpan,
    wait_until: Option<Instant>,
    asker: &'a mut A,
    decode: Decode<'a>,
) -> impl Future<Output = Asked> + Send + 'a {
    async move {
        let call = guard.report().call().clone();
        let store = Arc::clone(call.store());
        if held::holds(&call.key) {
            // Single-flight would make this call wait for the one it runs inside of.
            let error = Error::Reentrant {
                tool: call.tool.name,
                key: call.key.short(),
            };
            return answered(refuse(&mut guard, Outcome::Reentrant, error));
        }
        if let Some(outer) = held::transaction() {
            // Its record would outlive the transaction's rollback.
            let error = Error::Config(format!(
                "tool `{}` was called inside the body of transactional tool `{outer}`: its \
                 record would be kept even if `{outer}`'s transaction rolled back, and a retry \
                 would replay it without doing its work again, so the call was refused. Inside \
                 a transactional tool, call the code itself (a plain function, not an \
                 `#[idempotent]` tool), or call the tool outside `{outer}`",
                call.tool.name
            ));
            return answered(refuse(&mut guard, Outcome::ConfigError, error));
        }
        let checked = call.turn.check_sizes();
        let duration = match checked.and_then(|()| keeper::duration(call.tool, call.lease)) {
            Ok(duration) => duration,
            Err(error) => return answered(refuse(&mut guard, Outcome::ConfigError, error)),
        };
        let wait_until = wait_until.unwrap_or_else(|| Instant::now() + call.turn.in_flight_wait());
        let (leader, claim) = 'ask: loop {
            let leader = match flight::join(store_id(&store), call.key, call.fingerprint) {
                Role::Done(shared) => {
                    return answered(recorded(&mut guard, &call, shared, Outcome::Joined, decode));
                }
                // Boxed, as every wait: a call that does not wait keeps a small future.
                Role::Follower(follower) => match Box::pin(follower.wait(wait_until)).await {
                    Waited::Done(shared) => {
                        return answered(recorded(
                            &mut guard,
                            &call,
                            shared,
                            Outcome::Joined,
                            decode,
                        ));
                    }
                    Waited::Abandoned => continue 'ask, // it recorded nothing: maybe lead now
                    Waited::TimedOut => return answered(in_flight(&mut guard, &call, wait_until)),
                },
                Role::Leader(leader) => leader,
            };
            let mut backoff = FIRST_BACKOFF;
            loop {
                let claim = Claim {
                    lease: call.lease(LeaseToken::generate()),
                    duration,
                    sent: Instant::now(), // no later than the store's start of the lease
                };
                let answer = begin(&store, &call, asker, &claim, wait_until).await;
                let refusal = match answer {
                    Err(error) if A::held_too_long(&error) => {
                        Some(in_flight(&mut guard, &call, wait_until))
                    }
                    Err(error) => Some(refuse(&mut guard, Outcome::StoreError, error)),
                    Ok(Begin::Claimed) if !A::CLAIMS || Instant::now() < claim.trusted_until() => {
                        break 'ask (leader, claim);
                    }
                    // Answered after the lease it granted could be trusted: another caller may
                    // hold the key by then. Give it back and ask again.
                    Ok(Begin::Claimed) => {
                        background::release(Arc::clone(&store), claim.lease, None);
                        None
                    }
                    Ok(Begin::Completed(first)) if first.fingerprint != call.fingerprint => {
                        Some(mismatch_recorded(&mut guard, &call, &first))
                    }
                    Ok(Begin::Completed(first)) => {
                        leader.publish(|| first.clone());
                        return answered(recorded(
                            &mut guard,
                            &call,
                            first,
                            Outcome::Replayed,
                            decode,
                        ));
                    }
                    Ok(Begin::InFlight { fingerprint }) if fingerprint != call.fingerprint => Some(
                        mismatch(&mut guard, &call, &fingerprint, true, Earlier::Done),
                    ),
                    Ok(Begin::InFlight { .. }) => None,
                    Ok(Begin::Refused(exhausted)) => {
                        Some(over_budget(&mut guard, &call, exhausted))
                    }
                };
                if let Some(refusal) = refusal {
                    return answered(refusal);
                }
                // In flight elsewhere: ask again after a pause, while the wait lasts.
                let now = Instant::now();
                if now >= wait_until {
                    return answered(in_flight(&mut guard, &call, wait_until));
                }
                Box::pin(tokio::time::sleep(backoff.min(wait_until - now))).await;
                backoff = (backoff * 2).min(MAX_BACKOFF);
            }
        };
        call.turn.run().claimed(call.key);
        // A call a model made in a durable turn learns of the tool calls made in it.
        let watch = (!call.is_model_step())
            .then(crate::conversation::scope::watch)
            .flatten();
        let leader = if A::CLAIMS {
            let keeper = Keeper::new(Arc::clone(&store), &claim);
            guard.enter(Phase::Running(Box::new(Holding {
                claim: claim.clone(),
                keeper,
                leader,
                runtime: tokio::runtime::Handle::try_current().ok(),
                watch: watch.clone(),
            })));
            if let Some(watch) = &watch {
                // Claimed: now another run of the turn that asks the model's next step is seen.
                // Boxed, as every wait: a call made outside a model's call keeps a small future.
                let check = watch.before_running(call.tool.name);
                let checked = Box::pin(holding(&mut guard).keeper.run(check)).await;
                if let Err(error) | Ok(Err(error)) = checked {
                    call.turn.run().gave_back(call.key);
                    if let Phase::Running(holding) = guard.enter(Phase::Free) {
                        let (lease, runtime) = (holding.claim.lease.clone(), holding.runtime);
                        watch.released(&call, &lease);
                        background::release(Arc::clone(&store), lease, runtime);
                    }
                    return answered(refuse(&mut guard, Outcome::InFlight, error));
                }
            }
            None
        } else {
            Some(leader)
        };
        Asked::Granted(Box::new(Granted {
            guard,
            call,
            store,
            span,
            claim,
            leader,
            wait_until,
            caller: held::Caller::here(),
            watch,
        }))
    }
}

fn answered(answer: Answer) -> Asked {
    Asked::Answered(answer)
}

/// Asks the store, bounded by the lease asked for (an answer after that is of no use). If
/// the call is dropped meanwhile, or the answer is an error (a timeout may hide a claim that
/// landed), a claim that may have been made is given back with its token — retried while the
/// store does not answer, until that claim's lease would end.
#[allow(clippy::manual_async_fn)] // see `asking`: an async block keeps no second copy of its arguments
fn begin<'a, A: Asker>(
    store: &'a Arc<dyn Store>,
    call: &'a Call,
    asker: &'a mut A,
    claim: &'a Claim,
    wait_until: Instant,
) -> impl Future<Output = Result<Begin, Error>> + Send + 'a {
    async move {
        struct GiveBack<'a>(Option<(&'a Arc<dyn Store>, &'a Claim)>);
        impl Drop for GiveBack<'_> {
            fn drop(&mut self) {
                if let Some((store, claim)) = self.0 {
                    let until = claim.sent + claim.duration;
                    let (lease, now) = (claim.lease.clone(), Instant::now());
                    background::give_back(Arc::clone(store), lease, now..until, claim.duration);
                }
            }
        }
        let mut give_back = GiveBack(A::CLAIMS.then_some((store, claim)));
        let request = call.begin_request(claim.lease.token, claim.duration);
        let answer = bounded(asker.begin(store, request, wait_until), claim.duration)
            .await
            .unwrap_or_else(|| Err(Error::store("begin", "no answer within the lease")));
        if answer.is_ok() {
            give_back.0 = None;
        }
        answer
    }
}

/// `future`, given up `limit` after its first poll (`None`). No timer is armed (or allocated)
/// for a future that answers in its first poll (the memory store, a SQLite read).
pub(super) fn bounded<F: Future + Unpin>(
    mut future: F,
    limit: Duration,
) -> impl Future<Output = Option<F::Output>> {
    let mut timer: Option<Pin<Box<tokio::time::Sleep>>> = None;
    std::future::poll_fn(move |cx| {
        if let Poll::Ready(output) = Pin::new(&mut future).poll(cx) {
            return Poll::Ready(Some(output));
        }
        let timer = timer.get_or_insert_with(|| Box::pin(tokio::time::sleep(limit)));
        match timer.as_mut().poll(cx) {
            Poll::Ready(()) => Poll::Ready(None),
            Poll::Pending => Poll::Pending,
        }
    })
}

/// Runs a granted plain call: the body under the lease keeper, then records its result (or
/// gives the key back), publishes it, reports. Boxed: a call that replays keeps a small future.
pub(super) fn run(
    granted: Box<Granted>,
    body: Body<'_>,
) -> Pin<Box<dyn Future<Output = Answer> + Send + '_>> {
    Box::pin(run_here(granted, body))
}

fn run_here(granted: Box<Granted>, body: Body<'_>) -> impl Future<Output = Answer> + Send + '_ {
    let span = granted.span.clone();
    in_span(span, running(granted, body))
}

/// [`run`] in a task of its own (where there is a runtime): the caller going away does not cut
/// the body off. A panic of the body propagates to the caller, if it still waits.
pub(super) fn run_detached(granted: Box<Granted>, body: Body<'static>) -> Detached {
    match tokio::runtime::Handle::try_current() {
        // Boxed first: `spawn` moves its future by value several times on its way into the
        // task, and a pointer is cheaper to move than the call's future.
        Ok(_) => Detached::Task(tokio::spawn(run(granted, body))),
        Err(_) => Detached::Here(run(granted, body)),
    }
}

/// A detached call's answer: its task's, or (outside a runtime) the call run in place. A
/// future of its own, compiled here once; an `async fn` here would be compiled again in every
/// crate that has tools.
pub(super) enum Detached {
    Task(tokio::task::JoinHandle<Answer>),
    Here(Pin<Box<dyn Future<Output = Answer> + Send>>),
}

impl Future for Detached {
    type Output = Answer;

    fn poll(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Answer> {
        let task = match self.get_mut() {
            Detached::Here(call) => return call.as_mut().poll(cx),
            Detached::Task(task) => task,
        };
        match std::task::ready!(Pin::new(task).poll(cx)) {
            Ok(answer) => Poll::Ready(answer),
            Err(error) => match error.try_into_panic() {
                Ok(panic) => std::panic::resume_unwind(panic),
                // The runtime shut down: the task was dropped, and its guard kept the key as
                // interrupted (or gave it back, had the body not started).
                Err(_) => Poll::Ready(Err(Error::Config(
                    "the Tokio runtime shut down while the tool ran".to_owned(),
                ))),
            },
        }
    }
}

async fn running(mut granted: Box<Granted>, body: Body<'_>) -> Answer {
    // Borrowed from the box rather than moved out: the call's future (boxed too) stays small.
    let Granted {
        guard,
        call,
        store,
        claim,
        caller,
        watch,
        ..
    } = &mut *granted;
    let (call, store, watch) = (&*call, &*store, &*watch);
    let duration = claim.duration;
    let body = Scoped {
        body,
        held: held::with(call.key, std::mem::take(caller)),
        turn: call.turn.clone(),
    };
    // The body is polled in the keeper's first poll, unless the lease ended already (then the
    // call answers `LeaseLost`, holding nothing). Dropped mid-run, the body goes before the
    // guard decides (it is a temporary of this `.await`): two bodies of one key never overlap.
    guard.start();
    let finished = match holding(guard).keeper.run(body).await {
        Ok(Ok(finished)) => finished,
        Ok(Err(panic)) => panicked(guard, panic),
        Err(error) => {
            // The lease could not be kept: the body was dropped, and the key is not ours. A
            // renewal the store kept while it did not answer may still land and hold the key
            // for nobody: given back (with this claim's token, so only if it is still ours)
            // once the lease it trusted would have ended, not sooner — the quarter of a lease
            // left between a holder that cannot renew and the next stays whole.
            if let Phase::Running(holding) = guard.enter(Phase::Free) {
                let (lease, ended) = (holding.claim.lease.clone(), Instant::now() + duration / 4);
                let when = ended..ended + duration;
                background::give_back(Arc::clone(store), lease, when, duration);
            }
            return refuse(guard, Outcome::LeaseLost, error);
        }
    };

    // Record the result (or give the key back), publish it, report.
    let (bytes, ok) = match finished {
        Finished::Release => {
            call.turn.run().gave_back(call.key);
            if let Some(watch) = &watch {
                watch.released(call, &holding(guard).claim.lease);
            }
            return release_after_err(guard, store).await;
        }
        Finished::Record { bytes, ok } => (bytes, ok),
        // A model step that cannot be replayed is not worth keeping: it fails, and the model
        // is asked again (a restarted run could not continue from it).
        Finished::Unreplayable { reason, .. } if call.is_model_step() => {
            let Phase::Running(holding) = guard.enter(Phase::Free) else {
                unreachable!("the body ran under the claim");
            };
            let (lease, runtime) = (holding.claim.lease.clone(), holding.runtime.clone());
            background::release(Arc::clone(store), lease, runtime);
            let error = Error::Encode {
                tool: call.tool.name,
                what: "the model's response".to_owned(),
                message: reason,
            };
            return refuse(guard, Outcome::StoreError, error);
        }
        Finished::Unreplayable { bytes, reason } => {
            tracing::error!(target: "idem", tool = call.tool.name, key = %call.key.short(),
                %reason, "the result cannot be replayed faithfully; retries will be told the \
                tool ran");
            (bytes, true)
        }
    };
    let Phase::Running(holding) = guard.enter(Phase::Free) else {
        unreachable!("the body ran under the claim");
    };
    let ttl = guard::ttl_of(guard.report());
    let lease = holding.claim.lease.clone();
    guard.enter(Phase::Recording {
        holding,
        bytes: bytes.clone(),
        ok,
    });
    // Bounded by a lease: a store that does not answer by then is retried in the background.
    let give_up = Instant::now() + duration;
    let answer = self::holding(guard)
        .keeper
        .during(store.complete(&lease, &bytes, ttl), give_up)
        .await;
    let Phase::Recording { holding, .. } = guard.enter(Phase::Free) else {
        unreachable!("the result was being recorded");
    };
    let outcome = outcome_of(ok);
    let shared = FirstResult {
        fingerprint: call.fingerprint,
        result: bytes.clone(),
    };
    match answer {
        Some(Ok(())) => {
            holding.leader.publish(|| shared);
            guard.report().report(outcome);
        }
        failed if call.is_model_step() => {
            // A model's answer is worth nothing to a restarted run unless it is recorded: the
            // step fails (the key given back) and the model is asked again, rather than act on
            // an answer a restart would not see — also when the lease was lost (another run
            // may be asking the step).
            let error = match failed {
                Some(Err(error)) => error,
                _ => Error::store("complete", "no answer within the lease"),
            };
            let outcome = match error {
                Error::LeaseLost { .. } => Outcome::LeaseLost,
                _ => Outcome::StoreError,
            };
            let Holding {
                keeper,
                runtime,
                leader,
                ..
            } = *holding;
            // But a lost reply may hide a record that landed, which a restart would replay
            // while this run, told the step failed, went another way: `landed` looks (boxed:
            // a rare path, kept out of every call's future). Recorded, the step answers it.
            let lease = keeper.lease().clone();
            if !matches!(error, Error::LeaseLost { .. })
                && Box::pin(landed(store, &lease, &shared, duration)).await
            {
                leader.publish(|| shared);
                guard.report().report(outcome_of(ok));
                return Ok(());
            }
            background::release(Arc::clone(keeper.store()), lease, runtime);
            return refuse(guard, outcome, error);
        }
        Some(Err(error @ Error::LeaseLost { .. })) => {
            // The body finished past its lease without yielding (the keeper could neither renew
            // the lease nor stop it). It ran: its result goes to the callers waiting here, and
            // to the store under a new claim unless another call took the key meanwhile.
            tracing::warn!(target: "idem", tool = call.tool.name, key = %call.key.short(),
                %error, "the tool ran past its lease; recording its result under a new claim");
            guard.report().report(Outcome::LeaseLost);
            let Holding {
                leader, runtime, ..
            } = *holding;
            leader.publish(|| shared);
            background::record_anew(
                Arc::clone(store),
                call.clone(),
                bytes,
                ttl,
                duration,
                runtime,
            )
            .await;
        }
        failed => {
            let error = match failed {
                Some(Err(error)) => error,
                _ => Error::store("complete", "no answer within the lease"),
            };
            tracing::error!(target: "idem", tool = call.tool.name, key = %call.key.short(),
                %error, "the tool ran but its result could not be recorded yet; retrying in the \
                background while holding the key");
            guard.report().report(outcome);
            let Holding {
                keeper,
                leader,
                runtime,
                ..
            } = *holding;
            let lingering = leader.linger(shared);
            background::record(keeper, call.clone(), bytes, ttl, Some(lingering), runtime);
        }
    }
    Ok(())
}

/// A recorded result's outcome: `Executed` for an `Ok`, `Failed` for an `Err` (recorded with
/// `cache_errors`).
fn outcome_of(ok: bool) -> Outcome {
    if ok {
        Outcome::Executed
    } else {
        Outcome::Failed
    }
}

/// Whether `lease`'s key holds `recorded` as its live result though the store's reply to the
/// record was lost, as the store answers within `limit` each time: the lease is given back
/// first — fenced, so a record still on its way can no longer land — and only a claim found no
/// longer held is looked up.
async fn landed(
    store: &Arc<dyn Store>,
    lease: &crate::store::Lease,
    recorded: &FirstResult,
    limit: Duration,
) -> bool {
    let released = bounded(store.release(lease), limit).await;
    if !matches!(released, Some(Err(Error::LeaseLost { .. }))) {
        return false;
    }
    let read = bounded(store.get(&lease.namespace, &lease.key), limit).await;
    matches!(read, Some(Ok(Some(record)))
        if record.fingerprint == recorded.fingerprint
            && record.result.as_deref() == Some(&recorded.result[..]))
}

/// The body, polled with the call's held keys and turn around it (in a detached call's task
/// too, where task-locals do not follow).
struct Scoped<'a> {
    body: Body<'a>,
    held: Held,
    turn: Turn,
}

impl Drop for Scoped<'_> {
    fn drop(&mut self) {
        self.held.end();
    }
}

/// A panic of the tool's body, caught where the body is polled.
pub(super) type Panic = Box<dyn std::any::Any + Send>;

impl Future for Scoped<'_> {
    /// How the body finished, or its panic: caught here, so that the call can tell the body's
    /// own panic (the key is given back) from another's that drops the call while its body
    /// runs (a sibling in the caller's `join!`: the body may have done its work).
    type Output = Result<Finished, Panic>;

    fn poll(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Self::Output> {
        let Scoped { body, held, turn } = self.get_mut();
        poll_body(body.as_mut(), held, turn, cx).map(|polled| {
            polled.map(|finished| match finished {
                // An `Err` of a body that a call it made was refused in may be that refusal
                // ("still running: call again", a store that is down), not the tool's own
                // failure: recorded (`cache_errors`), it would answer every retry for the TTL.
                // Not recorded, its key is given back, as for every `Err` without it. Its
                // caller gets it as this tool's `Err`, not as idem's answer: told too.
                Finished::Record { ok: false, .. } | Finished::Release if held.refused_a_call() => {
                    held.refusal_to_caller();
                    Finished::Release
                }
                finished => finished,
            })
        })
    }
}

/// Polls a tool's body with the call's held keys and turn around it (its task-locals), and
/// catches the body's own panic.
pub(super) fn poll_body<F: Future + ?Sized>(
    body: Pin<&mut F>,
    held: &Held,
    turn: &Turn,
    cx: &mut Context<'_>,
) -> Poll<Result<F::Output, Panic>> {
    let polled = panic::catch_unwind(AssertUnwindSafe(|| {
        held::sync_scope(held.clone(), || turn.clone().sync_scope(|| body.poll(cx)))
    }));
    match polled {
        Ok(poll) => poll.map(Ok),
        Err(panic) => Poll::Ready(Err(panic)),
    }
}

/// The body panicked: the key is given back (a panic is a failure, like an `Err` that is not
/// recorded), the call is reported `Panicked`, and the panic goes on to the caller.
fn panicked(guard: &mut Guard, panic: Panic) -> ! {
    if let Phase::Running(holding) = guard.enter(Phase::Free) {
        guard::release_and_tell(&holding, guard.report());
        guard.report().report(Outcome::Panicked);
        drop(holding); // followers wake after the key was given back, and ask again
    }
    panic::resume_unwind(panic)
}

/// The claim the call holds.
fn holding(guard: &mut Guard) -> &mut Holding {
    guard
        .holding()
        .unwrap_or_else(|| unreachable!("the call holds a claim here"))
}

/// A store's identity for single-flight: its address.
pub(super) fn store_id(store: &Arc<dyn Store>) -> usize {
    Arc::as_ptr(store).cast::<()>() as usize
}

/// An `Err` that is not recorded: give the key back so that a retry runs again. The guard
/// stays armed meanwhile: a caller giving up during the release hands it to the background,
/// and a process exiting right after the call has given the key back.
async fn release_after_err(guard: &mut Guard, store: &Arc<dyn Store>) -> Answer {
    let Phase::Running(holding) = guard.enter(Phase::Free) else {
        unreachable!("the body ran under the claim");
    };
    let (lease, duration) = (holding.claim.lease.clone(), holding.claim.duration);
    guard.enter(Phase::Releasing(holding));
    let answer = bounded(store.release(&lease), duration).await;
    let Phase::Releasing(holding) = guard.enter(Phase::Free) else {
        unreachable!("the key was being given back");
    };
    match answer {
        Some(Ok(()) | Err(Error::LeaseLost { .. })) => {}
        Some(Err(error)) => tracing::warn!(target: "idem", key = %lease.key.short(), %error,
            "could not give the key back; it is freed when its lease ends"),
        None => tracing::warn!(target: "idem", key = %lease.key.short(),
            "the store did not answer a release; the key is freed when its lease ends"),
    }
    guard.report().report(Outcome::Failed);
    drop(holding); // followers wake after the key was given back, and ask again
    Ok(())
}

/// A recorded result, replayed or shared: returned for decoding, unless it is a marker, which
/// answers with its error.
pub(super) fn recorded(
    guard: &mut Guard,
    call: &Call,
    first: FirstResult,
    outcome: Outcome,
    decode: Decode<'_>,
) -> Answer {
    if first.fingerprint != call.fingerprint {
        return mismatch_recorded(guard, call, &first);
    }
    // The decoder answers a marker with its error: the outcome says which. A `Deserialize`
    // that panics (it validates what an earlier version recorded) is a decode error: the
    // record stays, and so does the answer to every retry.
    let decoded = panic::catch_unwind(AssertUnwindSafe(|| decode(call, &first.result)));
    let decoded =
        decoded.unwrap_or_else(|panic| Err(decode_panicked(call.tool.name, &call.key, &*panic)));
    match decoded {
        Ok(()) => {
            guard.report().report(outcome);
            Ok(())
        }
        Err(error) => {
            let outcome = match error {
                Error::Interrupted { .. } => Outcome::WasInterrupted,
                Error::NotReplayable { .. } => Outcome::NotReplayable,
                _ => Outcome::DecodeError,
            };
            refuse(guard, outcome, error)
        }
    }
}

pub(super) fn refuse(guard: &mut Guard, outcome: Outcome, error: Error) -> Answer {
    guard.report().fail_with(outcome, &error);
    Err(error)
}

/// Refuses `call`, whose key was used before with the fingerprint `recorded`, by a call
/// still `running` or recorded (its action then `earlier`).
pub(super) fn mismatch(
    guard: &mut Guard,
    call: &Call,
    recorded: &crate::Fingerprint,
    running: bool,
    earlier: Earlier,
) -> Answer {
    let error = call.mismatch(recorded, running, earlier);
    let outcome = match error {
        Error::NameClash { .. } => Outcome::ConfigError,
        _ => Outcome::PayloadMismatch,
    };
    refuse(guard, outcome, error)
}

/// Refuses `call`, whose key holds `first`, recorded for other arguments: saying what the
/// record holds — a result, a recorded `Err`, the marker of a call cut off, or nothing readable
/// — so that a model is never told an action was done that failed or may not have happened.
pub(super) fn mismatch_recorded(guard: &mut Guard, call: &Call, first: &FirstResult) -> Answer {
    use crate::replay::{RecordKind, kind};
    let earlier = match kind(&first.result) {
        Ok(RecordKind::Err) => Earlier::Failed,
        Ok(RecordKind::Interrupted) => Earlier::Interrupted,
        // A result, or one that cannot be replayed: the action ran to its end.
        Ok(RecordKind::Ok | RecordKind::NotReplayable { .. }) => Earlier::Done,
        // A record that does not open (damaged, or a newer idem's) says nothing of the action.
        Err(_) => Earlier::Unknown,
    };
    mismatch(guard, call, &first.fingerprint, false, earlier)
}

pub(super) fn in_flight(guard: &mut Guard, call: &Call, wait_until: Instant) -> Answer {
    let error = Error::InFlight {
        tool: call.tool.name,
        key: call.key.short(),
        waited: call.turn.in_flight_wait() + Instant::now().saturating_duration_since(wait_until),
        free_within: keeper::duration(call.tool, call.lease).unwrap_or(crate::store::DEFAULT_LEASE),
    };
    refuse(guard, Outcome::InFlight, error)
}

pub(super) fn over_budget(guard: &mut Guard, call: &Call, exhausted: Exhausted) -> Answer {
    let tool = call.tool.name;
    let error = match exhausted {
        Exhausted::Key { attempts, limit } => Error::BudgetExhausted {
            tool,
            key: call.key.short(),
            attempts,
            limit,
        },
        Exhausted::Turn { calls, limit } => Error::TurnBudgetExhausted {
            tool,
            turn: call.turn.id().to_owned(),
            calls,
            limit,
        },
        Exhausted::Tool { calls, limit } if call.is_model_step() => Error::ModelStepsExhausted {
            turn: call.turn.id().to_owned(),
            steps: calls,
            limit,
        },
        Exhausted::Tool { calls, limit } => Error::ToolBudgetExhausted {
            tool,
            turn: call.turn.id().to_owned(),
            calls,
            limit,
        },
    };
    refuse(guard, Outcome::BudgetExhausted, error)
}

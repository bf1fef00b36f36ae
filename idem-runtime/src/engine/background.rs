//! Work that outlives its call: giving a key back, marking it interrupted, recording a result
//! the store could not take yet.
//!
//! Each is polled once in place first — an in-memory store finishes there, so a process that
//! exits right after the call has done it — and goes on in a task of the current Tokio runtime
//! if it has to wait. A call dropped on a thread outside any runtime (a future kept past the
//! `block_on` that polled it) first asks the store in place, which is enough for a store that
//! answers at once (the memory store, SQLite when idle; SQLite also takes a write it queues to
//! its thread), and otherwise hands the work to the runtime the call was made on, if it still
//! runs. A store client or a timer may need a runtime, so outside one nothing is polled.
//! Nothing here panics.

use std::future::Future;
use std::pin::Pin;
use std::sync::Arc;
use std::task::{Context, Waker};
use std::time::Duration;

use bytes::Bytes;
use tokio::runtime::Handle;
use tokio::time::Instant;

use super::keeper::Keeper;
use crate::Error;
use crate::flight::Lingering;
use crate::replay;
use crate::store::{Lease, Store};

/// How long a store operation run in the background may take.
const BOUND: Duration = Duration::from_secs(10);

type Work = Pin<Box<dyn Future<Output = ()> + Send>>;

/// Polls `work` once in place; if it has to wait, hands `rest` (built from it, inside the
/// runtime, where timers may be built) to a task of the current runtime, or of `runtime` (the
/// call's) outside any.
fn go(
    mut work: Work,
    rest: impl FnOnce(Work) -> Work + Send + 'static,
    what: &'static str,
    runtime: Option<Handle>,
) {
    let runtime = match Handle::try_current() {
        Ok(current) => current,
        Err(_) => match runtime {
            Some(runtime) => {
                // Entering the call's runtime from this thread lets the work build its
                // timers; a runtime that shut down drops the task unpolled.
                let _entered = runtime.enter();
                runtime.spawn(async move { rest(work).await });
                return;
            }
            None => {
                tracing::warn!(target: "idem",
                    "no Tokio runtime to {what} in; the key is freed when its lease ends");
                return;
            }
        },
    };
    if work
        .as_mut()
        .poll(&mut Context::from_waker(Waker::noop()))
        .is_ready()
    {
        return;
    }
    runtime.spawn(async move { rest(work).await });
}

/// Outside any runtime, the store's answer to `asked` if it gave it at once (`None`: the work
/// goes to a runtime). Inside one, `None` without asking: [`go`] polls it in place.
fn here<T>(asked: impl FnOnce() -> Option<Result<T, Error>>) -> Option<Result<T, Error>> {
    if Handle::try_current().is_ok() {
        return None;
    }
    asked()
}

/// A store operation, bounded by [`BOUND`] once it runs in a task.
fn bounded(work: Work, what: &'static str, key: String) -> Work {
    Box::pin(async move {
        if tokio::time::timeout(BOUND, work).await.is_err() {
            tracing::warn!(target: "idem", %key,
                "the store did not answer ({what}); the key is freed when its lease ends");
        }
    })
}

/// Gives `lease` back. `LeaseLost` is expected (the claim never landed, or was taken over) and
/// not worth a word.
pub(super) fn release(store: Arc<dyn Store>, lease: Lease, runtime: Option<Handle>) {
    fn said(lease: &Lease, answer: Result<(), Error>) {
        match answer {
            Ok(()) | Err(Error::LeaseLost { .. }) => {}
            Err(error) => tracing::warn!(target: "idem", key = %lease.key.short(), %error,
                "could not give the key back; it is freed when its lease ends"),
        }
    }
    if let Some(answer) = here(|| store.release(&lease).answered_now()) {
        return said(&lease, answer);
    }
    let key = lease.key.short().to_string();
    let work: Work = Box::pin(async move { said(&lease, store.release(&lease).await) });
    go(
        work,
        move |work| bounded(work, "release", key),
        "give a key back",
        runtime,
    );
}

/// Gives back the claim a `begin` (or the renewal of a claim) may have made though the call
/// holds no claim — its answer was lost, or its caller stopped waiting — trying again while
/// the store does not answer (a failover, a partition, a frozen server), until `until`: the end
/// of the lease such a claim would have, when the store frees the key itself. A request a
/// store kept while it did not answer (a frozen server) can run when it answers again, and a
/// claim then starts its lease from there: so after an attempt the store did not answer, the
/// attempts go on for one more `lease` past `until`, and the first answer after is confirmed
/// by one more attempt. `Ok` ends it; so does `LeaseLost` (nothing held with this token, or it
/// was taken over), once confirmed. The first attempt waits for the start of `when`.
pub(super) fn give_back(
    store: Arc<dyn Store>,
    lease: Lease,
    when: std::ops::Range<Instant>,
    duration: Duration,
) {
    let std::ops::Range { start, end: until } = when;
    let work: Work = Box::pin(async move {
        tokio::time::sleep_until(start).await;
        let mut backoff = FIRST_GIVE_BACK_STEP;
        // Whether an attempt went unanswered since the last answer, and when the attempts end.
        let (mut unanswered, mut late) = (false, until);
        loop {
            let step = (Instant::now() + BOUND).min(late);
            let failed = match tokio::time::timeout_at(step, store.release(&lease)).await {
                Ok(Ok(())) => return,
                Ok(Err(Error::LeaseLost { .. })) if !unanswered => return,
                Ok(Err(Error::LeaseLost { .. })) => {
                    // The store answers again: a request it kept may run right after.
                    unanswered = false;
                    late = late.max(Instant::now() + GIVE_BACK_STEP * 2);
                    "nothing to give back yet, once the store answered again".to_owned()
                }
                Ok(Err(error)) => {
                    if crate::store::did_not_answer(&error) {
                        (unanswered, late) = (true, until + duration);
                    }
                    error.to_string()
                }
                Err(_) => {
                    (unanswered, late) = (true, until + duration);
                    "no answer".to_owned()
                }
            };
            if Instant::now() + backoff >= late {
                tracing::warn!(target: "idem", key = %lease.key.short(), error = %failed,
                    "could not give the key back; it is freed when its lease ends");
                return;
            }
            tracing::debug!(target: "idem", key = %lease.key.short(), error = %failed,
                "could not give the key back yet; retrying");
            tokio::time::sleep(backoff).await;
            backoff = (backoff * 2).min(GIVE_BACK_STEP);
        }
    });
    go(work, |work| work, "give a key back", None);
}

/// The first pause, and the longest, between two attempts of [`give_back`].
const FIRST_GIVE_BACK_STEP: Duration = Duration::from_millis(50);
const GIVE_BACK_STEP: Duration = Duration::from_secs(1);

/// Marks the key held with `lease` as interrupted for `ttl`: retries are told the outcome is
/// unknown instead of running the tool again.
pub(super) fn mark_interrupted(
    store: Arc<dyn Store>,
    lease: Lease,
    tool: &'static str,
    ttl: Duration,
    runtime: Option<Handle>,
) {
    fn said(lease: &Lease, answer: Result<(), Error>) {
        if let Err(error) = answer {
            tracing::warn!(target: "idem", key = %lease.key.short(), %error,
                "could not mark the interrupted key; it is freed when its lease ends");
        }
    }
    let marker = replay::encode_interrupted(tool);
    if let Some(answer) = here(|| store.complete(&lease, &marker, ttl).answered_now()) {
        return said(&lease, answer);
    }
    let key = lease.key.short().to_string();
    let work: Work =
        Box::pin(async move { said(&lease, store.complete(&lease, &marker, ttl).await) });
    go(
        work,
        move |work| bounded(work, "mark", key),
        "mark a key interrupted",
        runtime,
    );
}

/// Keeps trying to record `bytes` under the keeper's claim, renewing it meanwhile (the keeper
/// renews as it does while the body runs), until it lands, the store says the claim is gone,
/// or the TTL would have passed. Until then, callers in this process get the result from
/// `lingering` and callers elsewhere see the key in flight.
///
/// Past the lease's end as far as the engine knows (no renewal answered in time), renewing
/// cannot help, but the store may still hold the claim: a renewal whose answer was lost took
/// effect, or nobody else claimed the key. So the result is still offered, with the claim's
/// token, which the store fences: it lands only if no other caller took the key over, and the
/// store's `LeaseLost` ends the attempts.
pub(super) fn record(
    mut keeper: Keeper,
    call: super::Call,
    bytes: Bytes,
    ttl: Duration,
    lingering: Option<Lingering>,
    runtime: Option<Handle>,
) {
    let duration = keeper.duration();
    let work: Work = Box::pin(async move {
        let key = keeper.lease().key.short();
        let give_up = Instant::now() + ttl;
        let mut backoff = Duration::from_millis(5);
        loop {
            let (store, lease) = (Arc::clone(keeper.store()), keeper.lease().clone());
            let step = Instant::now() + BOUND.min(ttl);
            let attempt = store.complete(&lease, &bytes, ttl);
            let answer = if keeper.gone() {
                tokio::time::timeout_at(step, attempt).await.ok()
            } else {
                keeper.during(attempt, step).await
            };
            match answer {
                Some(Ok(())) => {
                    tracing::info!(target: "idem", %key, "the result was recorded after a retry");
                    break;
                }
                Some(Err(Error::LeaseLost { .. })) => {
                    // The claim ended first (the body ran past it, or the store forgot it). The
                    // body ran all the same: its result goes under a new claim unless another
                    // call took the key.
                    let store = Arc::clone(keeper.store());
                    drop(keeper);
                    let anew = anew(store, call, bytes, ttl, duration);
                    if tokio::time::timeout(BOUND, anew).await.is_err() {
                        tracing::error!(target: "idem", %key, "the store did not answer \
                            (record anew); a retry runs the tool again");
                    }
                    break;
                }
                Some(Err(error)) => tracing::warn!(target: "idem", %key, %error,
                    "recording the result failed; retrying"),
                None => tracing::warn!(target: "idem", %key,
                    "the store did not answer while recording the result; retrying"),
            }
            if Instant::now() + backoff >= give_up {
                tracing::error!(target: "idem", %key,
                    "gave up recording the result: its TTL would have passed");
                break;
            }
            if keeper.gone() {
                tokio::time::sleep(backoff).await;
                backoff = (backoff * 2).min(GONE_STEP.min(ttl));
            } else {
                keeper.during(tokio::time::sleep(backoff), give_up).await;
                backoff = (backoff * 2).min(keeper_step(ttl));
            }
        }
        drop(lingering);
    });
    go(work, |work| work, "record a result", runtime);
}

/// Records `bytes` for `call` under a new claim of its key (of `duration`), once the call's
/// own claim is gone — unless another call holds or recorded the key meanwhile: then nothing is
/// recorded. The new claim is not charged to the turn's budget (the body ran already: its
/// result is not withheld). For a result whose body ran past its lease (it blocked its thread:
/// the lease could be neither renewed nor the body stopped), or whose claim the store no longer
/// held when it was recorded, and for the interrupted call's record of a transactional call
/// whose body ended the transaction itself. Bounded by [`BOUND`]; outside any runtime (and
/// without `runtime`), nothing is done. Says whether it recorded.
pub(super) fn record_anew(
    store: Arc<dyn Store>,
    call: super::Call,
    bytes: Bytes,
    ttl: Duration,
    duration: Duration,
    runtime: Option<Handle>,
) -> impl Future<Output = bool> + Send {
    let key = call.key.short();
    let work = anew(store, call, bytes, ttl, duration);
    // In a task of its own, which the caller awaits: a retry made after the call answered
    // finds the record, and a caller that goes away does not cut the claim and the record apart.
    let task = Handle::try_current()
        .ok()
        .or(runtime)
        .map(|runtime| runtime.spawn(tokio::time::timeout(BOUND, work)));
    async move {
        match task {
            Some(task) => match task.await {
                Ok(Ok(recorded)) => recorded,
                Ok(Err(_)) => {
                    tracing::error!(target: "idem", %key, "the store did not answer (record \
                        anew); a retry runs the tool again");
                    false
                }
                Err(_) => false,
            },
            None => false,
        }
    }
}

/// [`record_anew`]'s work, in place.
async fn anew(
    store: Arc<dyn Store>,
    call: super::Call,
    bytes: Bytes,
    ttl: Duration,
    duration: Duration,
) -> bool {
    let key = call.key.short();
    let token = crate::store::LeaseToken::generate();
    let mut request = call.begin_request(token, duration);
    request.charge = crate::store::Charge {
        max_attempts: u32::MAX,
        max_calls: None,
        max_tool_actions: None,
        ..request.charge
    };
    let lease = call.lease(token);
    let recorded = match store.begin(request).await {
        Ok(crate::store::Begin::Claimed) => store.complete(&lease, &bytes, ttl).await,
        Ok(_) => {
            tracing::warn!(target: "idem", %key, "another call holds or recorded the key: \
                this call's record was not written");
            return false;
        }
        Err(error) => Err(error),
    };
    match recorded {
        Ok(()) => {
            tracing::info!(target: "idem", %key, "recorded under a new claim");
            true
        }
        Err(error) => {
            tracing::error!(target: "idem", %key, %error, "could not record under a new \
                claim; a retry runs the tool again");
            drop(store.release(&lease).await);
            false
        }
    }
}

/// The longest pause between two attempts to record once the lease is past its end: nothing
/// is renewed then, and a store that is down is not asked more often than this.
const GONE_STEP: Duration = Duration::from_secs(5);

/// The longest pause between two attempts to record in the background.
fn keeper_step(ttl: Duration) -> Duration {
    Duration::from_millis(250).min(ttl)
}

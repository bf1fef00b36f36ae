//! A claimed key: running the tool, recording its result, and what happens when the call ends
//! early.

use std::future::Future;
use std::pin::pin;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::task::Poll;
use std::time::Duration;

use tokio::time::Instant;
use tracing::Instrument;

use crate::Error;
use crate::flight::{Leader, Lingering};
use crate::replay::{self, Recorded, ResultCodec};
use crate::stats::Outcome;
use crate::store::{DEFAULT_TTL, FirstResult, Lease, ResultBytes, Store};

use super::held;
use super::lease::{self, Keeper};
use super::report::Reporter;

/// A key this call holds in the store, and everything needed to run the tool under it.
pub(crate) struct Claimed {
    report: Reporter,
    store: Arc<dyn Store>,
    lease: Lease,
    duration: Duration,
    /// When the claiming `begin` was sent: the lease's conservative start.
    sent: Instant,
    leader: Leader,
}

impl Claimed {
    pub(super) fn new(
        report: Reporter,
        store: Arc<dyn Store>,
        lease: Lease,
        duration: Duration,
        sent: Instant,
        leader: Leader,
    ) -> Self {
        Claimed {
            report,
            store,
            lease,
            duration,
            sent,
            leader,
        }
    }

    /// How long the tool's result is kept.
    fn ttl(&self) -> Duration {
        self.report.call().tool.ttl.unwrap_or(DEFAULT_TTL)
    }

    /// Runs the tool in the caller's task: cancelled with it.
    pub(super) fn attached<C, T, E, F>(self, body: F) -> impl Future<Output = Result<T, E>>
    where
        C: ResultCodec<T, E>,
        E: From<Error>,
        F: Future<Output = Result<T, E>>,
    {
        let held = held::with(self.lease.key);
        held::scope(held, self.run::<C, T, E, F>(body))
    }

    /// Runs the tool in a task of its own: it finishes and records its result even if the
    /// caller goes away.
    pub(super) async fn detached<C, T, E, F>(self, body: F) -> Result<T, E>
    where
        C: ResultCodec<T, E> + 'static,
        T: Send + 'static,
        E: From<Error> + Send + 'static,
        F: Future<Output = Result<T, E>> + Send + 'static,
    {
        let turn = self.report.call().turn.clone();
        let held = held::with(self.lease.key);
        let task = turn.scope(held::scope(held, self.run::<C, T, E, F>(body)));
        let mut task = Box::pin(task.instrument(tracing::Span::current()));
        // Polled here first, in the poll that claimed the key: a body that finishes at once
        // needs no task of its own. One that waits goes on in its own task, which the caller
        // going away does not cancel.
        if let Poll::Ready(result) = lease::poll_once(task.as_mut()).await {
            return result;
        }
        match tokio::spawn(task).await {
            Ok(result) => result,
            Err(error) => match error.try_into_panic() {
                Ok(panic) => std::panic::resume_unwind(panic),
                // The runtime is shutting down: the tool's task was dropped, and its guard
                // kept the key as interrupted.
                Err(_) => Err(Error::Config(
                    "the Tokio runtime shut down while the tool ran".to_owned(),
                )
                .into()),
            },
        }
    }

    /// Runs the body under a guard, then records its result.
    async fn run<C, T, E, F>(self, body: F) -> Result<T, E>
    where
        C: ResultCodec<T, E>,
        E: From<Error>,
        F: Future<Output = Result<T, E>>,
    {
        let started = AtomicBool::new(false);
        let mut guard = Guard {
            claimed: Some(self),
            started: &started,
            recording: None,
            releasing: false,
        };
        let mut body = pin!(body);
        let mut body = pin!(std::future::poll_fn(|cx| {
            started.store(true, Ordering::Relaxed);
            body.as_mut().poll(cx)
        }));
        // First polled in the poll that claimed the key, when its lease cannot have ended: a
        // body that finishes at once needs no keeper, no clock and no timer.
        if let Poll::Ready(result) = lease::poll_once(body.as_mut()).await {
            return guard.finish::<C, T, E>(result, &mut None).await;
        }
        // Boxed, like recording on a slow store below: the timers of a tool that waits are no
        // part of the future of one that does not. The keeper's first poll, in this same poll,
        // leaves the body alone: it is pending and will be woken.
        let mut keeper = guard.keeper();
        match Box::pin(keeper.run(lease::PolledJustNow::new(body))).await {
            Ok(result) => guard.finish::<C, T, E>(result, &mut Some(keeper)).await,
            Err(error) => {
                // The lease ran out: the body was stopped, and the key is no longer ours.
                let mut claimed = guard.disarm();
                claimed.report.fail(Outcome::StoreError, error)
            }
        }
    }
}

/// Ends a claim whichever way the call ends: recorded, released, kept as interrupted, or
/// recorded in the background.
struct Guard<'a> {
    claimed: Option<Claimed>,
    /// Whether the body was polled: a body that never started did nothing.
    started: &'a AtomicBool,
    /// The bytes being recorded, while `complete` is awaited.
    recording: Option<Vec<u8>>,
    /// The key is being given back after an `Err` that is not recorded.
    releasing: bool,
}

impl Guard<'_> {
    /// A keeper of the claim's lease, counted from when the claim was sent.
    fn keeper(&self) -> Keeper {
        let c = self.claimed();
        Keeper::new(Arc::clone(&c.store), c.lease.clone(), c.duration, c.sent)
    }

    fn claimed(&self) -> &Claimed {
        self.claimed
            .as_ref()
            .unwrap_or_else(|| unreachable!("the guard holds its claim until disarmed"))
    }

    fn disarm(&mut self) -> Claimed {
        self.claimed
            .take()
            .unwrap_or_else(|| unreachable!("the guard is disarmed once"))
    }

    /// Records the tool's result (or releases the key for an `Err` that is not recorded).
    ///
    /// It borrows the guard (which stays armed in its caller's frame until this disarms it)
    /// and the keeper, so that its future holds neither twice.
    async fn finish<C, T, E>(
        &mut self,
        result: Result<T, E>,
        keeper: &mut Option<Keeper>,
    ) -> Result<T, E>
    where
        C: ResultCodec<T, E>,
        E: From<Error>,
    {
        let c = self.claimed();
        let (tool, key, ttl) = (c.report.call().tool, c.lease.key, c.ttl());
        // A result that cannot be recorded faithfully is never a reason to run the tool again:
        // a marker is recorded instead, and retries are told it ran.
        let bytes = match C::record(tool.name, &result) {
            Some(Recorded::Faithful(bytes)) => bytes,
            Some(Recorded::Unreplayable { bytes, error }) => {
                tracing::error!(target: "idem", tool = tool.name, key = %key.short(), %error,
                    "the result cannot be replayed faithfully; retries will be told the tool ran");
                bytes
            }
            None => {
                // An `Err` that is not recorded: give the key back so a retry runs again. The
                // guard stays armed meanwhile: a caller giving up during the release hands it
                // to the background instead of stranding the claim, and a process exiting
                // right after the call has given the key back.
                self.releasing = true;
                if let Some(c) = &self.claimed {
                    let answer = match c.store.release(&c.lease).into_ready() {
                        Ok(answer) => Some(answer),
                        Err(pending) => Box::pin(tokio::time::timeout(c.duration, pending))
                            .await
                            .ok(),
                    };
                    match answer {
                        Some(Ok(()) | Err(Error::LeaseLost { .. })) => {}
                        Some(Err(error)) => tracing::warn!(target: "idem", tool = tool.name,
                            key = %key.short(), %error,
                            "could not release the key; it is freed when its lease expires"),
                        None => tracing::warn!(target: "idem", tool = tool.name,
                            key = %key.short(),
                            "the store did not answer a release; the key is freed when its \
                             lease expires"),
                    }
                }
                let mut claimed = self.disarm();
                claimed.report.report(Outcome::Failed);
                return result;
            }
        };
        self.recording = Some(bytes);
        // The lease is still renewed while the result is recorded: a slow store must not let
        // it lapse and another caller run the tool again.
        let completed = match (&self.claimed, &self.recording) {
            (Some(c), Some(bytes)) => match c.store.complete(&c.lease, bytes, ttl).into_ready() {
                Ok(answer) => answer,
                Err(pending) => {
                    let keeper = match keeper {
                        Some(keeper) => keeper,
                        None => keeper.insert(self.keeper()),
                    };
                    Box::pin(keeper.during(pending)).await.unwrap_or_else(|| {
                        Err(Error::store("complete", "no answer within the lease"))
                    })
                }
            },
            _ => unreachable!("the guard holds its claim and the bytes being recorded"),
        };
        let bytes = self.recording.take().unwrap_or_default();
        let mut claimed = self.disarm();
        let outcome = if result.is_ok() {
            Outcome::Executed
        } else {
            Outcome::Failed
        };
        match completed {
            Ok(()) => {
                let fingerprint = claimed.report.call().fingerprint;
                claimed.leader.publish(|| FirstResult {
                    fingerprint,
                    result: ResultBytes::from(bytes),
                });
                claimed.report.report(outcome);
            }
            Err(error @ Error::LeaseLost { .. }) => {
                tracing::error!(target: "idem", tool = tool.name, key = %key.short(), %error,
                    "the tool ran but its lease was lost before the result was recorded");
                claimed.report.report(Outcome::StoreError);
            }
            Err(error) => {
                tracing::error!(target: "idem", tool = tool.name, key = %key.short(), %error,
                    "the tool ran but its result could not be recorded yet; retrying in the \
                     background while holding the key");
                claimed.report.report(outcome);
                record_in_background(claimed, bytes);
            }
        }
        result
    }
}

impl Drop for Guard<'_> {
    fn drop(&mut self) {
        let Some(mut claimed) = self.claimed.take() else {
            return;
        };
        let tool = claimed.report.call().tool;
        if self.releasing {
            // The caller went away while the key was given back after an `Err`.
            claimed.report.report(Outcome::Failed);
            lease::release_in_background(Arc::clone(&claimed.store), claimed.lease.clone());
            return;
        }
        if let Some(bytes) = self.recording.take() {
            // The caller went away while the result was being recorded: finish recording it,
            // so that a retry replays instead of running the tool again.
            claimed.report.report(Outcome::Executed);
            record_in_background(claimed, bytes);
            return;
        }
        let started = self.started.load(Ordering::Relaxed);
        let (store, lease) = (Arc::clone(&claimed.store), claimed.lease.clone());
        let (duration, ttl) = (claimed.duration, claimed.ttl());
        if std::thread::panicking() {
            claimed.report.report(Outcome::Panicked);
            lease::release_in_background(store, lease);
        } else if !started || tool.release_on_cancel {
            claimed.report.report(Outcome::Cancelled);
            lease::release_in_background(store, lease);
        } else {
            // Dropped mid-run: the side effect may or may not have happened. Running it again
            // could do it twice, so retries are told the outcome is unknown instead.
            claimed.report.report(Outcome::Interrupted);
            let key = lease.key;
            lease::cleanup(async move {
                let marker = replay::encode_interrupted(tool.name);
                let marked = tokio::time::timeout(duration, store.complete(&lease, &marker, ttl));
                if !matches!(marked.await, Ok(Ok(()))) {
                    tracing::warn!(target: "idem", key = %key.short(),
                        "could not mark the interrupted key; it is freed when its lease expires");
                }
            });
        }
        // `claimed.leader` drops last: followers wake after the key was given back or marked
        // (at once for in-memory stores).
    }
}

/// Keeps trying to record `bytes` under the claim, renewing it meanwhile, until it lands, the
/// lease is lost, or the TTL would have passed. Until then, callers in this process get the
/// result from the flight and callers elsewhere see the key in flight. Every store request is
/// bounded by a quarter of the lease, so a store that never answers cannot keep this task (or
/// the flight) alive beyond the TTL.
fn record_in_background(claimed: Claimed, bytes: Vec<u8>) {
    let ttl = claimed.ttl();
    let Claimed {
        report,
        store,
        lease,
        duration,
        leader,
        ..
    } = claimed;
    let shared = FirstResult {
        fingerprint: report.call().fingerprint,
        result: ResultBytes::from(bytes),
    };
    let lingering: Lingering = leader.linger(shared.clone());
    drop(report);
    let give_up = Instant::now() + ttl;
    lease::cleanup(async move {
        let key = lease.key.short();
        // Each round renews the claim and tries to record, both at once (a renewal that
        // hangs does not hold the write back; a recorded result does not wait for the
        // renewal), each bounded by a quarter of the lease, then waits at most a quarter: the
        // claim is renewed at least every half lease.
        let step = (duration / 4).max(Duration::from_millis(1));
        let mut backoff = Duration::from_millis(20).min(step);
        loop {
            let renewal = tokio::time::timeout(step, store.renew(&lease, duration));
            let recording = tokio::time::timeout(step, store.complete(&lease, &shared.result, ttl));
            let (mut renewal, mut recording) = (std::pin::pin!(renewal), std::pin::pin!(recording));
            let mut renewed = None;
            let completed = loop {
                tokio::select! {
                    biased;
                    completed = &mut recording => break completed,
                    answer = &mut renewal, if renewed.is_none() => renewed = Some(answer),
                }
            };
            match completed {
                Ok(Ok(())) => {
                    tracing::info!(target: "idem", %key, "the result was recorded after a retry");
                    break;
                }
                Ok(Err(error @ Error::LeaseLost { .. })) => {
                    tracing::error!(target: "idem", %key, %error,
                        "the result could not be recorded: another caller took the key over");
                    break;
                }
                Ok(Err(error)) => tracing::warn!(target: "idem", %key, %error,
                    "recording the result failed; retrying"),
                Err(_) => tracing::warn!(target: "idem", %key,
                    "the store did not answer while recording the result; retrying"),
            }
            // Not recorded: the renewal must land (or time out) before the next round.
            let renewed = match renewed {
                Some(answer) => answer,
                None => renewal.await,
            };
            if let Ok(Err(error @ Error::LeaseLost { .. })) = renewed {
                tracing::error!(target: "idem", %key, %error,
                    "the result could not be recorded: the key's lease was lost");
                break;
            }
            if Instant::now() + backoff >= give_up {
                tracing::error!(target: "idem", %key,
                    "gave up recording the result: its TTL would have passed");
                break;
            }
            tokio::time::sleep(backoff).await;
            backoff = (backoff * 2).min(step);
        }
        drop(lingering);
    });
}

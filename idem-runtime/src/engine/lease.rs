//! Holding a claim: giving back one that may have landed, and keeping one alive while the tool
//! runs.

use std::future::Future;
use std::pin::{Pin, pin};
use std::sync::Arc;
use std::task::{Context, Poll, Waker};
use std::time::Duration;

use tokio::time::Instant;

use crate::Error;
use crate::store::{Lease, MAX_LEASE, MIN_LEASE, Store};
use crate::tool::ToolInfo;

/// The lease a tool asks for, within [`MIN_LEASE`]..=[`MAX_LEASE`].
pub(super) fn duration(tool: &ToolInfo) -> Result<Duration, Error> {
    let lease = tool.lease.unwrap_or(crate::store::DEFAULT_LEASE);
    if (MIN_LEASE..=MAX_LEASE).contains(&lease) {
        Ok(lease)
    } else {
        Err(Error::Config(format!(
            "tool `{}` asks for a lease of {lease:?}; leases must be between {MIN_LEASE:?} and \
             {MAX_LEASE:?}",
            tool.name
        )))
    }
}

/// Polls `future` once: its output, or `Pending` (it has registered to be woken).
pub(super) async fn poll_once<F: Future>(mut future: Pin<&mut F>) -> Poll<F::Output> {
    std::future::poll_fn(|cx| Poll::Ready(future.as_mut().poll(cx))).await
}

/// `future`, polled just now in this same poll of its task and pending: the first poll of the
/// wrapper returns `Pending` without polling it again (it has registered to be woken), so a
/// body that yields to the runtime is not polled a second time before its wake-up.
pub(super) struct PolledJustNow<F> {
    future: F,
    skip: bool,
}

impl<F> PolledJustNow<F> {
    pub(super) fn new(future: F) -> Self {
        PolledJustNow { future, skip: true }
    }
}

impl<F: Future + Unpin> Future for PolledJustNow<F> {
    type Output = F::Output;

    fn poll(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<F::Output> {
        if std::mem::take(&mut self.skip) {
            return Poll::Pending;
        }
        Pin::new(&mut self.future).poll(cx)
    }
}

/// A `begin` in flight. If it is abandoned — the caller dropped it, or it failed without an
/// answer (a timeout may hide a claim that landed) — the claim it may have made is given back
/// with the token chosen before sending, so no key is left claimed by nobody.
pub(super) struct PendingClaim<'s> {
    store: &'s Arc<dyn Store>,
    lease: Lease,
    armed: bool,
}

impl<'s> PendingClaim<'s> {
    pub(super) fn new(store: &'s Arc<dyn Store>, lease: Lease) -> Self {
        PendingClaim {
            store,
            lease,
            armed: true,
        }
    }

    /// The store answered: nothing to give back.
    pub(super) fn answered(mut self) {
        self.armed = false;
    }
}

impl Drop for PendingClaim<'_> {
    fn drop(&mut self) {
        if self.armed {
            release_in_background(Arc::clone(self.store), self.lease.clone());
        }
    }
}

/// How long a release given back in the background may wait for the store.
const RELEASE_TIMEOUT: Duration = Duration::from_secs(10);

/// Gives `lease` back without waiting. `LeaseLost` is expected (the claim never landed, or was
/// taken over) and not worth a word.
pub(super) fn release_in_background(store: Arc<dyn Store>, lease: Lease) {
    cleanup(async move {
        match tokio::time::timeout(RELEASE_TIMEOUT, store.release(&lease)).await {
            Ok(Ok(()) | Err(Error::LeaseLost { .. })) => {}
            Ok(Err(error)) => tracing::warn!(target: "idem", key = %lease.key.short(), %error,
                "could not give the key back; it is freed when its lease expires"),
            Err(_) => tracing::warn!(target: "idem", key = %lease.key.short(),
                "the store did not answer a release; the key is freed when its lease expires"),
        }
    });
}

/// Runs a clean-up future from a destructor or a caller that will not wait: polled once in
/// place (enough for in-memory stores), else spawned on the current Tokio runtime. Without a
/// runtime it is dropped, and lease expiry frees the key.
pub(super) fn cleanup(work: impl Future<Output = ()> + Send + 'static) {
    let mut work: Pin<Box<dyn Future<Output = ()> + Send>> = Box::pin(work);
    let mut cx = Context::from_waker(Waker::noop());
    if work.as_mut().poll(&mut cx).is_ready() {
        return;
    }
    if let Ok(handle) = tokio::runtime::Handle::try_current() {
        handle.spawn(work);
    }
}

/// A renewal in flight: when it was sent, and the store's answer (`None`: none before the
/// lease's end).
type Renewal = Pin<Box<dyn Future<Output = (Instant, Option<Result<(), Error>>)> + Send>>;

/// The answer of the renewal in flight; pending forever when there is none (its `select!`
/// branch is disabled then).
async fn answer(renewal: &mut Option<Renewal>) -> (Instant, Option<Result<(), Error>>) {
    match renewal {
        Some(renewal) => renewal.await,
        None => std::future::pending().await,
    }
}

/// Keeps a claim alive: renews its lease every third of its duration, and tracks when the
/// lease ends on this process's monotonic clock, counted from the moment each request was
/// *sent* (so never later than the store's own view).
pub(super) struct Keeper {
    store: Arc<dyn Store>,
    lease: Lease,
    duration: Duration,
    deadline: Instant,
    next: Instant,
    /// The store said the lease is lost (or the record completed): stop renewing.
    lost: bool,
}

impl Keeper {
    /// A keeper for a lease claimed by a request sent at `sent`.
    pub(super) fn new(
        store: Arc<dyn Store>,
        lease: Lease,
        duration: Duration,
        sent: Instant,
    ) -> Self {
        Keeper {
            store,
            lease,
            duration,
            deadline: sent + duration,
            next: sent + duration / 3,
            lost: false,
        }
    }

    /// Whether the lease has ended, as far as this process can tell.
    pub(super) fn ended(&self) -> bool {
        self.lost || Instant::now() >= self.deadline
    }

    /// Polls `body` while renewing. If no renewal has succeeded by the lease's end — the store
    /// is unreachable, or answered that the lease is lost — another caller may already hold the
    /// key, so the body is dropped at that point and [`Error::LeaseLost`] returned: two
    /// executions of one key never overlap. Renewals run alongside the body, never instead of
    /// it.
    pub(super) async fn run<F: Future>(&mut self, body: F) -> Result<F::Output, Error> {
        let mut body = pin!(body);
        let mut renewal: Option<Renewal> = None;
        loop {
            if self.ended() {
                tracing::error!(target: "idem", key = %self.lease.key.short(),
                    "the lease ran out before it could be renewed: the tool was stopped, since \
                     another caller may now hold the key");
                return Err(Error::LeaseLost {
                    key: self.lease.key.short(),
                });
            }
            let (renewing, next, deadline) = (renewal.is_some(), self.next, self.deadline);
            tokio::select! {
                biased;
                output = &mut body => return Ok(output),
                answer = answer(&mut renewal),
                    if renewing => {
                    renewal = None;
                    self.settle(answer);
                }
                () = tokio::time::sleep_until(next), if !renewing => {
                    renewal = Some(self.start_renewal());
                }
                () = tokio::time::sleep_until(deadline) => {}
            }
        }
    }

    /// Awaits `work` (recording the result) while renewing alongside it, for at most one lease
    /// duration: `None` if it did not answer by then. Unlike [`Keeper::run`], `work` is never
    /// dropped for a lost lease — the store fences a late write — because a renewal refused
    /// *after* `complete` landed is expected.
    pub(super) async fn during<F: Future>(&mut self, work: F) -> Option<F::Output> {
        let mut work = pin!(work);
        let give_up = Instant::now() + self.duration;
        let mut renewal: Option<Renewal> = None;
        loop {
            let renewing = renewal.is_some();
            let next = if self.lost {
                give_up
            } else {
                self.next.min(give_up)
            };
            tokio::select! {
                biased;
                output = &mut work => return Some(output),
                answer = answer(&mut renewal),
                    if renewing => {
                    renewal = None;
                    self.settle(answer);
                }
                () = tokio::time::sleep_until(next), if !renewing => {
                    if Instant::now() >= give_up {
                        return None;
                    }
                    if !self.lost {
                        renewal = Some(self.start_renewal());
                    }
                }
                () = tokio::time::sleep_until(give_up) => return None,
            }
        }
    }

    /// Sends one renewal, bounded by the lease's end.
    fn start_renewal(&self) -> Renewal {
        let (store, lease, duration) = (Arc::clone(&self.store), self.lease.clone(), self.duration);
        let deadline = self.deadline;
        Box::pin(async move {
            let asked = Instant::now();
            let answer = tokio::time::timeout_at(deadline, store.renew(&lease, duration)).await;
            (asked, answer.ok())
        })
    }

    /// Takes a renewal's answer into account.
    fn settle(&mut self, (asked, answer): (Instant, Option<Result<(), Error>>)) {
        match answer {
            Some(Ok(())) => {
                self.deadline = asked + self.duration;
                self.next = asked + self.duration / 3;
            }
            Some(Err(Error::LeaseLost { .. })) => self.lost = true,
            Some(Err(error)) => {
                tracing::warn!(target: "idem", key = %self.lease.key.short(), %error,
                    "could not renew the lease; retrying before it runs out");
                let retry = (self.duration / 10).max(Duration::from_millis(1));
                self.next = (Instant::now() + retry).min(self.deadline);
            }
            None => {} // the lease's end passed: `ended` says so
        }
    }
}

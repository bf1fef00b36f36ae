//! Holding a claim: one keeper per claim renews its lease while the body runs, while the result
//! is recorded, and while it is recorded in the background.

use std::future::Future;
use std::pin::{Pin, pin};
use std::sync::Arc;
use std::task::Poll;
use std::time::Duration;

use tokio::time::Instant;

use crate::Error;
use crate::store::{Lease, MAX_LEASE, MIN_LEASE, Store};
use crate::tool::ToolInfo;

/// The lease a call asks for (its own, else its tool's), within [`MIN_LEASE`]..=[`MAX_LEASE`].
pub(super) fn duration(tool: &ToolInfo, call: Option<Duration>) -> Result<Duration, Error> {
    let lease = call.or(tool.lease).unwrap_or(crate::store::DEFAULT_LEASE);
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

/// How far a store's end of a lease and this process's timers can be off, whatever the lease:
/// stores keep lease ends in whole milliseconds (the start truncated: up to 1 ms early) and
/// Tokio's timers fire on whole milliseconds (rounded up: up to 1 ms late).
pub(super) const GRANULARITY: Duration = Duration::from_millis(2);

/// How much of a lease this process trusts, counted from when the request that started (or
/// renewed) it was sent: three quarters, less [`GRANULARITY`]. A store frees the key one whole
/// lease after it *received* that request, so a whole quarter of the lease is left for a late
/// timer, a busy executor and a paused process, for every lease from [`MIN_LEASE`] up: the body
/// is dropped before any store can hand the key to another caller unless this process is
/// paused for longer than a quarter of the lease.
pub(super) fn trusted(lease: Duration) -> Duration {
    // Integer arithmetic (a float multiplication costs a hundred instructions a claim); the
    // division truncates, so the nanoseconds it drops are trusted less, not more.
    (lease / 4 * 3).saturating_sub(GRANULARITY)
}

/// A claim the store granted: the lease, how long it is, and when the claiming `begin` was sent
/// (no earlier than the store's own start of the lease).
#[derive(Debug, Clone)]
pub(super) struct Claim {
    pub(super) lease: Lease,
    pub(super) duration: Duration,
    pub(super) sent: Instant,
}

impl Claim {
    /// When this process stops trusting the claim unless it is renewed.
    pub(super) fn trusted_until(&self) -> Instant {
        self.sent + trusted(self.duration)
    }
}

/// A renewal in flight: when it was sent, and the store's answer (`None`: none in time).
type Renewal = Pin<Box<dyn Future<Output = (Instant, Option<Result<(), Error>>)> + Send>>;

/// What to do with the work a keeper holds when the lease can no longer be trusted.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum AtTheEnd {
    /// Drop it: the tool's body, which must not run while another caller may.
    Drop,
    /// Keep waiting for it: a `complete`, which the store fences if the key was taken over.
    Wait,
}

/// Keeps a claim alive: renews its lease every quarter of its duration, and tracks on this
/// process's monotonic clock until when it is trusted ([`trusted`]). One renewal is in flight
/// at a time, bounded by the store's own end of the lease; it carries over from the body to
/// the recording.
pub(super) struct Keeper {
    store: Arc<dyn Store>,
    lease: Lease,
    duration: Duration,
    /// When the lease stops being trusted.
    until: Instant,
    /// When the store's lease ends at the earliest, as far as this process knows.
    store_end: Instant,
    /// When to renew next.
    next: Instant,
    /// The store said the lease is lost (or the record completed): stop renewing.
    lost: bool,
    renewal: Option<Renewal>,
}

impl Keeper {
    /// A keeper of `claim`.
    pub(super) fn new(store: Arc<dyn Store>, claim: &Claim) -> Self {
        Keeper {
            store,
            lease: claim.lease.clone(),
            duration: claim.duration,
            until: claim.trusted_until(),
            // The store's end of the lease at the earliest: its start may be up to a
            // millisecond early.
            store_end: claim.sent + claim.duration.saturating_sub(GRANULARITY / 2),
            next: claim.sent + claim.duration / 4,
            lost: false,
            renewal: None,
        }
    }

    /// Forgets the renewal in flight, as if it went unanswered: its timer belongs to the
    /// runtime it was polled on, which may be gone when the keeper is polled again elsewhere
    /// (a call dropped in another runtime). The next round sends a new one.
    pub(super) fn forget_renewal(&mut self) {
        self.renewal = None;
    }

    /// The lease it keeps.
    pub(super) fn lease(&self) -> &Lease {
        &self.lease
    }

    /// How long each of its leases lasts.
    pub(super) fn duration(&self) -> Duration {
        self.duration
    }

    /// The store that holds it.
    pub(super) fn store(&self) -> &Arc<dyn Store> {
        &self.store
    }

    /// Whether the store certainly no longer holds the lease: it said so, or its end passed
    /// without a renewal.
    pub(super) fn gone(&self) -> bool {
        self.lost || Instant::now() >= self.store_end
    }

    /// Polls `body` while renewing. If the lease stops being trusted first — the store did
    /// not answer a renewal in time, or said the lease is lost — the body is dropped at that
    /// point and [`Error::LeaseLost`] returned: two executions of one key never overlap.
    pub(super) async fn run<F: Future>(&mut self, body: F) -> Result<F::Output, Error> {
        let mut body = pin!(body);
        match self.hold(body.as_mut(), AtTheEnd::Drop, None).await {
            Some(output) => Ok(output),
            None => Err(Error::LeaseLost {
                key: self.lease.key.short(),
            }),
        }
    }

    /// Awaits `work` (a `complete`) while renewing, until `give_up` at the latest: `None` if it
    /// did not answer by then. `work` is not dropped when the lease stops being trusted: the
    /// store fences a write that comes too late, and a renewal refused *after* the record
    /// completed is expected.
    pub(super) async fn during<F: Future>(
        &mut self,
        work: F,
        give_up: Instant,
    ) -> Option<F::Output> {
        let mut work = pin!(work);
        self.hold(work.as_mut(), AtTheEnd::Wait, Some(give_up))
            .await
    }

    /// Polls `work` once each time it is woken — never again before — while it renews the
    /// lease; ends when the work does, at the lease's trusted end (`AtTheEnd::Drop`) or at
    /// `give_up`. Its one timer, for the next renewal or the end, is armed only when the work
    /// did not finish in this poll: a quick body or a store that answers in place needs none.
    async fn hold<F: Future + ?Sized>(
        &mut self,
        mut work: Pin<&mut F>,
        at_the_end: AtTheEnd,
        give_up: Option<Instant>,
    ) -> Option<F::Output> {
        let mut timer: Option<Pin<Box<tokio::time::Sleep>>> = None;
        std::future::poll_fn(|cx| {
            let mut work_polled = false;
            loop {
                let now = Instant::now();
                if at_the_end == AtTheEnd::Drop && !self.lost && now >= self.until {
                    self.renew_at_the_end(cx, now);
                }
                if at_the_end == AtTheEnd::Drop && (self.lost || now >= self.until) {
                    tracing::error!(target: "idem", key = %self.lease.key.short(),
                        "the lease could not be renewed in time: the tool was stopped, since \
                         another caller may soon hold the key");
                    return Poll::Ready(None);
                }
                if give_up.is_some_and(|at| now >= at) {
                    return Poll::Ready(None);
                }
                if !std::mem::replace(&mut work_polled, true)
                    && let Poll::Ready(output) = work.as_mut().poll(cx)
                {
                    return Poll::Ready(Some(output));
                }
                if self.renewal.is_none() && !self.lost && now >= self.next {
                    if now >= self.store_end {
                        // No renewal answered before the store's end of the lease: the store
                        // may have given the key to another caller; no renewal can help now.
                        self.lost = true;
                        continue;
                    }
                    self.renewal = Some(self.start_renewal());
                }
                if self.poll_renewal(cx) {
                    continue;
                }
                let mut wake = match (at_the_end, give_up) {
                    (AtTheEnd::Drop, _) => self.until,
                    (AtTheEnd::Wait, Some(at)) => at,
                    (AtTheEnd::Wait, None) => self.store_end,
                };
                if self.renewal.is_none() && !self.lost {
                    wake = wake.min(self.next);
                }
                let timer = timer.get_or_insert_with(|| Box::pin(tokio::time::sleep_until(wake)));
                if timer.deadline() != wake {
                    timer.as_mut().reset(wake);
                }
                if timer.as_mut().poll(cx).is_pending() {
                    return Poll::Pending;
                }
            }
        })
        .await
    }

    /// Past the trusted part of the lease — the keeper was not polled in time (an executor
    /// stalled by other work in the caller's task) — a renewal that has answered saves the
    /// body: the one in flight, answered meanwhile, or, before the store's end of the lease, a
    /// new one the store answers in place (memory, an idle SQLite). Answered before the store's
    /// end, the key is still this claim's, and the lease is trusted again from when the renewal
    /// was sent. A renewal not answered yet cannot: the body is dropped at the trusted end all
    /// the same.
    fn renew_at_the_end(&mut self, cx: &mut std::task::Context<'_>, now: Instant) {
        if self.renewal.is_none() {
            if now >= self.store_end {
                return;
            }
            self.renewal = Some(self.start_renewal());
        }
        self.poll_renewal(cx);
    }

    /// Polls the renewal in flight, if any, and takes its answer into account: whether it
    /// answered.
    fn poll_renewal(&mut self, cx: &mut std::task::Context<'_>) -> bool {
        let Some(renewal) = &mut self.renewal else {
            return false;
        };
        let Poll::Ready(answer) = renewal.as_mut().poll(cx) else {
            return false;
        };
        self.renewal = None;
        self.settle(answer);
        true
    }

    /// Sends one renewal, bounded by the store's end of the lease (no answer after it can help).
    fn start_renewal(&self) -> Renewal {
        let (store, lease, duration) = (Arc::clone(&self.store), self.lease.clone(), self.duration);
        let bound = self.store_end;
        Box::pin(async move {
            let asked = Instant::now();
            let answer = tokio::time::timeout_at(bound, store.renew(&lease, duration)).await;
            (asked, answer.ok())
        })
    }

    /// Takes a renewal's answer into account.
    fn settle(&mut self, (asked, answer): (Instant, Option<Result<(), Error>>)) {
        match answer {
            Some(Ok(())) => {
                self.until = self.until.max(asked + trusted(self.duration));
                let store_end = asked + self.duration.saturating_sub(GRANULARITY / 2);
                self.store_end = self.store_end.max(store_end);
                self.next = asked + self.duration / 4;
            }
            Some(Err(Error::LeaseLost { .. })) => self.lost = true,
            Some(Err(error)) => {
                tracing::warn!(target: "idem", key = %self.lease.key.short(), %error,
                    "could not renew the lease; retrying before it runs out");
                let retry = (self.duration / 10).max(Duration::from_millis(1));
                self.next = Instant::now() + retry;
            }
            None => {} // no answer before the store's end: the next round marks it lost
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// For every lease a tool may ask for, the body is dropped a whole quarter of the lease
    /// before the earliest moment a store can free the key, once the store's millisecond
    /// truncation and the timer's rounding are paid (the margin docs/guarantees.md promises).
    #[test]
    fn a_quarter_of_every_lease_is_left_after_the_granularity() {
        let mut lease = MIN_LEASE;
        while lease <= MAX_LEASE {
            let store_frees = lease - GRANULARITY / 2; // its start truncated to the millisecond
            let dropped = trusted(lease) + GRANULARITY / 2; // the timer rounded up
            assert!(
                store_frees.saturating_sub(dropped) >= lease / 4,
                "a {lease:?} lease keeps {:?}",
                store_frees.saturating_sub(dropped)
            );
            lease = lease.mul_f64(1.5);
        }
    }

    /// Three quarters of the lease, less the granularity, to within the nanoseconds an integer
    /// division drops (never more than that).
    #[test]
    fn three_quarters_of_a_lease_are_trusted() {
        assert_eq!(trusted(Duration::from_secs(1)), Duration::from_millis(748));
        let odd = Duration::new(7, 999_999_999);
        let exact = odd.mul_f64(0.75) - GRANULARITY;
        assert!(trusted(odd) <= exact && exact - trusted(odd) < Duration::from_nanos(4));
    }
}

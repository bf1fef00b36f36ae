//! Holding a claim: giving back one that may have landed, and keeping one alive while the tool
//! runs.

use std::future::Future;
use std::pin::{Pin, pin};
use std::sync::Arc;
use std::task::{Context, Waker};
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

    /// The lease this request claims if it claims the key.
    pub(super) fn lease(&self) -> &Lease {
        &self.lease
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

/// Gives `lease` back without waiting. `LeaseLost` is expected (the claim never landed, or was
/// taken over) and not worth a word.
pub(super) fn release_in_background(store: Arc<dyn Store>, lease: Lease) {
    cleanup(async move {
        match store.release(&lease).await {
            Ok(()) | Err(Error::LeaseLost { .. }) => {}
            Err(error) => tracing::warn!(target: "idem", key = %lease.key.short(), %error,
                "could not give the key back; it is freed when its lease expires"),
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

/// Polls `body` while keeping `lease` alive: renewed every third of its duration.
///
/// The lease's end is tracked on this process's monotonic clock, from the moment each request
/// was *sent* (so never later than the store's own view). If no renewal has succeeded by then —
/// the store is unreachable, or answered that the lease is lost — another caller may already
/// hold the key, so the body is dropped at that point and [`Error::LeaseLost`] returned: two
/// executions of one key never overlap.
pub(super) async fn renewing<F: Future>(
    body: F,
    store: &dyn Store,
    lease: &Lease,
    duration: Duration,
    sent: Instant,
) -> Result<F::Output, Error> {
    let mut body = pin!(body);
    let mut deadline = sent + duration;
    let period = duration / 3;
    let retry = (duration / 10).max(Duration::from_millis(1));
    let mut next = sent + period;
    loop {
        tokio::select! {
            biased;
            output = &mut body => return Ok(output),
            () = tokio::time::sleep_until(next) => {}
        }
        let asked = Instant::now();
        match tokio::time::timeout_at(deadline, store.renew(lease, duration)).await {
            Ok(Ok(())) => {
                deadline = asked + duration;
                next = asked + period;
            }
            Ok(Err(error @ Error::LeaseLost { .. })) => return Err(error),
            Ok(Err(error)) => {
                tracing::warn!(target: "idem", key = %lease.key.short(), %error,
                    "could not renew the lease; retrying before it runs out");
                next = (Instant::now() + retry).min(deadline);
            }
            Err(_) => {}
        }
        if Instant::now() >= deadline {
            tracing::error!(target: "idem", key = %lease.key.short(),
                "the lease ran out before it could be renewed: the tool was stopped, since \
                 another caller may now hold the key");
            return Err(Error::LeaseLost {
                key: lease.key.short(),
            });
        }
    }
}

//! Store wrappers of the harness: the Tokio-time clock, the observer that tells the ledger what
//! the store recorded, the watcher of renewals that tells it which leases the injected faults
//! troubled, a deliberately broken store for the self-test, and a store whose every operation
//! is pending once (for the cancellation-point enumerator).

use std::sync::Arc;
use std::task::Poll;
use std::time::Duration;

use idem_tools_runtime::clock::Clock;
use idem_tools_runtime::store::{
    Begin, BeginRequest, Lease, Record, RecordState, Store, StoreFuture,
};
use idem_tools_runtime::{Error, Key};

use crate::ledger::Ledger;

/// Wall-clock milliseconds that follow Tokio's clock, so a paused runtime's virtual time moves
/// the store's leases and TTLs too.
#[derive(Debug, Clone, Copy)]
pub struct TokioClock {
    start: tokio::time::Instant,
}

impl TokioClock {
    /// Starts at a fixed epoch reading, now (call inside the runtime).
    pub fn new() -> Self {
        TokioClock {
            start: tokio::time::Instant::now(),
        }
    }
}

impl Clock for TokioClock {
    fn now_ms(&self) -> u64 {
        let elapsed = tokio::time::Instant::now().saturating_duration_since(self.start);
        1_700_000_000_000 + u64::try_from(elapsed.as_millis()).unwrap_or(u64::MAX / 2)
    }
}

/// Passes every operation to the store below and tells the ledger about each accepted
/// `complete`.
pub struct Observed {
    inner: Arc<dyn Store>,
    ledger: Arc<Ledger>,
}

impl Observed {
    /// Observes `inner` for `ledger`.
    pub fn new(inner: Arc<dyn Store>, ledger: Arc<Ledger>) -> Self {
        Observed { inner, ledger }
    }
}

impl Store for Observed {
    fn begin<'a>(&'a self, req: BeginRequest<'a>) -> StoreFuture<'a, Begin> {
        self.inner.begin(req)
    }
    fn renew<'a>(&'a self, lease: &'a Lease, duration: Duration) -> StoreFuture<'a, ()> {
        self.inner.renew(lease, duration)
    }
    fn complete<'a>(
        &'a self,
        lease: &'a Lease,
        result: &'a [u8],
        ttl: Duration,
    ) -> StoreFuture<'a, ()> {
        Box::pin(async move {
            match self.inner.complete(lease, result, ttl).await {
                Ok(()) => {
                    self.ledger.completed(lease.key, lease.token, result, ttl);
                    Ok(())
                }
                Err(error @ Error::LeaseLost { .. }) => {
                    self.ledger.lease_lost(lease.key, lease.token, result);
                    Err(error)
                }
                Err(error) => Err(error),
            }
        })
    }
    fn release<'a>(&'a self, lease: &'a Lease) -> StoreFuture<'a, ()> {
        self.inner.release(lease)
    }
    fn get<'a>(&'a self, namespace: &'a str, key: &'a Key) -> StoreFuture<'a, Option<Record>> {
        self.inner.get(namespace, key)
    }
    fn purge_expired(&self) -> StoreFuture<'_, u64> {
        self.inner.purge_expired()
    }
    fn list<'a>(
        &'a self,
        namespace: Option<&'a str>,
        limit: usize,
    ) -> StoreFuture<'a, Vec<Record>> {
        self.inner.list(namespace, limit)
    }
    fn remove<'a>(&'a self, namespace: &'a str, key: &'a Key) -> StoreFuture<'a, bool> {
        self.inner.remove(namespace, key)
    }
}

/// Sits where the engine meets the store (above the injected faults) and tells the ledger
/// about each renewal: sent, then answered (clean: at once in virtual time, and not a store
/// error; the store saying the lease is already lost is clean) or dropped unanswered.
pub struct Renewals {
    inner: Arc<dyn Store>,
    ledger: Arc<Ledger>,
}

impl Renewals {
    /// Watches `inner`'s renewals for `ledger`.
    pub fn new(inner: Arc<dyn Store>, ledger: Arc<Ledger>) -> Self {
        Renewals { inner, ledger }
    }
}

/// Ends a renewal in the ledger when it is dropped: unanswered, unless marked answered.
struct Pending<'a> {
    ledger: &'a Ledger,
    id: u64,
    clean: Option<bool>,
}

impl Drop for Pending<'_> {
    fn drop(&mut self) {
        self.ledger
            .renewal_ended(self.id, self.clean.unwrap_or(false));
    }
}

impl Store for Renewals {
    fn begin<'a>(&'a self, req: BeginRequest<'a>) -> StoreFuture<'a, Begin> {
        self.inner.begin(req)
    }
    fn renew<'a>(&'a self, lease: &'a Lease, duration: Duration) -> StoreFuture<'a, ()> {
        Box::pin(async move {
            let mut pending = Pending {
                ledger: &self.ledger,
                id: self.ledger.renewal_sent(lease.token),
                clean: None,
            };
            let result = self.inner.renew(lease, duration).await;
            pending.clean = Some(!matches!(result, Err(Error::Store { .. })));
            result
        })
    }
    fn complete<'a>(
        &'a self,
        lease: &'a Lease,
        result: &'a [u8],
        ttl: Duration,
    ) -> StoreFuture<'a, ()> {
        self.inner.complete(lease, result, ttl)
    }
    fn release<'a>(&'a self, lease: &'a Lease) -> StoreFuture<'a, ()> {
        self.inner.release(lease)
    }
    fn get<'a>(&'a self, namespace: &'a str, key: &'a Key) -> StoreFuture<'a, Option<Record>> {
        self.inner.get(namespace, key)
    }
    fn purge_expired(&self) -> StoreFuture<'_, u64> {
        self.inner.purge_expired()
    }
    fn list<'a>(
        &'a self,
        namespace: Option<&'a str>,
        limit: usize,
    ) -> StoreFuture<'a, Vec<Record>> {
        self.inner.list(namespace, limit)
    }
    fn remove<'a>(&'a self, namespace: &'a str, key: &'a Key) -> StoreFuture<'a, bool> {
        self.inner.remove(namespace, key)
    }
}

/// A broken store for the harness's self-test: it forgets completions, turning `begin` of a
/// completed key into a fresh claim.
pub struct Forgetful {
    inner: Arc<dyn Store>,
}

impl Forgetful {
    /// Breaks `inner`.
    pub fn new(inner: Arc<dyn Store>) -> Self {
        Forgetful { inner }
    }
}

impl Store for Forgetful {
    fn begin<'a>(&'a self, req: BeginRequest<'a>) -> StoreFuture<'a, Begin> {
        Box::pin(async move {
            if let Some(record) = self.inner.get(req.namespace, req.key).await?
                && record.state == RecordState::Completed
            {
                self.inner.remove(req.namespace, req.key).await?;
            }
            self.inner.begin(req).await
        })
    }
    fn renew<'a>(&'a self, lease: &'a Lease, duration: Duration) -> StoreFuture<'a, ()> {
        self.inner.renew(lease, duration)
    }
    fn complete<'a>(
        &'a self,
        lease: &'a Lease,
        result: &'a [u8],
        ttl: Duration,
    ) -> StoreFuture<'a, ()> {
        self.inner.complete(lease, result, ttl)
    }
    fn release<'a>(&'a self, lease: &'a Lease) -> StoreFuture<'a, ()> {
        self.inner.release(lease)
    }
    fn get<'a>(&'a self, namespace: &'a str, key: &'a Key) -> StoreFuture<'a, Option<Record>> {
        self.inner.get(namespace, key)
    }
    fn purge_expired(&self) -> StoreFuture<'_, u64> {
        self.inner.purge_expired()
    }
    fn list<'a>(
        &'a self,
        namespace: Option<&'a str>,
        limit: usize,
    ) -> StoreFuture<'a, Vec<Record>> {
        self.inner.list(namespace, limit)
    }
    fn remove<'a>(&'a self, namespace: &'a str, key: &'a Key) -> StoreFuture<'a, bool> {
        self.inner.remove(namespace, key)
    }
}

thread_local! {
    /// A reply delay planned for the operation being called on this thread.
    static SLOW_REPLY: std::cell::Cell<Option<Duration>> = const { std::cell::Cell::new(None) };
}

/// Plans a reply delay for the operation being called (by the fault plan, which the fault
/// wrapper consults synchronously when an operation is called).
pub fn plan_slow_reply(by: Duration) {
    SLOW_REPLY.with(|slot| slot.set(Some(by)));
}

/// Delays the replies the fault plan asks it to: the operation takes effect, its reply comes
/// late (a `Delay` of the fault wrapper delays the operation itself). Sits above the fault
/// wrapper.
pub struct SlowReplies {
    inner: Arc<dyn Store>,
}

impl SlowReplies {
    /// Wraps `inner`.
    pub fn new(inner: Arc<dyn Store>) -> Self {
        SlowReplies { inner }
    }
}

/// Calls `op` and delays its reply if the plan asked for it during the call.
fn slowed<'a, T: Send + 'a>(op: impl FnOnce() -> StoreFuture<'a, T>) -> StoreFuture<'a, T> {
    SLOW_REPLY.with(|slot| slot.set(None));
    let work = op();
    match SLOW_REPLY.with(std::cell::Cell::take) {
        None => work,
        Some(by) => Box::pin(async move {
            let reply = work.await;
            tokio::time::sleep(by).await;
            reply
        }),
    }
}

impl Store for SlowReplies {
    fn begin<'a>(&'a self, req: BeginRequest<'a>) -> StoreFuture<'a, Begin> {
        slowed(|| self.inner.begin(req))
    }
    fn renew<'a>(&'a self, lease: &'a Lease, duration: Duration) -> StoreFuture<'a, ()> {
        slowed(|| self.inner.renew(lease, duration))
    }
    fn complete<'a>(
        &'a self,
        lease: &'a Lease,
        result: &'a [u8],
        ttl: Duration,
    ) -> StoreFuture<'a, ()> {
        slowed(|| self.inner.complete(lease, result, ttl))
    }
    fn release<'a>(&'a self, lease: &'a Lease) -> StoreFuture<'a, ()> {
        slowed(|| self.inner.release(lease))
    }
    fn get<'a>(&'a self, namespace: &'a str, key: &'a Key) -> StoreFuture<'a, Option<Record>> {
        slowed(|| self.inner.get(namespace, key))
    }
    fn purge_expired(&self) -> StoreFuture<'_, u64> {
        slowed(|| self.inner.purge_expired())
    }
    fn list<'a>(
        &'a self,
        namespace: Option<&'a str>,
        limit: usize,
    ) -> StoreFuture<'a, Vec<Record>> {
        slowed(|| self.inner.list(namespace, limit))
    }
    fn remove<'a>(&'a self, namespace: &'a str, key: &'a Key) -> StoreFuture<'a, bool> {
        slowed(|| self.inner.remove(namespace, key))
    }
}

/// A store whose operations take effect when first polled, like a network store's (the memory
/// store's take effect when called): under the fault wrapper a `Delay` then delays the effect,
/// and a caller that drops the operation before then cancels it.
pub struct Lazy {
    inner: Arc<dyn Store>,
}

impl Lazy {
    /// Wraps `inner`.
    pub fn new(inner: Arc<dyn Store>) -> Self {
        Lazy { inner }
    }
}

impl Store for Lazy {
    fn begin<'a>(&'a self, req: BeginRequest<'a>) -> StoreFuture<'a, Begin> {
        Box::pin(async move { self.inner.begin(req).await })
    }
    fn renew<'a>(&'a self, lease: &'a Lease, duration: Duration) -> StoreFuture<'a, ()> {
        Box::pin(async move { self.inner.renew(lease, duration).await })
    }
    fn complete<'a>(
        &'a self,
        lease: &'a Lease,
        result: &'a [u8],
        ttl: Duration,
    ) -> StoreFuture<'a, ()> {
        Box::pin(async move { self.inner.complete(lease, result, ttl).await })
    }
    fn release<'a>(&'a self, lease: &'a Lease) -> StoreFuture<'a, ()> {
        Box::pin(async move { self.inner.release(lease).await })
    }
    fn get<'a>(&'a self, namespace: &'a str, key: &'a Key) -> StoreFuture<'a, Option<Record>> {
        Box::pin(async move { self.inner.get(namespace, key).await })
    }
    fn purge_expired(&self) -> StoreFuture<'_, u64> {
        Box::pin(async move { self.inner.purge_expired().await })
    }
    fn list<'a>(
        &'a self,
        namespace: Option<&'a str>,
        limit: usize,
    ) -> StoreFuture<'a, Vec<Record>> {
        Box::pin(async move { self.inner.list(namespace, limit).await })
    }
    fn remove<'a>(&'a self, namespace: &'a str, key: &'a Key) -> StoreFuture<'a, bool> {
        Box::pin(async move { self.inner.remove(namespace, key).await })
    }
}

/// A store whose every operation returns `Pending` once (waking itself) before it runs: each
/// store call is a point where the caller can be dropped.
pub struct YieldOnce {
    inner: Arc<dyn Store>,
}

impl YieldOnce {
    /// Wraps `inner`.
    pub fn new(inner: Arc<dyn Store>) -> Self {
        YieldOnce { inner }
    }
}

/// Pending once, then `work`.
fn yield_then<'a, T: Send + 'a>(work: StoreFuture<'a, T>) -> StoreFuture<'a, T> {
    Box::pin(async move {
        let mut yielded = false;
        std::future::poll_fn(|cx| {
            if std::mem::replace(&mut yielded, true) {
                Poll::Ready(())
            } else {
                cx.waker().wake_by_ref();
                Poll::Pending
            }
        })
        .await;
        work.await
    })
}

impl Store for YieldOnce {
    fn begin<'a>(&'a self, req: BeginRequest<'a>) -> StoreFuture<'a, Begin> {
        yield_then(self.inner.begin(req))
    }
    fn renew<'a>(&'a self, lease: &'a Lease, duration: Duration) -> StoreFuture<'a, ()> {
        yield_then(self.inner.renew(lease, duration))
    }
    fn complete<'a>(
        &'a self,
        lease: &'a Lease,
        result: &'a [u8],
        ttl: Duration,
    ) -> StoreFuture<'a, ()> {
        yield_then(self.inner.complete(lease, result, ttl))
    }
    fn release<'a>(&'a self, lease: &'a Lease) -> StoreFuture<'a, ()> {
        yield_then(self.inner.release(lease))
    }
    fn get<'a>(&'a self, namespace: &'a str, key: &'a Key) -> StoreFuture<'a, Option<Record>> {
        yield_then(self.inner.get(namespace, key))
    }
    fn purge_expired(&self) -> StoreFuture<'_, u64> {
        yield_then(self.inner.purge_expired())
    }
    fn list<'a>(
        &'a self,
        namespace: Option<&'a str>,
        limit: usize,
    ) -> StoreFuture<'a, Vec<Record>> {
        yield_then(self.inner.list(namespace, limit))
    }
    fn remove<'a>(&'a self, namespace: &'a str, key: &'a Key) -> StoreFuture<'a, bool> {
        yield_then(self.inner.remove(namespace, key))
    }
}

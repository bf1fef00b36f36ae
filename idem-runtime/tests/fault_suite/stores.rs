//! Store wrappers of the harness: the Tokio-time clock, the observer that tells the ledger what
//! the store recorded, the watcher of renewals that tells it which leases the injected faults
//! troubled, a deliberately broken store for the self-test, and a store whose every operation
//! is pending once (for the cancellation-point enumerator).

use std::sync::Arc;
use std::task::Poll;
use std::time::Duration;

use idem_tools_runtime::clock::Clock;
use idem_tools_runtime::store::{
    Begin, BeginRequest, Lease, Record, RecordState, Removed, Store, StoreFuture,
};
use idem_tools_runtime::{Error, Key};

use crate::ledger::Ledger;

/// Writes the `Store` methods listed, each handing its call of `self.inner` to `$through` (a
/// function of the call, as a closure, returning the wrapper's answer): what a wrapper does
/// not change, it forwards in one line.
macro_rules! forward {
    ($through:path; $($method:ident)*) => { $( forward!(@one $through, $method); )* };
    (@one $t:path, begin) => {
        fn begin<'a>(&'a self, req: BeginRequest<'a>) -> StoreFuture<'a, Begin> {
            $t(move || self.inner.begin(req))
        }
    };
    (@one $t:path, renew) => {
        fn renew<'a>(&'a self, lease: &'a Lease, duration: Duration) -> StoreFuture<'a, ()> {
            $t(move || self.inner.renew(lease, duration))
        }
    };
    (@one $t:path, complete) => {
        fn complete<'a>(
            &'a self,
            lease: &'a Lease,
            result: &'a [u8],
            ttl: Duration,
        ) -> StoreFuture<'a, ()> {
            $t(move || self.inner.complete(lease, result, ttl))
        }
    };
    (@one $t:path, release) => {
        fn release<'a>(&'a self, lease: &'a Lease) -> StoreFuture<'a, ()> {
            $t(move || self.inner.release(lease))
        }
    };
    (@one $t:path, get) => {
        fn get<'a>(&'a self, namespace: &'a str, key: &'a Key) -> StoreFuture<'a, Option<Record>> {
            $t(move || self.inner.get(namespace, key))
        }
    };
    (@one $t:path, purge_expired) => {
        fn purge_expired(&self) -> StoreFuture<'_, u64> {
            $t(move || self.inner.purge_expired())
        }
    };
    (@one $t:path, list) => {
        fn list<'a>(
            &'a self,
            namespace: Option<&'a str>,
            limit: usize,
        ) -> StoreFuture<'a, Vec<Record>> {
            $t(move || self.inner.list(namespace, limit))
        }
    };
    (@one $t:path, remove) => {
        fn remove<'a>(&'a self, namespace: &'a str, key: &'a Key) -> StoreFuture<'a, bool> {
            $t(move || self.inner.remove(namespace, key))
        }
    };
    (@one $t:path, remove_shown) => {
        fn remove_shown<'a>(&'a self, shown: &'a Record) -> StoreFuture<'a, Removed> {
            $t(move || self.inner.remove_shown(shown))
        }
    };
}

/// The call, unchanged.
fn passed<'a, T>(call: impl FnOnce() -> StoreFuture<'a, T>) -> StoreFuture<'a, T> {
    call()
}

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
    fn complete<'a>(
        &'a self,
        lease: &'a Lease,
        result: &'a [u8],
        ttl: Duration,
    ) -> StoreFuture<'a, ()> {
        StoreFuture::new(async move {
            let sent = self.ledger.now();
            match self.inner.complete(lease, result, ttl).await {
                Ok(()) => {
                    self.ledger
                        .completed(lease.key, lease.token, result, ttl, sent);
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
    forward!(passed; begin renew release get purge_expired list remove remove_shown);
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
    fn renew<'a>(&'a self, lease: &'a Lease, duration: Duration) -> StoreFuture<'a, ()> {
        StoreFuture::new(async move {
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
    forward!(passed; begin complete release get purge_expired list remove remove_shown);
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
        StoreFuture::new(async move {
            if let Some(record) = self.inner.get(req.namespace, req.key).await?
                && record.state == RecordState::Completed
            {
                self.inner.remove(req.namespace, req.key).await?;
            }
            self.inner.begin(req).await
        })
    }
    forward!(passed; renew complete release get purge_expired list remove remove_shown);
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
        Some(by) => StoreFuture::new(async move {
            let reply = work.await;
            tokio::time::sleep(by).await;
            reply
        }),
    }
}

impl Store for SlowReplies {
    forward!(slowed; begin renew complete release get purge_expired list remove remove_shown);
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

/// The call, made when its answer is first polled.
fn on_first_poll<'a, T: Send + 'a>(
    call: impl FnOnce() -> StoreFuture<'a, T> + Send + 'a,
) -> StoreFuture<'a, T> {
    StoreFuture::new(async move { call().await })
}

impl Store for Lazy {
    forward!(on_first_poll; begin renew complete release get purge_expired list remove remove_shown);
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

/// The call, made now; then pending once, then its answer.
fn yield_then<'a, T: Send + 'a>(call: impl FnOnce() -> StoreFuture<'a, T>) -> StoreFuture<'a, T> {
    let work = call();
    StoreFuture::new(async move {
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
    forward!(yield_then; begin renew complete release get purge_expired list remove remove_shown);
}

//! A fault-injecting wrapper around any store, for tests of what callers see when a store is
//! slow, down, or loses replies. Each test that uses it includes it (`#[path] mod fault_store`).
#![allow(dead_code)] // each test uses a part of it

use std::fmt;
use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::Duration;

use idem_tools_runtime::Error;
use idem_tools_runtime::key::Key;
use idem_tools_runtime::store::{Begin, BeginRequest, Lease, Record, Removed, Store, StoreFuture};

/// A store operation, as [`FaultStore`] plans faults for it.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Op {
    /// [`Store::begin`].
    Begin,
    /// [`Store::renew`].
    Renew,
    /// [`Store::complete`].
    Complete,
    /// [`Store::release`].
    Release,
    /// [`Store::get`].
    Get,
    /// [`Store::purge_expired`], [`Store::list`] and [`Store::remove`].
    Admin,
}

impl Op {
    const COUNT: usize = 6;

    fn index(self) -> usize {
        self as usize
    }
}

/// What happens to one operation.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Fault {
    /// The operation runs normally.
    None,
    /// The operation runs after a delay (a slow network or a busy server).
    Delay(Duration),
    /// The operation fails without taking effect (the server was unreachable).
    FailBefore,
    /// The operation takes effect, then fails (the reply was lost).
    FailAfter,
    /// The operation takes effect, then the reply never comes: the future stays pending until
    /// the caller drops it.
    HangAfter,
    /// The store answers that the lease was lost (another caller took the key), without
    /// running the operation.
    LoseLease,
}

type Plan = dyn Fn(Op) -> Fault + Send + Sync;

/// Wraps a store and injects a [`Fault`] into each operation, as a plan decides.
///
/// ```
/// # extern crate idem_tools_runtime as idem_tools;
/// use std::sync::Arc;
/// use idem_tools::store::fault::{Fault, FaultStore, Op};
/// use idem_tools::store::{MemoryStore, Store};
///
/// // A store whose `complete` replies are all lost after they took effect.
/// let store = FaultStore::new(Arc::new(MemoryStore::new()), |op| match op {
///     Op::Complete => Fault::FailAfter,
///     _ => Fault::None,
/// });
/// let store: Arc<dyn Store> = Arc::new(store);
/// # let _ = store;
/// ```
pub struct FaultStore {
    inner: Arc<dyn Store>,
    plan: Box<Plan>,
    calls: [AtomicUsize; Op::COUNT],
}

impl FaultStore {
    /// Wraps `inner`; `plan` is asked once per operation.
    pub fn new(inner: Arc<dyn Store>, plan: impl Fn(Op) -> Fault + Send + Sync + 'static) -> Self {
        FaultStore {
            inner,
            plan: Box::new(plan),
            calls: Default::default(),
        }
    }

    /// How many times `op` was called.
    pub fn calls(&self, op: Op) -> usize {
        self.calls[op.index()].load(Ordering::SeqCst)
    }

    /// The wrapped store.
    pub fn inner(&self) -> &Arc<dyn Store> {
        &self.inner
    }

    /// Runs `work` (which may act as soon as it is called: in-memory stores do) under the
    /// planned fault.
    fn wrap<'a, T: Send + 'a>(
        &'a self,
        op: Op,
        work: impl FnOnce() -> StoreFuture<'a, T> + Send + 'a,
    ) -> StoreFuture<'a, T> {
        self.calls[op.index()].fetch_add(1, Ordering::SeqCst);
        let fault = (self.plan)(op);
        StoreFuture::new(async move {
            let lost = || Error::store(op_name(op), "injected fault: the reply was lost");
            match fault {
                Fault::None => work().await,
                Fault::Delay(by) => {
                    tokio::time::sleep(by).await;
                    work().await
                }
                Fault::FailBefore => Err(Error::store(
                    op_name(op),
                    "injected fault: the store was unreachable",
                )),
                Fault::FailAfter => {
                    drop(work().await);
                    Err(lost())
                }
                Fault::HangAfter => {
                    drop(work().await);
                    std::future::pending().await
                }
                Fault::LoseLease => Err(Error::LeaseLost {
                    key: Key::from_bytes([0; 32]).short(),
                }),
            }
        })
    }
}

fn op_name(op: Op) -> &'static str {
    match op {
        Op::Begin => "begin",
        Op::Renew => "renew",
        Op::Complete => "complete",
        Op::Release => "release",
        Op::Get => "get",
        Op::Admin => "admin",
    }
}

impl fmt::Debug for FaultStore {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("FaultStore").finish_non_exhaustive()
    }
}

impl Store for FaultStore {
    fn begin<'a>(&'a self, req: BeginRequest<'a>) -> StoreFuture<'a, Begin> {
        self.wrap(Op::Begin, move || self.inner.begin(req))
    }
    fn renew<'a>(&'a self, lease: &'a Lease, duration: Duration) -> StoreFuture<'a, ()> {
        self.wrap(Op::Renew, move || self.inner.renew(lease, duration))
    }
    fn complete<'a>(
        &'a self,
        lease: &'a Lease,
        result: &'a [u8],
        ttl: Duration,
    ) -> StoreFuture<'a, ()> {
        self.wrap(Op::Complete, move || {
            self.inner.complete(lease, result, ttl)
        })
    }
    fn release<'a>(&'a self, lease: &'a Lease) -> StoreFuture<'a, ()> {
        self.wrap(Op::Release, move || self.inner.release(lease))
    }
    fn get<'a>(&'a self, namespace: &'a str, key: &'a Key) -> StoreFuture<'a, Option<Record>> {
        self.wrap(Op::Get, move || self.inner.get(namespace, key))
    }
    fn purge_expired(&self) -> StoreFuture<'_, u64> {
        self.wrap(Op::Admin, move || self.inner.purge_expired())
    }
    fn list<'a>(
        &'a self,
        namespace: Option<&'a str>,
        limit: usize,
    ) -> StoreFuture<'a, Vec<Record>> {
        self.wrap(Op::Admin, move || self.inner.list(namespace, limit))
    }
    fn remove<'a>(&'a self, namespace: &'a str, key: &'a Key) -> StoreFuture<'a, bool> {
        self.wrap(Op::Admin, move || self.inner.remove(namespace, key))
    }
    fn remove_shown<'a>(&'a self, shown: &'a Record) -> StoreFuture<'a, Removed> {
        self.wrap(Op::Admin, move || self.inner.remove_shown(shown))
    }
}

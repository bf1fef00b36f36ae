//! Where a tool method's body runs, chosen by the generated code: a `&self` method with owned
//! arguments runs detached on a clone of its receiver when the type allows it (autoref
//! specialization: [`CloneSelf`] before [`BorrowSelf`]), else attached, with a warning from its
//! `#[tool_impl]` block ([`Probe`]). Also
//! the runners of detached bodies, whose bounds carry the advice rustc shows when a body is not
//! `Send`, and `self_key`.

use std::future::Future;
use std::marker::PhantomData;
use std::ops::Deref;
use std::sync::Arc;

use serde::Serialize;

use super::{
    AttachedBody, DetachedBody, Digest, Records, Store, ToolErr, ToolOk, ToolReturn, key_arg, run,
    run_detached,
};

/// The receiver of a `&self` tool, for autoref specialization:
/// `(&&Receiver(self)).idem_receiver()` is [`CloneSelf`]'s when `S: Clone + Send + Sync +
/// 'static`, else [`BorrowSelf`]'s.
pub struct Receiver<'a, S: ?Sized>(pub &'a S);

/// A clone of the receiver, moved into the tool's task: the body runs detached.
pub struct Owned<S>(S);

/// The receiver, borrowed: the body runs attached, in the caller's task.
pub struct Borrowed<'a, S: ?Sized>(&'a S);

impl<S> Deref for Owned<S> {
    type Target = S;
    fn deref(&self) -> &S {
        &self.0
    }
}

impl<S: ?Sized> Deref for Borrowed<'_, S> {
    type Target = S;
    fn deref(&self) -> &S {
        self.0
    }
}

/// Chosen when the receiver's type can be cloned into a task of its own.
pub trait CloneSelf<S> {
    /// A clone of the receiver.
    fn idem_receiver(&self) -> Owned<S>;
}

impl<S: Clone + Send + Sync + 'static> CloneSelf<S> for &Receiver<'_, S> {
    fn idem_receiver(&self) -> Owned<S> {
        Owned(self.0.clone())
    }
}

/// Chosen when it cannot: the tool runs attached (its `#[tool_impl]` block warns about it, once,
/// through [`Probe`]).
pub trait BorrowSelf<'a, S: ?Sized> {
    /// The receiver, borrowed.
    fn idem_receiver(&self) -> Borrowed<'a, S>;
}

impl<'a, S: ?Sized> BorrowSelf<'a, S> for Receiver<'a, S> {
    fn idem_receiver(&self) -> Borrowed<'a, S> {
        Borrowed(self.0)
    }
}

/// The self type of a `#[tool_impl]` block, for its check that the block's `&self` tools can
/// run on a clone: `(&&Probe::<S>::NEW).tools_run_attached()` is [`Detachable`]'s (nothing)
/// when `S: Clone + Send + Sync + 'static`, else the block's own deprecated method, whose note
/// names the type and its tools.
pub struct Probe<S: ?Sized>(PhantomData<fn() -> *const S>);

impl<S: ?Sized> Probe<S> {
    /// The probe.
    pub const NEW: Self = Probe(PhantomData);
}

/// Chosen when the block's type can be cloned into a task: its `&self` tools run detached.
pub trait Detachable {
    /// Nothing to say.
    fn tools_run_attached(&self) {}
}

impl<S: Clone + Send + Sync + 'static> Detachable for &Probe<S> {}

impl<S: Send + Sync + 'static> Owned<S> {
    /// Runs the body `body` makes of this clone, detached (see [`run_detached`]); the body is
    /// kept in `slot`, in the caller's future, until the key is claimed.
    pub fn run<'b, R, F, Fut, C>(
        self,
        digest: Digest,
        store: Option<Arc<dyn Store>>,
        records: C,
        slot: &'b mut Option<Fut>,
        body: F,
    ) -> impl Future<Output = R> + Send + 'b
    where
        R: ToolReturn + Send + 'static,
        R::Ok: ToolOk + Send + 'static,
        R::Err: ToolErr + Send + 'static,
        C: Records<R>,
        F: FnOnce(Self) -> Fut,
        Fut: DetachedBody<R>, // not Send? MutexGuard/Rc across .await, or a trait async fn (-> impl Future + Send); borrows? attached
    {
        *slot = Some(body(self));
        run_detached(digest, store, records, slot)
    }
}

impl<'a, S: ?Sized> Borrowed<'a, S> {
    /// Runs the body `body` makes of the borrowed receiver, attached (see [`run`]).
    pub fn run<'b, R, F, Fut, C>(
        self,
        digest: Digest,
        store: Option<Arc<dyn Store>>,
        records: C,
        slot: &'b mut Option<Fut>,
        body: F,
    ) -> impl Future<Output = R> + Send + 'b
    where
        R: ToolReturn + Send,
        R::Ok: ToolOk + Send + 'b,
        R::Err: ToolErr + Send + 'b,
        C: Records<R>,
        F: FnOnce(Self) -> Fut,
        Fut: AttachedBody<R> + 'b,
    {
        *slot = Some(body(self));
        run(digest, store, records, slot)
    }
}

/// The value of `self_key = …`.
#[diagnostic::on_unimplemented(
    message = "`self_key = …` must give a value that implements `Serialize`, found `{Self}`",
    label = "the receiver's identity, part of the idempotency key as the argument `self`",
    note = "give a field or an expression that identifies the receiver and is `Serialize`: \
            `self_key = self.account_id`, `self_key = (&self.tenant, &self.user)`"
)]
pub trait SelfKey: Serialize {}
impl<T: Serialize + ?Sized> SelfKey for T {}

/// Adds `self_key`'s value to the key and the fingerprint, as the argument `self`.
pub fn self_key<T: SelfKey + ?Sized>(digest: &mut Digest, value: &T) {
    key_arg(digest, "self", value);
}

//! A tool's body that ended the transaction idem opened for it (a `COMMIT` or `ROLLBACK` sent
//! on its connection): nothing of the call is recorded, and a claim the body committed is
//! marked interrupted — what the body wrote may have committed with it — rather than left to
//! expire and run again. Whether the body returned, overran its lease, panicked or was dropped.

use tokio::runtime::Handle;

use super::super::Call;
use super::super::call::{self, refuse};
use super::super::guard::Guard;
use crate::Error;
use crate::stats::Outcome;
use crate::store::{Lease, PostgresStore};

/// If the tool's body ended the transaction its claim opened and the claim committed (a
/// `COMMIT` of the body's), marks the key interrupted — what the body wrote may have committed
/// too — rather than leave it to expire and run again. Whether it was marked.
pub(super) async fn mark_ended(
    store: &PostgresStore,
    call: &Call,
    lease: &Lease,
    ttl: std::time::Duration,
) -> bool {
    let marker = crate::replay::encode_interrupted(call.tool.name);
    match store.mark_ended(lease, &marker, ttl).await {
        Ok(marked) => marked,
        Err(error) => {
            tracing::error!(target: "idem", tool = call.tool.name, key = %call.key.short(),
                %error, "could not mark the key of a tool that ended its own transaction as \
                interrupted; it is freed when its lease ends");
            false
        }
    }
}

/// The tool's body ended the transaction its claim opened: nothing of it is recorded; its
/// claim was `marked` interrupted if it had committed.
pub(super) fn ended_by_the_tool(guard: &mut Guard, call: &Call, marked: bool) -> call::Answer {
    let error = Error::TransactionEnded {
        tool: call.tool.name,
        key: call.key.short(),
        marked,
    };
    refuse(guard, Outcome::ConfigError, error)
}

/// While the body runs: if the call is dropped (its caller went away, the body panicked), the
/// key is marked in a task of its own, should the body have committed its claim.
pub(super) struct MarkIfDropped(Option<Marking>);

struct Marking {
    store: PostgresStore,
    lease: Lease,
    tool: &'static str,
    ttl: std::time::Duration,
    runtime: Option<Handle>,
}

impl MarkIfDropped {
    pub(super) fn arm(
        store: &PostgresStore,
        call: &Call,
        lease: &Lease,
        ttl: std::time::Duration,
    ) -> Self {
        MarkIfDropped(Some(Marking {
            store: store.clone(),
            lease: lease.clone(),
            tool: call.tool.name,
            ttl,
            runtime: Handle::try_current().ok(),
        }))
    }

    /// The body is over: the call handles what it did.
    pub(super) fn disarm(mut self) {
        self.0 = None;
    }
}

impl Drop for MarkIfDropped {
    fn drop(&mut self) {
        let Some(Marking {
            store,
            lease,
            tool,
            ttl,
            runtime,
        }) = self.0.take()
        else {
            return;
        };
        let Some(runtime) = Handle::try_current().ok().or(runtime) else {
            return; // no runtime left: the claim, if it committed, ends with its lease
        };
        runtime.spawn(async move {
            let marker = crate::replay::encode_interrupted(tool);
            if let Err(error) = store.mark_ended(&lease, &marker, ttl).await {
                // Most dropped calls committed nothing (the rollback undid their claim): a
                // warning, not an error.
                tracing::warn!(target: "idem", tool, key = %lease.key.short(), %error,
                    "could not check whether a dropped transactional call's body had committed \
                    its claim; if it had, the key is freed when its lease ends");
            }
        });
    }
}

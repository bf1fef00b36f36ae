//! A tool's body that ended the transaction idem opened for it (a `COMMIT` or `ROLLBACK` sent
//! on its connection): nothing of the call is recorded. The claim was written, inside the
//! transaction, as the record of an interrupted call (`idem_claim`): if the body committed it,
//! that record stands with the body's writes — whether the body then returned, overran its
//! lease, panicked or was dropped — and a retry is told the outcome is unknown instead of
//! running the tool again.

use super::super::Call;
use super::super::call::{self, refuse};
use super::super::guard::Guard;
use crate::Error;
use crate::stats::Outcome;
use crate::store::{Lease, PostgresStore};

/// Whether the tool's body committed the claim (with the interrupted call's record it holds),
/// for the report; the record stands either way.
pub(super) async fn committed(store: &PostgresStore, call: &Call, lease: &Lease) -> bool {
    match store.claim_committed(lease).await {
        Ok(committed) => committed,
        Err(error) => {
            tracing::warn!(target: "idem", tool = call.tool.name, key = %call.key.short(),
                %error, "could not read whether a tool that ended its own transaction \
                committed its claim; if it did, the key is kept as interrupted");
            false
        }
    }
}

/// The tool's body ended the transaction its claim opened: nothing of it is recorded; its
/// claim was `marked` interrupted if it committed.
pub(super) fn ended_by_the_tool(guard: &mut Guard, call: &Call, marked: bool) -> call::Answer {
    let error = Error::TransactionEnded {
        tool: call.tool.name,
        key: call.key.short(),
        marked,
    };
    refuse(guard, Outcome::ConfigError, error)
}

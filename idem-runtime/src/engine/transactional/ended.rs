//! A tool's body that ended the transaction idem opened for it (a `COMMIT` or `ROLLBACK` sent
//! on its connection): nothing of the call is recorded. The claim was written, inside the
//! transaction, as the record of an interrupted call (`idem_claim`): if the body committed it,
//! that record stands with the body's writes — whether the body then returned, overran its
//! lease, panicked or was dropped — and a retry is told the outcome is unknown instead of
//! running the tool again. If the claim did not commit, the key is marked interrupted
//! afterwards: what the body ran after ending the transaction committed on its own.

use std::sync::Arc;
use std::time::Duration;

use super::super::Call;
use super::super::background;
use super::super::call::{self, refuse};
use super::super::guard::{Guard, ttl_of};
use crate::stats::Outcome;
use crate::store::{Lease, PostgresStore};
use crate::{Error, KeyKept};

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
/// claim was `marked` interrupted if it committed. If it did not (the body rolled the
/// transaction back — or `sqlx` did, for a savepoint the body began that failed or was dropped),
/// what the body ran afterwards ran outside any transaction and committed on its own: the key is
/// kept interrupted all the same, under a new claim of `duration` unless another call took it,
/// so that a retry is told the outcome is unknown rather than run the tool again.
pub(super) async fn ended_by_the_tool(
    guard: &mut Guard,
    call: &Call,
    marked: bool,
    duration: Duration,
) -> call::Answer {
    let kept = if marked {
        KeyKept::Committed
    } else {
        let marker = crate::replay::encode_interrupted(call.tool.name);
        let (store, ttl) = (Arc::clone(call.store()), ttl_of(guard.report()));
        let marking =
            background::record_anew(store, call.clone(), marker.into(), ttl, duration, None);
        if marking.await {
            KeyKept::MarkedAfter
        } else {
            KeyKept::NotKept
        }
    };
    let error = Error::TransactionEnded {
        tool: call.tool.name,
        key: call.key.short(),
        kept,
    };
    refuse(guard, Outcome::ConfigError, error)
}

//! A tool's body that ended the transaction idem opened for it (a `COMMIT` or `ROLLBACK` sent
//! on its connection): nothing of the call is recorded. The claim was written, inside the
//! transaction, as the record of an interrupted call (`idem_claim`): if the body committed it,
//! that record stands with the body's writes — whether the body then returned, overran its
//! lease, panicked or was dropped — and a retry is told the outcome is unknown instead of
//! running the tool again. If the claim did not commit, the key is marked interrupted
//! afterwards: what the body ran after ending the transaction committed on its own.

use std::sync::Arc;
use std::time::Duration;

use sqlx::pool::PoolConnection;
use sqlx::{PgConnection, Postgres};

use super::super::Call;
use super::super::background;
use super::super::call::{self, refuse};
use super::super::guard::{Guard, ttl_of};
use crate::stats::Outcome;
use crate::store::postgres::conn::give_back;
use crate::store::postgres::tx::{self, ClaimTx};
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

/// The body ran past its lease and was dropped, its connection left as it was: whether it had
/// ended the transaction (`Some`: and whether its claim committed), asked before the
/// connection's transaction is rolled back. The server also ends a session whose transaction
/// sat idle for a whole lease, rolling everything back: the connection then says so.
pub(super) async fn overran(
    store: &PostgresStore,
    lease: &Lease,
    conn: &mut PgConnection,
    reply: Duration,
) -> Option<bool> {
    match store.claim_transaction(lease).await {
        Ok(ClaimTx::Open) => None,
        Ok(ClaimTx::Ended { committed: true }) => Some(true),
        Ok(ClaimTx::Ended { committed: false }) => {
            match tx::still_open(conn, lease.token, reply).await {
                // A statement of the body still runs, outside the transaction: it ended it.
                Err(sqlx::Error::Io(error)) if error.kind() == std::io::ErrorKind::TimedOut => {
                    Some(false)
                }
                // The session is over: the server ended it, and the transaction with it.
                Err(error) if crate::store::postgres::conn::unsure(&error) => None,
                _ => Some(false),
            }
        }
        Err(error) => {
            tracing::warn!(target: "idem", key = %lease.key.short(), %error, "could not read \
                whether a transactional tool that ran past its lease had ended its transaction; \
                it is rolled back");
            None
        }
    }
}

/// A transactional call whose body is running: what it takes to find out, if the call is
/// dropped then, whether the body had ended the transaction.
pub(super) struct Watched {
    store: PostgresStore,
    call: Call,
    lease: Lease,
    ttl: Duration,
    duration: Duration,
}

impl Watched {
    pub(super) fn new(
        store: &PostgresStore,
        call: &Call,
        lease: &Lease,
        ttl: Duration,
        duration: Duration,
    ) -> Watched {
        Watched {
            store: store.clone(),
            call: call.clone(),
            lease: lease.clone(),
            ttl,
            duration,
        }
    }

    /// The call was dropped while its body ran, leaving `conn` as the body did (the
    /// `ROLLBACK` of its transaction not yet sent). In a task: asks on another connection
    /// whether the transaction is still open, then closes `conn` — rolling back whatever is —
    /// and if the body had rolled the transaction back itself (what it ran afterwards
    /// committed on its own), marks the key interrupted under a new claim. Outside any runtime
    /// (and without `runtime`), the connection is closed and nothing is asked.
    pub(super) fn dropped(
        self,
        conn: PoolConnection<Postgres>,
        runtime: Option<tokio::runtime::Handle>,
    ) {
        let Some(runtime) = tokio::runtime::Handle::try_current().ok().or(runtime) else {
            drop(conn.detach());
            return;
        };
        let reply = self.store.reply_timeout();
        runtime.spawn(async move {
            let ended = self.store.claim_transaction(&self.lease).await;
            give_back(conn, None, true, reply);
            match ended {
                Ok(ClaimTx::Ended { committed: false }) => {
                    let marker = crate::replay::encode_interrupted(self.call.tool.name);
                    let store: Arc<dyn crate::store::Store> = Arc::new(self.store);
                    let (call, ttl, duration) = (self.call, self.ttl, self.duration);
                    let marking =
                        background::record_anew(store, call, marker.into(), ttl, duration, None);
                    marking.await;
                }
                Ok(_) => {}
                Err(error) => tracing::warn!(target: "idem", key = %self.lease.key.short(),
                    %error, "could not read whether a transactional tool dropped mid-run had \
                    ended its transaction; if it rolled it back, a retry runs it again"),
            }
        });
    }
}

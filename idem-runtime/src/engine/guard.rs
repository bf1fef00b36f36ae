//! The one drop guard of a call: what the call holds at each point of its life, and — if the
//! call ends early (its caller goes away, the body panics) — the one place that decides its
//! outcome and what is done in the background.

use std::sync::Arc;

use bytes::Bytes;
use tokio::runtime::Handle;

use super::background;
use super::keeper::{Claim, Keeper};
use super::report::Reporter;
use crate::conversation::overlap::Watch;
use crate::flight::Leader;
use crate::stats::Outcome;
use crate::store::{FirstResult, Store};

/// A claimed key: the claim, its keeper, and the flight identical calls in this process wait on.
pub(super) struct Holding {
    pub(super) claim: Claim,
    pub(super) keeper: Keeper,
    pub(super) leader: Leader,
    /// The runtime the claim was made on: clean-up of a call dropped outside any runtime goes
    /// there.
    pub(super) runtime: Option<Handle>,
    /// The watch of the call a model made that this call is made in, told of a key given back.
    pub(super) watch: Option<Arc<Watch>>,
}

/// What the call holds (boxed: a call that replays never holds a claim, and its future stays
/// small).
pub(super) enum Phase {
    /// No claim: the call is asking the store or waiting, or it has its answer.
    Free,
    /// The key is claimed and the body runs (or is about to).
    Running(Box<Holding>),
    /// The body returned an `Err` that is not recorded: the key is being given back.
    Releasing(Box<Holding>),
    /// The body's result is being recorded (`ok`: it is an `Ok`).
    Recording {
        holding: Box<Holding>,
        bytes: Bytes,
        ok: bool,
    },
}

/// Owns the call's reporter and what it holds. Dropped before the call has an answer (its
/// future dropped, or a panic unwinding), its `Drop` decides the outcome and the clean-up: the
/// one place outside `call.rs` that decides an outcome.
pub(super) struct Guard {
    report: Option<Reporter>,
    phase: Phase,
    /// Whether the body may have been polled: a body never polled did nothing.
    started: bool,
}

impl Guard {
    pub(super) fn new(report: Reporter) -> Self {
        Guard {
            report: Some(report),
            phase: Phase::Free,
            started: false,
        }
    }

    /// The body is about to be polled.
    pub(super) fn start(&mut self) {
        self.started = true;
    }

    /// The reporter, to report the call's outcome.
    pub(super) fn report(&mut self) -> &mut Reporter {
        self.report
            .as_mut()
            .unwrap_or_else(|| unreachable!("the reporter stays until the call answers"))
    }

    /// Moves to `phase`; returns what the call held before.
    pub(super) fn enter(&mut self, phase: Phase) -> Phase {
        std::mem::replace(&mut self.phase, phase)
    }

    /// The claim being held, while the body runs or the result is recorded.
    pub(super) fn holding(&mut self) -> Option<&mut Holding> {
        match &mut self.phase {
            Phase::Running(holding)
            | Phase::Releasing(holding)
            | Phase::Recording { holding, .. } => Some(holding),
            Phase::Free => None,
        }
    }
}

/// How long the tool's result is kept.
pub(super) fn ttl_of(report: &Reporter) -> std::time::Duration {
    report.call().record_ttl()
}

impl Drop for Guard {
    fn drop(&mut self) {
        if let Phase::Free = self.phase {
            // Nothing held: the call has its answer (reported already, so this reports
            // nothing), or was dropped while asking or waiting.
            if let Some(report) = &mut self.report {
                report.report(Outcome::Cancelled);
            }
            return;
        }
        let Some(mut report) = self.report.take() else {
            return;
        };
        let tool = report.call().tool;
        let ttl = ttl_of(&report);
        let (outcome, holding) = match std::mem::replace(&mut self.phase, Phase::Free) {
            Phase::Free => return, // see above
            // (The body's own panic is caught where it is polled, and answered there: a panic
            // unwinding through the call here is another's — a sibling in the caller's
            // `join!`, say — and drops the call like any caller that goes away.)
            // Dropped before the body first ran, or a tool that may simply run again.
            Phase::Running(holding) if !self.started || tool.release_on_cancel => {
                release_and_tell(&holding, &report);
                (Outcome::Cancelled, holding)
            }
            // Dropped mid-run: the side effect may or may not have happened. Running it again
            // could do it twice, so retries are told the outcome is unknown instead.
            Phase::Running(holding) => {
                let store = Arc::clone(holding.keeper.store());
                let lease = holding.claim.lease.clone();
                let runtime = holding.runtime.clone();
                background::mark_interrupted(store, lease, tool.name, ttl, runtime);
                (Outcome::Interrupted, holding)
            }
            // Dropped while giving the key back after an `Err`: finish giving it back.
            Phase::Releasing(holding) => {
                release(&holding);
                (Outcome::Failed, holding)
            }
            // Dropped while the result was recorded: finish recording it, so that a retry
            // replays instead of running the tool again.
            Phase::Recording { holding, bytes, ok } => {
                let Holding {
                    mut keeper,
                    leader,
                    runtime,
                    ..
                } = *holding;
                // The background may run on another runtime than the call's.
                keeper.forget_renewal();
                let fingerprint = report.call().fingerprint;
                let shared = FirstResult {
                    fingerprint,
                    result: bytes.clone(),
                };
                // A model step's answer is acted on only once recorded: callers here wait
                // for the store (the step in flight) instead of taking it unrecorded.
                let lingering = if report.call().is_model_step() {
                    drop(leader);
                    None
                } else {
                    Some(leader.linger(shared))
                };
                report.report(if ok {
                    Outcome::Executed
                } else {
                    Outcome::Failed
                });
                let call = report.call().clone();
                background::record(keeper, call, bytes, ttl, lingering, runtime);
                return;
            }
        };
        report.report(outcome);
        // The leader drops last: followers wake after the key was given back or marked (at once
        // for in-memory stores), and ask again.
        drop(holding);
    }
}

/// Gives the claim back in the background.
pub(super) fn release(holding: &Holding) {
    let store: Arc<dyn Store> = Arc::clone(holding.keeper.store());
    background::release(store, holding.claim.lease.clone(), holding.runtime.clone());
}

/// [`release`], and tells the turn's run — and the watch of the call a model made, if the call
/// was made in one — that the key is given back.
pub(super) fn release_and_tell(holding: &Holding, report: &Reporter) {
    let call = report.call();
    call.turn.run().gave_back(call.key);
    if let Some(watch) = &holding.watch {
        watch.released(call, &holding.claim.lease);
    }
    release(holding);
}

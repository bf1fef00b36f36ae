//! Durable turns: two runs of one turn at once (an orchestrator that resumed a turn twice).
//!
//! A call a model made after a step can fail in one run and go through in the other, which
//! made it again: the two models then read different outcomes, and the run whose model read
//! the failure may start the action again with reworded arguments — a new key, a second
//! action. Each run writes before it reads, so that of two runs one always sees the other:
//!
//! - a run's call claims its tool's key, then reads the conversation's next step
//!   ([`Watch::before_running`]): a step another run is asking is waited for, and a failure it
//!   recorded for this call is this call's too — the tool does not run;
//! - a run that asks the next step claims it, then reads the keys its tool calls gave back
//!   after a failure since the step before ([`outdated`]): a key another run has claimed since
//!   stops this run before its model is asked ([`Error::RunOverlap`]), and gives the step back.
//!   A key this run claimed again since — in any call of any of its conversations, inside
//!   another tool, or in the application's own retry (the engine tells the run of every claim
//!   once it has given a key back) — is no sign of another run.

use std::sync::atomic::{AtomicU32, Ordering};
use std::sync::{Arc, Mutex, PoisonError};

use tokio::time::Instant;

use super::Here;
use super::tool_failure::ReadFailure;
use crate::engine::Call;
use crate::key::Key;
use crate::replay::{self, RecordKind};
use crate::store::{Lease, RecordState, Store};
use crate::{Conversation, Error};

/// A tool call that gave its key back after a failure (an `Err`, a panic, a cancelled call of
/// a tool that may run again, a call refused once claimed): its key, and the store that holds
/// it.
#[derive(Clone)]
pub(super) struct Released {
    key: Key,
    /// The claim given back (a record that still holds it is this run's).
    lease: Lease,
    store: Arc<dyn Store>,
    /// When, on the run's clock.
    at: u64,
}

/// What a call a model made (through [`Conversation::model_tool_call`]) learns of the
/// `#[idempotent]` tool calls made directly in it (not inside their bodies), for its
/// conversation and the call it is made in, if any.
pub(crate) struct Watch {
    conversation: Conversation,
    here: Here,
    /// The step the call followed, and whether that step replayed.
    after: (u32, bool),
    /// The end of the call's wait for another run that asks the next step.
    give_up: Instant,
    /// The call (its tool and arguments, as the model sent them) and its order since the step.
    made: Key,
    order: u32,
    /// The watch of the call a model made that this call is made in (an agent run in a call).
    outer: Option<Arc<Watch>>,
    /// The failure another run recorded for this call with the next step, read once a tool
    /// call's key was claimed: the tool did not run.
    recorded: Mutex<Option<ReadFailure>>,
}

impl Released {
    /// Whether `other` is the same give-back.
    pub(super) fn same(&self, other: &Released) -> bool {
        self.key == other.key && self.at == other.at
    }
}

impl Watch {
    pub(super) fn new(
        conversation: &Conversation,
        here: &Here,
        (after, give_up): ((u32, bool), Instant),
        made: Key,
        order: u32,
    ) -> Watch {
        Watch {
            conversation: conversation.clone(),
            here: here.clone(),
            after,
            give_up,
            made,
            order,
            outer: super::scope::enclosing_watch(),
            recorded: Mutex::new(None),
        }
    }

    /// The tool call `call`, made in the call, gives its claim `lease` back after a failure
    /// (now, or in the background): another run may make it since.
    pub(crate) fn released(&self, call: &Call, lease: &Lease) {
        let key = call.key();
        let mut watch = Some(self);
        while let Some(here) = watch {
            let run = here.conversation.turn.run();
            let released = Released {
                key,
                lease: lease.clone(),
                store: Arc::clone(call.store()),
                at: run.tick(),
            };
            run.watch_claims_of(key);
            here.here.doubt(released);
            watch = here.outer.as_deref();
        }
    }

    /// The failure recorded by another run that answered the call instead of its tool.
    pub(super) fn take_recorded(&self) -> Option<ReadFailure> {
        self.recorded
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .take()
    }

    /// Called once a tool call made in the call (of `tool`) has claimed its key, before the
    /// tool runs: reads the conversation's next step, waiting for another run that asks it (up
    /// to the turn's in-flight wait after the call began). `Ok` if the tool may run: the step
    /// is not recorded, or recorded without a failure of this call. An error if it must not —
    /// the step records a failure of this call (kept for
    /// [`take_recorded`](Self::take_recorded)), another run still asks it, or the store did
    /// not say.
    pub(crate) async fn before_running(&self, tool: &str) -> Result<(), Error> {
        // A call of a sub-agent is also the call of the model that runs it: each step after.
        let mut watch = Some(self);
        while let Some(here) = watch {
            here.read_next_step(tool).await?;
            watch = here.outer.as_deref();
        }
        Ok(())
    }

    /// [`before_running`](Self::before_running) for this watch's own conversation.
    async fn read_next_step(&self, tool: &str) -> Result<(), Error> {
        // (A call made inside the next step's own ask is in a scope of its own: no watch.)
        let next = self.after.0.saturating_add(1);
        if self.here.asks(next) {
            // This run holds the next step's claim and asks it (a call made alongside): no
            // other run can be asking it, nor record a failure there.
            return Ok(());
        }
        let (failures, settled) = self
            .conversation
            .read_failures(&self.here, next, self.give_up)
            .await?;
        let failed = failures.iter().find(|read| read.is(self.made, self.order));
        if let Some(read) = failed {
            *self.recorded.lock().unwrap_or_else(PoisonError::into_inner) = Some(read.clone());
        }
        if settled && failed.is_none() {
            return Ok(());
        }
        Err(Error::RunOverlap {
            turn: self.conversation.turn.id().to_owned(),
            conversation: self.conversation.label.to_string(),
            step: self.after.0,
            tool: tool.to_owned(),
        })
    }
}

impl Here {
    /// Whether this run holds step `step` of the conversation and asks it.
    pub(super) fn asks(&self, step: u32) -> bool {
        self.shared.asking.load(Ordering::SeqCst) == step.saturating_add(1)
    }

    /// The tool call `released` gave its key back after a failure.
    fn doubt(&self, released: Released) {
        // Kept for the next step, also when the step after the call was asked meanwhile (a
        // call alongside it): the failure is read by a later step then.
        let mut calls = self.calls();
        // The latest time a key was given back is the one a later claim must follow.
        calls.doubted.retain(|doubted| doubted.key != released.key);
        calls.doubted.push(released);
    }
}

impl super::Run {
    /// Keeps when this run claims `key` next, from now on (it was just given back).
    fn watch_claims_of(&self, key: Key) {
        let mut claims = self.claims.lock().unwrap_or_else(PoisonError::into_inner);
        claims.insert(key, None);
    }

    /// This run claimed `key` (the engine says so of every claim).
    pub(crate) fn claimed(&self, key: Key) {
        if self.clock.load(Ordering::SeqCst) == 0 {
            return; // no key given back in a model's call yet: no claim is watched
        }
        let at = self.tick();
        let mut claims = self.claims.lock().unwrap_or_else(PoisonError::into_inner);
        if let Some(claimed) = claims.get_mut(&key) {
            *claimed = Some(at);
        }
    }

    /// This run gave `key` back (the engine says so of every claim it gives back).
    pub(crate) fn gave_back(&self, key: Key) {
        if self.clock.load(Ordering::SeqCst) == 0 {
            return;
        }
        let mut claims = self.claims.lock().unwrap_or_else(PoisonError::into_inner);
        if let Some(claimed) = claims.get_mut(&key) {
            *claimed = None;
        }
    }

    /// The next tick of the run's clock.
    fn tick(&self) -> u64 {
        self.clock.fetch_add(1, Ordering::SeqCst) + 1
    }

    /// Whether this run holds, or kept, a claim of the key of `released` made since it was
    /// given back.
    fn made_again(&self, released: &Released) -> bool {
        let claims = self.claims.lock().unwrap_or_else(PoisonError::into_inner);
        matches!(claims.get(&released.key), Some(Some(at)) if *at > released.at)
    }
}

/// Marks the step this run asks while it holds the step's claim.
pub(super) struct Asking<'a>(&'a AtomicU32);

impl<'a> Asking<'a> {
    pub(super) fn step(asking: &'a AtomicU32, step: u32) -> Asking<'a> {
        asking.store(step.saturating_add(1), Ordering::SeqCst);
        Asking(asking)
    }
}

impl Drop for Asking<'_> {
    fn drop(&mut self) {
        self.0.store(0, Ordering::SeqCst);
    }
}

/// Whether one of the tool calls in `doubted` — made after step `step` of `conversation`,
/// which gave their key back after a failure — has been claimed since by another run of the
/// turn (a claim of this run that it holds or kept does not count): held,
/// or recorded as anything but an `Err` (a result, or a marker of a call that went through or
/// was cut off). [`Error::RunOverlap`] if one has (or the store's error if it did not say).
pub(super) async fn outdated(
    conversation: &Conversation,
    step: u32,
    doubted: &[Released],
) -> Result<(), Error> {
    let turn = &conversation.turn;
    let wait = turn.in_flight_wait();
    for call in doubted {
        if turn.run().made_again(call) {
            continue;
        }
        // This run's own claim may still be held (given back in the background, or not at
        // all: the store failed): give it back first, so that what is read is not this run's.
        // A claim another run holds, or a record, has another token: this changes nothing.
        let release = call.store.release(&call.lease);
        let _ = tokio::time::timeout(wait, release).await;
        let read = call.store.get(&call.lease.namespace, &call.key);
        let read = tokio::time::timeout(wait, read).await;
        let read = read.map_err(|_| Error::store("get", "no answer within the wait"))??;
        // A caller-supplied key may be another turn's too: that is no other run of this one.
        let Some(record) = read.filter(|record| record.turn == turn.id()) else {
            continue;
        };
        let claimed_since = match (&record.state, &record.result) {
            (RecordState::InProgress, _) => true,
            // A recorded `Err` is every run's failure: each reads it.
            (RecordState::Completed, Some(bytes)) => {
                !matches!(replay::kind(bytes), Ok(RecordKind::Err))
            }
            (RecordState::Completed, None) => false,
        };
        // Checked again: a claim of this run's own may have been made while the key was read.
        if claimed_since && !turn.run().made_again(call) {
            return Err(Error::RunOverlap {
                turn: turn.id().to_owned(),
                conversation: conversation.label.to_string(),
                step,
                tool: record.tool,
            });
        }
    }
    Ok(())
}

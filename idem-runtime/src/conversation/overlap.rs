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
//! - a run that asks the next step claims it, then reads the keys of the calls its model read
//!   as failed ([`outdated`]): a key another run claimed since, or recorded a result of, stops
//!   this run before its model is asked ([`Error::RunOverlap`]), and gives the step back.

use std::sync::{Arc, Mutex, PoisonError};

use super::Here;
use super::tool_failure::ReadFailure;
use crate::key::{Fingerprint, Key};
use crate::replay::{self, RecordKind};
use crate::store::{RecordState, Store};
use crate::{Conversation, Error};

/// A tool call whose `Err` gave its key back: its key and fingerprint, and the store that
/// holds its key.
#[derive(Clone)]
pub(super) struct Released {
    key: Key,
    fingerprint: Fingerprint,
    store: Arc<dyn Store>,
}

impl Released {
    fn is(&self, key: Key, fingerprint: Fingerprint) -> bool {
        self.key == key && self.fingerprint == fingerprint
    }
}

/// What a call a model made (through [`Conversation::model_tool_call`]) learns of the
/// `#[idempotent]` tool calls made directly in it (not inside their bodies).
pub(crate) struct Watch {
    conversation: Conversation,
    here: Here,
    /// The step the call followed, and whether that step replayed.
    after: (u32, bool),
    /// The call (its tool and arguments, as the model sent them) and its order since the step.
    made: Key,
    order: u32,
    /// The tool calls made in it whose body ran and returned an `Ok`: their keys and
    /// fingerprints.
    executed: Mutex<Vec<(Key, Fingerprint)>>,
    /// Those whose body returned an `Err` that gave their key back.
    released: Mutex<Vec<Released>>,
    /// The failure another run recorded for this call with the next step, read once a tool
    /// call's key was claimed: the tool did not run.
    recorded: Mutex<Option<ReadFailure>>,
}

impl Watch {
    pub(super) fn new(
        conversation: &Conversation,
        here: &Here,
        after: (u32, bool),
        made: Key,
        order: u32,
    ) -> Watch {
        Watch {
            conversation: conversation.clone(),
            here: here.clone(),
            after,
            made,
            order,
            executed: Mutex::new(Vec::new()),
            released: Mutex::new(Vec::new()),
            recorded: Mutex::new(None),
        }
    }

    /// The tool call with `key` and `fingerprint`, made in the call, ran and returned an `Ok`.
    pub(crate) fn executed(&self, key: Key, fingerprint: Fingerprint) {
        let mut executed = self.executed.lock().unwrap_or_else(PoisonError::into_inner);
        executed.push((key, fingerprint));
    }

    /// The tool call with `key` and `fingerprint`, made in the call, gave its key back after
    /// an `Err`: another run may make it since.
    pub(crate) fn released(&self, key: Key, fingerprint: Fingerprint, store: &Arc<dyn Store>) {
        let mut released = self.released.lock().unwrap_or_else(PoisonError::into_inner);
        if !released.iter().any(|call| call.is(key, fingerprint)) {
            let store = Arc::clone(store);
            released.push(Released {
                key,
                fingerprint,
                store,
            });
        }
    }

    /// The tool calls made in the call that ran and returned an `Ok`.
    pub(super) fn executed_calls(&self) -> Vec<(Key, Fingerprint)> {
        self.executed
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .clone()
    }

    /// The tool calls made in the call that gave their key back after an `Err`.
    pub(super) fn released_calls(&self) -> Vec<Released> {
        self.released
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .clone()
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
    /// to the turn's in-flight wait). `Ok` if the tool may run: the step is not recorded, or
    /// recorded without a failure of this call. An error if it must not — the step records a
    /// failure of this call (kept for [`take_recorded`](Self::take_recorded)), another run
    /// still asks it, or the store did not say.
    pub(crate) async fn before_running(&self, tool: &str) -> Result<(), Error> {
        if self.here.shared.steps.try_lock().is_err() {
            // This run asks a step of the conversation meanwhile (the call is made inside it):
            // no other run can be asking the next one.
            return Ok(());
        }
        let next = self.after.0 + 1;
        let (failures, settled) = self
            .conversation
            .read_failures(self.here.scope, next)
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
    /// The tool calls `released` were made in a call that the model read as failed.
    pub(super) fn doubt(&self, after: (u32, bool), released: Vec<Released>) {
        let mut calls = self.calls();
        if calls.after == Some(after) {
            for call in released {
                let known = calls.doubted.iter().any(|doubted| doubted.key == call.key);
                if !known {
                    calls.doubted.push(call);
                }
            }
        }
    }
}

impl super::Run {
    /// The tool calls `keys` ran in this run and went through.
    pub(super) fn went_through(&self, keys: Vec<(Key, Fingerprint)>) {
        let mut went_through = self
            .went_through
            .lock()
            .unwrap_or_else(PoisonError::into_inner);
        went_through.extend(keys);
    }

    /// Whether the tool call `released` ran again in this run since it failed, and went
    /// through.
    fn made_again(&self, released: &Released) -> bool {
        let went_through = self
            .went_through
            .lock()
            .unwrap_or_else(PoisonError::into_inner);
        went_through.contains(&(released.key, released.fingerprint))
    }
}

/// Whether one of the tool calls in `doubted` — made after step `step` of `conversation`, and
/// read as failed by its model — has been claimed since by another run, or has a result
/// recorded: [`Error::RunOverlap`] if one has (or the store's error if it did not say).
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
        let read = tokio::time::timeout(wait, call.store.get(turn.namespace(), &call.key)).await;
        let read = read.map_err(|_| Error::store("get", "no answer within the wait"))??;
        let Some(record) = read.filter(|record| record.fingerprint == call.fingerprint) else {
            continue;
        };
        let went_through = match (&record.state, &record.result) {
            (RecordState::InProgress, _) => true,
            (RecordState::Completed, Some(bytes)) => matches!(
                replay::kind(bytes),
                Ok(RecordKind::Ok | RecordKind::NotReplayable { .. })
            ),
            (RecordState::Completed, None) => false,
        };
        if went_through {
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

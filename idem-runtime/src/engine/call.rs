//! A call's life, top to bottom: join → begin → answer → run under the lease keeper → record →
//! publish → report. It never sees the tool's types: the body is polled, and its result encoded
//! and decoded, by the typed [`Execution`](super::Execution), through the [`Port`].

use std::sync::Arc;
use std::time::Duration;

use bytes::Bytes;
use tokio::time::Instant;

use super::Call;
use super::background;
use super::guard::{self, Guard, Holding, Phase};
use super::held;
use super::keeper::{self, Claim, Keeper};
use super::port::{BodyScope, Finished, Port};
use super::report::Reporter;
use crate::Error;
use crate::flight::{self, Role, Waited};
use crate::replay::{self, RecordKind};
use crate::stats::Outcome;
use crate::store::{Begin, Exhausted, FirstResult, LeaseToken, Store};

/// The first pause, and the longest, between two polls of a key in flight elsewhere.
pub(super) const FIRST_BACKOFF: Duration = Duration::from_millis(5);
pub(super) const MAX_BACKOFF: Duration = Duration::from_millis(250);

/// How a call ended, for the typed layer.
pub(super) enum Answer {
    /// The body ran in this call; its result is the typed layer's. The outcome is reported.
    Ran,
    /// A recorded result to decode and return — replayed from the store, or shared by an
    /// identical call — and the outcome to report once it decoded.
    Recorded {
        bytes: Bytes,
        outcome: Outcome,
        report: Reporter,
    },
    /// The call was refused or failed; the outcome is reported.
    Refused(Error),
}

/// Runs one call: see the module documentation. `detached`: once claimed, the call moves into
/// a task of its own.
pub(super) async fn run(report: Reporter, port: Arc<Port>, detached: bool) -> Answer {
    let call = report.call().clone();
    let store = Arc::clone(call.store());
    let mut guard = Guard::new(report, Arc::clone(&port));

    // 1. Refusals that need no store.
    if held::holds(&call.key) {
        // Single-flight would make this call wait for the one it runs inside of.
        let error = Error::Reentrant {
            tool: call.tool.name,
            key: call.key.short(),
        };
        return refuse(&mut guard, Outcome::Reentrant, error);
    }
    let duration = match keeper::duration(call.tool) {
        Ok(duration) => duration,
        Err(error) => return refuse(&mut guard, Outcome::ConfigError, error),
    };

    // 2. Join an identical call running here, or ask the store until the call has an answer
    //    or a claim. Waiting — for the call here, or for a holder elsewhere — charges nothing.
    let wait_until = Instant::now() + call.turn.in_flight_wait();
    let (leader, claim) = 'ask: loop {
        let leader = match flight::join(store_id(&store), call.key) {
            Role::Done(shared) => return recorded(&mut guard, &call, shared, Outcome::Joined),
            Role::Follower(follower) => match follower.wait(wait_until).await {
                Waited::Done(shared) => {
                    return recorded(&mut guard, &call, shared, Outcome::Joined);
                }
                Waited::Abandoned => continue 'ask, // it recorded nothing: maybe lead now
                Waited::TimedOut => return in_flight(&mut guard, &call, wait_until),
            },
            Role::Leader(leader) => leader,
        };
        let mut backoff = FIRST_BACKOFF;
        loop {
            let token = LeaseToken::generate();
            let sent = Instant::now(); // no later than the store's start of the lease
            let claim = Claim {
                lease: call.lease(token),
                duration,
                sent,
            };
            match begin(&store, &call, token, duration, &claim).await {
                Err(error) => return refuse(&mut guard, Outcome::StoreError, error),
                Ok(Begin::Claimed) if Instant::now() < claim.trusted_until() => {
                    break 'ask (leader, claim);
                }
                // Answered after the lease it granted could be trusted: another caller may
                // hold the key by then. Give it back and ask again.
                Ok(Begin::Claimed) => background::release(Arc::clone(&store), claim.lease),
                Ok(Begin::Completed(first)) => {
                    if first.fingerprint != call.fingerprint {
                        return mismatch(&mut guard, &call);
                    }
                    leader.publish(|| first.clone());
                    return recorded(&mut guard, &call, first, Outcome::Replayed);
                }
                Ok(Begin::InFlight { fingerprint }) if fingerprint != call.fingerprint => {
                    return mismatch(&mut guard, &call);
                }
                Ok(Begin::InFlight { .. }) => {}
                Ok(Begin::Refused(exhausted)) => return over_budget(&mut guard, &call, exhausted),
            }
            // In flight elsewhere: ask again after a pause, while the wait lasts.
            let now = Instant::now();
            if now >= wait_until {
                return in_flight(&mut guard, &call, wait_until);
            }
            tokio::time::sleep(backoff.min(wait_until - now)).await;
            backoff = (backoff * 2).min(MAX_BACKOFF);
        }
    };

    // 3. Run the body under the lease keeper.
    let keeper = Keeper::new(Arc::clone(&store), &claim);
    guard.enter(Phase::Running(Holding {
        claim,
        keeper,
        leader,
    }));
    if detached {
        port.detach().await;
    }
    port.enter(BodyScope {
        held: held::with(call.key),
        turn: call.turn.clone(),
    });
    let finished = match holding(&mut guard).keeper.run(port.body()).await {
        Ok(finished) => finished,
        Err(error) => {
            // The lease could not be kept: the body was dropped, and the key is not ours.
            guard.enter(Phase::Free);
            return refuse(&mut guard, Outcome::LeaseLost, error);
        }
    };

    // 4. Record the result (or give the key back), publish it, report.
    let (bytes, ok) = match finished {
        Finished::Release => return release_after_err(&mut guard, &store).await,
        Finished::Record { bytes, ok } => (bytes, ok),
        Finished::Unreplayable { bytes, reason } => {
            tracing::error!(target: "idem", tool = call.tool.name, key = %call.key.short(),
                %reason, "the result cannot be replayed faithfully; retries will be told the \
                tool ran");
            (bytes, true)
        }
    };
    let Phase::Running(holding) = guard.enter(Phase::Free) else {
        unreachable!("the body ran under the claim");
    };
    let ttl = guard::ttl_of(guard.report());
    let lease = holding.claim.lease.clone();
    guard.enter(Phase::Recording {
        holding,
        bytes: bytes.clone(),
        ok,
    });
    // Bounded by a lease: a store that does not answer by then is retried in the background.
    let give_up = Instant::now() + duration;
    let answer = self::holding(&mut guard)
        .keeper
        .during(store.complete(&lease, &bytes, ttl), give_up)
        .await;
    let Phase::Recording { holding, .. } = guard.enter(Phase::Free) else {
        unreachable!("the result was being recorded");
    };
    let outcome = if ok {
        Outcome::Executed
    } else {
        Outcome::Failed
    };
    let shared = FirstResult {
        fingerprint: call.fingerprint,
        result: bytes.clone(),
    };
    match answer {
        Some(Ok(())) => {
            holding.leader.publish(|| shared);
            guard.report().report(outcome);
        }
        Some(Err(error @ Error::LeaseLost { .. })) => {
            tracing::error!(target: "idem", tool = call.tool.name, key = %call.key.short(),
                %error, "the tool ran but its lease was lost before the result was recorded");
            guard.report().report(Outcome::LeaseLost);
        }
        failed => {
            let error = match failed {
                Some(Err(error)) => error,
                _ => Error::store("complete", "no answer within the lease"),
            };
            tracing::error!(target: "idem", tool = call.tool.name, key = %call.key.short(),
                %error, "the tool ran but its result could not be recorded yet; retrying in the \
                background while holding the key");
            guard.report().report(outcome);
            let Holding { keeper, leader, .. } = holding;
            background::record(keeper, bytes, ttl, leader.linger(shared));
        }
    }
    Answer::Ran
}

/// The claim the call holds.
fn holding(guard: &mut Guard) -> &mut Holding {
    guard
        .holding()
        .unwrap_or_else(|| unreachable!("the call holds a claim here"))
}

/// A store's identity for single-flight: its address.
pub(super) fn store_id(store: &Arc<dyn Store>) -> usize {
    Arc::as_ptr(store).cast::<()>() as usize
}

/// Asks the store to begin, bounded by the lease it asks for (an answer after that is of no
/// use). If the call is dropped meanwhile, or the answer is an error (a timeout may hide a
/// claim that landed), the claim it may have made is given back with its token — retried
/// while the store does not answer, until that claim's lease would end.
async fn begin(
    store: &Arc<dyn Store>,
    call: &Call,
    token: LeaseToken,
    duration: Duration,
    claim: &Claim,
) -> Result<Begin, Error> {
    struct GiveBack<'a>(Option<(&'a Arc<dyn Store>, &'a Claim)>);
    impl Drop for GiveBack<'_> {
        fn drop(&mut self) {
            if let Some((store, claim)) = self.0 {
                let until = claim.sent + claim.duration;
                background::give_back(Arc::clone(store), claim.lease.clone(), until);
            }
        }
    }
    let mut give_back = GiveBack(Some((store, claim)));
    let request = call.begin_request(token, duration);
    let answer = match tokio::time::timeout(duration, store.begin(request)).await {
        Ok(answer) => answer,
        Err(_) => Err(Error::store("begin", "no answer within the lease")),
    };
    if answer.is_ok() {
        give_back.0 = None;
    }
    answer
}

/// An `Err` that is not recorded: give the key back so that a retry runs again. The guard
/// stays armed meanwhile: a caller giving up during the release hands it to the background,
/// and a process exiting right after the call has given the key back.
async fn release_after_err(guard: &mut Guard, store: &Arc<dyn Store>) -> Answer {
    let Phase::Running(holding) = guard.enter(Phase::Free) else {
        unreachable!("the body ran under the claim");
    };
    let (lease, duration) = (holding.claim.lease.clone(), holding.claim.duration);
    guard.enter(Phase::Releasing(holding));
    let answer = tokio::time::timeout(duration, store.release(&lease)).await;
    let Phase::Releasing(holding) = guard.enter(Phase::Free) else {
        unreachable!("the key was being given back");
    };
    match answer {
        Ok(Ok(()) | Err(Error::LeaseLost { .. })) => {}
        Ok(Err(error)) => tracing::warn!(target: "idem", key = %lease.key.short(), %error,
            "could not give the key back; it is freed when its lease ends"),
        Err(_) => tracing::warn!(target: "idem", key = %lease.key.short(),
            "the store did not answer a release; the key is freed when its lease ends"),
    }
    guard.report().report(Outcome::Failed);
    drop(holding); // followers wake after the key was given back, and ask again
    Answer::Ran
}

/// A recorded result, replayed or shared: returned for decoding, unless it is a marker, which
/// answers with its error.
pub(super) fn recorded(
    guard: &mut Guard,
    call: &Call,
    first: FirstResult,
    outcome: Outcome,
) -> Answer {
    if first.fingerprint != call.fingerprint {
        return mismatch(guard, call);
    }
    let (tool, key) = (call.tool.name, call.key.short());
    match replay::kind(&first.result) {
        Ok(RecordKind::Ok) => {}
        Ok(RecordKind::Err) if call.tool.cache_errors => {}
        Ok(RecordKind::Interrupted) => {
            let error = Error::Interrupted { tool, key };
            return refuse(guard, Outcome::WasInterrupted, error);
        }
        Ok(RecordKind::NotReplayable { reason }) => {
            let error = Error::NotReplayable {
                tool,
                key,
                message: reason,
            };
            return refuse(guard, Outcome::NotReplayable, error);
        }
        Ok(RecordKind::Err) => {
            let error = Error::Decode {
                tool,
                key,
                message: "the record holds an `Err`, but this tool records `Ok` results only \
                          (was `cache_errors` removed?)"
                    .to_owned(),
            };
            return refuse(guard, Outcome::DecodeError, error);
        }
        Err(error) => {
            let message = error.to_string();
            return refuse(
                guard,
                Outcome::DecodeError,
                Error::Decode { tool, key, message },
            );
        }
    }
    Answer::Recorded {
        bytes: first.result,
        outcome,
        report: guard.take_report(),
    }
}

pub(super) fn refuse(guard: &mut Guard, outcome: Outcome, error: Error) -> Answer {
    guard.report().fail_with(outcome, &error);
    Answer::Refused(error)
}

pub(super) fn mismatch(guard: &mut Guard, call: &Call) -> Answer {
    let error = Error::PayloadMismatch {
        tool: call.tool.name,
        key: call.key.short(),
    };
    refuse(guard, Outcome::PayloadMismatch, error)
}

pub(super) fn in_flight(guard: &mut Guard, call: &Call, wait_until: Instant) -> Answer {
    let error = Error::InFlight {
        tool: call.tool.name,
        key: call.key.short(),
        waited: call.turn.in_flight_wait() + Instant::now().saturating_duration_since(wait_until),
    };
    refuse(guard, Outcome::InFlight, error)
}

pub(super) fn over_budget(guard: &mut Guard, call: &Call, exhausted: Exhausted) -> Answer {
    let tool = call.tool.name;
    let error = match exhausted {
        Exhausted::Key { attempts, limit } => Error::BudgetExhausted {
            tool,
            key: call.key.short(),
            attempts,
            limit,
        },
        Exhausted::Turn { calls, limit } => Error::TurnBudgetExhausted {
            tool,
            turn: call.turn.id().to_owned(),
            calls,
            limit,
        },
    };
    refuse(guard, Outcome::BudgetExhausted, error)
}

//! What a record says about its key, as the operator needs it: the store's state (in progress or
//! completed) refined by what a completed record holds (`replay::kind`).

use clap::ValueEnum;
use idem_tools_runtime::replay::{self, RecordKind};
use idem_tools_runtime::store::{Record, RecordState};
use serde_json::{Value, json};

/// A record's state, as `--state` takes it and the output shows it.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, ValueEnum)]
pub enum State {
    /// A caller holds a lease and is running the tool (or crashed; the lease then ends).
    InProgress,
    /// The tool returned `Ok`; retries replay it.
    Completed,
    /// The tool returned an `Err`, recorded because the tool sets `cache_errors`; retries get it.
    Failed,
    /// The call was dropped while the tool ran: whether it took effect is unknown; retries are
    /// refused until the record expires.
    Interrupted,
    /// The tool ran, but its result could not be recorded faithfully; retries are told it ran.
    NotReplayable,
    /// Completed, but this idem cannot read what was recorded (corrupt, or from a newer idem).
    Unreadable,
}

impl State {
    /// Every state, in the order of the `stats` columns.
    pub const ALL: [State; 6] = [
        State::InProgress,
        State::Completed,
        State::Failed,
        State::Interrupted,
        State::NotReplayable,
        State::Unreadable,
    ];

    /// The state of `record`.
    pub fn of(record: &Record) -> State {
        Self::with_kind(record).0
    }

    /// The state of `record`, and what its result holds when it can be read.
    fn with_kind(record: &Record) -> (State, Option<RecordKind>) {
        if record.state == RecordState::InProgress {
            return (State::InProgress, None);
        }
        let Some(Ok(kind)) = record.result.as_deref().map(replay::kind) else {
            return (State::Unreadable, None);
        };
        let state = match kind {
            RecordKind::Ok => State::Completed,
            RecordKind::Err => State::Failed,
            RecordKind::Interrupted => State::Interrupted,
            RecordKind::NotReplayable { .. } => State::NotReplayable,
        };
        (state, Some(kind))
    }

    /// Its name in the output, as `--state` spells it: `in-progress`, `not-replayable`, ….
    pub fn as_str(self) -> &'static str {
        match self {
            State::InProgress => "in-progress",
            State::Completed => "completed",
            State::Failed => "failed",
            State::Interrupted => "interrupted",
            State::NotReplayable => "not-replayable",
            State::Unreadable => "unreadable",
        }
    }

    /// What the next identical call does once the record is removed, as a sentence.
    pub fn after_removal(self) -> &'static str {
        match self {
            State::InProgress => {
                "The next identical call runs the tool; if the caller holding the claim is still \
                 running, a retry may run the tool a second time."
            }
            State::Completed => {
                "The tool has run; the next identical call runs it AGAIN instead of replaying \
                 its result."
            }
            State::Failed => {
                "The next identical call runs the tool again instead of getting the recorded \
                 error."
            }
            State::Interrupted => {
                "The next identical call runs the tool again: check first whether the \
                 interrupted call took effect."
            }
            State::NotReplayable => {
                "The tool has run (its result could not be recorded); the next identical call \
                 runs it AGAIN."
            }
            State::Unreadable => {
                "The next identical call runs the tool again (what the record holds cannot be \
                 read, so whether the tool ran is not known here)."
            }
        }
    }
}

/// The marker a completed record holds instead of a result, for `--json`: `{"kind":
/// "interrupted"}` or `{"kind": "not-replayable", "reason": "…"}`; `null` for anything else.
pub fn marker_json(record: &Record) -> Value {
    match State::with_kind(record) {
        (_, Some(RecordKind::Interrupted)) => json!({ "kind": State::Interrupted.as_str() }),
        (_, Some(RecordKind::NotReplayable { reason })) => {
            json!({ "kind": State::NotReplayable.as_str(), "reason": reason })
        }
        _ => Value::Null,
    }
}

/// Why the tool's result was not recorded, for a not-replayable record.
pub fn unreplayable_reason(record: &Record) -> Option<String> {
    match State::with_kind(record) {
        (_, Some(RecordKind::NotReplayable { reason })) => Some(reason),
        _ => None,
    }
}

#[cfg(test)]
mod tests {
    use super::State;
    use clap::ValueEnum;

    #[test]
    fn the_names_shown_are_the_names_state_takes() {
        for state in State::ALL {
            let parsed = State::from_str(state.as_str(), false);
            assert_eq!(parsed, Ok(state), "{}", state.as_str());
        }
        assert_eq!(State::value_variants(), State::ALL);
    }
}

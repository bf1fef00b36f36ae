//! A call's metrics through the `metrics` facade, with each tool's metric keys built once.
//!
//! Building a [`Key`] with labels allocates and hashes; doing it four times per call would
//! cost more than the rest of a replay. So each tool's keys are built on its first call, kept
//! for the life of the process (one small entry per tool name), and looked up in a
//! thread-local map. The recorder itself is asked on every call, so a recorder installed later
//! (or a thread-local one) sees the following calls.

use std::cell::RefCell;
use std::collections::HashMap;
use std::sync::{Mutex, Once, PoisonError};
use std::time::Instant;

use metrics::{Key, Label, Level, Metadata, Unit, with_recorder};

use super::{CALL_DURATION_SECONDS, CALLS_IN_FLIGHT, CALLS_TOTAL};
use crate::stats::Outcome;

static METADATA: Metadata<'static> =
    Metadata::new(module_path!(), Level::INFO, Some(module_path!()));

/// One tool's metric keys.
struct ToolKeys {
    in_flight: Key,
    /// `(calls_total, duration)` for each outcome, in the order of [`Outcome::ALL`].
    by_outcome: Vec<(Key, Key)>,
}

impl ToolKeys {
    fn new(tool: &'static str) -> Self {
        let by_outcome = Outcome::ALL
            .iter()
            .map(|outcome| {
                let labels = || {
                    vec![
                        Label::new("tool", tool),
                        Label::new("outcome", outcome.as_str()),
                    ]
                };
                (
                    Key::from_parts(CALLS_TOTAL, labels()),
                    Key::from_parts(CALL_DURATION_SECONDS, labels()),
                )
            })
            .collect();
        ToolKeys {
            in_flight: Key::from_parts(CALLS_IN_FLIGHT, vec![Label::new("tool", tool)]),
            by_outcome,
        }
    }

    fn for_outcome(&self, outcome: Outcome) -> Option<&(Key, Key)> {
        let index = Outcome::ALL.iter().position(|o| *o == outcome)?;
        self.by_outcome.get(index)
    }
}

/// The keys of `tool`: from this thread's map, else from the process's (built on first use).
fn keys(tool: &'static str) -> &'static ToolKeys {
    thread_local! {
        static LOCAL: RefCell<HashMap<&'static str, &'static ToolKeys>> =
            RefCell::new(HashMap::new());
    }
    LOCAL
        .try_with(|local| {
            if let Some(&keys) = local.borrow().get(tool) {
                return keys;
            }
            let keys = shared(tool);
            local.borrow_mut().insert(tool, keys);
            keys
        })
        .unwrap_or_else(|_| shared(tool)) // this thread is exiting
}

fn shared(tool: &'static str) -> &'static ToolKeys {
    static ALL: Mutex<Option<HashMap<&'static str, &'static ToolKeys>>> = Mutex::new(None);
    let mut all = ALL.lock().unwrap_or_else(PoisonError::into_inner);
    all.get_or_insert_with(HashMap::new)
        .entry(tool)
        .or_insert_with(|| Box::leak(Box::new(ToolKeys::new(tool))))
}

/// Describes the metrics to the installed `metrics` recorder (their unit and help text).
///
/// idem calls it once, on the first call that reaches the engine. Call it yourself after
/// installing a recorder if that happens later.
pub fn describe_metrics() {
    use metrics::{describe_counter, describe_gauge, describe_histogram};
    describe_counter!(
        CALLS_TOTAL,
        Unit::Count,
        "Calls of state-changing tools, by tool and outcome."
    );
    describe_histogram!(
        CALL_DURATION_SECONDS,
        Unit::Seconds,
        "How long calls of state-changing tools took, by tool and outcome."
    );
    describe_gauge!(
        CALLS_IN_FLIGHT,
        Unit::Count,
        "Calls of state-changing tools running now, by tool."
    );
}

/// Metrics for one call: started when it enters the engine, ended exactly once.
pub(crate) struct CallMetrics {
    keys: &'static ToolKeys,
    started: Instant,
}

impl CallMetrics {
    /// A call of `tool` entered the engine.
    pub(crate) fn start(tool: &'static str) -> Self {
        static DESCRIBED: Once = Once::new();
        DESCRIBED.call_once(describe_metrics);
        let keys = keys(tool);
        with_recorder(|r| r.register_gauge(&keys.in_flight, &METADATA).increment(1.0));
        CallMetrics {
            keys,
            started: Instant::now(),
        }
    }

    /// The call ended with `outcome`.
    pub(crate) fn end(&self, outcome: Outcome) {
        let seconds = self.started.elapsed().as_secs_f64();
        let keys = self.keys;
        with_recorder(|r| {
            r.register_gauge(&keys.in_flight, &METADATA).decrement(1.0);
            if let Some((calls, duration)) = keys.for_outcome(outcome) {
                r.register_counter(calls, &METADATA).increment(1);
                r.register_histogram(duration, &METADATA).record(seconds);
            }
        });
    }
}

/// Counts a call of `tool` refused before it reached the engine.
pub(crate) fn refused(tool: &'static str) {
    if let Some((calls, _)) = keys(tool).for_outcome(Outcome::ConfigError) {
        with_recorder(|r| r.register_counter(calls, &METADATA).increment(1));
    }
}

//! One outcome per call: the log event, the counters, the span's outcome and the metrics.

use crate::stats::{GLOBAL, Outcome};
use crate::tool::ToolInfo;
use crate::{Error, Turn};

use super::Call;
use super::telemetry::{self, CallSpan};

/// Owns a call until its outcome is reported, and reports it once: every call yields exactly
/// one event, one count, one outcome on its span and one end of its metrics. Which outcome a
/// call that ends early gets is the guard's to decide (`Guard`'s `Drop`), not this type's.
pub(crate) struct Reporter {
    call: Call,
    done: bool,
    /// The call's span (none when nothing wants it).
    span: CallSpan,
    /// The span the call was made in (the caller's): the parent of the call's span and of its
    /// outcome event.
    context: CallSpan,
    #[cfg(feature = "metrics")]
    metrics: telemetry::CallMetrics,
}

impl Reporter {
    /// Starts reporting `call`, whose span is `span`, made in the caller's span `context`.
    pub(crate) fn new(call: Call, span: CallSpan, context: CallSpan) -> Self {
        Reporter {
            span,
            context,
            #[cfg(feature = "metrics")]
            metrics: telemetry::CallMetrics::start(call.tool.name),
            call,
            done: false,
        }
    }

    pub(crate) fn call(&self) -> &Call {
        &self.call
    }

    /// Reports the outcome of a call that did not fail.
    pub(crate) fn report(&mut self, outcome: Outcome) {
        self.emit(outcome, None);
    }

    /// Reports a call that failed with `error`.
    pub(crate) fn fail_with(&mut self, outcome: Outcome, error: &Error) {
        self.emit(outcome, Some(error));
    }

    fn emit(&mut self, outcome: Outcome, error: Option<&Error>) {
        if std::mem::replace(&mut self.done, true) {
            return;
        }
        GLOBAL.add(outcome);
        let call = &self.call;
        call.turn.record(outcome);
        #[cfg(feature = "metrics")]
        self.metrics.end(outcome);
        if !telemetry::wanted() {
            return;
        }
        // The event stands next to the call's span, not inside it: it carries every field
        // itself, so each prints once — a subscriber printing span fields with each event sees
        // none of the span's here — and it carries them to a layer that keeps events but not
        // spans. Events of the tool's own body are inside the span, with its fields.
        let routine = matches!(
            outcome,
            Outcome::Executed | Outcome::Replayed | Outcome::Joined | Outcome::Failed
        );
        let (tool, key, turn) = (call.tool.name, call.key.short(), call.turn.id());
        let namespace = call.turn.namespace();
        let name = outcome.as_str();
        let context = self.context.get();
        match error {
            None if routine => tracing::info!(target: "idem", parent: context, tool, %key,
                turn, namespace, outcome = name, "tool call"),
            None => tracing::warn!(target: "idem", parent: context, tool, %key, turn,
                namespace, outcome = name, "tool call"),
            Some(error) => tracing::warn!(target: "idem", parent: context, tool, %key, turn,
                namespace, outcome = name, %error, "tool call"),
        }
        // Recorded after the event, so that a subscriber printing span fields with each event
        // prints the outcome and error once.
        telemetry::record_outcome(self.span.get(), outcome, error);
    }
}

/// Logs and counts a call refused before it could be made (no turn, for instance), in `turn`'s
/// counters too when it was made in one.
pub(crate) fn refused(tool: &'static ToolInfo, turn: Option<&Turn>, error: &Error) {
    GLOBAL.add(Outcome::ConfigError);
    telemetry::refused(tool.name);
    let outcome = Outcome::ConfigError.as_str();
    match turn {
        Some(turn) => {
            turn.record(Outcome::ConfigError);
            tracing::warn!(target: "idem", tool = tool.name, turn = turn.id(),
                namespace = turn.namespace(), outcome, %error, "tool call");
        }
        None => tracing::warn!(target: "idem", tool = tool.name, outcome, %error, "tool call"),
    }
}

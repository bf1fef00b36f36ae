//! Operating idem: a `tracing` span around every state-changing call and, with the `metrics`
//! feature, metrics through the [`metrics`](https://docs.rs/metrics) facade.
//!
//! # The span
//! Each call of an `#[idempotent]` tool runs inside an `INFO` span named `idem.tool_call`
//! (target `idem`). The tool's body runs inside it, so the spans it opens (an HTTP client, a
//! database driver) nest under it, detached tools included. Its fields:
//!
//! | field | value |
//! |---|---|
//! | `otel.name` | the tool's name: the span's name once exported by `tracing-opentelemetry` |
//! | `tool`, `key`, `turn`, `namespace` | the tool's name, the key's first 12 hex digits, the turn id and namespace |
//! | `outcome` | recorded when the call ends: an [`Outcome`] name such as `executed` or `replayed` |
//! | `otel.status_code`, `otel.status_description` | `ERROR` and the error, for a call that failed ([`is_failure`]) |
//!
//! The call's one event (`tool call`) carries `tool`, `key`, `turn`, `namespace`, `outcome` and
//! `error`. It is emitted next to the span (in the caller's context), not inside it, so that a
//! subscriber printing span fields with each event prints each field once, and a layer that
//! keeps events but filters spans out still gets the key.
//!
//! When no subscriber is interested in the span, it is never built: a disabled span costs a
//! callsite check.
//!
//! # Metrics
//! With the `metrics` cargo feature, every call also counts into whatever `metrics` recorder
//! the application installed (Prometheus exporter, OpenTelemetry bridge, …); with none
//! installed, the calls go to the facade's no-op recorder. The tool's key is never a label.
//!
//! | metric | type | labels |
//! |---|---|---|
//! | [`CALLS_TOTAL`] | counter | `tool`, `outcome` |
//! | [`CALL_DURATION_SECONDS`] | histogram (seconds) | `tool`, `outcome` |
//! | [`CALLS_IN_FLIGHT`] | gauge | `tool` |

use std::future::Future;
use std::pin::Pin;
use std::task::{Context, Poll};

use pin_project_lite::pin_project;
use tracing::Span;
use tracing::field::{Empty, display};

use crate::Error;
use crate::stats::Outcome;

use super::Call;

#[cfg(feature = "metrics")]
mod metrics;

#[cfg(feature = "metrics")]
pub(super) use self::metrics::CallMetrics;
#[cfg(feature = "metrics")]
pub use self::metrics::describe_metrics;

/// Counter of calls of state-changing tools, by `tool` and `outcome` (one per call).
pub const CALLS_TOTAL: &str = "idem_tool_calls_total";
/// Histogram of how long calls took from entering the engine to their outcome, in seconds, by
/// `tool` and `outcome`.
pub const CALL_DURATION_SECONDS: &str = "idem_tool_call_duration_seconds";
/// Gauge of calls that entered the engine and have no outcome yet, by `tool`.
pub const CALLS_IN_FLIGHT: &str = "idem_tool_calls_in_flight";

/// Whether a call that ended with `outcome` (and `error`, the error it returned to its caller,
/// if any) failed: its span gets `otel.status_code = "ERROR"`.
///
/// A call fails when it returns an idem error to its caller, when the tool returned an error
/// or panicked, or when the store failed around it (its result not recorded). A call its
/// caller dropped (`cancelled`, `interrupted`) did not fail: nobody was waiting for it.
pub fn is_failure(outcome: Outcome, error: Option<&Error>) -> bool {
    error.is_some()
        || matches!(
            outcome,
            Outcome::Failed | Outcome::Panicked | Outcome::StoreError | Outcome::LeaseLost
        )
}

/// Whether anything may want a call's span or event: a `tracing` subscriber was set, or a `log`
/// logger is installed (which `tracing`'s `log` feature forwards to when no subscriber is).
pub(super) fn wanted() -> bool {
    tracing::dispatcher::has_been_set() || log::max_level() != log::LevelFilter::Off
}

/// A call's span: none at all when nothing wants one ([`wanted`]). Not a disabled `Span`: with
/// `tracing`'s `log` feature, which another crate of the build may turn on (sqlx does), a
/// disabled `Span` still looks for a `log` logger each time it is entered, left or dropped —
/// about a hundred instructions per call of any store.
#[derive(Clone)]
pub(crate) struct CallSpan(Option<Span>);

/// What [`CallSpan::get`] answers for a call with no span.
static NO_SPAN: Span = Span::none();

impl CallSpan {
    /// The span (a disabled one if the call has none).
    pub(crate) fn get(&self) -> &Span {
        self.0.as_ref().unwrap_or(&NO_SPAN)
    }
}

/// `future`, entered in a call's span at each poll, as `tracing::Instrument` does; for a call
/// without a span, nothing.
pub(crate) fn in_span<F: Future>(span: CallSpan, future: F) -> Entering<F> {
    Entering { span, future }
}

pin_project! {
    /// A future entered in a call's span at each poll: [`in_span`].
    pub(crate) struct Entering<F> {
        span: CallSpan,
        #[pin]
        future: F,
    }
}

impl<F: Future> Future for Entering<F> {
    type Output = F::Output;

    fn poll(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<F::Output> {
        let this = self.project();
        let _entered = this.span.0.as_ref().map(Span::enter);
        this.future.poll(cx)
    }
}

/// The span of one call: see the module documentation. With nothing to take it
/// ([`wanted`]), none is built.
pub(super) fn span(call: &Call) -> CallSpan {
    if !wanted() {
        return CallSpan(None);
    }
    let tool = call.tool.name;
    CallSpan(Some(tracing::info_span!(
        target: "idem",
        "idem.tool_call",
        otel.name = tool,
        tool,
        key = %call.key.short(),
        turn = call.turn.id(),
        namespace = call.turn.namespace(),
        outcome = Empty,
        otel.status_code = Empty,
        otel.status_description = Empty,
    )))
}

/// The span a call is made in, the parent of its span and of its outcome event (none when
/// nothing wants them: [`wanted`]).
pub(super) fn context() -> CallSpan {
    CallSpan(wanted().then(Span::current))
}

/// Records a call's outcome on its span.
pub(super) fn record_outcome(span: &Span, outcome: Outcome, error: Option<&Error>) {
    if span.is_disabled() {
        return;
    }
    span.record("outcome", outcome.as_str());
    if is_failure(outcome, error) {
        span.record("otel.status_code", "ERROR");
        if let Some(error) = error {
            span.record("otel.status_description", display(error));
        }
    }
}

/// Counts a call refused before it reached the engine (it was never in flight and took no
/// time: only the counter moves).
pub(super) fn refused(tool: &'static str) {
    #[cfg(feature = "metrics")]
    metrics::refused(tool);
    #[cfg(not(feature = "metrics"))]
    let _ = tool;
}

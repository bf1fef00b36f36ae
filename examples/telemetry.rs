//! What idem shows an operator: `cargo run --example telemetry`.
//!
//! Each call of an `#[idempotent]` tool runs inside a span named `idem.tool_call` (exported to
//! OpenTelemetry under the tool's name), the tool's own spans nest under it, and the call ends
//! with one `tool call` event. Here a `fmt` subscriber prints them, with a line when each span
//! closes; in production a `tracing-opentelemetry` layer ships the same spans (see
//! docs/observability.md).

use std::sync::Arc;

use idem_tools::{MemoryStore, Turn, idempotent};
use tracing::Instrument;
use tracing_subscriber::fmt::format::FmtSpan;

/// A tool's error.
#[derive(Debug)]
pub struct ToolError(idem_tools::Error);

impl From<idem_tools::Error> for ToolError {
    fn from(error: idem_tools::Error) -> Self {
        ToolError(error)
    }
}

/// Sends a message; its HTTP request is a span of its own, under the call's span.
#[idempotent]
pub async fn send_message(to: String) -> Result<u64, ToolError> {
    let request = tracing::info_span!("http.request", http.method = "POST", to = %to);
    async {
        tracing::info!("delivered");
        Ok(1001)
    }
    .instrument(request)
    .await
}

#[tokio::main(flavor = "current_thread")]
async fn main() {
    tracing_subscriber::fmt()
        .with_env_filter(
            tracing_subscriber::EnvFilter::try_from_default_env().unwrap_or_else(|_| "info".into()),
        )
        .with_span_events(FmtSpan::CLOSE)
        .without_time()
        .with_ansi(std::io::IsTerminal::is_terminal(&std::io::stdout()))
        .init();

    let turn = Turn::new("conv-42/turn-1")
        .with_namespace("acme")
        .with_store(Arc::new(MemoryStore::new()));
    let agent = tracing::info_span!("agent.turn", turn = turn.id());
    let (first, retry) = turn
        .clone()
        .scope(
            async {
                let first = send_message("ada".into()).await;
                let retry = send_message("ada".into()).await; // replayed: no HTTP request
                (first, retry)
            }
            .instrument(agent),
        )
        .await;
    let (first, retry) = match (first, retry) {
        (Ok(first), Ok(retry)) => (first, retry),
        (Err(ToolError(error)), _) | (_, Err(ToolError(error))) => {
            eprintln!("send_message failed: {error}");
            std::process::exit(1);
        }
    };
    let stats = turn.stats();
    println!(
        "\nmessage id {first}, replayed as {retry}: {} executed, {} replayed",
        stats.executed, stats.replayed
    );
    if first != retry || stats.executed != 1 || stats.replayed != 1 {
        eprintln!("expected one execution and one replay");
        std::process::exit(1);
    }
}

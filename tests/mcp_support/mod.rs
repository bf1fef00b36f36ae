//! What the `mcp_*` tests share: the example server, and a client connected to it through a
//! `tokio::io::duplex` pipe.
#![allow(dead_code)] // each test file uses some of it

#[path = "../../examples/mcp_server.rs"]
pub mod example;

use std::sync::Arc;

use example::{Backend, session};
use idem_tools::mcp::{IDEMPOTENCY_EXTENSION, IdemServer};
use rmcp::model::{
    CallToolRequestParams, CallToolResult, ClientCapabilities, ClientConfig, JsonObject,
    RequestMetaObject,
};
use rmcp::service::RunningService;
use rmcp::{RoleClient, ServerHandler, ServiceExt};
use serde_json::Value;

pub type Client = RunningService<RoleClient, ClientConfig>;

/// A client connected to `server` through a `tokio::io::duplex` pipe, that declares no
/// extension (like every client by default).
pub async fn connect<S: ServerHandler>(server: IdemServer<S>) -> Client {
    connect_as(server, ClientConfig::default()).await
}

/// A client that declares the idem extension (it promises a turn id per user message).
pub async fn connect_declaring<S: ServerHandler>(server: IdemServer<S>) -> Client {
    connect_as(server, declaring()).await
}

/// What a client declaring the idem extension sends in `initialize`.
pub fn declaring() -> ClientConfig {
    let mut extensions = std::collections::BTreeMap::new();
    extensions.insert(IDEMPOTENCY_EXTENSION.to_owned(), JsonObject::new());
    let capabilities = ClientCapabilities::builder()
        .enable_extensions_with(extensions)
        .build();
    ClientConfig::new(capabilities, ClientConfig::default().client_info)
}

async fn connect_as<S: ServerHandler>(server: IdemServer<S>, client: ClientConfig) -> Client {
    let (server_io, client_io) = tokio::io::duplex(64 * 1024);
    tokio::spawn(async move {
        if let Ok(running) = server.serve(server_io).await {
            let _ = running.waiting().await;
        }
    });
    client.serve(client_io).await.expect("the client connects")
}

/// A new session over `backend`.
pub async fn connect_to(backend: &Arc<Backend>) -> Client {
    connect(session(Arc::clone(backend)).expect("the catalog matches the server")).await
}

/// A `tools/call` of `tool` with `args` and the `_meta` entries `meta`.
pub fn call(tool: &'static str, args: Value, meta: &[(&str, &str)]) -> CallToolRequestParams {
    let mut params = CallToolRequestParams::new(tool)
        .with_arguments(args.as_object().cloned().unwrap_or_default());
    if !meta.is_empty() {
        let mut object = RequestMetaObject::default();
        for (name, value) in meta {
            object.insert((*name).to_owned(), Value::from(*value));
        }
        params.meta = Some(object);
    }
    params
}

/// The text of a result's first content block.
pub fn text(result: &CallToolResult) -> String {
    result
        .content
        .first()
        .and_then(|c| c.as_text())
        .map(|t| t.text.clone())
        .unwrap_or_default()
}

pub fn is_error(result: &CallToolResult) -> bool {
    result.is_error == Some(true)
}

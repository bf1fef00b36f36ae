//! The MCP client's idempotency key goes to the first `#[idempotent]` tool whose call runs
//! (is first polled), not to a tool whose future the handler makes and drops: the same for a
//! detached function rewritten to return its future as for an `async fn`.
mod mcp_support;

use std::sync::atomic::{AtomicUsize, Ordering};

use idem_tools::idempotent;
use idem_tools::mcp::{IDEMPOTENCY_KEY_META, IdemServer, ToolError};
use mcp_support::{call, connect, is_error};
use rmcp::handler::server::router::tool::ToolRouter;
use rmcp::handler::server::wrapper::Parameters;
use rmcp::schemars::JsonSchema;
use rmcp::{ServerHandler, tool, tool_handler, tool_router};
use serde::Deserialize;
use serde_json::json;

static CREATED_NEW: AtomicUsize = AtomicUsize::new(0);
static CREATED_OLD: AtomicUsize = AtomicUsize::new(0);

#[idempotent]
async fn notify(title: String) -> Result<String, ToolError> {
    Ok(format!("notified {title}"))
}
#[idempotent]
#[rustfmt::skip] // another attribute: the `async fn` expansion, not rewritten
async fn notify_old(title: String) -> Result<String, ToolError> {
    Ok(format!("notified {title}"))
}
#[idempotent]
async fn create(title: String) -> Result<String, ToolError> {
    CREATED_NEW.fetch_add(1, Ordering::SeqCst);
    Ok(format!("created {title}"))
}
#[idempotent]
#[rustfmt::skip]
async fn create_old(title: String) -> Result<String, ToolError> {
    CREATED_OLD.fetch_add(1, Ordering::SeqCst);
    Ok(format!("created {title}"))
}

#[derive(Deserialize, JsonSchema)]
#[schemars(crate = "rmcp::schemars")]
struct Open {
    title: String,
    notify: bool,
}

#[derive(Clone)]
struct Desk {
    tool_router: ToolRouter<Desk>,
}

#[tool_router]
impl Desk {
    /// Notifies only if asked; the notification future is made up front.
    #[tool(description = "open")]
    async fn open(&self, Parameters(p): Parameters<Open>) -> Result<String, ToolError> {
        let notification = notify(p.title.clone());
        if p.notify {
            notification.await?;
        }
        create(p.title).await
    }
    #[tool(description = "open, tools expanded as async fns")]
    async fn open_old(&self, Parameters(p): Parameters<Open>) -> Result<String, ToolError> {
        let notification = notify_old(p.title.clone());
        if p.notify {
            notification.await?;
        }
        create_old(p.title).await
    }
}

#[tool_handler(router = self.tool_router)]
impl ServerHandler for Desk {}

async fn runs_with_one_key(tool: &'static str, created: &AtomicUsize) -> (usize, Vec<bool>) {
    let desk = Desk {
        tool_router: Desk::tool_router(),
    };
    let client = connect(IdemServer::new(desk, &[]).unwrap()).await;
    let mut errors = Vec::new();
    // One client key, retried with other arguments: with the key routed to `create`, the
    // second is refused (the key was used with other arguments) and nothing runs again.
    for title in ["a", "b"] {
        let args = json!({"title": title, "notify": false});
        let result = client
            .call_tool(call(tool, args, &[(IDEMPOTENCY_KEY_META, "k1")]))
            .await;
        errors.push(result.map(|r| is_error(&r)).unwrap_or(true));
    }
    client.cancel().await.unwrap();
    (created.load(Ordering::SeqCst), errors)
}

#[tokio::test]
async fn the_client_key_goes_to_the_first_tool_that_runs() {
    let old = runs_with_one_key("open_old", &CREATED_OLD).await;
    let new = runs_with_one_key("open", &CREATED_NEW).await;
    assert_eq!(
        old,
        (1, vec![false, true]),
        "the key is create's: its reuse is refused"
    );
    assert_eq!(
        new, old,
        "(runs of create, errors): rewritten form vs async fn form"
    );
}

//! An rmcp server's `#[tool_router]` block: its `&self` tools say what of `self` identifies
//! their actions, once on `#[tool_impl(...)]` or on each method.
use idem_tools::idempotent;
use idem_tools::mcp::{Json, ToolError};
use rmcp::handler::server::router::tool::ToolRouter;
use rmcp::handler::server::wrapper::Parameters;
use rmcp::schemars::JsonSchema;
use rmcp::{tool, tool_router};
use serde::{Deserialize, Serialize};

#[derive(Debug, Clone, Serialize, Deserialize, JsonSchema)]
#[schemars(crate = "rmcp::schemars")]
pub struct NewTicket {
    title: String,
}

#[derive(Debug, Clone, Serialize, Deserialize, JsonSchema)]
#[schemars(crate = "rmcp::schemars")]
pub struct Ticket {
    id: u64,
}

#[derive(Clone)]
pub struct Desk {
    tenant: String,
    tool_router: ToolRouter<Desk>,
}

#[idem_tools::tool_impl]
#[tool_router]
impl Desk {
    /// Says nothing: two tenants' desks would share tickets.
    #[idempotent]
    #[tool(description = "Open a support ticket")]
    async fn open_ticket(
        &self,
        Parameters(new): Parameters<NewTicket>,
    ) -> Result<Json<Ticket>, ToolError> {
        let _ = (&self.tenant, new);
        Ok(Json(Ticket { id: 1 }))
    }

    /// Says it: no error.
    #[idempotent(self_key = self.tenant)]
    #[tool(description = "Close a ticket")]
    async fn close_ticket(
        &self,
        Parameters(ticket): Parameters<Ticket>,
    ) -> Result<Json<Ticket>, ToolError> {
        Ok(Json(ticket))
    }
}

fn main() {
    let _ = Desk::tool_router;
}

use idem_tools::idempotent;

/// What rmcp's structured output looks like (`rmcp::Json`, `idem_tools::mcp::Json`).
#[derive(serde::Serialize)]
pub struct Json<T>(pub T);

#[derive(serde::Serialize, serde::Deserialize)]
pub struct Ticket {
    id: u64,
}

/// A write tool returning `Json<T>`, as a read-only rmcp tool would.
#[idempotent]
async fn open_ticket(title: String) -> Json<Ticket> {
    Json(Ticket { id: title.len() as u64 })
}

/// In a `Result`, but a `Json` that does not deserialize (like `rmcp::Json`).
#[idempotent]
async fn close_ticket(id: u64) -> Result<Json<Ticket>, idem_tools::Error> {
    Ok(Json(Ticket { id }))
}

fn main() {}

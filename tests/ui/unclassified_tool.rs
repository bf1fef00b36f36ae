#[idem::idempotent]
async fn send_message(to: String) -> Result<(), idem::Error> {
    let _ = to;
    Ok(())
}

mod docs {
    pub fn search(query: &str) -> usize {
        query.len()
    }
}

const TOOLS: &[idem::ToolInfo] = idem::tools![send_message, docs::search];

fn main() {
    let _ = TOOLS;
}

#[idem_tools::idempotent]
async fn send_message(to: String) -> Result<(), idem_tools::Error> {
    let _ = to;
    Ok(())
}

mod docs {
    pub fn search(query: &str) -> usize {
        query.len()
    }
}

async fn delete_repo(name: String) -> Result<(), idem_tools::Error> {
    let _ = name;
    Ok(())
}

const TOOLS: &[idem_tools::ToolInfo] = idem_tools::tools![send_message, docs::search];
const MORE: &[idem_tools::ToolInfo] = idem_tools::tools![delete_repo];

fn main() {
    let _ = (TOOLS, MORE);
}

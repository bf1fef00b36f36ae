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

async fn delete_repo(name: String) -> Result<(), idem::Error> {
    let _ = name;
    Ok(())
}

const TOOLS: &[idem::ToolInfo] = idem::tools![send_message, docs::search];
const MORE: &[idem::ToolInfo] = idem::tools![delete_repo];

fn main() {
    let _ = (TOOLS, MORE);
}

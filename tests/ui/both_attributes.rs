use idem_tools::{idempotent, read_only};

#[idempotent]
#[read_only]
async fn send_message(to: String) -> Result<(), idem_tools::Error> {
    let _ = to;
    Ok(())
}

#[read_only]
#[idempotent]
async fn search(query: String) -> Result<(), idem_tools::Error> {
    let _ = query;
    Ok(())
}

fn main() {}

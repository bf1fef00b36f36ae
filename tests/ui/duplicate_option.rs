use idem_tools::idempotent;

#[idempotent(ttl = "1h", budget = 2, ttl = "2h")]
async fn send_message(to: String) -> Result<(), idem_tools::Error> {
    let _ = to;
    Ok(())
}

// `#[read_only]` accepts `name`, once: the second is a duplicate, not an unknown option.
#[idem_tools::read_only(name = "search", name = "find")]
fn search(query: &str) -> usize {
    query.len()
}

fn main() {}

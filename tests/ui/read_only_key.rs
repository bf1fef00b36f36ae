use idem_tools::read_only;

// `#[key]` is an `#[idempotent]` tool's: the error says so (rustc said only that it cannot find
// the attribute).
#[read_only]
async fn lookup(#[key] request_id: String, query: String) -> usize {
    request_id.len() + query.len()
}

fn main() {}

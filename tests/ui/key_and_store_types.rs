use idem_tools::idempotent;

#[idempotent]
async fn refund(#[key] request_id: u64, cents: u64) -> Result<u64, idem_tools::Error> {
    let _ = request_id;
    Ok(cents)
}

// A pattern: the error points at its type too (not at the attribute).
#[idempotent]
async fn refund_pair(#[key] (request, _): (u64, u8), cents: u64) -> Result<u64, idem_tools::Error> {
    let _ = request;
    Ok(cents)
}

fn not_a_store() -> u32 {
    0
}

#[idempotent(store = not_a_store())]
async fn audit(line: String) -> Result<(), idem_tools::Error> {
    let _ = line;
    Ok(())
}

fn main() {}

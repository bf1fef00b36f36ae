use idem_tools::idempotent;

struct Receipt {
    id: u64,
}

#[idempotent]
async fn send_message(to: String) -> Result<Receipt, idem_tools::Error> {
    let _ = to;
    Ok(Receipt { id: 1 })
}

fn main() {}

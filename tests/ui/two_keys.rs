use idem_tools::idempotent;

#[idempotent]
async fn refund(#[key] request_id: String, #[key] order_id: String) -> Result<(), idem_tools::Error> {
    let _ = (request_id, order_id);
    Ok(())
}

fn main() {}

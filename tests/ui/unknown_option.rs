use idem_tools::idempotent;

#[idempotent(retries = 3)]
async fn send_message(to: String) -> Result<(), idem_tools::Error> {
    let _ = to;
    Ok(())
}

#[idempotent(key = "request_id")]
async fn refund(request_id: String) -> Result<(), idem_tools::Error> {
    let _ = request_id;
    Ok(())
}

fn main() {}

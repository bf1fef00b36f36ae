use idem_tools::idempotent;

#[idempotent(ttl = "1h", budget = 2, ttl = "2h")]
async fn send_message(to: String) -> Result<(), idem_tools::Error> {
    let _ = to;
    Ok(())
}

fn main() {}

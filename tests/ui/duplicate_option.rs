use idem::idempotent;

#[idempotent(ttl = "1h", budget = 2, ttl = "2h")]
async fn send_message(to: String) -> Result<(), idem::Error> {
    let _ = to;
    Ok(())
}

fn main() {}

use idem_tools::idempotent;

#[idempotent(ttl = "1 hour and a bit", budget = 0)]
async fn send_message(to: String) -> Result<(), idem_tools::Error> {
    let _ = to;
    Ok(())
}

fn main() {}

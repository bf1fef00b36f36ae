use idem_tools::idempotent;

#[idempotent(skip(cleint))]
async fn send_message(client: u32, to: String) -> Result<(), idem_tools::Error> {
    let _ = (client, to);
    Ok(())
}

fn main() {}

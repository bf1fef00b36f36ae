use idem::idempotent;

#[idempotent(skip(cleint))]
async fn send_message(client: u32, to: String) -> Result<(), idem::Error> {
    let _ = (client, to);
    Ok(())
}

fn main() {}

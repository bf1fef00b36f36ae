use idem::idempotent;

struct HttpClient;

#[idempotent]
async fn send_message(client: &HttpClient, to: String) -> Result<(), idem::Error> {
    let _ = (client, to);
    Ok(())
}

fn main() {}

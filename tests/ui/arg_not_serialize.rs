use idem_tools::idempotent;

struct HttpClient;

#[idempotent]
async fn send_message(client: &HttpClient, to: String) -> Result<(), idem_tools::Error> {
    let _ = (client, to);
    Ok(())
}

fn main() {}

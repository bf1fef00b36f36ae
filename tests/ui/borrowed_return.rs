use idem_tools::idempotent;

#[idempotent]
async fn greeting(to: String) -> Result<&'static str, idem_tools::Error> {
    let _ = to;
    Ok("hello")
}

fn main() {}

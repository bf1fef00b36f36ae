use idem::idempotent;

#[idempotent]
async fn greeting(to: String) -> Result<&'static str, idem::Error> {
    let _ = to;
    Ok("hello")
}

fn main() {}

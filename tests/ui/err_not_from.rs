use idem_tools::idempotent;

#[derive(Debug)]
struct MyError;

#[idempotent]
async fn send_message(to: String) -> Result<u64, MyError> {
    let _ = to;
    Ok(1)
}

fn main() {}

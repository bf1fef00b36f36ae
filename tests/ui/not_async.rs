use idem::idempotent;

#[idempotent]
fn send_message(to: String) -> Result<(), idem::Error> {
    let _ = to;
    Ok(())
}

fn main() {}

use idem_tools::idempotent;

#[idempotent]
fn send_message(to: String) -> Result<(), idem_tools::Error> {
    let _ = to;
    Ok(())
}

fn main() {}

use idem_tools::idempotent;

#[idempotent(release_on_cancel)]
async fn send(to: String) -> Result<u32, idem_tools::Error> {
    let _ = to;
    Ok(1)
}

/// With `attached`, `release_on_cancel` is accepted.
#[idempotent(attached, release_on_cancel)]
async fn send_attached(to: String) -> Result<u32, idem_tools::Error> {
    let _ = to;
    Ok(1)
}

fn main() {}

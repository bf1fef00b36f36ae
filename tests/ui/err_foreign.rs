use idem_tools::idempotent;

/// `std::fmt::Error` stands for a foreign error type such as `rmcp::ErrorData`: the orphan rule
/// forbids adding `impl From<idem_tools::Error>` for it here, and the note says what to do instead.
#[idempotent]
async fn send_message(to: String) -> Result<u64, std::fmt::Error> {
    let _ = to;
    Ok(1)
}

fn main() {}

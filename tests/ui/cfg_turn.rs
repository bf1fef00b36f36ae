use idem_tools::{Error, idempotent};

// `note`, configured out, is left out of the key; the turn cannot be configured out.
#[idempotent]
async fn tag(
    #[cfg(any())] turn: &idem_tools::Turn,
    #[cfg(any())] note: String,
    id: u32,
) -> Result<u32, Error> {
    Ok(id)
}

fn main() {}

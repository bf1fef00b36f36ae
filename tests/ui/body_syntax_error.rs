//! A syntax error inside a tool's body is rustc's to report, once, at the tokens, as in any
//! function: the macro keeps an `async fn`'s body as tokens (it emits it as written) and has
//! nothing to say about it.
use idem_tools::idempotent;

#[idempotent]
pub async fn send_message(to: String) -> Result<u32, idem_tools::Error> {
    let n = to.len() +;
    Ok(n as u32)
}

fn main() {}

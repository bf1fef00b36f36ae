//! A syntax error in the body of a function that is not `async` (a `#[read_only]` helper, in a
//! `#[tool_impl]` block or alone) is rustc's to report, once, at its tokens: the macros keep a
//! body they cannot parse as written, and say nothing of their own.
use idem_tools::{idempotent, read_only, tool_impl};

#[derive(Clone)]
pub struct Mailer;

#[tool_impl(same_service)]
impl Mailer {
    #[idempotent]
    pub async fn send_message(&self, to: String) -> Result<u32, idem_tools::Error> {
        Ok(to.len() as u32)
    }

    #[read_only]
    pub fn search(&self, query: &str) -> usize {
        let n = query.len() +;
        n
    }
}

#[read_only]
pub fn count(query: &str) -> usize {
    let n = query.len() *;
    n
}

fn main() {}

//! A syntax error inside a method's body under `#[tool_impl]` is rustc's to report, at the
//! tokens: the block's methods are read without their bodies, kept as written. A body the
//! `self` rewrite (a method run on a clone of its receiver) cannot parse is refused too, at the
//! same tokens, and never emitted alone: syntax idem cannot read yet would otherwise compile,
//! and run, without idem.
use idem_tools::{idempotent, tool_impl};

#[derive(Clone)]
pub struct Mailer;

#[tool_impl(same_service)]
impl Mailer {
    #[idempotent]
    pub async fn send_message(&self, to: String) -> Result<u32, idem_tools::Error> {
        let n = to.len() +;
        Ok(n as u32)
    }
}

fn main() {}

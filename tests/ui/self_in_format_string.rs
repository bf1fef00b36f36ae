//! A body that runs on a clone of its receiver cannot name `self` inside a format string: the
//! string's implicit capture resolves where it was written, to the borrowed receiver, which
//! the detached body cannot hold. The error points at the string and says what to write.
use idem_tools::{Error, idempotent, tool_impl};

#[derive(Clone, Debug)]
pub struct Mailer {
    pub from: String,
}

#[tool_impl(same_service)]
impl Mailer {
    #[idempotent]
    pub async fn describe(&self, n: u64) -> Result<String, Error> {
        let shown = format!("{} {n}", self.from); // an argument: fine
        Ok(format!("{self:?} {shown} {{self}}"))
    }
}

fn main() {}

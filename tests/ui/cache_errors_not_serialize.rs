//! With `cache_errors`, an `Err` is recorded and replayed, so its type must (de)serialize: the
//! error says that `cache_errors` is why.
use idem_tools::{idempotent, tool_impl};

#[derive(Debug)]
struct DeclinedError;

impl From<idem_tools::Error> for DeclinedError {
    fn from(_: idem_tools::Error) -> Self {
        DeclinedError
    }
}

#[idempotent(cache_errors)]
async fn charge(cents: u64) -> Result<u64, DeclinedError> {
    Ok(cents)
}

#[derive(Clone)]
struct Billing;

#[tool_impl(same_service)]
impl Billing {
    /// A method (detached on a clone): the same one error.
    #[idempotent(cache_errors)]
    pub async fn refund(&self, cents: u64) -> Result<u64, DeclinedError> {
        Ok(cents)
    }
}

fn main() {}

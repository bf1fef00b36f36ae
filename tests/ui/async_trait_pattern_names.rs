use idem_tools::{Error, idempotent};

#[async_trait::async_trait]
trait Transfers {
    async fn transfer(&self, route: (u64, u64), limits: &(u64, u64)) -> Result<u64, Error>;
}

struct Ledger;

// async-trait renames `(from, to)` `__arg1` (it counts `self`); idem names `(low, high)`, of a
// reference type, `arg1` (after `self`): the message says to bind one to a name.
#[async_trait::async_trait]
impl Transfers for Ledger {
    #[idempotent(name = "transfer", same_service, attached)]
    async fn transfer(&self, (from, to): (u64, u64), (low, high): &(u64, u64)) -> Result<u64, Error> {
        Ok(from + to + low + high)
    }
}

fn main() {}

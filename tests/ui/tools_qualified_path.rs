use idem_tools::{Error, idempotent, tool_impl};

trait Transfers {
    fn transfer(&self, cents: u64) -> impl Future<Output = Result<u64, Error>> + Send;
}

#[derive(Clone)]
struct Ledger;

#[tool_impl(same_service)]
impl Transfers for Ledger {
    #[idempotent]
    async fn transfer(&self, cents: u64) -> Result<u64, Error> {
        Ok(cents)
    }
}

// A trait method written as a qualified path: the message says to write `Ledger::transfer`.
const TOOLS: &[idem_tools::ToolInfo] = idem_tools::tools![<Ledger as Transfers>::transfer];

// Not a list of paths: the message says what `tools![]` takes.
const MORE: &[idem_tools::ToolInfo] = idem_tools::tools![Ledger::transfer Ledger::transfer];

fn main() {
    let _ = (TOOLS, MORE);
}

use idem_tools::{idempotent, read_only, tool_impl};

#[derive(Clone)]
struct Billing;

#[tool_impl(same_service)]
impl Billing {
    #[idempotent]
    pub async fn charge_card(&self, cents: u64) -> Result<u64, idem_tools::Error> {
        Ok(cents)
    }
}

#[derive(Clone)]
struct Wrapper<T>(T);

#[tool_impl]
impl<T: Sync> Wrapper<T> {
    #[read_only]
    fn peek(&self) -> usize {
        let _ = &self.0;
        0
    }
}

/// A function of the same name as a method is listed as itself.
#[idempotent]
async fn refund(cents: u64) -> Result<u64, idem_tools::Error> {
    Ok(cents)
}

#[tool_impl(same_service)]
impl Billing {
    #[idempotent]
    pub async fn refund(&self, cents: u64) -> Result<u64, idem_tools::Error> {
        Ok(cents)
    }
}

const FINE: &[idem_tools::ToolInfo] = idem_tools::tools![refund, Billing::refund];
const TOOLS: &[idem_tools::ToolInfo] = idem_tools::tools![charge_card];
const MORE: &[idem_tools::ToolInfo] = idem_tools::tools![peek];

fn main() {
    let _ = (FINE, TOOLS, MORE);
}

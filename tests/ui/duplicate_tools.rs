use idem_tools::{idempotent, tool_impl};

mod billing {
    #[idem_tools::idempotent(name = "charge")]
    pub async fn charge(cents: u64) -> Result<u64, idem_tools::Error> {
        Ok(cents)
    }
}

#[idempotent(name = "charge")]
async fn charge_card(cents: u64) -> Result<u64, idem_tools::Error> {
    Ok(cents)
}

trait Tool {
    async fn call(&self, input: String) -> Result<String, idem_tools::Error>;
}

#[derive(Clone)]
struct A;
#[derive(Clone)]
struct B;

/// Two methods named `call`, told apart by `#[tool_impl]`: not a duplicate.
#[tool_impl(same_service)]
impl Tool for A {
    #[idempotent]
    async fn call(&self, input: String) -> Result<String, idem_tools::Error> {
        Ok(input)
    }
}

#[tool_impl(same_service)]
impl Tool for B {
    #[idempotent]
    async fn call(&self, input: String) -> Result<String, idem_tools::Error> {
        Ok(input)
    }
}

const TOOLS: &[idem_tools::ToolInfo] = idem_tools::tools![A::call, billing::charge, B::call, charge_card];

fn main() {
    let _ = TOOLS;
}

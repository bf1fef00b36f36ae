use idem_tools::{idempotent, tool_impl};

#[derive(Clone)]
struct Server;

#[tool_impl(budget = 3)]
impl Server {
    #[idempotent(same_service)]
    async fn open(&self, id: u32) -> Result<u32, idem_tools::Error> {
        Ok(id)
    }
}

#[derive(Clone)]
struct Other;

/// An invalid option is reported once, by `#[idempotent]`; the other descriptors still exist.
#[tool_impl]
impl Other {
    #[idempotent(budget = 0, same_service)]
    async fn open(&self, id: u32) -> Result<u32, idem_tools::Error> {
        Ok(id)
    }

    #[idem_tools::read_only]
    fn peek(&self) -> u32 {
        0
    }
}

const TOOLS: &[idem_tools::ToolInfo] = idem_tools::tools![Other::peek];

fn main() {
    let _ = (Server, TOOLS);
}

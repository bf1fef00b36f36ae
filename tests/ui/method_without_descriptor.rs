use idem_tools::idempotent;

struct Server;

impl Server {
    /// Named, but with no visibility and no `#[tool_impl]`: no descriptor.
    #[idempotent(name = "server_send", same_service, attached)]
    async fn send(&self, to: String) -> Result<u32, idem_tools::Error> {
        let _ = to;
        Ok(1)
    }

    /// Not annotated at all.
    pub async fn delete_repo(&self) {}
}

const TOOLS: &[idem_tools::ToolInfo] = idem_tools::tools![Server::send, Server::delete_repo];

fn main() {
    let _ = TOOLS;
}

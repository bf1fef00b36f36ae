use idem_tools::idempotent;

struct Server;

impl Server {
    /// A method outside `#[tool_impl]`: its default name would be the bare `send`.
    #[idempotent(same_service)]
    pub async fn send(&self, to: String) -> Result<u32, idem_tools::Error> {
        let _ = to;
        Ok(1)
    }

    /// With a name it is fine (`attached`: outside `#[tool_impl]`, a `&self` tool runs
    /// attached, and says so unless told).
    #[idempotent(name = "server_send_all", same_service, attached)]
    pub async fn send_all(&self, to: String) -> Result<u32, idem_tools::Error> {
        let _ = to;
        Ok(1)
    }
}

fn main() {}

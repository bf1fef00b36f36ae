use idem_tools::idempotent;

struct Server;

impl Server {
    /// A method outside `#[tool_impl]`: its default name would be the bare `send`.
    #[idempotent]
    pub async fn send(&self, to: String) -> Result<u32, idem_tools::Error> {
        let _ = to;
        Ok(1)
    }

    /// With a name it is fine.
    #[idempotent(name = "server_send_all")]
    pub async fn send_all(&self, to: String) -> Result<u32, idem_tools::Error> {
        let _ = to;
        Ok(1)
    }
}

fn main() {}

use idem_tools::{idempotent, tool_impl};

/// `self_key` without a `self`.
#[idempotent(self_key = 42)]
async fn send(to: String) -> Result<String, idem_tools::Error> {
    Ok(to)
}

#[derive(Clone)]
struct Handle;

#[derive(Clone)]
struct Mailer {
    from: String,
    client: Handle,
}

#[tool_impl]
impl Mailer {
    /// A value that is not `Serialize`.
    #[idempotent(self_key = self.client)]
    pub async fn send(&self, to: String) -> Result<String, idem_tools::Error> {
        Ok(to)
    }

    /// `self` is never in the key: nothing to skip.
    #[idempotent(skip(self), same_service)]
    pub async fn notify(&self, to: String) -> Result<String, idem_tools::Error> {
        Ok(format!("{} {to}", self.from))
    }
}

fn main() {}

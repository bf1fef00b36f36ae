//! The misuses of `self_key` and `same_service`, on a method and on a `#[tool_impl]` block.
use idem_tools::{idempotent, read_only, tool_impl};

/// `same_service` without a `self`.
#[idempotent(same_service)]
async fn send(to: String) -> Result<String, idem_tools::Error> {
    Ok(to)
}

#[derive(Clone)]
struct Mailer {
    from: String,
}

#[tool_impl]
impl Mailer {
    /// Both.
    #[idempotent(self_key = self.from, same_service)]
    pub async fn send(&self, to: String) -> Result<String, idem_tools::Error> {
        Ok(to)
    }
}

/// Both, on the block.
#[tool_impl(same_service, self_key = self.from)]
impl Mailer {
    #[idempotent]
    pub async fn notify(&self, to: String) -> Result<String, idem_tools::Error> {
        Ok(to)
    }
}

/// On a block with no `#[idempotent]` method taking `self`.
#[tool_impl(same_service)]
impl Mailer {
    #[read_only]
    pub async fn outbox(&self) -> Vec<String> {
        vec![self.from.clone()]
    }
}

fn main() {}

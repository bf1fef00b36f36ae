use idem_tools::{idempotent, tool_impl};

#[idempotent]
async fn count(to: String) -> u32 {
    let _ = to;
    1
}

#[derive(Clone)]
struct Counter;

#[tool_impl(same_service)]
impl Counter {
    /// A method (detached on a clone): one error, naming the declared type.
    #[idempotent]
    pub async fn count(&self, to: String) -> u32 {
        let _ = to;
        1
    }
}

fn main() {}

use idem_tools::{Error, idempotent};

/// A trait-per-tool framework: each tool implements `execute`, and the default `run` is the
/// idempotent entry point. A native `async fn` in a trait makes no promise that its future is
/// `Send`, so `run`'s body, which awaits it, is not `Send` either.
trait Tool: Sync {
    const NAME: &'static str;

    async fn execute(&self, amount: u64) -> u64;

    #[idempotent(name = "tool_run", self_key = Self::NAME)]
    async fn run(&self, amount: u64) -> Result<u64, Error> {
        Ok(self.execute(amount).await)
    }
}

fn main() {}

use std::sync::{Arc, Mutex};

use idem_tools::{idempotent, tool_impl};

/// A `Clone` receiver: the tool runs detached, on a clone, so its body must be `Send`.
#[derive(Clone)]
struct Ledger {
    entries: Arc<Mutex<Vec<u64>>>,
}

#[tool_impl(same_service)]
impl Ledger {
    #[idempotent]
    pub async fn append(&self, cents: u64) -> Result<usize, idem_tools::Error> {
        let mut entries = self.entries.lock().unwrap();
        tokio::task::yield_now().await; // the guard is held across `.await`
        entries.push(cents);
        Ok(entries.len())
    }
}

/// The same in a free function.
#[idempotent(skip(entries))]
async fn append(entries: Arc<Mutex<Vec<u64>>>, cents: u64) -> Result<usize, idem_tools::Error> {
    let mut entries = entries.lock().unwrap();
    tokio::task::yield_now().await;
    entries.push(cents);
    Ok(entries.len())
}

fn main() {}

use std::rc::Rc;

use idem_tools::idempotent;

/// No receiver and owned arguments: detached, so the body must be `Send`.
#[idempotent]
async fn count(n: u32) -> Result<u32, idem_tools::Error> {
    let shared = Rc::new(n);
    tokio::task::yield_now().await;
    Ok(*shared)
}

fn main() {}

use idem_tools::idempotent;

#[idempotent]
async fn count(to: String) -> u32 {
    let _ = to;
    1
}

fn main() {}

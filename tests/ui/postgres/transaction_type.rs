use idem_tools::idempotent;

#[idempotent]
async fn wrong(#[transaction] tx: &mut String, n: u32) -> Result<u32, idem_tools::Error> {
    tx.push('x');
    Ok(n)
}

fn main() {}

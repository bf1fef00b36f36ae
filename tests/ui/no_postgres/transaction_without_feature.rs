use idem_tools::idempotent;

struct PgConnection;

#[idempotent]
async fn transfer(#[transaction] tx: &mut PgConnection, cents: u64) -> Result<u64, idem_tools::Error> {
    let _ = tx;
    Ok(cents)
}

fn main() {}

use idem_tools::idempotent;

#[idempotent(actions_per_turn = 0)]
async fn charge(amount: u64) -> Result<(), idem_tools::Error> {
    let _ = amount;
    Ok(())
}

#[idempotent(actions_per_turn = "five")]
async fn refund(amount: u64) -> Result<(), idem_tools::Error> {
    let _ = amount;
    Ok(())
}

fn main() {}

use idem_tools::idempotent;

#[idempotent(lease = "5ms")]
async fn too_short(n: u32) -> Result<u32, idem_tools::Error> {
    Ok(n)
}

#[idempotent(lease = "25h")]
async fn too_long(n: u32) -> Result<u32, idem_tools::Error> {
    Ok(n)
}

#[idempotent(lease = "soon")]
async fn not_a_duration(n: u32) -> Result<u32, idem_tools::Error> {
    Ok(n)
}

fn main() {}

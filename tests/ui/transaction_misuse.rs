use idem_tools::idempotent;

struct Conn;

#[idempotent]
async fn two(#[transaction] a: &mut Conn, #[transaction] b: &mut Conn) -> Result<u32, idem_tools::Error> {
    Ok(1)
}

#[idempotent]
async fn by_value(#[transaction] tx: Conn) -> Result<u32, idem_tools::Error> {
    Ok(1)
}

#[idempotent(cache_errors)]
async fn caching(#[transaction] tx: &mut Conn) -> Result<u32, idem_tools::Error> {
    Ok(1)
}

#[idempotent(release_on_cancel)]
async fn releasing(#[transaction] tx: &mut Conn) -> Result<u32, idem_tools::Error> {
    Ok(1)
}

#[idempotent(skip(tx))]
async fn skipped(#[transaction] tx: &mut Conn, n: u32) -> Result<u32, idem_tools::Error> {
    Ok(n)
}

#[idempotent]
async fn keyed(#[key] #[transaction] tx: &mut Conn) -> Result<u32, idem_tools::Error> {
    Ok(1)
}

fn main() {}

use idem_tools::idempotent;

struct Smtp;

// Written through and in the key: refused.
#[idempotent]
async fn append(buf: &mut Vec<u8>, line: String) -> Result<usize, idem_tools::Error> {
    buf.extend_from_slice(line.as_bytes());
    Ok(buf.len())
}

// In the key through a pattern: refused.
#[idempotent]
async fn charge(&mut (ref mut n, _): &mut (u64, u64)) -> Result<u64, idem_tools::Error> {
    *n += 1;
    Ok(*n)
}

// A connection handle, skipped: allowed.
#[idempotent(skip(db))]
async fn log(db: &mut Smtp, cents: u64) -> Result<u64, idem_tools::Error> {
    let _ = db;
    Ok(cents)
}

// A handle the body only uses, ignored: allowed.
#[idempotent(ignore(client))]
async fn send(client: &mut Smtp, to: String) -> Result<String, idem_tools::Error> {
    let _ = client;
    Ok(to)
}

// Inside an `Option`, a tuple or parentheses: refused.
#[allow(unused_parens)]
#[idempotent]
async fn maybe(buf: Option<&mut Vec<u8>>, pair: (&mut Vec<u8>, u8), paren: (&mut u8)) -> Result<u8, idem_tools::Error> {
    let _ = (buf, pair, paren);
    Ok(0)
}

// A type a `macro_rules!` passed in: refused.
macro_rules! tool_taking {
    ($t:ty) => {
        #[idempotent]
        async fn generated(buf: $t) -> Result<u8, idem_tools::Error> {
            let _ = buf;
            Ok(0)
        }
    };
}
tool_taking!(&mut Vec<u8>);

fn main() {}

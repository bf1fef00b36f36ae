use idem_tools::idempotent;

#[idempotent]
async fn returns_a_string(to: String) -> String {
    to
}

#[idempotent]
async fn returns_nothing(to: String) {
    let _ = to;
}

fn main() {}

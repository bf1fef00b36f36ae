use idem_tools::idempotent;

#[idempotent]
async fn greeting(to: String) -> Result<&'static str, idem_tools::Error> {
    let _ = to;
    Ok("hello")
}

// A lifetime other than `'static` borrows too (`Cow<'static, str>` is owned: it compiles).
#[idempotent]
async fn quote<'a>(text: &'a str) -> Result<std::borrow::Cow<'a, str>, idem_tools::Error> {
    Ok(std::borrow::Cow::Borrowed(text))
}

fn main() {}

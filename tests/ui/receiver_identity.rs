//! A method with a receiver says what of `self` identifies its action (`self_key = …`) or that
//! every instance is the same service (`same_service`), on itself or on its `#[tool_impl]`
//! block; saying nothing is an error at the receiver.
use idem_tools::{idempotent, tool_impl};

#[derive(Clone)]
struct Payments {
    account: String,
}

#[tool_impl]
impl Payments {
    /// Says nothing: `Payments { account: "B" }` would get A's receipt.
    #[idempotent(ttl = "1h")]
    pub async fn charge(&self, cents: u64) -> Result<String, idem_tools::Error> {
        Ok(format!("{} paid {cents}", self.account))
    }

    /// Says it: no error.
    #[idempotent(self_key = self.account)]
    pub async fn refund(&self, cents: u64) -> Result<u64, idem_tools::Error> {
        Ok(cents)
    }

    /// Without `self`: nothing to say.
    #[idempotent]
    pub async fn rate(cents: u64) -> Result<u64, idem_tools::Error> {
        Ok(cents)
    }
}

/// Outside `#[tool_impl]`, with a name: the type is unknown to the macro.
struct Ledger;

impl Ledger {
    #[idempotent(name = "ledger_post", attached)]
    pub async fn post(&mut self, cents: u64) -> Result<u64, idem_tools::Error> {
        Ok(cents)
    }
}

/// An agent framework's tool trait (rig's `Tool`, say): the trait impl says it once, or each
/// method does.
trait Tool {
    async fn call(&self, to: String) -> Result<String, idem_tools::Error>;
}

#[derive(Clone)]
struct SendEmail;

#[tool_impl]
impl Tool for SendEmail {
    #[idempotent]
    async fn call(&self, to: String) -> Result<String, idem_tools::Error> {
        Ok(to)
    }
}

#[derive(Clone)]
struct SendSms;

#[tool_impl(same_service)]
impl Tool for SendSms {
    #[idempotent]
    async fn call(&self, to: String) -> Result<String, idem_tools::Error> {
        Ok(to)
    }
}

/// A generic block: the identity alone is the same for every `C`, so the key names `C` too.
#[derive(Clone)]
struct Wallet<C> {
    account: String,
    currency: std::marker::PhantomData<C>,
}

#[tool_impl]
impl<C: Send + Sync + 'static> Wallet<C> {
    #[idempotent(attached)]
    pub async fn pay(&self, cents: u64) -> Result<String, idem_tools::Error> {
        Ok(format!("{} paid {cents}", self.account))
    }
}

fn main() {}

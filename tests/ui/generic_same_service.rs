use idem_tools::{idempotent, tool_impl};

pub trait Currency: Send + Sync + 'static {
    const CODE: &'static str;
}

/// Every `Refund<C>` is one value, but not one service: `Refund<Usd>` and `Refund<Eur>`.
#[derive(Clone)]
pub struct Refund<C>(std::marker::PhantomData<C>);

#[tool_impl(same_service)]
impl<C: Currency + Clone> Refund<C> {
    #[idempotent]
    pub async fn call(&self, order: u64) -> Result<u64, idem_tools::Error> {
        Ok(order)
    }
}

/// A method's own `same_service`, on a block generic over a constant.
#[derive(Clone)]
pub struct Shard<const N: usize>;

#[tool_impl]
impl<const N: usize> Shard<N> {
    #[idempotent(same_service)]
    pub async fn write(&self, row: u64) -> Result<u64, idem_tools::Error> {
        Ok(row + N as u64)
    }
}

/// A block generic over its trait's parameter: the service's refunds in two currencies.
pub trait Refunds<C> {
    fn refund(&self, order: u64) -> impl std::future::Future<Output = Result<u64, idem_tools::Error>> + Send;
}

#[derive(Clone)]
pub struct Service;

#[tool_impl(same_service)]
impl<C: Currency> Refunds<C> for Service {
    #[idempotent]
    async fn refund(&self, order: u64) -> Result<u64, idem_tools::Error> {
        Ok(order)
    }
}

/// Every method says what tells its instances apart: the block's `same_service` is unused,
/// and the block compiles.
#[derive(Clone)]
pub struct Ledger<C>(std::marker::PhantomData<C>);

#[tool_impl(same_service)]
impl<C: Currency + Clone> Ledger<C> {
    #[idempotent(attached, self_key = C::CODE)]
    pub async fn post(&self, amount: u64) -> Result<u64, idem_tools::Error> {
        Ok(amount)
    }
}

/// What to write instead: the type's identity in the key.
#[derive(Clone)]
pub struct Payout<C>(std::marker::PhantomData<C>);

#[tool_impl(self_key = C::CODE)]
impl<C: Currency + Clone> Payout<C> {
    #[idempotent(attached)]
    pub async fn call(&self, order: u64) -> Result<u64, idem_tools::Error> {
        Ok(order)
    }
}

fn main() {}

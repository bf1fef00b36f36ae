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

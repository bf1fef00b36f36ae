//! A `&self` tool that cannot run on a clone of its receiver runs attached and says so: one
//! warning per `impl` block, at its type, naming the tools (or, outside `#[tool_impl]`, one per
//! method), made an error here so that its text is checked.
#![deny(deprecated)]

use std::sync::atomic::{AtomicU64, Ordering};

use idem_tools::{idempotent, tool_impl};

/// Not `Clone` (its counter is not behind an `Arc`).
struct Billing {
    charges: AtomicU64,
}

#[tool_impl(same_service)]
impl Billing {
    #[idempotent]
    pub async fn charge_card(&self, cents: u64) -> Result<u64, idem_tools::Error> {
        Ok(self.charges.fetch_add(cents, Ordering::SeqCst))
    }

    /// The same block: the same one warning names both.
    #[idempotent]
    pub async fn capture(&self, cents: u64) -> Result<u64, idem_tools::Error> {
        Ok(self.charges.fetch_add(cents, Ordering::SeqCst))
    }

    /// `attached` accepts it: no warning.
    #[idempotent(attached)]
    pub async fn refund(&self, cents: u64) -> Result<u64, idem_tools::Error> {
        Ok(self.charges.fetch_sub(cents, Ordering::SeqCst))
    }

    /// `&mut self` always runs attached: no warning.
    #[idempotent]
    pub async fn reset(&mut self, to: u64) -> Result<u64, idem_tools::Error> {
        *self.charges.get_mut() = to;
        Ok(to)
    }
}

/// A generic impl: whether `Wallet<C>` is `'static` cannot be checked.
#[derive(Clone)]
struct Wallet<C>(C);

#[tool_impl(self_key = "Wallet")]
impl<C: Clone + Send + Sync + 'static> Wallet<C> {
    #[idempotent]
    pub async fn pay(&self, cents: u64) -> Result<u64, idem_tools::Error> {
        let _ = &self.0;
        Ok(cents)
    }
}

/// Outside `#[tool_impl]`: the type is unknown to the macro.
#[derive(Clone)]
struct Mailer;

impl Mailer {
    #[idempotent(name = "mailer_send", same_service)]
    pub async fn send(&self, to: String) -> Result<String, idem_tools::Error> {
        Ok(to)
    }
}

/// Under `#[async_trait]` too.
#[async_trait::async_trait]
trait Payments {
    async fn pay(&self, cents: u64) -> Result<u64, idem_tools::Error>;
}

#[tool_impl(same_service)]
#[async_trait::async_trait]
impl Payments for Billing {
    #[idempotent]
    async fn pay(&self, cents: u64) -> Result<u64, idem_tools::Error> {
        Ok(self.charges.fetch_add(cents, Ordering::SeqCst))
    }
}

/// And with `#[async_trait]` above `#[tool_impl]`, which then reads the methods it wrote.
struct Ledger {
    entries: AtomicU64,
}

#[async_trait::async_trait]
#[tool_impl(same_service)]
impl Payments for Ledger {
    #[idempotent]
    async fn pay(&self, cents: u64) -> Result<u64, idem_tools::Error> {
        Ok(self.entries.fetch_add(cents, Ordering::SeqCst))
    }
}

/// A block's inner `#![allow(deprecated)]` governs its warning as an outer one does: none here.
struct Quiet {
    count: AtomicU64,
}

#[tool_impl(same_service)]
impl Quiet {
    #![allow(deprecated)]

    #[idempotent]
    pub async fn bump(&self, by: u64) -> Result<u64, idem_tools::Error> {
        Ok(self.count.fetch_add(by, Ordering::SeqCst))
    }
}

fn main() {}

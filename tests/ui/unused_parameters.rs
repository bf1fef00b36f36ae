//! A tool that returns its call's future (detached, owned arguments) reports its parameters'
//! lints as the `async fn` it was written as: unused, needlessly `mut`, and `#[expect(…)]` on a
//! parameter fulfilled or not by the body.
#![deny(unused_variables, unused_mut, unfulfilled_lint_expectations)]

use idem_tools::{Error, idempotent};

#[idempotent]
async fn unused(to: String, amount: u64) -> Result<usize, Error> {
    Ok(to.len())
}

#[idempotent]
async fn needless_mut(mut to: String) -> Result<usize, Error> {
    Ok(to.len())
}

/// Fulfilled: no error (nor through `cfg_attr`).
#[idempotent]
async fn expected(
    #[expect(unused_variables)] quiet: u64,
    #[cfg_attr(all(), expect(unused_variables))] hushed: u64,
    mut to: String,
) -> Result<String, Error> {
    to.push('!');
    Ok(to)
}

/// Unfulfilled: the body uses it.
#[idempotent]
async fn unexpected(#[expect(unused_variables)] used: u64) -> Result<u64, Error> {
    Ok(used)
}

fn main() {}

//! Every parameter of a tool is used by it — the key reads it, or the body's future holds it
//! until the body ends — in both forms of the expansion: the detached tool that returns its
//! call's future (owned arguments) and the `async fn` (here, made so by a borrowed argument).
//! So no parameter is reported unused (renaming one `_name`, as rustc would suggest, would
//! change the tool's keys) and an `#[expect(unused_variables)]` on one is unfulfilled in both;
//! a parameter's other lints apply as written.
#![deny(warnings)]

use idem_tools::{Error, idempotent};

/// Returns its future: nothing reported but the needless `mut` and the expectation.
#[idempotent(ignore(trace))]
async fn owned(
    to: String,
    amount: u64,
    trace: String,
    #[allow(non_snake_case)] fileName: String,
    mut needless: String,
    #[expect(unused_variables)] expected: u64,
) -> Result<usize, Error> {
    Ok(to.len())
}

/// An `async fn`: the same.
#[idempotent(ignore(trace))]
async fn borrowed(
    to: &str,
    amount: u64,
    trace: String,
    #[allow(non_snake_case)] fileName: String,
    mut needless: String,
    #[expect(unused_variables)] expected: u64,
) -> Result<usize, Error> {
    Ok(to.len())
}

fn main() {}

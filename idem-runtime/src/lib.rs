//! Runtime for [`idem`](https://docs.rs/idem): canonical idempotency keys, turns and retry budgets,
//! dedup stores and the execution engine that `#[idempotent]` tools run through.
#![forbid(unsafe_code)]
#![warn(missing_docs)]

pub mod error;
pub mod key;

pub use error::{Error, Result};

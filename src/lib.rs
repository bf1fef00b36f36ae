#![forbid(unsafe_code)]
pub use idem_runtime::*;

//! probe
#![deny(
    missing_docs,
    unused_results,
    unused_qualifications,
    let_underscore_drop,
    elided_lifetimes_in_paths,
    rust_2018_idioms,
    unreachable_pub,
    single_use_lifetimes,
    trivial_casts,
    unused_lifetimes,
    meta_variable_misuse,
    missing_debug_implementations,
    unsafe_code,
    unused_import_braces,
    redundant_lifetimes,
    unit_bindings
)]
#![deny(warnings)]
use idem_tools::{Error, idempotent, read_only, tool_impl};
/// m
pub mod m {
    use super::*;
    /// a
    #[idempotent(skip(c), ignore(d))]
    pub async fn a(x: u32, c: u32, d: String, (p, q): (u32, u32), _u: u32) -> Result<u32, Error> {
        Ok(x + c + p + q + d.len() as u32)
    }
    /// a2
    #[idempotent]
    pub async fn a2(x: &str, t: &idem_tools::Turn, #[key] k: &str) -> Result<u32, Error> {
        Ok(1)
    }
    /// S
    #[derive(Clone, Debug)]
    pub struct S {
        id: u32,
    }
    #[tool_impl(self_key = self.id)]
    impl S {
        /// b
        #[idempotent]
        pub async fn b(&self, x: u32) -> Result<u32, Error> {
            Ok(x + self.id)
        }
        /// c
        #[idempotent]
        pub async fn c(&self, x: &str) -> Result<u32, Error> {
            Ok(self.id)
        }
        /// r
        #[read_only]
        pub fn r(&self) -> u32 {
            self.id
        }
    }
    /// T
    pub const T: &[idem_tools::ToolInfo] = idem_tools::tools![a, a2, S::b, S::c, S::r];
}

//! Procedural macros for [`idem`](https://docs.rs/idem). Depend on `idem`, not on this crate:
//! the macros are documented, and their generated code resolved, through `idem`.
#![forbid(unsafe_code)]

use proc_macro::TokenStream;

mod expand;
mod options;
mod tool_impl;

/// Makes an `async fn` tool safe to retry. Documented in `idem`, which re-exports it.
#[proc_macro_attribute]
pub fn idempotent(args: TokenStream, item: TokenStream) -> TokenStream {
    expand::idempotent(args.into(), item.into()).into()
}

/// Classifies a tool as read-only. Documented in `idem`, which re-exports it.
#[proc_macro_attribute]
pub fn read_only(args: TokenStream, item: TokenStream) -> TokenStream {
    expand::read_only(args.into(), item.into()).into()
}

/// Emits the descriptors of an `impl` block's visibility-less tool methods. Documented in
/// `idem`, which re-exports it.
#[proc_macro_attribute]
pub fn tool_impl(args: TokenStream, item: TokenStream) -> TokenStream {
    tool_impl::tool_impl(args.into(), item.into()).into()
}

/// The implementation of `idem::tools![]`, which passes its `$crate` first: `$crate; a, b::c`.
#[doc(hidden)]
#[proc_macro]
pub fn tools_impl(input: TokenStream) -> TokenStream {
    expand::tools(input.into()).into()
}

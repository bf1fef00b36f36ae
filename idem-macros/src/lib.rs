//! Procedural macros for [`idem`](https://docs.rs/idem). Depend on `idem`, not on this crate:
//! the macros are documented, and their generated code resolved, through `idem`.
//!
//! The pipeline, one module per step:
//! - `attr`: the attribute options, parsed with their spans;
//! - `ast`: the input model, the annotated function read from its tokens;
//! - `valid`: the rules, each an error at the tokens or option that broke it;
//! - `placement`: where the body runs (detached, attached, on a clone of `self`);
//! - `expand`: code generation for `#[idempotent]` and `#[read_only]`;
//! - `receiver`: the `self` rewrite for a body that runs on a clone of its receiver;
//! - `descriptor`: tool names and the `ToolInfo` descriptors (and `manifest`: the name the
//!   crate's `Cargo.toml` gives `idem-tools`);
//! - `catalog`: `tools![]` and its compile-time checks;
//! - `tool_impl`: `#[tool_impl]` on an `impl` block;
//! - `errors`: the error collector every step reports into.
#![forbid(unsafe_code)]

use proc_macro::TokenStream;

mod ast;
mod attr;
mod catalog;
mod descriptor;
mod errors;
mod expand;
mod manifest;
mod owned;
mod placement;
mod receiver;
mod tool_impl;
mod valid;

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

/// Names the tool methods of an `impl` block after its type and emits the descriptors of its
/// visibility-less ones. Documented in `idem`, which re-exports it.
#[proc_macro_attribute]
pub fn tool_impl(args: TokenStream, item: TokenStream) -> TokenStream {
    tool_impl::tool_impl(args.into(), item.into()).into()
}

/// The implementation of `idem_tools::tools![]`, which passes its `$crate` first: `$crate; a, b::c`.
#[doc(hidden)]
#[proc_macro]
pub fn tools_impl(input: TokenStream) -> TokenStream {
    catalog::tools(input.into()).into()
}

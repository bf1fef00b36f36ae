//! Descriptors: the `ToolInfo` of a tool (its name rule and options), the `__private` path, and
//! the `const <fn>__needs_idem` that `tools![]` reads.

use proc_macro2::{Literal, TokenStream};
use quote::{format_ident, quote, quote_spanned};
use syn::ext::IdentExt;
use syn::{FnArg, Ident, Path, Signature, Visibility};

use crate::attr::{IdempotentOptions, ReadOnlyOptions};

/// The tool's name: `name = "…"` if given, else `Type::method` for a method of a
/// `#[tool_impl]` block, else the function's name.
pub(crate) fn tool_name(
    ident: &Ident,
    name: Option<&syn::LitStr>,
    impl_type: Option<&Ident>,
) -> String {
    let fn_name = ident.unraw().to_string();
    match (name, impl_type) {
        (Some(name), _) => name.value(),
        (None, Some(ty)) => format!("{}::{fn_name}", ty.unraw()),
        (None, None) => fn_name,
    }
}

/// The `…::__private` path and the `ToolInfo` expression of the `#[idempotent]` tool `ident`:
/// `ToolInfo::idempotent(name).with_…(…)`.
pub(crate) fn idempotent_info(
    ident: &Ident,
    options: &IdempotentOptions,
) -> (TokenStream, TokenStream) {
    let private = private_path(options.krate.as_ref());
    let name = tool_name(ident, options.name.as_ref(), options.impl_type.as_ref());
    let mut info = quote!(#private::ToolInfo::idempotent(#name));
    // Each setter is spanned at its option, so an error in evaluating it points there.
    if let Some(version) = options.version {
        let value = Literal::u32_unsuffixed(version.value);
        info = quote_spanned!(version.span=> #info.with_version(#value));
    }
    if let Some(ttl) = options.ttl {
        let value = duration(&private, ttl.value);
        info = quote_spanned!(ttl.span=> #info.with_ttl(#value));
    }
    if let Some(lease) = options.lease {
        let value = duration(&private, lease.value);
        info = quote_spanned!(lease.span=> #info.with_lease(#value));
    }
    if let Some(budget) = options.budget {
        let value = Literal::u32_unsuffixed(budget.value);
        info = quote_spanned!(budget.span=> #info.with_budget(#value));
    }
    if options.cache_errors.is_some() {
        info = quote!(#info.with_cache_errors());
    }
    if options.release_on_cancel.is_some() {
        info = quote!(#info.with_release_on_cancel());
    }
    (private, info)
}

/// `Duration::new(secs, nanos)`.
fn duration(private: &TokenStream, value: std::time::Duration) -> TokenStream {
    let secs = Literal::u64_unsuffixed(value.as_secs());
    let nanos = Literal::u32_unsuffixed(value.subsec_nanos());
    quote!(#private::Duration::new(#secs, #nanos))
}

/// The `…::__private` path and the `ToolInfo` expression of the `#[read_only]` tool `ident`.
pub(crate) fn read_only_info(
    ident: &Ident,
    options: &ReadOnlyOptions,
) -> (TokenStream, TokenStream) {
    let private = private_path(options.krate.as_ref());
    let name = tool_name(ident, None, options.impl_type.as_ref());
    let info = quote!(#private::ToolInfo::read_only(#name));
    (private, info)
}

/// `::idem_tools::__private`, or `<crate = "…">::__private`.
fn private_path(krate: Option<&Path>) -> TokenStream {
    match krate {
        Some(krate) => quote!(#krate::__private),
        None => quote!(::idem_tools::__private),
    }
}

/// Whether the method-level macro emits the function's descriptor itself: always, except for a
/// method with a receiver and no visibility, which may be in a trait impl (which cannot hold
/// extra items). `#[tool_impl]` on the `impl` block emits exactly those.
pub(crate) fn emits_own_descriptor(sig: &Signature, vis: &Visibility) -> bool {
    let is_method = sig
        .inputs
        .first()
        .is_some_and(|a| matches!(a, FnArg::Receiver(_)));
    !(is_method && matches!(vis, Visibility::Inherited))
}

/// The descriptor next to the function, when it emits its own (see [`emits_own_descriptor`]):
/// a free constant for a function, an associated constant for a method.
pub(crate) fn own_descriptor(
    sig: &Signature,
    vis: &Visibility,
    private: &TokenStream,
    info: &TokenStream,
) -> Option<TokenStream> {
    emits_own_descriptor(sig, vis).then(|| descriptor_const(vis, &sig.ident, private, info))
}

/// `#vis const <fn>__needs_idem: ToolInfo = #info;`.
pub(crate) fn descriptor_const(
    vis: &Visibility,
    fn_ident: &Ident,
    private: &TokenStream,
    info: &TokenStream,
) -> TokenStream {
    let ident = descriptor_ident(fn_ident);
    let fn_name = fn_ident.unraw().to_string();
    let doc = format!("The idem classification of `{fn_name}`.");
    quote! {
        #[doc = #doc]
        #[doc(hidden)]
        #[allow(dead_code, non_upper_case_globals)]
        #vis const #ident: #private::ToolInfo = #info;
    }
}

/// `<fn>__needs_idem`, spanned at `ident`. The name is what rustc prints when `tools![<fn>]`
/// lists a function that is not annotated (an unresolved name cannot be given a message of its
/// own), so it points at what is missing; it is short so that rustc does not offer another
/// tool's descriptor as a "similar name".
pub(crate) fn descriptor_ident(ident: &Ident) -> Ident {
    format_ident!("{}__needs_idem", ident.unraw(), span = ident.span())
}

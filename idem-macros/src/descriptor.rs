//! Descriptors: the `ToolInfo` of a tool (its name rule and options), the `__private` path, and
//! the `const <fn>__needs_idempotent_or_read_only` that `tools![]` reads.

use proc_macro2::{Literal, Span, TokenStream};
use quote::{format_ident, quote, quote_spanned};
use syn::ext::IdentExt;
use syn::{FnArg, Ident, Path, Signature, Visibility};

use crate::attr::{IdempotentOptions, ReadOnlyOptions};

/// A tool's name, the Rust item it names, and how the name came about (for errors).
pub(crate) struct ToolName {
    /// The name: part of every key, and what a model is shown.
    pub name: String,
    /// The function or method as written, without `r#`.
    pub item: String,
    /// Where the name comes from.
    pub origin: Origin,
    /// Where an error about the name points: the `name = "…"` literal, else the function's
    /// name.
    pub span: Span,
}

/// Where a tool's name comes from.
pub(crate) enum Origin {
    /// `name = "…"`.
    Explicit,
    /// A free function's (or a method's outside `#[tool_impl]`) own name.
    Function,
    /// `Type__method`, under `#[tool_impl]`.
    Method {
        /// `Type`.
        ty: String,
    },
}

/// The tool's name: `name = "…"` if given, else `Type__method` for a method of a
/// `#[tool_impl]` block, else the function's name.
pub(crate) fn tool_name(
    ident: &Ident,
    name: Option<&syn::LitStr>,
    impl_type: Option<&Ident>,
) -> ToolName {
    let item = ident.unraw().to_string();
    let (name, origin, span) = match (name, impl_type) {
        (Some(name), _) => (name.value(), Origin::Explicit, name.span()),
        (None, Some(ty)) => {
            let ty = ty.unraw().to_string();
            (format!("{ty}__{item}"), Origin::Method { ty }, ident.span())
        }
        (None, None) => (item.clone(), Origin::Function, ident.span()),
    };
    ToolName {
        name,
        item,
        origin,
        span,
    }
}

/// What is wrong with `name` for model APIs (OpenAI and Anthropic accept tool names matching
/// `^[a-zA-Z0-9_-]{1,64}$`), if anything.
pub(crate) fn name_problem(name: &str) -> Option<String> {
    if let Some(c) = name
        .chars()
        .find(|c| !(c.is_ascii_alphanumeric() || *c == '_' || *c == '-'))
    {
        let shown = match c {
            ' ' => "a space".to_owned(),
            c if c.is_whitespace() || c.is_control() => format!("{c:?}"),
            c => format!("`{c}`"),
        };
        return Some(format!("contains {shown}"));
    }
    match name.len() {
        0 => Some("is empty".to_owned()),
        len @ 65.. => Some(format!("is {len} characters long")),
        _ => None,
    }
}

/// The `ToolInfo` expression for `kind` (`idempotent` or `read_only`) and `name`.
fn base_info(private: &TokenStream, kind: &str, name: &ToolName) -> TokenStream {
    let kind = Ident::new(kind, Span::call_site());
    let (tool, item) = (&name.name, &name.item);
    if tool == item {
        quote!(#private::ToolInfo::#kind(#tool))
    } else {
        quote!(#private::ToolInfo::#kind(#tool).with_item(#item))
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
    let mut info = base_info(&private, "idempotent", &name);
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
    if let Some(actions) = options.actions_per_turn {
        let value = Literal::u32_unsuffixed(actions.value);
        info = quote_spanned!(actions.span=> #info.with_actions_per_turn(#value));
    }
    if options.cache_errors.is_some() {
        info = quote!(#info.with_cache_errors());
    }
    if options.release_on_cancel.is_some() {
        info = quote!(#info.with_release_on_cancel());
    }
    if !options.skip.is_empty() {
        let skipped = options.skip.iter().map(|ident| ident.unraw().to_string());
        info = quote!(#info.with_skipped(&[#(#skipped),*]));
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
    let name = tool_name(ident, options.name.as_ref(), options.impl_type.as_ref());
    let info = base_info(&private, "read_only", &name);
    (private, info)
}

/// `::idem_tools::__private`, or `<crate = "…">::__private`, or, without `crate = "…"`, the
/// name the crate's `Cargo.toml` gives `idem-tools` (`idem = { package = "idem-tools" }`).
pub(crate) fn private_path(krate: Option<&Path>) -> TokenStream {
    match (krate, crate::manifest::renamed()) {
        (Some(krate), _) => quote!(#krate::__private),
        (None, Some(name)) => {
            let name = Ident::new(&name, Span::call_site());
            quote!(::#name::__private)
        }
        (None, None) => quote!(::idem_tools::__private),
    }
}

/// Whether the method-level macro emits the function's descriptor itself: always, except for a
/// function with no visibility that is a method (it has a receiver) or sits in a
/// `#[tool_impl]` block (`in_tool_impl`): either may be in a trait impl, which cannot hold extra
/// items. `#[tool_impl]` on the `impl` block emits exactly those.
pub(crate) fn emits_own_descriptor(sig: &Signature, vis: &Visibility, in_tool_impl: bool) -> bool {
    let is_method = sig
        .inputs
        .first()
        .is_some_and(|a| matches!(a, FnArg::Receiver(_)));
    !((is_method || in_tool_impl) && matches!(vis, Visibility::Inherited))
}

/// The descriptor next to the function, when it emits its own (see [`emits_own_descriptor`]):
/// a free constant for a function, an associated constant for a method.
pub(crate) fn own_descriptor(
    sig: &Signature,
    vis: &Visibility,
    in_tool_impl: bool,
    private: &TokenStream,
    info: &TokenStream,
) -> Option<TokenStream> {
    emits_own_descriptor(sig, vis, in_tool_impl)
        .then(|| descriptor_const(vis, &sig.ident, private, info))
}

/// `#vis const <fn>__needs_idempotent_or_read_only: ToolInfo = #info;`.
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

/// `<fn>__needs_idempotent_or_read_only`, spanned at `ident`. The name is what rustc prints when
/// `tools![<fn>]` lists a function that is not annotated (an unresolved name cannot be given a
/// message of its own), so it says what to add. (A name this long lets rustc offer another
/// tool's descriptor as a "similar name" more often than `__needs_idem` did; a newcomer told
/// "cannot find value `send__needs_idem`" did not know what to do, which costs more.)
pub(crate) fn descriptor_ident(ident: &Ident) -> Ident {
    format_ident!(
        "{}__needs_idempotent_or_read_only",
        ident.unraw(),
        span = ident.span()
    )
}

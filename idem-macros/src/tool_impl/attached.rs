//! The one warning of a `#[tool_impl]` block whose `&self` tools run attached: its type is not
//! `Clone + Send + Sync + 'static` (checked by the generated code), or the block is generic (so
//! that cannot be checked). Given once for the block, at its self type, naming the type and the
//! tools, rather than once per method through `__private` names.

use proc_macro2::TokenStream;
use quote::{ToTokens, format_ident, quote};
use syn::ext::IdentExt;
use syn::spanned::Spanned;
use syn::{AttrStyle, Attribute, Ident, ImplItem, ImplItemFn, ItemFn, ItemImpl};

use super::{attr_args, classified};
use crate::ast::ToolFn;
use crate::attr::IdempotentOptions;
use crate::descriptor::private_path;
use crate::errors::Errors;
use crate::placement::{self, CUT_OFF, Run, Unchecked};

/// The warning for the block's `&self` tools that run attached for want of a checked type, if
/// any: a deprecated item of the block's own, used once.
pub(super) fn warning(block: &ItemImpl, type_name: &Ident) -> TokenStream {
    let mut krate = None;
    let mut on_clone = Vec::new();
    let mut generic = Vec::new();
    for item in &block.items {
        let ImplItem::Fn(method) = item else { continue };
        if allows_deprecated(&method.attrs) {
            continue;
        }
        let Some((options, run)) = placed(method) else {
            continue;
        };
        let name = format!("`{}`", method.sig.ident.unraw());
        match run {
            Run::OnClone => on_clone.push(name),
            Run::AttachedWarned(Unchecked::GenericImpl) => generic.push(name),
            Run::AttachedWarned(Unchecked::NoToolImpl)
            | Run::Detached
            | Run::Attached
            | Run::Transactional => continue,
        }
        krate = krate.or(options.krate);
    }
    let private = private_path(krate.as_ref());
    // The block's own `#[allow(deprecated)]` (or any lint attribute, written outside the
    // block or inside it, `#![allow(..)]`) governs the warning too, written on it.
    let lints: Vec<Attribute> = block
        .attrs
        .iter()
        .filter(|a| is_lint(a))
        .map(|a| Attribute {
            style: AttrStyle::Outer,
            ..a.clone()
        })
        .collect();
    let ty = type_name.unraw();
    let at = block.self_ty.span();
    let mut out = TokenStream::new();
    if !on_clone.is_empty() {
        let note = format!(
            "`{ty}` is not `Clone + Send + Sync + 'static`, so its `&self` {tools} attached, \
             in the caller's task: {CUT_OFF}. To run {them} detached, on a clone of `self` that \
             finishes even if the caller goes away: derive `Clone` for `{ty}` (cheap when its \
             clients are behind `Arc`) and make it `Send + Sync + 'static`, or take \
             `self: Arc<Self>`. To keep {one} attached, write `#[idempotent(attached)]` on it",
            tools = tools(&on_clone),
            them = them(&on_clone),
            one = one(&on_clone),
        );
        let warning = format_ident!("{}_cannot_be_cloned_into_a_task", ty);
        let method = Ident::new("tools_run_attached", at);
        let self_ty = &block.self_ty;
        out.extend(quote! {
            #(#lints)*
            const _: () = {
                #[allow(non_camel_case_types)]
                trait #warning {
                    #[deprecated(note = #note)]
                    fn tools_run_attached(&self) {}
                }
                impl<S: ?::core::marker::Sized> #warning for #private::Probe<S> {}
                #[allow(dead_code)]
                fn check() {
                    use #private::Detachable as _;
                    (&&#private::Probe::<#self_ty>::NEW).#method();
                }
            };
        });
    }
    if !generic.is_empty() {
        let note = format!(
            "the `impl` block of `{ty}` is generic, so idem cannot check that the type is \
             `Clone + Send + Sync + 'static`, and its `&self` {tools} attached, in the caller's \
             task: {CUT_OFF}. To run {them} detached, take `self: Arc<Self>`, or move {them} to \
             a non-generic `impl` block of a `Clone + Send + Sync + 'static` type. To keep \
             {one} attached, write `#[idempotent(attached)]` on it",
            tools = tools(&generic),
            them = them(&generic),
            one = one(&generic),
        );
        let warning = format_ident!("{}_tools_run_attached", ty, span = at);
        out.extend(quote! {
            #(#lints)*
            const _: () = {
                #[allow(non_snake_case)]
                #[deprecated(note = #note)]
                const fn #warning() {}
                #[allow(dead_code)]
                const CHECK: () = #warning();
            };
        });
    }
    out
}

/// `allow`, `expect`, `warn`, `deny` or `forbid`.
fn is_lint(attr: &Attribute) -> bool {
    ["allow", "expect", "warn", "deny", "forbid"]
        .iter()
        .any(|lint| attr.path().is_ident(lint))
}

/// Whether the method allows `deprecated` itself: it is then left out of the warning.
fn allows_deprecated(attrs: &[Attribute]) -> bool {
    attrs.iter().any(|attr| {
        (attr.path().is_ident("allow") || attr.path().is_ident("expect"))
            && attr.to_token_stream().to_string().contains("deprecated")
    })
}

/// `tool `a` runs`, `tools `a`, `b` and `c` run`.
fn tools(names: &[String]) -> String {
    match names {
        [one] => format!("tool {one} runs"),
        [init @ .., last] => format!("tools {} and {last} run", init.join(", ")),
        [] => String::new(),
    }
}

/// `it` or `them`.
fn them(names: &[String]) -> &'static str {
    if names.len() == 1 { "it" } else { "them" }
}

/// `it` or `one`.
fn one(names: &[String]) -> &'static str {
    if names.len() == 1 { "it" } else { "one" }
}

/// An `#[idempotent]` method's options and where its body runs, as its own attribute will
/// decide (its options already name the block's type).
fn placed(method: &ImplItemFn) -> Option<(IdempotentOptions, Run)> {
    let (kind, attr) = classified(method)?;
    if kind != "idempotent" {
        return None;
    }
    let mut errors = Errors::default();
    let options = IdempotentOptions::parse(attr_args(attr)?, &mut errors);
    if errors.any() {
        return None;
    }
    let func = ItemFn {
        attrs: Vec::new(),
        vis: method.vis.clone(),
        sig: method.sig.clone(),
        block: Box::new(method.block.clone()),
    };
    let tool = ToolFn::read(func);
    let run = placement::run(&tool, &options);
    Some((options, run))
}

//! A detached tool whose arguments are all owned returns its call's future
//! (`fn tool(..) -> impl Future<Output = R>`) instead of being an `async fn`: when it may, and how
//! its parameters move into the body's future.

use proc_macro2::TokenStream;
use quote::quote;
use syn::{Attribute, FnArg, Pat, Signature, Type};

/// Whether `attr` is one of the compiler's own attributes that change nothing an attribute
/// macro below would expect (`doc`, lints, `cfg`, `must_use`, `inline`, …).
pub(crate) fn is_inert(attr: &Attribute) -> bool {
    const INERT: [&str; 12] = [
        "doc",
        "allow",
        "warn",
        "deny",
        "expect",
        "forbid",
        "cfg",
        "must_use",
        "inline",
        "cold",
        "deprecated",
        "track_caller",
    ];
    attr.path()
        .get_ident()
        .is_some_and(|ident| INERT.iter().any(|name| ident == name))
}

/// Whether `ty` is written as a path whose last segment is `Result` (`Result<T, E>`,
/// `anyhow::Result<T>`, `io::Result<T>`).
pub(crate) fn names_a_result(ty: &Type) -> bool {
    matches!(ty, Type::Path(path) if path.path.segments.last().is_some_and(|s| s.ident == "Result"))
}

/// The statements that open the body's future: each parameter bound again, moved in, as an
/// `async fn` moves its arguments into its future (and drops them when it ends). The binding
/// takes the parameter's `mut` and lint attributes off the signature: the body is where the
/// parameter is used or not, so `unused_variables`, `unused_mut` and an `#[expect(…)]` on it
/// are decided there, as in an `async fn`.
pub(crate) fn move_into_body(sig: &mut Signature) -> TokenStream {
    let mut moved = TokenStream::new();
    for input in &mut sig.inputs {
        let FnArg::Typed(typed) = input else { continue };
        let Pat::Ident(pat) = &mut *typed.pat else {
            continue; // pattern parameters are renamed to identifiers before (`rename_patterns`)
        };
        let ident = &pat.ident;
        if pat.by_ref.is_some() || pat.subpat.is_some() {
            moved.extend(quote!(let _ = &#ident;));
            continue;
        }
        let mutability = pat.mutability.take();
        let (lints, kept): (Vec<Attribute>, Vec<Attribute>) = std::mem::take(&mut typed.attrs)
            .into_iter()
            .partition(is_lint);
        typed.attrs = kept;
        // Clippy sees the parameter's own tokens: a rebinding is not the user's shadowing,
        // nor a use of an `_`-prefixed parameter.
        moved.extend(quote! {
            #(#lints)*
            #[allow(
                clippy::shadow_same,
                clippy::no_effect_underscore_binding,
                clippy::used_underscore_binding
            )]
            let #mutability #ident = #ident;
        });
    }
    moved
}

/// `#[allow(…)]`, `#[expect(…)]`, `#[warn(…)]`, `#[deny(…)]` or `#[forbid(…)]`, or a
/// `#[cfg_attr(…)]` (on a parameter, it can only give lints or `cfg`).
fn is_lint(attr: &Attribute) -> bool {
    ["allow", "expect", "warn", "deny", "forbid", "cfg_attr"]
        .iter()
        .any(|lint| attr.path().is_ident(lint))
}

//! Where the body of an `#[idempotent]` tool runs: detached (in a task of its own), attached
//! (in the caller's task), or, for a `&self` method, on a clone of its receiver when its type
//! allows it. Decided from the signature and the options; [`crate::expand`] emits the code.

use proc_macro2::{TokenStream, TokenTree};
use quote::ToTokens;
use syn::Type;

use crate::ast::{Form, Role, ToolFn};
use crate::attr::IdempotentOptions;
use crate::valid::borrows;

/// What a caller that gives up does to an attached tool, for the warnings about one.
pub(crate) const CUT_OFF: &str = "if a caller gives up mid-run (a timeout, a dropped future), \
                                  the tool is cut off and its key is kept as interrupted, so \
                                  every retry is refused (\"may or may not have taken \
                                  effect\") until the record expires";

/// Where the body of an `#[idempotent]` tool runs.
#[derive(Clone, Copy, PartialEq, Eq)]
pub(crate) enum Run {
    /// In a task of its own: it owns everything it uses (see [`owns_its_arguments`]).
    Detached,
    /// In the caller's task.
    Attached,
    /// A `&self` method with owned arguments in a non-generic `#[tool_impl]` block: detached, on
    /// a clone of `self`, if the type is `Clone + Send + Sync + 'static`; else attached, with a
    /// warning. The generated code chooses, by autoref specialization.
    OnClone,
    /// A `&self` method with owned arguments whose type the generated code cannot check: it
    /// runs attached, with a warning.
    AttachedWarned(Unchecked),
    /// A `#[transaction]` tool: in the caller's task, inside a transaction the engine opens
    /// (a caller that goes away rolls it back, so there is nothing to detach or warn about).
    Transactional,
}

/// Why a `&self` method's type cannot be checked for `Clone + Send + Sync + 'static`.
#[derive(Clone, Copy, PartialEq, Eq)]
pub(crate) enum Unchecked {
    /// Its `impl` block has generic parameters: whether they are `'static` is unknowable.
    GenericImpl,
    /// Its `impl` block is not under `#[tool_impl]`, so the macro cannot tell whether it is
    /// generic.
    NoToolImpl,
}

/// Where the body runs (see [`Run`]). A method marked `attached` is not warned about.
pub(crate) fn run(tool: &ToolFn, options: &IdempotentOptions) -> Run {
    if tool.params.iter().any(|p| p.role == Role::Transaction) {
        return Run::Transactional;
    }
    if options.attached.is_some() || !owns_its_arguments(tool) {
        return Run::Attached;
    }
    match receiver_kind(tool) {
        Receiver::None | Receiver::Arc => Run::Detached,
        Receiver::Shared if options.impl_type.is_none() => {
            Run::AttachedWarned(Unchecked::NoToolImpl)
        }
        Receiver::Shared if options.impl_generic => Run::AttachedWarned(Unchecked::GenericImpl),
        Receiver::Shared => Run::OnClone,
        Receiver::Other => Run::Attached,
    }
}

/// Whether the body owns everything it uses but its receiver, so that it can run in a task of
/// its own: no parameter type with a reference or a lifetime, no `impl Trait` parameter, no
/// type parameters (whether they are `'static` is unknowable here), and an `async fn` (native,
/// or the `#[async_trait]` shape, whose lifetime parameters are its own and whose borrowed
/// parameters have a reference type).
pub(crate) fn owns_its_arguments(tool: &ToolFn) -> bool {
    let lifetimes_ok = match tool.form {
        Form::Native(_) => tool.func.sig.generics.lifetimes().next().is_none(),
        Form::AsyncTrait { .. } => true,
        Form::NoReturn | Form::NotAsync => return false,
    };
    lifetimes_ok
        && tool.func.sig.generics.type_params().next().is_none()
        && tool
            .params
            .iter()
            .all(|p| !borrows(p.ty.to_token_stream()) && !has_impl(p.ty.to_token_stream()))
}

/// What the receiver is, for where the body runs.
#[derive(Clone, Copy, PartialEq, Eq)]
pub(crate) enum Receiver {
    /// No receiver.
    None,
    /// `&self` or `self: &Self`.
    Shared,
    /// `self: Arc<Self>` (any path ending in `Arc`).
    Arc,
    /// `&mut self`, `self`, `self: Box<Self>`, …
    Other,
}

/// The kind of `tool`'s receiver.
pub(crate) fn receiver_kind(tool: &ToolFn) -> Receiver {
    let Some(receiver) = &tool.receiver else {
        return Receiver::None;
    };
    match &*receiver.ty {
        Type::Reference(r) if r.mutability.is_none() && is_self(&r.elem) => Receiver::Shared,
        Type::Path(p)
            if receiver.colon_token.is_some()
                && p.path.segments.last().is_some_and(|s| s.ident == "Arc") =>
        {
            Receiver::Arc
        }
        _ => Receiver::Other,
    }
}

/// `Self`.
fn is_self(ty: &Type) -> bool {
    matches!(ty, Type::Path(p) if p.qself.is_none() && p.path.is_ident("Self"))
}

/// Whether `tokens` hold `impl`.
pub(crate) fn has_impl(tokens: TokenStream) -> bool {
    tokens.into_iter().any(|token| match token {
        TokenTree::Ident(i) => i == "impl",
        TokenTree::Group(g) => has_impl(g.stream()),
        TokenTree::Punct(_) | TokenTree::Literal(_) => false,
    })
}

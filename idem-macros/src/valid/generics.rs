//! The rule about a generic tool function: each of its type and const parameters is in the
//! type of an argument, or its instantiations would share one key.

use proc_macro2::{TokenStream, TokenTree};
use quote::ToTokens;
use syn::ext::IdentExt;
use syn::{GenericParam, Ident, Type};

use super::mentions;
use crate::ast::{Role, ToolFn};
use crate::attr::IdempotentOptions;
use crate::errors::Errors;

/// Every type or const parameter of the function is in the type of an argument (or in the
/// `self_key`): one `static` slot serves all the instantiations of a generic function under
/// one name, and the check at run time lets them share it, as one tool told apart by its
/// arguments (`Instance::admits`). A parameter that no argument's type names — only in the
/// return type, in the body, or only through an associated type (`T::Id`, `<T as E>::Id`, the
/// same type for every `T`) or a `PhantomData<T>` (it encodes as nothing) — gives its
/// instantiations one key: `create::<Team>("ada")` would replay `create::<User>("ada")`'s
/// record. Read as tokens: `Vec<T>`, `&T`, `[u8; N]` name `T` and `N`. An argument in `skip` or
/// `ignore` counts, as its value does — the author says it does not identify the action
/// (`client: C`, a client generic for tests) — and so does an `impl Trait` argument. So does a
/// parameter named only in the error type of a `Result<T, E>` return (`E`), unless errors are
/// recorded (`cache_errors`): the recorded `Ok` is the same for every one. Lifetimes are not
/// compared; the parameters of a `#[tool_impl]` block are not the function's (see
/// `tool_impl::generic`).
pub(super) fn in_key(tool: &ToolFn, options: &IdempotentOptions, errors: &mut Errors) {
    let in_key: Vec<TokenStream> = tool
        .params
        .iter()
        .filter(|p| {
            matches!(
                p.role,
                Role::Key | Role::CallerKey | Role::Skip | Role::Ignore
            )
        })
        .map(|p| p.ty.to_token_stream())
        .chain(options.self_key.iter().map(|k| k.value.to_token_stream()))
        .collect();
    let error_only = match (&tool.func.sig.output, options.cache_errors) {
        (syn::ReturnType::Type(_, ty), None) => result_parts(ty),
        _ => None,
    };
    let function = tool.func.sig.ident.unraw();
    for param in &tool.func.sig.generics.params {
        let (ident, kind, one, other) = match param {
            GenericParam::Type(t) => (&t.ident, "type", "User", "Team"),
            GenericParam::Const(c) => (&c.ident, "const", "1", "64"),
            GenericParam::Lifetime(_) => continue,
        };
        if in_key
            .iter()
            .any(|tokens| names_type(tokens.clone(), ident))
        {
            continue;
        }
        if let Some((ok, err)) = &error_only
            && mentions(err.clone(), &|i| i == ident)
            && !mentions(ok.clone(), &|i| i == ident)
        {
            continue;
        }
        let fix = match param {
            GenericParam::Const(c) => format!(
                "take it as an argument instead (`{value}: {ty}`), which the key holds, or use \
                 `{ident}` in the type of an argument in the key (`block: Block<{ident}>`)",
                value = ident.unraw().to_string().to_lowercase(),
                ty = c.ty.to_token_stream(),
            ),
            _ => format!(
                "use `{ident}` itself in the type of an argument in the key (`value: {ident}`, \
                 `items: Vec<{ident}>`; not only `{ident}::Id` or `PhantomData<{ident}>`, the \
                 same for every `{ident}`), or write one tool per type, each with its own name"
            ),
        };
        errors.at(
            ident.span(),
            format!(
                "the {kind} parameter `{ident}` of `{function}` is not in its key: no argument \
                 has it in its type, so two calls of `{function}` with the same arguments in \
                 one turn, one with `{ident} = {one}` and one with `{ident} = {other}`, would \
                 share one idempotency key, and the second would not run but replay the first \
                 one's result; {fix}"
            ),
        );
    }
}

/// Whether `tokens` (a type) name the parameter `ident` itself: not only through one of its
/// associated items (`T::Id`, `<T as Entity>::Id`) nor inside a `PhantomData<…>`.
fn names_type(tokens: TokenStream, ident: &Ident) -> bool {
    let tokens: Vec<TokenTree> = tokens.into_iter().collect();
    let mut i = 0;
    while i < tokens.len() {
        match &tokens[i] {
            TokenTree::Ident(name) if name == "PhantomData" => {
                // Skip its `<…>`: the tokens up to the matching `>`.
                let mut depth = 0usize;
                i += 1;
                while i < tokens.len() {
                    if let TokenTree::Punct(p) = &tokens[i] {
                        match p.as_char() {
                            '<' => depth += 1,
                            '>' if depth <= 1 => break,
                            '>' => depth -= 1,
                            _ => {}
                        }
                    }
                    i += 1;
                }
            }
            TokenTree::Ident(name) if name == ident => {
                let projected = match tokens.get(i + 1) {
                    Some(TokenTree::Punct(p)) => {
                        p.as_char() == ':'
                            && matches!(tokens.get(i + 2), Some(TokenTree::Punct(q)) if q.as_char() == ':')
                    }
                    Some(TokenTree::Ident(next)) => next == "as",
                    _ => false,
                };
                if !projected {
                    return true;
                }
            }
            TokenTree::Group(group) if names_type(group.stream(), ident) => return true,
            _ => {}
        }
        i += 1;
    }
    false
}

/// The `Ok` and `Err` types of a return type written `Result<T, E>` (any path ending in
/// `Result` with two type arguments), as tokens.
fn result_parts(ty: &Type) -> Option<(TokenStream, TokenStream)> {
    let Type::Path(path) = ty else { return None };
    let last = path.path.segments.last()?;
    if last.ident != "Result" {
        return None;
    }
    let syn::PathArguments::AngleBracketed(args) = &last.arguments else {
        return None;
    };
    let mut types = args.args.iter().filter_map(|arg| match arg {
        syn::GenericArgument::Type(ty) => Some(ty.to_token_stream()),
        _ => None,
    });
    match (types.next(), types.next(), types.next()) {
        (Some(ok), Some(err), None) => Some((ok, err)),
        _ => None,
    }
}

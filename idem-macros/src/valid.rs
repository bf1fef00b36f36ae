//! The rules: every check on an annotated function and its options, each reported into
//! [`Errors`] at the tokens (or the option) that caused it. A new rule goes here.

use proc_macro2::{TokenStream, TokenTree};
use quote::ToTokens;
use syn::ext::IdentExt;
use syn::spanned::Spanned;
use syn::{Attribute, FnArg, Ident, ItemFn, Type};

use crate::ast::{Form, Param, Role, ToolFn, async_trait_position, first_type_arg, take_attrs};
use crate::attr::{IdempotentOptions, ReadOnlyOptions};
use crate::descriptor::{self, Origin, ToolName, name_problem};
use crate::errors::Errors;
use crate::placement::{self, Run};

mod generics;
mod receiver;

/// What the rules decided about a valid `#[idempotent]` function.
pub(crate) struct Plan {
    /// Where the body runs.
    pub run: Run,
}

/// The message for a tool that does not return a `Result`.
pub(crate) const NOT_RESULT: &str = "an `#[idempotent]` tool must return `Result<T, E>` with \
                                     `T: Serialize + DeserializeOwned` and \
                                     `E: From<idem_tools::Error>`";

/// Checks an `#[idempotent]` function against its options, and gives each parameter its role.
pub(crate) fn idempotent(
    tool: &mut ToolFn,
    options: &IdempotentOptions,
    errors: &mut Errors,
) -> Plan {
    conflicting(&mut tool.func.attrs, "read_only", "idempotent", errors);
    form(tool, errors);
    receiver::named(tool, options, errors);
    let ident = &tool.func.sig.ident;
    let name = descriptor::tool_name(ident, options.name.as_ref(), options.impl_type.as_ref());
    tool_name(&name, "idempotent", errors);
    receiver::identity(tool, options, errors);
    caller_key(tool, errors);
    transaction(tool, options, errors);
    configured(tool, errors);
    unique_names(tool, errors);
    skip_and_ignore(tool, options, errors);
    written_through(tool, errors);
    generics::in_key(tool, options, errors);
    owned_ok(tool, errors);
    let run = placement::run(tool, options);
    if let Some(span) = options.release_on_cancel {
        let why = match run {
            Run::Detached => Some("this tool is detached (its body runs in a task of its own)"),
            Run::OnClone | Run::AttachedWarned(_) => Some(
                "this `&self` method with owned arguments runs detached, on a clone of `self`, \
                 when its type is `Clone + Send + Sync + 'static`",
            ),
            Run::Attached | Run::Transactional => None,
        };
        if let Some(why) = why {
            errors.at(
                span,
                format!(
                    "`release_on_cancel` applies to attached tools only: {why}, so a caller \
                     that times out or is dropped does not cancel it: it finishes and its \
                     result is recorded; add `attached` to run the body in the caller's task, \
                     or remove `release_on_cancel`"
                ),
            );
        }
    }
    Plan { run }
}

/// The name a model is shown must match `^[a-zA-Z0-9_-]{1,64}$` (OpenAI, Anthropic).
/// `attribute` is `idempotent` or `read_only`, for the fix.
pub(crate) fn tool_name(name: &ToolName, attribute: &str, errors: &mut Errors) {
    let Some(problem) = name_problem(&name.name) else {
        return;
    };
    let tool = &name.name;
    let rule = "model APIs (OpenAI, Anthropic) accept tool names of 1 to 64 ASCII letters, \
                digits, `_` and `-`";
    let fix = format!("give the tool such a name: `#[{attribute}(name = \"…\")]`");
    let message = match &name.origin {
        Origin::Explicit => {
            let mut fixed: String = tool
                .chars()
                .map(|c| {
                    if c.is_ascii_alphanumeric() || c == '-' {
                        c
                    } else {
                        '_'
                    }
                })
                .take(64)
                .collect();
            if fixed.is_empty() {
                fixed = "send_email".to_owned();
            }
            format!("the tool name \"{tool}\" {problem}: {rule}; write, say, \"{fixed}\"")
        }
        Origin::Function => format!(
            "this tool is named after its function, `{tool}`, which {problem}: {rule}; {fix}"
        ),
        Origin::Method { ty } => format!(
            "this tool is named `{tool}`, after its type `{ty}` and its method `{item}`, and the \
             name {problem}: {rule}; {fix}",
            item = name.item
        ),
    };
    errors.at(name.span, message);
}

/// Checks a `#[read_only]` function.
pub(crate) fn read_only(func: &mut ItemFn, options: &ReadOnlyOptions, errors: &mut Errors) {
    conflicting(&mut func.attrs, "idempotent", "read_only", errors);
    let ident = &func.sig.ident;
    let name = descriptor::tool_name(ident, options.name.as_ref(), options.impl_type.as_ref());
    tool_name(&name, "read_only", errors);
    // `#[key]` and `#[transaction]`, an `#[idempotent]` tool's, taken off (rustc would say
    // only that it cannot find them).
    for input in &mut func.sig.inputs {
        let FnArg::Typed(typed) = input else { continue };
        let key = take_attrs(&mut typed.attrs, "key").into_iter().map(|attr| {
            let what = "`#[key]` marks the caller-supplied idempotency key of an \
                        `#[idempotent]` tool; a `#[read_only]` tool has no key";
            (attr, what)
        });
        let tx = take_attrs(&mut typed.attrs, "transaction")
            .into_iter()
            .map(|attr| {
                let what = "`#[transaction]` marks the connection of an `#[idempotent]` tool's \
                        transaction; a `#[read_only]` tool runs in none";
                (attr, what)
            });
        for (attr, what) in key.chain(tx).collect::<Vec<_>>() {
            errors.spanned(&attr, format!("{what}: remove it"));
        }
    }
    // A `&mut` anywhere in a parameter's type, as for `#[idempotent]`'s key (`Option<&mut T>`),
    // and in a receiver's, written short (`&mut self`) or typed (`self: &mut Self`,
    // `self: Pin<&mut Self>`).
    for input in &func.sig.inputs {
        let tokens = match input {
            FnArg::Receiver(r) if r.colon_token.is_none() => match mutable_reference(&r.ty) {
                Some(_) => r.to_token_stream(),
                None => continue,
            },
            FnArg::Receiver(r) => match mutable_reference(&r.ty) {
                Some(reference) => reference.to_token_stream(),
                None => continue,
            },
            FnArg::Typed(t) => match mutable_reference(&t.ty) {
                Some(reference) => reference.to_token_stream(),
                None => continue,
            },
        };
        errors.spanned(
            tokens,
            "a `#[read_only]` tool cannot take a `&mut` parameter: it could change state through \
             it; take `&` instead, or make the tool `#[idempotent]`",
        );
    }
}

/// `#[read_only]` next to `#[idempotent]` (or the reverse): reported and removed.
fn conflicting(attrs: &mut Vec<Attribute>, other: &str, this: &str, errors: &mut Errors) {
    for attr in take_attrs(attrs, other) {
        errors.at(
            attr.span(),
            format!(
                "`#[{other}]` and `#[{this}]` cannot both apply: a tool either changes state \
                 (`#[idempotent]`) or only reads (`#[read_only]`); keep one"
            ),
        );
    }
}

/// No `&mut` argument in the key: a replay returns the first call's result but does not redo
/// what the body wrote through it. A handle the body only uses (a client, a connection) is
/// `ignore`d or `skip`ped, which says so; the `#[transaction]` connection is the engine's.
fn written_through(tool: &ToolFn, errors: &mut Errors) {
    for param in &tool.params {
        if param.role != Role::Key || !param.tx_attrs.is_empty() {
            continue;
        }
        let Some(reference) = mutable_reference(&param.ty) else {
            continue;
        };
        let name = &param.name;
        errors.spanned(
            reference,
            format!(
                "an `#[idempotent]` tool cannot take `{name}` by `&mut`: a retry answered from \
                 the record returns the first call's result without running the body, so what \
                 the body wrote through `{name}` would be missing while the call reports \
                 success; return what the tool produces in its result instead, or, for a \
                 handle the body only uses (a client, a connection), leave it out of the key \
                 with `ignore({name})`"
            ),
        );
    }
}

/// The first `&mut` anywhere in `ty` (`&mut T`, `Option<&mut T>`, `(&mut T, u8)`, a type a
/// `macro_rules!` passed in). A type alias hides one: the macro sees only the alias's name.
fn mutable_reference(ty: &Type) -> Option<&syn::TypeReference> {
    match ty {
        Type::Reference(reference) if reference.mutability.is_some() => Some(reference),
        Type::Reference(reference) => mutable_reference(&reference.elem),
        Type::Paren(inner) => mutable_reference(&inner.elem),
        Type::Group(inner) => mutable_reference(&inner.elem),
        Type::Array(inner) => mutable_reference(&inner.elem),
        Type::Slice(inner) => mutable_reference(&inner.elem),
        Type::Tuple(tuple) => tuple.elems.iter().find_map(mutable_reference),
        Type::Path(path) => path
            .qself
            .iter()
            .map(|qself| &*qself.ty)
            .find_map(mutable_reference)
            .or_else(|| {
                path.path.segments.iter().find_map(|segment| {
                    let syn::PathArguments::AngleBracketed(arguments) = &segment.arguments else {
                        return None;
                    };
                    arguments.args.iter().find_map(|argument| match argument {
                        syn::GenericArgument::Type(ty) => mutable_reference(ty),
                        _ => None,
                    })
                })
            }),
        _ => None,
    }
}

/// An `async fn` with a return type, or the `#[async_trait]` shape.
fn form(tool: &ToolFn, errors: &mut Errors) {
    match tool.form {
        Form::NoReturn => errors.at(tool.func.sig.ident.span(), NOT_RESULT),
        Form::NotAsync => errors.at(
            tool.func.sig.fn_token.span,
            "`#[idempotent]` needs an `async fn`: the tool runs through idem's async engine \
             (key, budget, store); make it `async fn`",
        ),
        Form::Native(_) | Form::AsyncTrait { .. } => {}
    }
}

/// At most one `#[key]`, never on `self` nor on the turn.
fn caller_key(tool: &mut ToolFn, errors: &mut Errors) {
    for attr in &tool.key_on_self {
        errors.at(attr.span(), "`self` cannot be the `#[key]`");
    }
    let mut first: Option<proc_macro2::Span> = None;
    for param in &mut tool.params {
        for attr in &param.key_attrs {
            if param.role == Role::Turn {
                errors.at(attr.span(), "the `Turn` parameter cannot be the `#[key]`");
            } else if let Some(first) = first {
                let mut error = syn::Error::new(
                    attr.span(),
                    "only one parameter can be the `#[key]`: it is the whole caller-supplied \
                     idempotency key",
                );
                error.combine(syn::Error::new(first, "the first `#[key]` is here"));
                errors.push(error);
            } else {
                first = Some(attr.span());
                param.role = Role::CallerKey;
            }
        }
    }
}

/// At most one `#[transaction]`, a plain name of a `&mut` type, not the `#[key]` nor the turn;
/// no `cache_errors` or `release_on_cancel` with it.
fn transaction(tool: &mut ToolFn, options: &IdempotentOptions, errors: &mut Errors) {
    const TYPE: &str = "`&mut sqlx::PgConnection`";
    let mut first: Option<proc_macro2::Span> = None;
    for param in &mut tool.params {
        let Some(attr) = param.tx_attrs.first() else {
            continue;
        };
        for extra in &param.tx_attrs[1..] {
            errors.at(extra.span(), "`#[transaction]` is written once");
        }
        if !matches!(attr.meta, syn::Meta::Path(_)) {
            errors.at(attr.span(), "`#[transaction]` takes no arguments");
        }
        if let Some(first) = first {
            let mut error = syn::Error::new(
                attr.span(),
                "only one parameter can be the `#[transaction]`: the tool runs in one \
                 transaction, and this is its connection",
            );
            error.combine(syn::Error::new(first, "the first `#[transaction]` is here"));
            errors.push(error);
            continue;
        }
        first = Some(attr.span());
        match param.role {
            Role::Turn => errors.at(
                attr.span(),
                "the `Turn` parameter cannot be the `#[transaction]`",
            ),
            Role::CallerKey => errors.at(
                attr.span(),
                "the `#[key]` parameter cannot be the `#[transaction]`",
            ),
            _ => {}
        }
        if !matches!(&param.ty, Type::Reference(r) if r.mutability.is_some()) {
            errors.spanned(
                &param.ty,
                format!(
                    "a `#[transaction]` parameter is the connection of the transaction the \
                     engine opens for the tool: write it {TYPE}"
                ),
            );
        } else if param.pattern.is_some() {
            errors.at(
                param.span(),
                "a `#[transaction]` parameter must be a plain name: `#[transaction] tx: &mut \
                 sqlx::PgConnection`",
            );
        }
        param.role = Role::Transaction;
    }
    if first.is_none() {
        return;
    }
    if let Some(span) = options.cache_errors {
        errors.at(
            span,
            "`cache_errors` does not apply to a transactional tool: an `Err` rolls its \
             transaction back (its writes and its claim), so a retry runs the tool again; \
             remove `cache_errors`, or return the failure as an `Ok` value to record it",
        );
    }
    if let Some(span) = options.release_on_cancel {
        errors.at(
            span,
            "a transactional tool always gives its key back when its caller goes away: its \
             transaction rolls back; remove `release_on_cancel`",
        );
    }
}

/// Two parameters cannot enter the key under one name (unless both are under `#[cfg(…)]`:
/// alternatives, one per configuration, such as `#[cfg(unix)] path: String` and
/// `#[cfg(not(unix))] path: OsString`; rustc reports two that are both configured in).
fn unique_names(tool: &ToolFn, errors: &mut Errors) {
    let params = &tool.params;
    // A pattern parameter `#[async_trait]` renamed `__argN` (it counts `self`).
    let renamed = |p: &Param| p.pattern.is_none() && async_trait_position(&p.binding).is_some();
    for (i, param) in params.iter().enumerate() {
        let Some(first) = params[..i]
            .iter()
            .find(|p| p.name == param.name && (p.cfgs.is_empty() || param.cfgs.is_empty()))
        else {
            continue;
        };
        let name = &param.name;
        // Two positional names: a pattern of a reference type (which async-trait leaves to
        // idem, numbered without `self`) and the one before it (numbered by async-trait, with
        // `self`). Neither can be renamed as written.
        if (renamed(first) && param.pattern.is_some())
            || (renamed(param) && first.pattern.is_some())
        {
            // At the patterns as written: the one idem names, and async-trait's `__argN`,
            // spanned at the pattern it replaced.
            let at = |p: &Param| p.pattern.as_ref().map_or(p.binding.span(), Spanned::span);
            let message = format!(
                "two pattern parameters are named `{name}` in the key: `#[async_trait]` numbers \
                 the pattern parameters it rewrites counting `self`, and idem numbers the one \
                 it leaves (of a reference type) after `self`, as without `#[async_trait]`; \
                 bind one of them to a name and destructure it in the body (`pair: &(u32, \
                 u32)`, then `let (a, b) = pair;`)"
            );
            let mut error = syn::Error::new(at(param), message);
            error.combine(syn::Error::new(
                at(first),
                format!("the other `{name}` is this one"),
            ));
            errors.push(error);
            continue;
        }
        errors.at(
            param.span(),
            format!(
                "two parameters are named `{name}` in the key (a pattern parameter is named \
                 `argN` after its position): rename one"
            ),
        );
    }
}

/// A parameter under `#[cfg(…)]` is left out of the key when it is configured out, as it is
/// out of the function; the turn and the `#[transaction]` connection cannot be: the tool's
/// turn, or its transaction, would then depend on the configuration.
fn configured(tool: &ToolFn, errors: &mut Errors) {
    for param in &tool.params {
        let what = match param.role {
            Role::Turn => {
                "the `Turn` parameter: the tool's turn would depend on the \
                           configuration; take the turn in every configuration (or none: \
                           the turn then comes from the `Turn::scope` the call runs in)"
            }
            Role::Transaction => {
                "the `#[transaction]` parameter: the tool's transaction \
                                  would depend on the configuration; write one tool per \
                                  configuration"
            }
            _ => continue,
        };
        for cfg in &param.cfgs {
            errors.spanned(cfg, format!("`#[cfg(…)]` cannot apply to {what}"));
        }
    }
}

/// `skip(..)` and `ignore(..)` name existing parameters that are not the turn or the `#[key]`,
/// each once.
fn skip_and_ignore(tool: &mut ToolFn, options: &IdempotentOptions, errors: &mut Errors) {
    let listed = options.skip.iter().map(|i| (i, Role::Skip, "skip"));
    let listed: Vec<(&Ident, Role, &str)> = listed
        .chain(options.ignore.iter().map(|i| (i, Role::Ignore, "ignore")))
        .collect();
    let params = &mut tool.params;
    for (i, &(ident, role, option)) in listed.iter().enumerate() {
        let name = ident.unraw().to_string();
        if let Some((_, _, first)) = listed[..i].iter().find(|(s, _, _)| s.unraw() == name) {
            errors.at(
                ident.span(),
                format!("`{name}` is already listed in `{first}(..)`"),
            );
            continue;
        }
        // Every parameter of that name: alternatives under `#[cfg(…)]` share one.
        let named = params.iter().filter(|p| p.name == name);
        let found = named
            .clone()
            .find(|p| matches!(p.role, Role::Turn | Role::Transaction | Role::CallerKey))
            .or_else(|| named.clone().next())
            .map(|p| p.role);
        match found {
            None if name == "self" => errors.at(
                ident.span(),
                format!(
                    "`self` is never in the key, no need to {option} it; to put the \
                     receiver's identity in the key, write `self_key = self.<field>`, or say \
                     that every instance is the same service with `same_service`"
                ),
            ),
            None => {
                let names: Vec<_> = params.iter().map(|p| format!("`{}`", p.name)).collect();
                let names = if names.is_empty() {
                    "it has none".to_owned()
                } else {
                    format!("it has {}", names.join(", "))
                };
                errors.at(
                    ident.span(),
                    format!(
                        "`{option}({name})`: the function has no parameter named `{name}` \
                         ({names}; a pattern parameter is named `argN` after its position)"
                    ),
                );
            }
            Some(Role::Turn) => errors.at(
                ident.span(),
                format!(
                    "`{name}` is the turn: it is never part of the key, no need to {option} it"
                ),
            ),
            Some(Role::Transaction) => errors.at(
                ident.span(),
                format!(
                    "`{name}` is the `#[transaction]` connection, which is never in the key: \
                     no need to {option} it"
                ),
            ),
            Some(Role::CallerKey) => errors.at(
                ident.span(),
                format!("`{name}` is the `#[key]`: it cannot be in `{option}(..)`"),
            ),
            Some(_) => {
                for p in params.iter_mut().filter(|p| p.name == name) {
                    p.role = role;
                }
            }
        }
    }
}

/// Whether `tokens` hold an identifier that is `wanted`.
pub(crate) fn mentions(tokens: TokenStream, wanted: &dyn Fn(&Ident) -> bool) -> bool {
    tokens.into_iter().any(|token| match token {
        TokenTree::Ident(ident) => wanted(&ident),
        TokenTree::Group(group) => mentions(group.stream(), wanted),
        TokenTree::Punct(_) | TokenTree::Literal(_) => false,
    })
}

/// `Result<&str, E>` cannot be replayed: the recorded value has nowhere to borrow from.
/// Checked here because rustc's own error ("`Deserialize` is not general enough") says nothing
/// useful.
fn owned_ok(tool: &ToolFn, errors: &mut Errors) {
    let Some(Type::Path(path)) = tool.form.output() else {
        return;
    };
    let Some(last) = path.path.segments.last() else {
        return;
    };
    let Some(ok) = first_type_arg(&last.arguments) else {
        return;
    };
    if last.ident == "Result" && borrows_non_static(ok.to_token_stream()) {
        errors.spanned(
            ok,
            "the `Ok` type of an `#[idempotent]` tool must be owned (no references, no \
             lifetimes but `'static`): a retry gets the first result back from the store, with nothing to \
             borrow from; return an owned type (`String` rather than `&str`, `Vec<T>` rather \
             than `&[T]`)",
        );
    }
}

/// Whether `tokens` hold a `&` or a lifetime other than `'static` (`Cow<'static, str>` owns
/// what it holds once deserialized; `&'static str` does not).
pub(crate) fn borrows_non_static(tokens: TokenStream) -> bool {
    let tokens: Vec<TokenTree> = tokens.into_iter().collect();
    tokens.iter().enumerate().any(|(i, token)| match token {
        TokenTree::Punct(p) if p.as_char() == '&' => true,
        TokenTree::Punct(p) if p.as_char() == '\'' => {
            !matches!(tokens.get(i + 1), Some(TokenTree::Ident(l)) if l == "static")
        }
        TokenTree::Group(g) => borrows_non_static(g.stream()),
        _ => false,
    })
}

/// Whether `tokens` hold a `&` or a lifetime.
pub(crate) fn borrows(tokens: TokenStream) -> bool {
    tokens.into_iter().any(|token| match token {
        TokenTree::Punct(p) => p.as_char() == '&' || p.as_char() == '\'',
        TokenTree::Group(g) => borrows(g.stream()),
        TokenTree::Ident(_) | TokenTree::Literal(_) => false,
    })
}

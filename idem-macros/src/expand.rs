//! The expansions of `#[idempotent]`, `#[read_only]` and `tools![]`.

use proc_macro2::{Group, Literal, Span, TokenStream, TokenTree};
use quote::{ToTokens, format_ident, quote, quote_spanned};
use syn::ext::IdentExt;
use syn::punctuated::Punctuated;
use syn::spanned::Spanned;
use syn::{
    Attribute, Expr, ExprAsync, FnArg, GenericArgument, Ident, ItemFn, Pat, PatIdent, Path,
    PathArguments, ReturnType, Signature, Stmt, Token, Type, TypeParamBound, Visibility,
    parse_quote, parse_quote_spanned,
};

use crate::options::{Errors, IdempotentOptions, parse_read_only};

/// `#[idempotent(...)]`.
pub(crate) fn idempotent(args: TokenStream, item: TokenStream) -> TokenStream {
    let mut errors = Errors::default();
    let options = IdempotentOptions::parse(args, &mut errors);
    let Ok(mut func) = syn::parse2::<ItemFn>(item.clone()) else {
        errors.at(
            Span::call_site(),
            "`#[idempotent]` applies to an `async fn` with a body (a function or a method)",
        );
        return fail(errors, item);
    };
    strip_conflicting(&mut func.attrs, "read_only", "idempotent", &mut errors);
    let params = Params::analyse(&mut func, &options.skip, &options.ignore, &mut errors);

    let form = if func.sig.asyncness.is_some() {
        match &func.sig.output {
            ReturnType::Type(_, ty) => Some(Form::Native((**ty).clone())),
            ReturnType::Default => {
                errors.at(func.sig.ident.span(), NOT_RESULT);
                None
            }
        }
    } else if let Some(form) = async_trait_form(&func) {
        Some(form)
    } else {
        errors.at(
            func.sig.fn_token.span,
            "`#[idempotent]` needs an `async fn`: the tool runs through idem's async engine \
             (key, budget, store); make it `async fn`",
        );
        None
    };

    let (Some(form), None) = (form, errors.peek()) else {
        return fail(errors, func.into_token_stream());
    };
    let (private, info) = idempotent_info(&func.sig.ident, &options);
    let descriptor = descriptor(&func, &private, &info);

    let (ret, inner_stmts, outer) = match form {
        Form::Native(ret) => (ret, func.block.stmts.clone(), None),
        Form::AsyncTrait { output, pin, inner } => (output, inner.block.stmts, Some(pin)),
    };
    let prelude = params.prelude(&private, &info, &ret, &options, inner_stmts);
    // The signature with pattern parameters named, so they can be hashed whole.
    params.rename_patterns(&mut func);
    // The braces carry the return type's span: rustc reports the bounds of the future held
    // across `.await` at the body's span, and this merges those reports with the others.
    let span = ret.span();
    func.block = Box::new(match outer {
        None => parse_quote_spanned!(span=> { #prelude }),
        Some(pin) => parse_quote_spanned!(span=> { #pin(async move { #prelude }) }),
    });
    quote!(#descriptor #func)
}

const NOT_RESULT: &str = "an `#[idempotent]` tool must return `Result<T, E>` with \
                          `T: Serialize + DeserializeOwned` and `E: From<idem::Error>`";

/// How the function is written.
enum Form {
    /// `async fn … -> R`.
    Native(Type),
    /// `#[async_trait]` already ran: `fn … -> Pin<Box<dyn Future<Output = R> + …>>` whose body
    /// is `Box::pin(async move { … })`.
    AsyncTrait {
        output: Type,
        pin: Expr,
        inner: Box<ExprAsync>,
    },
}

/// Recognises the output of `#[async_trait]`.
fn async_trait_form(func: &ItemFn) -> Option<Form> {
    let ReturnType::Type(_, ty) = &func.sig.output else {
        return None;
    };
    let pin = last_segment_args(ty, "Pin")?;
    let boxed = last_segment_args(single_type_arg(pin)?, "Box")?;
    let Type::TraitObject(object) = single_type_arg(boxed)? else {
        return None;
    };
    let output = object.bounds.iter().find_map(|bound| match bound {
        TypeParamBound::Trait(t) => {
            let last = t.path.segments.last()?;
            let PathArguments::AngleBracketed(args) = &last.arguments else {
                return None;
            };
            (last.ident == "Future").then_some(())?;
            args.args.iter().find_map(|arg| match arg {
                GenericArgument::AssocType(a) if a.ident == "Output" => Some(a.ty.clone()),
                _ => None,
            })
        }
        _ => None,
    })?;
    let [Stmt::Expr(Expr::Call(call), None)] = func.block.stmts.as_slice() else {
        return None;
    };
    let Expr::Path(pin_path) = &*call.func else {
        return None;
    };
    let last = pin_path.path.segments.last()?;
    let [Expr::Async(inner)] = call.args.iter().collect::<Vec<_>>().as_slice() else {
        return None;
    };
    (last.ident == "pin" && inner.capture.is_some()).then(|| Form::AsyncTrait {
        output,
        pin: (*call.func).clone(),
        inner: Box::new((*inner).clone()),
    })
}

fn last_segment_args<'t>(ty: &'t Type, name: &str) -> Option<&'t PathArguments> {
    let Type::Path(path) = ty else { return None };
    let last = path.path.segments.last()?;
    (last.ident == name).then_some(&last.arguments)
}

fn single_type_arg(args: &PathArguments) -> Option<&Type> {
    let PathArguments::AngleBracketed(args) = args else {
        return None;
    };
    args.args.iter().find_map(|a| match a {
        GenericArgument::Type(t) => Some(t),
        _ => None,
    })
}

/// What a parameter is to the key.
#[derive(Clone, Copy, PartialEq, Eq)]
enum Role {
    /// In the key and the fingerprint.
    Key,
    /// `skip(..)`: in the fingerprint only (if `Serialize`).
    Skip,
    /// `ignore(..)`: in neither the key nor the fingerprint.
    Ignore,
    /// `#[key]`: the caller-supplied key.
    CallerKey,
    /// `Turn` / `&Turn`: where the turn comes from.
    Turn,
}

struct Param {
    role: Role,
    /// The name in the key: the identifier, or `argN` for a pattern.
    name: String,
    /// The variable holding the argument.
    binding: Ident,
    /// The pattern to destructure `binding` into, for pattern parameters.
    pattern: Option<Pat>,
    /// Where errors about it point.
    span: Span,
}

struct Params(Vec<Param>);

impl Params {
    /// Classifies the parameters and removes their `#[key]` attributes.
    fn analyse(func: &mut ItemFn, skip: &[Ident], ignore: &[Ident], errors: &mut Errors) -> Params {
        let mut params = Vec::new();
        let mut caller_key: Option<Span> = None;
        let mut index = 0_usize;
        for input in &mut func.sig.inputs {
            let typed = match input {
                FnArg::Receiver(receiver) => {
                    for attr in take_attrs(&mut receiver.attrs, "key") {
                        errors.at(attr.span(), "`self` cannot be the `#[key]`");
                    }
                    continue;
                }
                FnArg::Typed(typed) => typed,
            };
            let position = index;
            index += 1;
            let key_attrs = take_attrs(&mut typed.attrs, "key");
            let (name, binding, pattern) = match &*typed.pat {
                Pat::Ident(PatIdent {
                    by_ref: None,
                    subpat: None,
                    ident,
                    ..
                }) => {
                    let mut name = ident.unraw().to_string();
                    // `#[async_trait]` names pattern parameters `__argN`.
                    if let Some(n) = name.strip_prefix("__arg")
                        && n.parse::<usize>().is_ok()
                    {
                        name = format!("arg{n}");
                    }
                    (name, ident.clone(), None)
                }
                pat => (
                    format!("arg{position}"),
                    format_ident!("idem_arg{}", position, span = Span::mixed_site()),
                    Some(pat.clone()),
                ),
            };
            let span = typed.ty.span();
            let mut role = if is_turn(&typed.ty) {
                Role::Turn
            } else {
                Role::Key
            };
            for attr in key_attrs {
                if role == Role::Turn {
                    errors.at(attr.span(), "the `Turn` parameter cannot be the `#[key]`");
                } else if let Some(first) = caller_key {
                    let mut error = syn::Error::new(
                        attr.span(),
                        "only one parameter can be the `#[key]`: it is the whole \
                         caller-supplied idempotency key",
                    );
                    error.combine(syn::Error::new(first, "the first `#[key]` is here"));
                    errors.push(error);
                } else {
                    caller_key = Some(attr.span());
                    role = Role::CallerKey;
                }
            }
            params.push(Param {
                role,
                name,
                binding,
                pattern,
                span,
            });
        }
        for (i, param) in params.iter().enumerate() {
            if params[..i].iter().any(|p| p.name == param.name) {
                errors.at(
                    param.span,
                    format!(
                        "two parameters are named `{}` in the key (a pattern parameter is named \
                         `argN` after its position): rename one",
                        param.name
                    ),
                );
            }
        }
        let listed = skip.iter().map(|i| (i, Role::Skip, "skip"));
        let listed: Vec<_> = listed
            .chain(ignore.iter().map(|i| (i, Role::Ignore, "ignore")))
            .collect();
        for (i, &(ident, role, option)) in listed.iter().enumerate() {
            let name = ident.unraw().to_string();
            if let Some((_, _, first)) = listed[..i].iter().find(|(s, _, _)| s.unraw() == name) {
                errors.at(
                    ident.span(),
                    format!("`{name}` is already listed in `{first}(..)`"),
                );
                continue;
            }
            match params.iter_mut().find(|p| p.name == name) {
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
                Some(p) if p.role == Role::Turn => errors.at(
                    ident.span(),
                    format!(
                        "`{name}` is the turn: it is never part of the key, no need to {option} it"
                    ),
                ),
                Some(p) if p.role == Role::CallerKey => errors.at(
                    ident.span(),
                    format!("`{name}` is the `#[key]`: it cannot be in `{option}(..)`"),
                ),
                Some(p) => p.role = role,
            }
        }
        Params(params)
    }

    /// The new body: descriptor, digest of the arguments, and the engine call around the old
    /// body.
    fn prelude(
        &self,
        private: &TokenStream,
        info: &TokenStream,
        ret: &Type,
        options: &IdempotentOptions,
        body: Vec<Stmt>,
    ) -> TokenStream {
        let tool = Ident::new("__IDEM_TOOL", Span::call_site());
        let digest = Ident::new("idem_digest", Span::mixed_site());
        let skip_traits = self
            .0
            .iter()
            .any(|p| p.role == Role::Skip)
            .then(|| quote!(use #private::{SkipViaNothing as _, SkipViaSerialize as _};));
        let init = match self.0.iter().find(|p| p.role == Role::Turn) {
            Some(turn) => {
                let binding = &turn.binding;
                quote!(#private::Digest::with_turn(&#tool, &#binding))
            }
            None => quote!(#private::Digest::from_scope(&#tool)),
        };
        let args = self.0.iter().filter_map(|p| {
            let (binding, name, at) = (&p.binding, &p.name, p.span);
            let path = respan(private.clone(), at);
            match p.role {
                Role::Key => Some(quote_spanned! {at=>
                    #path::key_arg(&mut #digest, #name, &#binding);
                }),
                Role::Skip => Some(quote_spanned! {at=>
                    (&#path::Skip(&#binding)).skip_arg(&mut #digest, #name);
                }),
                Role::CallerKey => Some(quote_spanned! {at=>
                    #digest.caller_key(&#binding);
                }),
                Role::Turn | Role::Ignore => None,
            }
        });
        let patterns = self.0.iter().filter_map(|p| {
            let (binding, pattern) = (&p.binding, p.pattern.as_ref()?);
            Some(quote!(let #pattern = #binding;))
        });
        let store = match &options.store {
            Some(store) => {
                let path = respan(private.clone(), store.span());
                quote_spanned!(store.span()=> #private::Some(#path::StoreRef::store_arc(&(#store))))
            }
            None => quote!(#private::None),
        };
        let runner = if options.cache_errors {
            "run_caching_errors"
        } else {
            "run"
        };
        let runner = Ident::new(runner, ret.span());
        let runner_path = respan(quote!(#private::#runner), ret.span());
        let tool_future = quote! {
            async move {
                #(#patterns)*
                #(#body)*
            }
        };
        // Every bound on the result type is checked at this call, and each is reported where
        // the return type is written (once: errors with equal spans and messages are merged).
        let mut run_args = Group::new(
            proc_macro2::Delimiter::Parenthesis,
            quote!(#digest, #store, #tool_future),
        );
        run_args.set_span(ret.span());
        let await_ = respan(quote!(.await), ret.span());
        let run = quote!(#runner_path::<#ret, _> #run_args #await_);
        quote! {
            static #tool: #private::ToolInfo = #info;
            #skip_traits
            let mut #digest = #init;
            #(#args)*
            #run
        }
    }

    /// Names pattern parameters `idem_argN` in the signature (destructured again in the body).
    fn rename_patterns(&self, func: &mut ItemFn) {
        let mut params = self.0.iter();
        for input in &mut func.sig.inputs {
            let FnArg::Typed(typed) = input else { continue };
            let Some(param) = params.next() else { return };
            if param.pattern.is_some() {
                let binding = &param.binding;
                *typed.pat = parse_quote!(#binding);
            }
        }
    }
}

/// The `…::__private` path and the `ToolInfo` expression of the `#[idempotent]` tool `ident`:
/// `ToolInfo::idempotent(name).with_…(…)`.
pub(crate) fn idempotent_info(
    ident: &Ident,
    options: &IdempotentOptions,
) -> (TokenStream, TokenStream) {
    let private = private_path(options.krate.as_ref());
    let name = options
        .name
        .as_ref()
        .map_or_else(|| ident.unraw().to_string(), syn::LitStr::value);
    let mut info = quote!(#private::ToolInfo::idempotent(#name));
    if let Some(version) = options.version {
        let version = Literal::u32_unsuffixed(version);
        info = quote!(#info.with_version(#version));
    }
    if let Some(ttl) = options.ttl {
        let secs = Literal::u64_unsuffixed(ttl.as_secs());
        let nanos = Literal::u32_unsuffixed(ttl.subsec_nanos());
        info = quote!(#info.with_ttl(#private::Duration::new(#secs, #nanos)));
    }
    if let Some(budget) = options.budget {
        let budget = Literal::u32_unsuffixed(budget);
        info = quote!(#info.with_budget(#budget));
    }
    if options.cache_errors {
        info = quote!(#info.with_cache_errors());
    }
    (private, info)
}

/// The `…::__private` path and the `ToolInfo` expression of the `#[read_only]` tool `ident`.
pub(crate) fn read_only_info(ident: &Ident, krate: Option<&Path>) -> (TokenStream, TokenStream) {
    let private = private_path(krate);
    let name = ident.unraw().to_string();
    let info = quote!(#private::ToolInfo::read_only(#name));
    (private, info)
}

/// `::idem::__private`, or `<crate = "…">::__private`.
fn private_path(krate: Option<&Path>) -> TokenStream {
    match krate {
        Some(krate) => quote!(#krate::__private),
        None => quote!(::idem::__private),
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

/// The compile-time descriptor next to the function: `const __idem_tool_<fn>: ToolInfo`, a
/// free constant for a function, an associated constant for a method (see
/// [`emits_own_descriptor`]).
fn descriptor(func: &ItemFn, private: &TokenStream, info: &TokenStream) -> Option<TokenStream> {
    emits_own_descriptor(&func.sig, &func.vis)
        .then(|| descriptor_const(&func.vis, &func.sig.ident, private, info))
}

/// `#vis const __idem_tool_<fn>: ToolInfo = #info;`.
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

fn descriptor_ident(ident: &Ident) -> Ident {
    format_ident!("__idem_tool_{}", ident, span = ident.span())
}

/// `#[read_only]`.
pub(crate) fn read_only(args: TokenStream, item: TokenStream) -> TokenStream {
    let mut errors = Errors::default();
    let krate = parse_read_only(args, &mut errors);
    let Ok(mut func) = syn::parse2::<ItemFn>(item.clone()) else {
        errors.at(
            Span::call_site(),
            "`#[read_only]` applies to a function or a method with a body",
        );
        return fail(errors, item);
    };
    strip_conflicting(&mut func.attrs, "idempotent", "read_only", &mut errors);
    for input in &func.sig.inputs {
        let span = match input {
            FnArg::Receiver(r) if r.reference.is_some() && r.mutability.is_some() => r.span(),
            FnArg::Typed(t) if matches!(&*t.ty, Type::Reference(r) if r.mutability.is_some()) => {
                t.ty.span()
            }
            _ => continue,
        };
        errors.at(
            span,
            "a `#[read_only]` tool cannot take a `&mut` parameter: it could change state through \
             it; take `&` instead, or make the tool `#[idempotent]`",
        );
    }
    if errors.peek().is_some() {
        return fail(errors, func.into_token_stream());
    }
    let (private, info) = read_only_info(&func.sig.ident, krate.as_ref());
    let descriptor = descriptor(&func, &private, &info);
    quote!(#descriptor #func)
}

/// `tools![$crate; a, b::c, Type::method]`.
pub(crate) fn tools(input: TokenStream) -> TokenStream {
    let mut tokens = input.into_iter();
    let krate: TokenStream = tokens
        .by_ref()
        .take_while(|t| !matches!(t, TokenTree::Punct(p) if p.as_char() == ';'))
        .collect();
    let rest: TokenStream = tokens.collect();
    let parser = Punctuated::<Path, Token![,]>::parse_terminated;
    let paths = match syn::parse::Parser::parse2(parser, rest) {
        Ok(paths) => paths,
        Err(error) => {
            let mut error = error.to_compile_error();
            error.extend(quote!(&[]));
            return error;
        }
    };
    let entries = paths.into_iter().map(|mut path| {
        if let Some(last) = path.segments.last_mut() {
            last.ident = descriptor_ident(&last.ident);
        }
        path
    });
    quote! {{
        const IDEM_TOOLS: &[#krate::__private::ToolInfo] = &[#(#entries),*];
        IDEM_TOOLS
    }}
}

/// The errors, then the item (so the rest of the crate and IDEs still see it).
pub(crate) fn fail(errors: Errors, item: TokenStream) -> TokenStream {
    let mut out = errors.into_compile_errors().unwrap_or_default();
    out.extend(item);
    out
}

/// Reports and removes the other classification attribute (`#[read_only]` next to
/// `#[idempotent]` or the reverse).
fn strip_conflicting(attrs: &mut Vec<Attribute>, other: &str, this: &str, errors: &mut Errors) {
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

/// Removes and returns the attributes whose path ends in `name`.
fn take_attrs(attrs: &mut Vec<Attribute>, name: &str) -> Vec<Attribute> {
    let (taken, kept) = std::mem::take(attrs)
        .into_iter()
        .partition(|a| a.path().segments.last().is_some_and(|s| s.ident == name));
    *attrs = kept;
    taken
}

/// `Turn` or `&Turn` (any path ending in `Turn`).
fn is_turn(ty: &Type) -> bool {
    let ty = match ty {
        Type::Reference(r) if r.mutability.is_none() => &*r.elem,
        ty => ty,
    };
    matches!(ty, Type::Path(p) if p.qself.is_none()
        && p.path.segments.last().is_some_and(|s| s.ident == "Turn" && s.arguments.is_none()))
}

/// `tokens` with their location moved to `at` (resolution unchanged), so errors point there.
fn respan(tokens: TokenStream, at: Span) -> TokenStream {
    tokens
        .into_iter()
        .map(|token| match token {
            TokenTree::Group(g) => {
                let mut group = Group::new(g.delimiter(), respan(g.stream(), at));
                group.set_span(g.span().located_at(at));
                TokenTree::Group(group)
            }
            mut token => {
                token.set_span(token.span().located_at(at));
                token
            }
        })
        .collect()
}

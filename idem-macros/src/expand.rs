//! Code generation for `#[idempotent]` and `#[read_only]`: parse ([`crate::attr`],
//! [`crate::ast`]), check ([`crate::valid`]), then emit the descriptor and the new body.

use proc_macro2::{Group, Span, TokenStream, TokenTree};
use quote::{ToTokens, format_ident, quote, quote_spanned};
use syn::ext::IdentExt;
use syn::spanned::Spanned;
use syn::{
    AttrStyle, Expr, FnArg, Ident, ItemFn, Pat, Stmt, Type, parse_quote, parse_quote_spanned,
};

use crate::ast::{Form, LazyFn, Param, Role, ToolFn, parsed_body};
use crate::attr::{IdempotentOptions, Located, ReadOnlyOptions};
use crate::descriptor::{idempotent_info, own_descriptor, read_only_info};
use crate::errors::{Errors, fail};
use crate::owned;
use crate::placement::{CUT_OFF, Run, Unchecked};
use crate::receiver::{replace_self, self_binding};
use crate::valid::{self, Plan, mentions};

/// `#[idempotent(...)]`.
pub(crate) fn idempotent(args: TokenStream, item: TokenStream) -> TokenStream {
    let mut errors = Errors::default();
    let options = IdempotentOptions::parse(args, &mut errors);
    let Ok(LazyFn(func)) = syn::parse2::<LazyFn>(item.clone()) else {
        errors.at(
            Span::call_site(),
            "`#[idempotent]` applies to an `async fn` with a body (a function or a method)",
        );
        return fail(errors, item);
    };
    let mut tool = ToolFn::read(func);
    let plan = valid::idempotent(&mut tool, &options, &mut errors);
    let (private, info) = idempotent_info(&tool.func.sig.ident, &options);
    let in_tool_impl = options.impl_type.is_some();
    let descriptor = own_descriptor(
        &tool.func.sig,
        &tool.func.vis,
        in_tool_impl,
        &private,
        &info,
    );
    // With its errors, the function keeps its descriptor (from the options that parsed): a
    // `tools![]` that lists it reports nothing more, where it would say the tool is not
    // annotated.
    if errors.any() {
        let func = tool.func.into_token_stream();
        return fail(errors, quote!(#descriptor #func));
    }
    let method = tool.func.sig.ident.clone();
    let ToolFn {
        mut func,
        form,
        params,
        receiver,
        ..
    } = tool;
    let (ret, mut body, pin) = match form {
        Form::Native(ret) => (ret, func.block.stmts.clone(), None),
        Form::AsyncTrait { output, pin, inner } => (output, inner.block.stmts, Some(pin)),
        // Reported by `valid::idempotent`.
        Form::NoReturn | Form::NotAsync => return fail(errors, func.into_token_stream()),
    };
    if plan.run == Run::OnClone {
        body = match parsed_body(body) {
            Ok(body) => body,
            // Never the function as written alone: it would compile, and run, without idem.
            Err(error) => {
                errors.at(
                    error.span(),
                    format_args!(
                        "`#[idempotent]` reads this body to run it on a clone of `self` and \
                         could not: {error}. If rustc reports no error here, the body uses \
                         syntax idem cannot read yet: write `#[idempotent(attached)]` to run \
                         it as written, on the borrowed receiver"
                    ),
                );
                return fail(errors, func.into_token_stream());
            }
        };
        for capture in replace_self(&mut body) {
            errors.at(
                capture,
                "this format string names `self`, but the body runs on a clone of the \
                 receiver, which a name inside a string cannot reach: pass it as an argument \
                 (`format!(\"{:?}\", self)`, `format!(\"{me:?}\", me = self)`), or write \
                 `#[idempotent(attached)]` to run the body on the borrowed receiver",
            );
        }
        if errors.any() {
            return fail(errors, func.into_token_stream());
        }
    }
    // A detached function (no receiver) returns its call's future instead of awaiting it in
    // an `async fn` of its own: one future per tool, the body's, instead of two nested ones.
    // Only for a return type written `…Result<…>`: any other type is refused once by the
    // runner of an `async fn`, where this form would report it at every bound it misses.
    // And only under no other attribute macro: one below `#[idempotent]` (`tracing::instrument`,
    // a framework's tool macro) expects the `async fn` it was written on.
    let returns_future = plan.run == Run::Detached
        && receiver.is_none()
        && pin.is_none()
        && owned::names_a_result(&ret)
        && func.attrs.iter().all(owned::is_inert);
    rename_patterns(&params, &mut func);
    remove_transaction(&params, &mut func);
    let new_body = Body {
        private: &private,
        info: &info,
        ret: &ret,
        options: &options,
        plan: &plan,
        params: &params,
        receiver: receiver
            .as_ref()
            .map_or_else(Span::call_site, |r| r.self_token.span),
        method: &method,
        pin: pin.as_ref(),
        returns_future,
    }
    .tokens(body);
    // The braces carry the return type's span: rustc reports the bounds of the future held
    // across `.await` at the body's span, and this merges those reports with the others.
    let span = ret.span();
    if returns_future {
        func.sig.asyncness = None;
        let future = respan(quote!(#private::Future), span);
        func.sig.output = parse_quote_spanned!(span=> -> impl #future<Output = #ret>);
    }
    // Emitted as tokens, not parsed back into a `syn::Block`: parsing the generated body was
    // more than half of the macro's time.
    let (outer, inner): (Vec<_>, Vec<_>) = func
        .attrs
        .iter()
        .partition(|attr| matches!(attr.style, AttrStyle::Outer));
    let block = match pin {
        None => quote_spanned!(span=> { #(#inner)* #new_body }),
        Some(pin) => quote_spanned!(span=> { #(#inner)* #pin(async move { #new_body }) }),
    };
    let (vis, sig) = (&func.vis, &func.sig);
    quote!(#descriptor #(#outer)* #vis #sig #block)
}

/// What the new body of an `#[idempotent]` function is made from.
struct Body<'a> {
    private: &'a TokenStream,
    info: &'a TokenStream,
    ret: &'a Type,
    options: &'a IdempotentOptions,
    plan: &'a Plan,
    params: &'a [Param],
    /// Where the receiver's `self` is written (warnings about it point there).
    receiver: Span,
    /// The function's name.
    method: &'a Ident,
    /// `Box::pin`, for an `#[async_trait]` method.
    pin: Option<&'a syn::Expr>,
    /// The function returns the call's future ([`run_owned`]) rather than awaiting it.
    returns_future: bool,
}

impl Body<'_> {
    /// The descriptor and slot statics, the digest of the arguments, and the engine call around
    /// the old body.
    fn tokens(&self, body: Vec<Stmt>) -> TokenStream {
        let Body {
            private,
            info,
            ret,
            options,
            plan,
            params,
            pin,
            ..
        } = *self;
        let tool = Ident::new("__IDEM_TOOL", Span::call_site());
        let slot = Ident::new("__IDEM_SLOT", Span::call_site());
        let digest = Ident::new("idem_digest", Span::mixed_site());
        let skip_traits = params
            .iter()
            .any(|p| p.role == Role::Skip)
            .then(|| quote!(use #private::{SkipViaNothing as _, SkipViaSerialize as _};));
        let instance = self.instance();
        let init = match params.iter().find(|p| p.role == Role::Turn) {
            // Spanned at the parameter's type: a type of the user's own named `Turn` is
            // reported there (`TurnParam`'s message).
            Some(turn) => {
                // The type named as written: a binding of the macro's own (`_turn`) would
                // have rustc report the error at the attribute.
                let (binding, at, ty) = (&turn.binding, turn.span(), &turn.ty);
                let path = respan(private.clone(), at);
                let value = respan(quote!(&#binding), at);
                quote_spanned! {at=>
                    #path::Digest::with_turn::<#ty>(&#tool, &#slot, #instance, #value)
                }
            }
            None => quote!(#private::Digest::from_scope(&#tool, &#slot, #instance)),
        };
        let args = params.iter().filter_map(|p| arg(private, &digest, p));
        let patterns = params.iter().filter_map(|p| {
            let (binding, pattern, cfgs) = (&p.binding, p.pattern.as_ref()?, &p.cfgs);
            Some(match pattern {
                // A name starting with `_`, through a call: clippy's
                // `no_effect_underscore_binding` takes that for an effect.
                Pat::Ident(_) => quote!(#(#cfgs)* let #pattern = #private::identity(#binding);),
                _ => quote!(#(#cfgs)* let #pattern = #binding;),
            })
        });
        let store = match &options.store {
            Some(store) => {
                let path = respan(private.clone(), store.span());
                quote_spanned!(store.span()=> #private::Some(#path::StoreRef::store_arc(&(#store))))
            }
            None => quote!(#private::None),
        };
        let self_key = options
            .self_key
            .as_ref()
            .map(|self_key| self_key_arg(private, &digest, self_key));
        let at = ret.span();
        let body = quote! {
            #(#patterns)*
            #(#body)*
        };
        let (prelude, callee, tool_future) = self.call(&body);
        let callee = respan(callee, at);
        // How results are recorded, with the check of an `Ok` that reports a failure in-band
        // (autoref specialization on the return type, whatever it is written as: an MCP
        // `CallToolResult` with `isError`; `ok_failure!` is `None` when idem is built without
        // `rmcp`, which spares rustc the probe).
        let records = {
            let kind = match (options.cache_errors.is_some(), self.returns_future) {
                (true, false) => quote!(OkAndErr),
                (false, false) => quote!(OkOnly),
                (true, true) => quote!(ok_and_err::<#ret>),
                (false, true) => quote!(ok_only::<#ret>),
            };
            let check = quote!(#private::ok_failure!(#ret));
            respan(quote!(#private::#kind(#check)), at)
        };
        // Every bound on the result type is checked at this call, and each is reported where
        // the return type is written, once: errors with equal spans and messages are merged,
        // so every token of the call, the type argument included, carries that one span.
        // The body is kept in the caller's future (`&mut Some(body)`, a temporary that lives
        // until the call is awaited) until the key is claimed; on a clone of `self`, the slot
        // is filled by the runner from the closure that takes the clone.
        // A function that returns the future has its result type's bounds checked by the
        // codec's (the future's type then needs none of them), and its boxed body named: the
        // runner's arguments are all names, spanned at the return type.
        let mut owned = TokenStream::new();
        let (records, body_arg) = match plan.run {
            Run::OnClone => (records, quote!(&mut #private::None, #tool_future)),
            Run::Transactional => (records, tool_future),
            _ if self.returns_future => {
                let codec = Ident::new("idem_codec", Span::mixed_site().located_at(at));
                let body = Ident::new("idem_body", Span::mixed_site().located_at(at));
                owned = quote! {
                    let #codec = #records;
                    let #body = #tool_future;
                };
                (codec.into_token_stream(), body.into_token_stream())
            }
            _ => (records, quote!(&mut #private::Some(#tool_future))),
        };
        let mut run_args = Group::new(
            proc_macro2::Delimiter::Parenthesis,
            quote!(#digest, #store, #records, #body_arg),
        );
        run_args.set_span(at);
        // An `async fn` body's type is known, so `R` is inferred: naming it would have rustc
        // check the bounds twice, once with our messages and once with its own. The
        // `#[async_trait]` block's type is not known, so there it is named.
        let turbofish = match pin {
            None => TokenStream::new(),
            Some(_) => {
                let ret_arg = respan(ret.to_token_stream(), at);
                let rest = if plan.run == Run::OnClone {
                    quote!(_, _, _)
                } else {
                    quote!(_, _)
                };
                respan(quote!(::<#ret_arg, #rest>), at)
            }
        };
        let await_ = if self.returns_future {
            TokenStream::new()
        } else {
            respan(quote!(.await), at)
        };
        let run = quote!(#callee #turbofish #run_args #await_);
        // With `cache_errors`, the error type's bounds are checked first, by a function whose
        // message names `cache_errors`, spanned like the runner's call (whose same error is then
        // merged into this one).
        // (A function that returns the future has them checked by its codec, `ok_and_err`.)
        let cached_err = options
            .cache_errors
            .filter(|_| !self.returns_future)
            .map(|_| {
                let call = quote!(#private::cached_err::<#ret>(););
                respan(resolved_at_call_site(call), at)
            });
        quote! {
            static #tool: #private::ToolInfo = #info;
            static #slot: #private::ToolSlot = #private::ToolSlot::new(#private::module_path!());
            #skip_traits
            let mut #digest = #init;
            #self_key
            #(#args)*
            #cached_err
            #prelude
            #owned
            #run
        }
    }

    /// What runs the body: the statements before the call (the receiver's clone or borrow, or
    /// the warning), the function or method called, and the body's future (or, on a clone,
    /// the closure that makes it from the receiver).
    fn call(&self, body: &TokenStream) -> (TokenStream, TokenStream, TokenStream) {
        let Body {
            private,
            ret,
            plan,
            receiver,
            ..
        } = *self;
        let at = ret.span();
        match plan.run {
            Run::OnClone => {
                // Autoref specialization: `CloneSelf` (an `Owned` clone) if `Self: Clone +
                // Send + Sync + 'static`, else `BorrowSelf` (the receiver borrowed); the
                // `#[tool_impl]` block warns about the latter, once (`tool_impl::attached`).
                let holder = Ident::new("idem_receiver", Span::mixed_site());
                let self_binding = self_binding();
                let pick = Ident::new("idem_receiver", receiver);
                let prelude = quote! {
                    use #private::{CloneSelf as _, BorrowSelf as _};
                    let #holder = (&&#private::Receiver(self)).#pick();
                };
                let method = Ident::new("run", Span::call_site().located_at(at));
                let typed = self.typed();
                let future = quote! {
                    move |#holder| #typed(async move {
                        let #self_binding = &*#holder;
                        #body
                    })
                };
                // The receiver in parentheses spanned like the rest of the call, so that the call's
                // span is the return type's: an error about a bound of `run` is then reported
                // there, once, merged with the same error from the runner's other bounds.
                let mut receiver = Group::new(proc_macro2::Delimiter::Parenthesis, quote!(#holder));
                receiver.set_span(Span::call_site().located_at(at));
                (prelude, quote!(#receiver.#method), future)
            }
            Run::Transactional => {
                let Some(tx) = self.params.iter().find(|p| p.role == Role::Transaction) else {
                    unreachable!("a transactional tool has its `#[transaction]` parameter");
                };
                let (binding, ty) = (&tx.binding, &tx.ty);
                let check = respan(private.clone(), tx.span());
                let prelude = quote_spanned! {tx.span()=>
                    #check::transactional_enabled::<()>();
                };
                let conn = Ident::new("idem_conn", Span::mixed_site());
                // The binding is made from the connection by a trait whose message names the
                // type to write, reported at the parameter's type.
                let from_conn = quote_spanned! {tx.span()=>
                    <#ty as #check::TransactionParam<'_>>::from_conn(#conn)
                };
                let runner = Ident::new("run_transactional", at);
                let future = quote! {
                    async move |#conn: &mut #private::PgConnection| -> #ret {
                        let #binding: #ty = #from_conn;
                        #body
                    }
                };
                (prelude, quote!(#private::#runner), future)
            }
            run => {
                // A `&self` tool of a generic `#[tool_impl]` block runs attached too: the block
                // says so, once (`tool_impl::attached`). Outside one, the method says it itself.
                let prelude = (run == Run::AttachedWarned(Unchecked::NoToolImpl))
                    .then(|| outside_tool_impl(self.method, receiver));
                if self.returns_future {
                    // Every parameter the key reads moves into the body, as into an `async
                    // fn`'s future, and is dropped when it ends. An `ignore`d one is the
                    // body's alone: moved in if the body uses it, else reported unused, as in
                    // the `async fn` form (tests/ui/unused_parameters.rs).
                    // The block spanned at the return type, where an error about it (not
                    // `Send`) is reported, as the runner of an `async fn` reports it.
                    let bindings = self
                        .params
                        .iter()
                        .filter(|p| p.role != Role::Ignore)
                        .map(|p| {
                            let (binding, cfgs) = (&p.binding, &p.cfgs);
                            quote!(#(#cfgs)* let _ = &#binding;)
                        });
                    let boxed = respan(quote!(#private::boxed::<#ret, _>), at);
                    let mut block = Group::new(
                        proc_macro2::Delimiter::Brace,
                        quote! {
                            #(#bindings)*
                            #body
                        },
                    );
                    block.set_span(at);
                    // The digest, for the body's type (`Digest::body_is`).
                    let digest = Ident::new("idem_digest", Span::mixed_site());
                    let future = quote_spanned!(at=> #boxed(&mut #digest, async move #block));
                    return (quote!(), quote!(#private::run_owned), future);
                }
                let runner = if run == Run::Detached {
                    "run_detached"
                } else {
                    "run"
                };
                let runner = Ident::new(runner, at);
                let typed = self.typed();
                let future = quote! {
                    #typed(async move {
                        #body
                    })
                };
                (quote!(#prelude), quote!(#private::#runner), future)
            }
        }
    }
}

impl Body<'_> {
    /// The instantiation the body is compiled for, checked at each call: one `static` slot
    /// serves every instantiation of a generic item — a trait's default method on each
    /// implementing type, a method of a generic `impl` block — under one name, so calls on two
    /// types would share keys unless something of the type is in them. Unchecked (`false`)
    /// for a `self_key` that names the type (`Self`, or a parameter of the `#[tool_impl]`
    /// block) or is a literal (`self_key = "ledger"`: every type is one service, as the user
    /// says); checked for any other (`self.account`, the receiver's identity alone, the same
    /// for two types; `tenant()` or a task-local read, which say nothing of the type either).
    /// The function's own generic arguments (its type and const parameters, `impl Trait`
    /// arguments) are left out of the comparison at run time (`Instance::admits`): those
    /// instantiations are one tool, told apart by their arguments, which `valid` makes sure of
    /// for a named parameter — it must be in the type of an argument in the key
    /// (`valid::generics::in_key`).
    fn instance(&self) -> TokenStream {
        let params = &self.options.impl_params;
        let per_type = self.options.self_key.as_ref().is_some_and(|self_key| {
            let tokens = self_key.value.to_token_stream();
            mentions(tokens, &|i| i == "Self" || params.contains(i)) || is_literal(&self_key.value)
        });
        // Checked with the body's type, which the runner takes (`Digest::body_is`).
        let checked = !per_type;
        quote!(#checked)
    }

    /// `typed::<R, _>`, which gives the body's future the declared return type as its output,
    /// so that an error about it names that type (`u32`, not `{integer}`), and a body of
    /// another type gets rustc's own mismatch.
    fn typed(&self) -> TokenStream {
        let (private, ret) = (self.private, self.ret);
        respan(quote!(#private::typed::<#ret, _>), ret.span())
    }
}

/// Whether `expr` is a literal (`"ledger"`, `7`, `-1`, a tuple of them), in parentheses or an
/// invisible group or not: the one `self_key` that says every type is one service. Any other
/// expression that does not
/// name the type (`tenant()`, a task-local read, `self.account`) may be the same for two types
/// without the user meaning it, so their calls are checked.
fn is_literal(expr: &Expr) -> bool {
    match expr {
        Expr::Lit(_) => true,
        Expr::Unary(unary) => matches!(unary.op, syn::UnOp::Neg(_)) && is_literal(&unary.expr),
        Expr::Tuple(tuple) => !tuple.elems.is_empty() && tuple.elems.iter().all(is_literal),
        Expr::Paren(inner) => is_literal(&inner.expr),
        Expr::Group(inner) => is_literal(&inner.expr),
        _ => false,
    }
}

/// The warning of a `&self` tool outside `#[tool_impl]`, which runs attached: a deprecated
/// function of its own, named after it, called at its receiver.
fn outside_tool_impl(method: &Ident, receiver: Span) -> TokenStream {
    let name = method.unraw();
    let note = format!(
        "`{name}` takes `&self` and runs attached, in the caller's task, because its `impl` \
         block is not under `#[idem_tools::tool_impl]`, so idem cannot check that its type is \
         `Clone + Send + Sync + 'static`: {CUT_OFF}. To run it detached, on a clone of `self`: \
         add `#[idem_tools::tool_impl]` to the `impl` block of a `Clone + Send + Sync + \
         'static` type, or take `self: Arc<Self>` (the one way for a trait's default method, \
         which has no such block). To keep it attached, write `#[idempotent(attached)]`"
    );
    let warning = format_ident!("{}_runs_attached", name, span = receiver);
    quote! {
        #[allow(non_snake_case)]
        #[deprecated(note = #note)]
        const fn #warning() {}
        #warning();
    }
}

/// `self_key(&mut digest, &(EXPR))`. The `&(…)` spans the expression (the `&` at its first
/// token, the parentheses at its last), so that an error about its type underlines all of it.
fn self_key_arg(private: &TokenStream, digest: &Ident, self_key: &Located<Expr>) -> TokenStream {
    let (expr, at) = (&self_key.value, self_key.span);
    let path = respan(private.clone(), at);
    let tokens: Vec<TokenTree> = expr.to_token_stream().into_iter().collect();
    let first = tokens.first().map_or(at, TokenTree::span);
    let last = tokens.last().map_or(at, TokenTree::span);
    let mut value = Group::new(proc_macro2::Delimiter::Parenthesis, quote!(#expr));
    value.set_span(last);
    let borrow = quote_spanned!(first=> &);
    quote_spanned!(at=> #path::self_key(&mut #digest, #borrow #value);)
}

/// The statement adding parameter `p` to the digest, if it is in the key or the fingerprint,
/// under the parameter's own `#[cfg(…)]` attributes.
fn arg(private: &TokenStream, digest: &Ident, p: &Param) -> Option<TokenStream> {
    let statement = arg_statement(private, digest, p)?;
    let cfgs = &p.cfgs;
    Some(quote!(#(#cfgs)* #statement))
}

/// The statement of [`arg`], without the parameter's `#[cfg(…)]`.
fn arg_statement(private: &TokenStream, digest: &Ident, p: &Param) -> Option<TokenStream> {
    let (binding, name, at) = (&p.binding, &p.name, p.span());
    let path = respan(private.clone(), at);
    match p.role {
        Role::Key => {
            // Errors point at the parameter's name (its type, for a pattern).
            let at = if p.pattern.is_none() {
                binding.span()
            } else {
                at
            };
            let path = respan(private.clone(), at);
            // The argument, spanned at the parameter's name, and the type argument `_` too:
            // the error points there, with no macro backtrace. (A type named like the
            // parameter, for the note to say `skip(<its name>)`, cost rustc a trait selection
            // per parameter: 2.8% of its instructions for a crate of two-argument tools.)
            let value = quote_spanned!(binding.span()=> &#binding);
            Some(quote_spanned! {at=>
                #path::key_arg::<_>(&mut #digest, #name, #value);
            })
        }
        Role::Skip => Some(quote_spanned! {at=>
            (&#path::Skip(&#binding)).skip_arg(&mut #digest, #name);
        }),
        // The binding as written: an error about its type points at it. A pattern's (or a
        // name's starting with `_`) is the macro's own, which rustc would report at the
        // attribute: its type is then named, as written, and the error points there.
        // (Not an `impl Trait` type, which a path cannot name.)
        // A pattern's name (`argN`, also async-trait's `__argN`) is the key's, not one the
        // model knows: the model is then told of "the idempotency key" without a name (`""`).
        Role::CallerKey => Some({
            let positional = matches!(&p.pattern, Some(pat) if !matches!(pat, Pat::Ident(_)))
                || crate::ast::async_trait_position(binding).is_some();
            let shown = if positional { "" } else { name.as_str() };
            match p.pattern {
                Some(_) if !mentions(p.ty.to_token_stream(), &|i| i == "impl") => {
                    let ty = &p.ty;
                    quote_spanned! {at=>
                        #digest.caller_key::<#ty>(#shown, &#binding);
                    }
                }
                _ => quote_spanned! {at=>
                    #digest.caller_key(#shown, &#binding);
                },
            }
        }),
        Role::Turn | Role::Ignore | Role::Transaction => None,
    }
}

/// Takes the `#[transaction]` parameter out of the signature: the engine passes it, callers
/// don't.
fn remove_transaction(params: &[Param], func: &mut ItemFn) {
    let mut roles = params.iter().map(|p| p.role);
    func.sig.inputs = std::mem::take(&mut func.sig.inputs)
        .into_iter()
        .filter(|input| match input {
            FnArg::Receiver(_) => true,
            FnArg::Typed(_) => roles.next() != Some(Role::Transaction),
        })
        .collect();
}

/// Names pattern parameters `idem_argN` in the signature (destructured again in the body).
fn rename_patterns(params: &[Param], func: &mut ItemFn) {
    let mut params = params.iter();
    for input in &mut func.sig.inputs {
        let FnArg::Typed(typed) = input else { continue };
        let Some(param) = params.next() else { return };
        if param.pattern.is_some() {
            let binding = &param.binding;
            *typed.pat = parse_quote!(#binding);
        }
    }
}

/// `#[read_only]`: the function untouched, its descriptor next to it.
pub(crate) fn read_only(args: TokenStream, item: TokenStream) -> TokenStream {
    let mut errors = Errors::default();
    let options = ReadOnlyOptions::parse(args, &mut errors);
    let Ok(LazyFn(mut func)) = syn::parse2::<LazyFn>(item.clone()) else {
        errors.at(
            Span::call_site(),
            "`#[read_only]` applies to a function or a method with a body",
        );
        return fail(errors, item);
    };
    valid::read_only(&mut func, &options, &mut errors);
    let (private, info) = read_only_info(&func.sig.ident, &options);
    let in_tool_impl = options.impl_type.is_some();
    let descriptor = own_descriptor(&func.sig, &func.vis, in_tool_impl, &private, &info);
    // With its errors, the function keeps its descriptor, as `#[idempotent]`'s does.
    if errors.any() {
        return fail(errors, quote!(#descriptor #func));
    }
    quote!(#descriptor #func)
}

/// `tokens` resolved at the call site (where a user's tokens resolve anyway), so that a span
/// made from them has one syntax context, the one of the generated code around them.
fn resolved_at_call_site(tokens: TokenStream) -> TokenStream {
    tokens
        .into_iter()
        .map(|token| match token {
            TokenTree::Group(g) => {
                let mut group = Group::new(g.delimiter(), resolved_at_call_site(g.stream()));
                group.set_span(g.span().resolved_at(Span::call_site()));
                TokenTree::Group(group)
            }
            mut token => {
                token.set_span(token.span().resolved_at(Span::call_site()));
                token
            }
        })
        .collect()
}

/// `tokens` with their location moved to `at` (resolution unchanged), so errors point there.
pub(crate) fn respan(tokens: TokenStream, at: Span) -> TokenStream {
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

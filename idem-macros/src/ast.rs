//! The input model: what an annotated function is made of, read from its tokens with no
//! judgement. The rules live in [`crate::valid`], the generated code in [`crate::expand`].

use proc_macro2::{Delimiter, Group, Span, TokenStream, TokenTree};
use quote::format_ident;
use syn::ext::IdentExt;
use syn::parse::discouraged::Speculative;
use syn::parse::{Parse, ParseStream, Parser};
use syn::spanned::Spanned;
use syn::{
    Attribute, Block, Expr, ExprAsync, FnArg, GenericArgument, Ident, ImplItem, ImplItemFn, Item,
    ItemFn, ItemImpl, Pat, PatIdent, PathArguments, Receiver, ReturnType, Signature, Stmt, Token,
    Type, TypeParamBound, Visibility, braced, token,
};

/// A function item whose body, if it is an `async fn`'s, is kept as tokens (one verbatim
/// statement; [`parsed_body`] parses it where needed): the macros emit it as written, and
/// parsing it into statements only to print them again was most of their time for a tool with
/// a body of any length. A function that is not `async` is parsed whole, for
/// [`async_trait_form`] to read.
pub(crate) struct LazyFn(pub ItemFn);

impl Parse for LazyFn {
    fn parse(input: ParseStream<'_>) -> syn::Result<Self> {
        let mut attrs = input.call(Attribute::parse_outer)?;
        let vis: Visibility = input.parse()?;
        let sig: Signature = input.parse()?;
        let block = Box::new(lazy_block(input, &sig, &mut attrs)?);
        Ok(LazyFn(ItemFn {
            attrs,
            vis,
            sig,
            block,
        }))
    }
}

/// The braces of a function with signature `sig`: an `async` one's statements as tokens (one
/// verbatim statement), another's parsed (as tokens too if they do not parse); the body's inner
/// attributes go to `attrs`, as syn keeps them.
fn lazy_block(
    input: ParseStream<'_>,
    sig: &Signature,
    attrs: &mut Vec<Attribute>,
) -> syn::Result<Block> {
    let content;
    let brace_token = braced!(content in input);
    attrs.extend(content.call(Attribute::parse_inner)?);
    let tokens: TokenStream = content.parse()?;
    // A body that does not parse is kept as written too: its syntax error is rustc's to report,
    // at its tokens (`#[async_trait]`'s bodies, read for their form, always parse).
    let stmts = match sig.asyncness {
        None => Block::parse_within.parse2(tokens.clone()).ok(),
        Some(_) => None,
    }
    .unwrap_or_else(|| vec![Stmt::Item(Item::Verbatim(tokens))]);
    Ok(Block { brace_token, stmts })
}

/// An `impl` block whose `async` methods' bodies are kept as tokens, as [`LazyFn`] keeps a
/// function's: `#[tool_impl]` reads the block's header and its methods' attributes and
/// signatures only (each method's own `#[idempotent]` reads it again as a [`LazyFn`]).
pub(crate) struct LazyImpl(pub ItemImpl);

impl Parse for LazyImpl {
    fn parse(input: ParseStream<'_>) -> syn::Result<Self> {
        // The header (attributes, generics, trait, type, `where`) is what comes before the
        // last group, the braces of the items: parsed as an `impl` with none.
        let mut header = TokenStream::new();
        let items = loop {
            let token: TokenTree = input.parse()?;
            match token {
                TokenTree::Group(group)
                    if input.is_empty() && group.delimiter() == Delimiter::Brace =>
                {
                    break group;
                }
                token => header.extend([token]),
            }
        };
        header.extend([TokenTree::Group(Group::new(
            Delimiter::Brace,
            TokenStream::new(),
        ))]);
        let mut block: ItemImpl = syn::parse2(header)?;
        block.brace_token = token::Brace(items.delim_span());
        let read_items = |input: ParseStream<'_>| {
            block.attrs.extend(input.call(Attribute::parse_inner)?);
            while !input.is_empty() {
                block.items.push(lazy_item(input)?);
            }
            Ok(())
        };
        read_items.parse2(items.stream())?;
        Ok(LazyImpl(block))
    }
}

/// One item of an `impl` block: a method with its body as tokens, or any other item, parsed.
fn lazy_item(input: ParseStream<'_>) -> syn::Result<ImplItem> {
    let ahead = input.fork();
    let method = || -> syn::Result<ImplItemFn> {
        let mut attrs = ahead.call(Attribute::parse_outer)?;
        let vis: Visibility = ahead.parse()?;
        let defaultness: Option<Token![default]> = ahead.parse()?;
        let sig: Signature = ahead.parse()?;
        // A method that is not `async` is parsed whole: its body may be the `#[async_trait]`
        // form, which placement reads.
        let block = lazy_block(&ahead, &sig, &mut attrs)?;
        Ok(ImplItemFn {
            attrs,
            vis,
            defaultness,
            sig,
            block,
        })
    };
    match method() {
        Ok(method) => {
            input.advance_to(&ahead);
            Ok(ImplItem::Fn(method))
        }
        Err(_) => input.parse(),
    }
}

/// The statements of a body [`LazyFn`] kept as tokens, parsed (for a rewrite that must tell
/// expressions from items); a body parsed already is returned as it is.
pub(crate) fn parsed_body(stmts: Vec<Stmt>) -> syn::Result<Vec<Stmt>> {
    match stmts.as_slice() {
        [Stmt::Item(Item::Verbatim(tokens))] => Block::parse_within.parse2(tokens.clone()),
        _ => Ok(stmts),
    }
}

/// An `#[idempotent]` function, `#[key]` and `#[transaction]` attributes taken off its
/// parameters.
pub(crate) struct ToolFn {
    /// The function as it will be emitted (its body is replaced by the expansion).
    pub func: ItemFn,
    /// How its body is written.
    pub form: Form,
    /// The `self` parameter, if any.
    pub receiver: Option<Receiver>,
    /// `#[key]` attributes found on `self`.
    pub key_on_self: Vec<Attribute>,
    /// The other parameters, in order.
    pub params: Vec<Param>,
}

/// How the function is written.
pub(crate) enum Form {
    /// `async fn … -> R`.
    Native(Type),
    /// `#[async_trait]` already ran: `fn … -> Pin<Box<dyn Future<Output = R> + …>>` whose body
    /// is `Box::pin(async move { … })`.
    AsyncTrait {
        /// `R`.
        output: Type,
        /// The `Box::pin` path.
        pin: Expr,
        /// The `async move` block.
        inner: Box<ExprAsync>,
    },
    /// `async fn` without a return type.
    NoReturn,
    /// Neither `async` nor the `#[async_trait]` shape.
    NotAsync,
}

impl Form {
    /// `R`, the tool's return type.
    pub(crate) fn output(&self) -> Option<&Type> {
        match self {
            Form::Native(ty) | Form::AsyncTrait { output: ty, .. } => Some(ty),
            Form::NoReturn | Form::NotAsync => None,
        }
    }
}

/// What a parameter is to the key.
#[derive(Clone, Copy, PartialEq, Eq)]
pub(crate) enum Role {
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
    /// `#[transaction]`: the connection of the tool's transaction, passed by the engine (not
    /// an argument callers pass).
    Transaction,
}

/// One parameter after `self`.
pub(crate) struct Param {
    /// Its role; [`Role::Key`] or [`Role::Turn`] until the options are applied.
    pub role: Role,
    /// The name in the key: the identifier, or `argN` for a pattern (not for a name starting
    /// with `_`, bound again in the body like one).
    pub name: String,
    /// The variable holding the argument.
    pub binding: Ident,
    /// The pattern to destructure `binding` into, for pattern parameters.
    pub pattern: Option<Pat>,
    /// Its type.
    pub ty: Type,
    /// The `#[key]` attributes it carried.
    pub key_attrs: Vec<Attribute>,
    /// The `#[transaction]` attributes it carried.
    pub tx_attrs: Vec<Attribute>,
    /// Its `#[cfg(…)]` attributes, left on it: every statement the expansion writes about it
    /// carries them too, so that a parameter configured out is not read.
    pub cfgs: Vec<Attribute>,
}

impl Param {
    /// Where errors about it point: its type.
    pub(crate) fn span(&self) -> Span {
        self.ty.span()
    }
}

impl ToolFn {
    /// Reads `func`, removing the `#[key]` and `#[transaction]` attributes of its parameters.
    pub(crate) fn read(mut func: ItemFn) -> ToolFn {
        let form = if func.sig.asyncness.is_some() {
            match &func.sig.output {
                ReturnType::Type(_, ty) => Form::Native((**ty).clone()),
                ReturnType::Default => Form::NoReturn,
            }
        } else {
            async_trait_form(&func).unwrap_or(Form::NotAsync)
        };
        let mut receiver = None;
        let mut key_on_self = Vec::new();
        let mut params = Vec::new();
        let mut index = 0_usize;
        for input in &mut func.sig.inputs {
            let typed = match input {
                FnArg::Receiver(r) => {
                    key_on_self = take_attrs(&mut r.attrs, "key");
                    receiver = Some(r.clone());
                    continue;
                }
                FnArg::Typed(typed) => typed,
            };
            let position = index;
            index += 1;
            let key_attrs = take_attrs(&mut typed.attrs, "key");
            let tx_attrs = take_attrs(&mut typed.attrs, "transaction");
            let cfgs = typed
                .attrs
                .iter()
                .filter(|attr| attr.path().is_ident("cfg"))
                .cloned()
                .collect();
            let (name, binding, pattern) = match &*typed.pat {
                // A name starting with `_` is bound again in the body, as a pattern is: the key
                // reads the macro's own `idem_argN`, so that clippy's `used_underscore_binding`
                // does not take that reading for the user's, and the name keeps its hygiene (a
                // parameter a `macro_rules!` macro names is found). In the key, its name.
                Pat::Ident(PatIdent {
                    by_ref: None,
                    subpat: None,
                    ident,
                    ..
                }) if ident.to_string().starts_with('_')
                    && async_trait_position(ident).is_none() =>
                {
                    (
                        ident.unraw().to_string(),
                        format_ident!("idem_arg{}", position, span = Span::mixed_site()),
                        Some((*typed.pat).clone()),
                    )
                }
                Pat::Ident(PatIdent {
                    by_ref: None,
                    subpat: None,
                    ident,
                    ..
                }) => {
                    let name = match async_trait_position(ident) {
                        Some(n) => format!("arg{n}"),
                        None => ident.unraw().to_string(),
                    };
                    (name, ident.clone(), None)
                }
                pat => (
                    format!("arg{position}"),
                    format_ident!("idem_arg{}", position, span = Span::mixed_site()),
                    Some(pat.clone()),
                ),
            };
            let role = if is_turn(&typed.ty) {
                Role::Turn
            } else {
                Role::Key
            };
            params.push(Param {
                role,
                name,
                binding,
                pattern,
                ty: (*typed.ty).clone(),
                key_attrs,
                tx_attrs,
                cfgs,
            });
        }
        ToolFn {
            func,
            form,
            receiver,
            key_on_self,
            params,
        }
    }
}

/// `N` of a pattern parameter `#[async_trait]` named `__argN` (a name of its own expansion).
pub(crate) fn async_trait_position(ident: &Ident) -> Option<usize> {
    ident.to_string().strip_prefix("__arg")?.parse().ok()
}

/// Recognises the output of `#[async_trait]`.
fn async_trait_form(func: &ItemFn) -> Option<Form> {
    let ReturnType::Type(_, ty) = &func.sig.output else {
        return None;
    };
    let pin = last_segment_args(ty, "Pin")?;
    let boxed = last_segment_args(first_type_arg(pin)?, "Box")?;
    let Type::TraitObject(object) = first_type_arg(boxed)? else {
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

/// The first type argument of `<…>`.
pub(crate) fn first_type_arg(args: &PathArguments) -> Option<&Type> {
    let PathArguments::AngleBracketed(args) = args else {
        return None;
    };
    args.args.iter().find_map(|a| match a {
        GenericArgument::Type(t) => Some(t),
        _ => None,
    })
}

/// Removes and returns the attributes whose path ends in `name`.
pub(crate) fn take_attrs(attrs: &mut Vec<Attribute>, name: &str) -> Vec<Attribute> {
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

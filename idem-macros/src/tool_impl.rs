//! The expansion of `#[tool_impl]`: it gives the tool methods of an `impl` block their type's
//! name (`Type::method`, through the hidden option `__impl = Type` inserted into their
//! attributes), and emits the descriptors that the method-level macros cannot emit themselves.

use std::collections::HashSet;

use proc_macro2::{Span, TokenStream, TokenTree};
use quote::{ToTokens, quote};
use syn::punctuated::Punctuated;
use syn::{
    Attribute, GenericParam, Ident, ImplItem, ImplItemFn, ItemImpl, Meta, Type, WherePredicate,
    parse_quote,
};

use crate::attr::{IMPL_OPTION, IdempotentOptions, ReadOnlyOptions};
use crate::descriptor::{descriptor_const, emits_own_descriptor, idempotent_info, read_only_info};
use crate::errors::{Errors, fail};

/// `#[tool_impl]`: the `impl` block, its methods' classification attributes given
/// `__impl = Type`, then an inherent `impl` holding the descriptors of its `#[idempotent]` /
/// `#[read_only]` methods that have a receiver and no visibility.
pub(crate) fn tool_impl(args: TokenStream, item: TokenStream) -> TokenStream {
    let mut errors = Errors::default();
    if !args.is_empty() {
        errors.push(syn::Error::new_spanned(
            &args,
            "`#[tool_impl]` takes no options: give them to each method's `#[idempotent(...)]` \
             (including `crate = \"…\"` for a renamed `idem_tools`)",
        ));
    }
    let mut block = match syn::parse2::<ItemImpl>(item.clone()) {
        Ok(block) => block,
        Err(_) => {
            let hint = if syn::parse2::<syn::ItemFn>(item.clone()).is_ok() {
                "; on a function, `#[idempotent]` or `#[read_only]` alone emits its descriptor"
            } else {
                ""
            };
            errors.at(
                Span::call_site(),
                format!(
                    "`#[tool_impl]` applies to an `impl` block (inherent or trait impl) whose \
                     methods are `#[idempotent]` or `#[read_only]`{hint}"
                ),
            );
            return fail(errors, item);
        }
    };
    let Some(type_name) = type_name(&block.self_ty) else {
        errors.spanned(
            &block.self_ty,
            "`#[tool_impl]` needs a named self type (`impl Tool for MyType`): its methods are \
             named after it",
        );
        return fail(errors, item);
    };
    for item in &mut block.items {
        if let ImplItem::Fn(method) = item {
            name_after(method, &type_name);
        }
    }
    // With options given to it, the methods are still named (so that they report no errors of
    // their own about it), but no descriptors are emitted.
    if errors.any() {
        return fail(errors, block.into_token_stream());
    }
    let descriptors: Vec<TokenStream> = block
        .items
        .iter()
        .filter_map(|item| match item {
            ImplItem::Fn(method) => method_descriptor(method),
            _ => None,
        })
        .collect();
    if descriptors.is_empty() {
        return block.into_token_stream();
    }
    let (impl_generics, self_ty, where_clause) = inherent_header(&block);
    quote! {
        #block
        #[allow(clippy::multiple_inherent_impl)]
        impl #impl_generics #self_ty #where_clause {
            #(#descriptors)*
        }
    }
}

/// The descriptor of `method`, if it is classified and the method-level macro emits none.
/// An invalid or ambiguous classification is reported by the method-level macro: skipped here.
fn method_descriptor(method: &ImplItemFn) -> Option<TokenStream> {
    if emits_own_descriptor(&method.sig, &method.vis) {
        return None;
    }
    let mut classified = method.attrs.iter().filter_map(|attr| {
        let last = attr.path().segments.last()?;
        (last.ident == "idempotent" || last.ident == "read_only").then_some((last, attr))
    });
    let (last, attr) = classified.next()?;
    if classified.next().is_some() {
        return None;
    }
    let args = attr_args(attr)?;
    let mut errors = Errors::default();
    let ident = &method.sig.ident;
    let (private, info) = if last.ident == "idempotent" {
        let options = IdempotentOptions::parse(args, &mut errors);
        idempotent_info(ident, &options)
    } else {
        let options = ReadOnlyOptions::parse(args, &mut errors);
        read_only_info(ident, &options)
    };
    if errors.any() {
        return None;
    }
    Some(descriptor_const(&parse_quote!(pub), ident, &private, &info))
}

/// The last segment of the self type's path, without generic arguments: `Wrapper` for
/// `Wrapper<T>`, `X` for `&X`.
fn type_name(ty: &Type) -> Option<Ident> {
    match ty {
        Type::Path(path) => path.path.segments.last().map(|s| s.ident.clone()),
        Type::Reference(r) => type_name(&r.elem),
        Type::Paren(p) => type_name(&p.elem),
        Type::Group(g) => type_name(&g.elem),
        _ => None,
    }
}

/// Adds `__impl = Type` to the method's `#[idempotent]` / `#[read_only]` attributes (all of
/// them: two on one method are reported by the method-level macro).
fn name_after(method: &mut ImplItemFn, type_name: &Ident) {
    let option = Ident::new(IMPL_OPTION, Span::call_site());
    for attr in &mut method.attrs {
        let Some(last) = attr.path().segments.last() else {
            continue;
        };
        if last.ident != "idempotent" && last.ident != "read_only" {
            continue;
        }
        let added = quote!(#option = #type_name);
        match &mut attr.meta {
            Meta::Path(path) => {
                attr.meta = Meta::List(syn::MetaList {
                    path: path.clone(),
                    delimiter: syn::MacroDelimiter::Paren(Default::default()),
                    tokens: added,
                });
            }
            Meta::List(list) => {
                let tokens = &list.tokens;
                list.tokens = if tokens.is_empty() {
                    added
                } else {
                    quote!(#tokens, #added)
                };
            }
            Meta::NameValue(_) => {}
        }
    }
}

/// The arguments of `#[attr]` / `#[attr(...)]`; `None` for `#[attr = …]`.
fn attr_args(attr: &Attribute) -> Option<TokenStream> {
    match &attr.meta {
        Meta::Path(_) => Some(TokenStream::new()),
        Meta::List(list) => Some(list.tokens.clone()),
        Meta::NameValue(_) => None,
    }
}

/// `impl<…> SelfTy where …` for an inherent impl of the block's type. The type and const
/// parameters that do not appear in the self type (in a trait impl, those only the trait uses)
/// are dropped, with every bound and `where` predicate that mentions them: an inherent impl
/// cannot have unconstrained parameters (E0207), and the descriptors use none.
fn inherent_header(block: &ItemImpl) -> (TokenStream, TokenStream, TokenStream) {
    let mut in_self_ty = HashSet::new();
    idents(block.self_ty.to_token_stream(), &mut in_self_ty);
    let dropped: HashSet<String> = block
        .generics
        .params
        .iter()
        .filter_map(|param| match param {
            GenericParam::Type(t) => Some(t.ident.to_string()),
            GenericParam::Const(c) => Some(c.ident.to_string()),
            GenericParam::Lifetime(_) => None,
        })
        .filter(|ident| !in_self_ty.contains(ident))
        .collect();
    let mentions_dropped = |tokens: TokenStream| {
        let mut found = HashSet::new();
        idents(tokens, &mut found);
        found.iter().any(|ident| dropped.contains(ident))
    };
    let mut generics = block.generics.clone();
    generics.params = std::mem::take(&mut generics.params)
        .into_iter()
        .filter(|param| match param {
            GenericParam::Type(t) => !dropped.contains(&t.ident.to_string()),
            GenericParam::Const(c) => !dropped.contains(&c.ident.to_string()),
            GenericParam::Lifetime(_) => true,
        })
        .map(|mut param| {
            if let GenericParam::Type(t) = &mut param {
                t.bounds = std::mem::take(&mut t.bounds)
                    .into_iter()
                    .filter(|b| !mentions_dropped(b.to_token_stream()))
                    .collect();
                if t.bounds.is_empty() {
                    t.colon_token = None;
                }
            }
            param
        })
        .collect();
    if let Some(clause) = &mut generics.where_clause {
        let kept: Punctuated<WherePredicate, _> = std::mem::take(&mut clause.predicates)
            .into_iter()
            .filter(|p| !mentions_dropped(p.to_token_stream()))
            .collect();
        clause.predicates = kept;
    }
    if generics
        .where_clause
        .as_ref()
        .is_some_and(|c| c.predicates.is_empty())
    {
        generics.where_clause = None;
    }
    let (impl_generics, _, where_clause) = generics.split_for_impl();
    (
        impl_generics.to_token_stream(),
        block.self_ty.to_token_stream(),
        where_clause.to_token_stream(),
    )
}

/// Every identifier in `tokens`, at any depth.
fn idents(tokens: TokenStream, into: &mut HashSet<String>) {
    for token in tokens {
        match token {
            TokenTree::Ident(ident) => {
                into.insert(ident.to_string());
            }
            TokenTree::Group(group) => idents(group.stream(), into),
            TokenTree::Punct(_) | TokenTree::Literal(_) => {}
        }
    }
}

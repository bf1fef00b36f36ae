//! The header of the inherent `impl` that holds a block's descriptors.

use std::collections::HashSet;

use proc_macro2::{TokenStream, TokenTree};
use quote::ToTokens;
use syn::punctuated::Punctuated;
use syn::{GenericParam, Ident, ItemImpl, WherePredicate};

/// `impl<…> SelfTy where …` for an inherent impl of the block's type. The type and const
/// parameters that do not appear in the self type (in a trait impl, those only the trait uses)
/// are dropped, with every bound and `where` predicate that mentions them: an inherent impl
/// cannot have unconstrained parameters (E0207), and the descriptors use none.
pub(super) fn inherent_header(block: &ItemImpl) -> (TokenStream, TokenStream, TokenStream) {
    let dropped: HashSet<String> = type_and_const_params(block)
        .filter(|(_, in_self_ty)| !in_self_ty)
        .map(|(ident, _)| ident.to_string())
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

/// The block's type and const parameters, each with whether its self type names it.
pub(super) fn type_and_const_params(block: &ItemImpl) -> impl Iterator<Item = (&Ident, bool)> {
    let mut in_self_ty = HashSet::new();
    idents(block.self_ty.to_token_stream(), &mut in_self_ty);
    block.generics.params.iter().filter_map(move |param| {
        let ident = match param {
            GenericParam::Type(t) => &t.ident,
            GenericParam::Const(c) => &c.ident,
            GenericParam::Lifetime(_) => return None,
        };
        Some((ident, in_self_ty.contains(&ident.to_string())))
    })
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

//! The expansion of `#[tool_impl]`: it gives the tool methods of an `impl` block their type's
//! name (`Type__method`, through the hidden option `__impl = Type` inserted into their
//! attributes, with `__impl_generic` when the block is generic), emits the descriptors that the
//! method-level macros cannot emit themselves, and the fallbacks that make
//! `tools![method]` say to write `tools![Type::method]`.

use std::collections::HashSet;
use std::hash::{DefaultHasher, Hash, Hasher};

use proc_macro2::{Span, TokenStream, TokenTree};
use quote::{ToTokens, format_ident, quote};
use syn::ext::IdentExt;
use syn::punctuated::Punctuated;
use syn::{
    Attribute, GenericParam, Ident, ImplItem, ImplItemFn, ItemImpl, Meta, Type, WherePredicate,
    parse_quote,
};

use crate::attr::{IMPL_GENERIC_OPTION, IMPL_OPTION, IdempotentOptions, ReadOnlyOptions};
use crate::descriptor::{
    descriptor_const, descriptor_ident, emits_own_descriptor, idempotent_info, private_path,
    read_only_info,
};
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
    let generic = is_generic(&block);
    for item in &mut block.items {
        if let ImplItem::Fn(method) = item {
            name_after(method, &type_name, generic);
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
    let fallbacks = fallbacks(&block, &type_name);
    if descriptors.is_empty() {
        return quote!(#block #fallbacks);
    }
    let (impl_generics, self_ty, where_clause) = inherent_header(&block);
    quote! {
        #block
        #[allow(clippy::multiple_inherent_impl)]
        impl #impl_generics #self_ty #where_clause {
            #(#descriptors)*
        }
        #fallbacks
    }
}

/// Whether the block has generic parameters, or a lifetime other than `'static` in its self
/// type (`impl Tool for Client<'_>`, `impl Tool for &X`): the type of `self` may then not be
/// `'static`, which the generated code cannot test.
fn is_generic(block: &ItemImpl) -> bool {
    fn borrows(tokens: TokenStream) -> bool {
        let tokens: Vec<TokenTree> = tokens.into_iter().collect();
        tokens.iter().enumerate().any(|(i, token)| match token {
            TokenTree::Punct(p) if p.as_char() == '&' => true,
            TokenTree::Punct(p) if p.as_char() == '\'' => {
                !matches!(tokens.get(i + 1), Some(TokenTree::Ident(l)) if l == "static")
            }
            TokenTree::Group(g) => borrows(g.stream()),
            _ => false,
        })
    }
    !block.generics.params.is_empty() || borrows(block.self_ty.to_token_stream())
}

/// For each tool method, a descriptor under the method's bare name that makes `tools![]` fail
/// with "list it as `Type::method`", in a module of its own, glob-imported: a glob import is
/// shadowed by an item of the same name, so a function's own descriptor still wins.
fn fallbacks(block: &ItemImpl, type_name: &Ident) -> TokenStream {
    let methods: Vec<(&Ident, TokenStream)> = block
        .items
        .iter()
        .filter_map(|item| match item {
            ImplItem::Fn(method) => classified(method).map(|(_, attr)| (&method.sig.ident, attr)),
            _ => None,
        })
        .filter_map(|(ident, attr)| Some((ident, attr_args(attr)?)))
        .collect();
    let Some((_, first_args)) = methods.first() else {
        return TokenStream::new();
    };
    let krate = IdempotentOptions::parse(first_args.clone(), &mut Errors::default()).krate;
    let private = private_path(krate.as_ref());
    let ty = type_name.unraw();
    let generics = if has_type_arguments(&block.self_ty) {
        "::<…>"
    } else {
        ""
    };
    let consts = methods.iter().map(|(ident, _)| {
        let method = ident.unraw();
        let message = format!(
            "tools![]: `{method}` is a method of `{ty}`, not a function: list it as \
             `{ty}{generics}::{method}`"
        );
        let descriptor = descriptor_ident(ident);
        quote! {
            pub(super) const #descriptor: #private::ToolInfo =
                #private::method_listed_as_function(#message);
        }
    });
    let mut hasher = DefaultHasher::new();
    block.to_token_stream().to_string().hash(&mut hasher);
    let module = format_ident!("__idem_methods_of_{}_{:016x}", ty, hasher.finish());
    quote! {
        #[doc(hidden)]
        #[allow(non_snake_case, non_upper_case_globals, dead_code)]
        mod #module {
            #(#consts)*
        }
        #[allow(unused_imports)]
        use #module::*;
    }
}

/// Whether the last segment of the self type has generic arguments.
fn has_type_arguments(ty: &Type) -> bool {
    match ty {
        Type::Path(path) => path
            .path
            .segments
            .last()
            .is_some_and(|s| !s.arguments.is_none()),
        Type::Reference(r) => has_type_arguments(&r.elem),
        Type::Paren(p) => has_type_arguments(&p.elem),
        Type::Group(g) => has_type_arguments(&g.elem),
        _ => false,
    }
}

/// The method's one `#[idempotent]` or `#[read_only]` attribute (`None` for none, or two).
fn classified(method: &ImplItemFn) -> Option<(&Ident, &Attribute)> {
    let mut classified = method.attrs.iter().filter_map(|attr| {
        let last = attr.path().segments.last()?;
        (last.ident == "idempotent" || last.ident == "read_only").then_some((&last.ident, attr))
    });
    let found = classified.next()?;
    classified.next().is_none().then_some(found)
}

/// The descriptor of `method`, if it is classified and the method-level macro emits none.
/// An invalid or ambiguous classification is reported by the method-level macro: skipped here.
fn method_descriptor(method: &ImplItemFn) -> Option<TokenStream> {
    if emits_own_descriptor(&method.sig, &method.vis) {
        return None;
    }
    let (kind, attr) = classified(method)?;
    let args = attr_args(attr)?;
    let mut errors = Errors::default();
    let ident = &method.sig.ident;
    let (private, info) = if kind == "idempotent" {
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
/// them: two on one method are reported by the method-level macro), and `__impl_generic` to
/// its `#[idempotent]` ones if the block is generic.
fn name_after(method: &mut ImplItemFn, type_name: &Ident, generic: bool) {
    let option = Ident::new(IMPL_OPTION, Span::call_site());
    let generic_flag = Ident::new(IMPL_GENERIC_OPTION, Span::call_site());
    for attr in &mut method.attrs {
        let Some(last) = attr.path().segments.last() else {
            continue;
        };
        if last.ident != "idempotent" && last.ident != "read_only" {
            continue;
        }
        let added = if generic && last.ident == "idempotent" {
            quote!(#option = #type_name, #generic_flag)
        } else {
            quote!(#option = #type_name)
        };
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

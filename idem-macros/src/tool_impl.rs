//! The expansion of `#[tool_impl]`: it gives the tool methods of an `impl` block their type's
//! name (`Type__method`, through the hidden option `__impl = Type` inserted into their
//! attributes, with `__impl_generic` when the block is generic), emits the descriptors that the
//! method-level macros cannot emit themselves, and the fallbacks that make
//! `tools![method]` say to write `tools![Type::method]`.

use std::hash::{DefaultHasher, Hash, Hasher};

use proc_macro2::{Span, TokenStream};
use quote::{ToTokens, format_ident, quote};
use syn::ext::IdentExt;
use syn::{Attribute, Ident, ImplItem, ImplItemFn, ItemImpl, Meta, Type, parse_quote};

use crate::ast::LazyImpl;
use crate::attr::{
    IMPL_GENERIC_OPTION, IMPL_OPTION, IdempotentOptions, ImplOptions, ReadOnlyOptions,
};
use crate::descriptor::{
    descriptor_const, descriptor_ident, emits_own_descriptor, idempotent_info, private_path,
    read_only_info,
};
use crate::errors::{Errors, fail};
use crate::valid::borrows_non_static;

mod attached;
mod generic;
mod header;
use generic::generic_same_service;
use header::{inherent_header, type_and_const_params};

/// `#[tool_impl]`: the `impl` block, its methods' classification attributes given
/// `__impl = Type`, then an inherent `impl` holding the descriptors of its `#[idempotent]` /
/// `#[read_only]` functions that have no visibility (in a trait impl, all of them).
pub(crate) fn tool_impl(args: TokenStream, item: TokenStream) -> TokenStream {
    let mut errors = Errors::default();
    let options = ImplOptions::parse(args, &mut errors);
    let mut block = match syn::parse2::<LazyImpl>(item.clone()) {
        Ok(LazyImpl(block)) => block,
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
    // The block's type and const parameters: a `self_key` that names one of them tells the
    // types the block is compiled for apart.
    let generic = is_generic(&block).then(|| {
        type_and_const_params(&block)
            .map(|(param, _)| param.clone())
            .collect::<Vec<_>>()
    });
    generic_same_service(&block, &options, &type_name, &mut errors);
    let mut identified = false;
    for item in &mut block.items {
        if let ImplItem::Fn(method) = item {
            name_after(method, &type_name, generic.as_ref());
            identified |= identify(method, &options);
        }
    }
    unused(&block, &options, identified, &mut errors);
    let descriptors: Vec<TokenStream> = block
        .items
        .iter()
        .filter_map(|item| match item {
            ImplItem::Fn(method) => method_descriptor(method),
            _ => None,
        })
        .collect();
    let mut fallbacks = fallbacks(&block, &type_name);
    // With errors in its options, the methods are still named (so that they report no errors
    // of their own about it) and the descriptors emitted (so that a `tools![]` that lists them
    // reports nothing more), without the warning about methods that run attached.
    if !errors.any() {
        fallbacks.extend(attached::warning(&block, &type_name));
    }
    let descriptors = (!descriptors.is_empty()).then(|| {
        let (impl_generics, self_ty, where_clause) = inherent_header(&block);
        quote! {
            #[allow(clippy::multiple_inherent_impl)]
            impl #impl_generics #self_ty #where_clause {
                #(#descriptors)*
            }
        }
    });
    fail(errors, quote!(#block #descriptors #fallbacks))
}

/// Whether the block has generic parameters, or a lifetime other than `'static` in its self
/// type (`impl Tool for Client<'_>`, `impl Tool for &X`): the type of `self` may then not be
/// `'static`, which the generated code cannot test.
fn is_generic(block: &ItemImpl) -> bool {
    !block.generics.params.is_empty() || borrows_non_static(block.self_ty.to_token_stream())
}

/// For each tool method, a descriptor under the method's bare name that makes `tools![]` fail
/// with "list it as `Type::method`", in a module of its own, glob-imported: a glob import is
/// shadowed by an item of the same name, so a function's own descriptor still wins.
fn fallbacks(block: &ItemImpl, type_name: &Ident) -> TokenStream {
    let methods: Vec<(&ImplItemFn, TokenStream)> = block
        .items
        .iter()
        .filter_map(|item| match item {
            ImplItem::Fn(method) => classified(method).map(|(_, attr)| (method, attr)),
            _ => None,
        })
        .filter_map(|(method, attr)| Some((method, attr_args(attr)?)))
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
    let consts = methods.iter().map(|(method, _)| {
        let (ident, cfgs) = (&method.sig.ident, cfgs(method));
        let method = ident.unraw();
        let message = format!(
            "tools![]: `{method}` is a method of `{ty}`, not a function: list it as \
             `{ty}{generics}::{method}`"
        );
        let descriptor = descriptor_ident(ident);
        quote! {
            #(#cfgs)*
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
    if emits_own_descriptor(&method.sig, &method.vis, true) {
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
    let cfgs = cfgs(method);
    let descriptor = descriptor_const(&parse_quote!(pub), ident, &private, &info);
    Some(quote!(#(#cfgs)* #descriptor))
}

/// The method's `#[cfg(…)]` attributes: what the block emits for it exists where it does.
fn cfgs(method: &ImplItemFn) -> impl Iterator<Item = &Attribute> {
    method
        .attrs
        .iter()
        .filter(|attr| attr.path().is_ident("cfg"))
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
/// them: two on one method are reported by the method-level macro), and
/// `__impl_generic(params…)` to its `#[idempotent]` ones if the block is generic.
fn name_after(method: &mut ImplItemFn, type_name: &Ident, generic: Option<&Vec<Ident>>) {
    let option = Ident::new(IMPL_OPTION, Span::call_site());
    let generic_flag = Ident::new(IMPL_GENERIC_OPTION, Span::call_site());
    for attr in &mut method.attrs {
        let Some(last) = attr.path().segments.last() else {
            continue;
        };
        if last.ident != "idempotent" && last.ident != "read_only" {
            continue;
        }
        let added = match generic {
            // Lifetimes alone: the flag, no list (`()` is not a nested attribute list).
            Some(params) if last.ident == "idempotent" && params.is_empty() => {
                quote!(#option = #type_name, #generic_flag)
            }
            Some(params) if last.ident == "idempotent" => {
                quote!(#option = #type_name, #generic_flag(#(#params),*))
            }
            _ => quote!(#option = #type_name),
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

/// Gives the block's `self_key = …` or `same_service` to the method's `#[idempotent]`
/// attributes if it has a receiver and says neither itself (a method's own wins). Whether the
/// method is one that takes them.
fn identify(method: &mut ImplItemFn, options: &ImplOptions) -> bool {
    if method.sig.receiver().is_none() {
        return false;
    }
    let added = match (&options.self_key, options.same_service) {
        (Some(self_key), _) => {
            let expr = &self_key.value;
            quote!(self_key = #expr)
        }
        (None, Some(span)) => {
            let flag = Ident::new("same_service", span);
            quote!(#flag)
        }
        (None, None) => TokenStream::new(),
    };
    let mut found = false;
    for attr in &mut method.attrs {
        if attr
            .path()
            .segments
            .last()
            .is_none_or(|s| s.ident != "idempotent")
        {
            continue;
        }
        found = true;
        let Meta::List(list) = &mut attr.meta else {
            continue; // `name_after` made it a list; `#[idempotent = …]` is reported by it
        };
        let own = IdempotentOptions::parse(list.tokens.clone(), &mut Errors::default());
        if added.is_empty() || own.self_key.is_some() || own.same_service.is_some() {
            continue;
        }
        let tokens = &list.tokens;
        list.tokens = if tokens.is_empty() {
            added.clone()
        } else {
            quote!(#tokens, #added)
        };
    }
    found
}

/// A block's `self_key` or `same_service` with no `#[idempotent]` method taking `self` to
/// give it to.
fn unused(block: &ItemImpl, options: &ImplOptions, identified: bool, errors: &mut Errors) {
    if identified {
        return;
    }
    // A macro call among the items may write methods, which the block cannot see.
    let by_macro = block.items.iter().find_map(|item| match item {
        ImplItem::Macro(call) => call.mac.path.segments.last().map(|s| s.ident.to_string()),
        _ => None,
    });
    let message = match by_macro {
        Some(name) => format!(
            "no `#[idempotent]` method of this block takes `self`, so nothing of `self` can \
             identify an action: remove it. (A method that a macro such as `{name}!` writes \
             inside the block is not seen by `#[tool_impl]`, which expands first: give it this \
             option, and its name, on its own attribute: `#[idempotent(name = \"…\", …)]`)"
        ),
        None => "no `#[idempotent]` method of this block takes `self`, so nothing of `self` can \
                 identify an action: remove it"
            .to_owned(),
    };
    let spans = options.self_key.as_ref().map(|k| k.span);
    for span in spans.into_iter().chain(options.same_service) {
        errors.at(span, &message);
    }
}

/// The arguments of `#[attr]` / `#[attr(...)]`; `None` for `#[attr = …]`.
pub(super) fn attr_args(attr: &Attribute) -> Option<TokenStream> {
    match &attr.meta {
        Meta::Path(_) => Some(TokenStream::new()),
        Meta::List(list) => Some(list.tokens.clone()),
        Meta::NameValue(_) => None,
    }
}

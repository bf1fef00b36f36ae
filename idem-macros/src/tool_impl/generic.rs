//! A generic block's `same_service`: the type's parameters are part of what a value is.

use syn::ext::IdentExt;
use syn::{Ident, ImplItem, ItemImpl};

use super::attr_args;
use super::header::type_and_const_params;
use crate::attr::{IdempotentOptions, ImplOptions};
use crate::errors::Errors;

/// `same_service` (the block's, or a method's own) on a block generic over a type or constant
/// of its self type: `Refund<Usd>` and `Refund<Eur>` would share keys and replay each other's
/// results, so what tells them apart must be said (`self_key = …`).
pub(super) fn generic_same_service(
    block: &ItemImpl,
    options: &ImplOptions,
    type_name: &Ident,
    errors: &mut Errors,
) {
    let params: Vec<&Ident> = type_and_const_params(block)
        .filter(|(_, in_self_ty)| *in_self_ty)
        .map(|(ident, _)| ident)
        .collect();
    let Some(&first) = params.first() else {
        return;
    };
    // An expression of it that a key could hold.
    let example = if block.generics.const_params().any(|c| &c.ident == first) {
        first.to_string()
    } else {
        format!("{first}::NAME")
    };
    let ty = type_name.unraw();
    let over = params
        .iter()
        .map(|p| format!("`{p}`"))
        .collect::<Vec<_>>()
        .join(", ");
    let message = format!(
        "`same_service` says that every `{ty}` is one service, but this block is generic over \
         {over}: two `{ty}`s of another `{first}` called with the same arguments would share a \
         key, and one would get the other's result. Put what tells them apart into the key: \
         `self_key = {example}` (any expression of `self` or of `{first}`, such as an \
         associated constant); if no `{first}` changes what the tool does, say so with a \
         constant: `self_key = \"{ty}\"`"
    );
    let methods = block.items.iter().filter_map(|item| match item {
        ImplItem::Fn(method) if method.sig.receiver().is_some() => Some(method),
        _ => None,
    });
    let own = methods.flat_map(|method| &method.attrs).filter_map(|attr| {
        let last = attr.path().segments.last()?;
        if last.ident != "idempotent" {
            return None;
        }
        IdempotentOptions::parse(attr_args(attr)?, &mut Errors::default()).same_service
    });
    for span in options.same_service.into_iter().chain(own) {
        errors.at(span, message.clone());
    }
}

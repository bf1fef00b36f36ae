//! A generic block's `same_service`: the block's parameters are part of what a value is.

use syn::ext::IdentExt;
use syn::{Ident, ImplItem, ItemImpl};

use super::attr_args;
use super::header::type_and_const_params;
use crate::attr::{IdempotentOptions, ImplOptions};
use crate::errors::Errors;

/// `same_service` (the block's, where a method relies on it, or a method's own) on a block
/// generic over a type or constant — of its self type (`Refund<Usd>` and `Refund<Eur>`) or
/// of its trait (`impl<C> Refunds<C> for Service`): the instances would share keys and replay
/// each other's results, so what tells them apart must be said (`self_key = …`).
pub(super) fn generic_same_service(
    block: &ItemImpl,
    options: &ImplOptions,
    type_name: &Ident,
    errors: &mut Errors,
) {
    let params: Vec<(&Ident, bool)> = type_and_const_params(block).collect();
    let Some(&(first, in_self_ty)) = params.first() else {
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
        .map(|(p, _)| format!("`{p}`"))
        .collect::<Vec<_>>()
        .join(", ");
    let instances = if in_self_ty {
        format!("two `{ty}`s of another `{first}`")
    } else {
        format!("a `{ty}`'s implementations for two `{first}`s")
    };
    let message = format!(
        "`same_service` says that every `{ty}` is one service, but this block is generic over \
         {over}: {instances} called with the same arguments would share a key, and one would \
         get the other's result. Put what tells them apart into the key: \
         `self_key = {example}` (an expression that names `{first}`, such as its associated \
         constant, alone or in a tuple with fields of `self`: one that does not name it is \
         taken to be the same for every `{first}`, and a second `{first}`'s call is refused \
         at run time); if no `{first}` changes what the tool does, say so with a literal: \
         `self_key = \"{ty}\"`"
    );
    let methods = block.items.iter().filter_map(|item| match item {
        ImplItem::Fn(method) if method.sig.receiver().is_some() => Some(method),
        _ => None,
    });
    let own: Vec<IdempotentOptions> = methods
        .flat_map(|method| &method.attrs)
        .filter_map(|attr| {
            let last = attr.path().segments.last()?;
            if last.ident != "idempotent" {
                return None;
            }
            Some(IdempotentOptions::parse(
                attr_args(attr)?,
                &mut Errors::default(),
            ))
        })
        .collect();
    // The block's `same_service` is what a method without an identity of its own uses.
    let relied_on = own
        .iter()
        .any(|method| method.self_key.is_none() && method.same_service.is_none());
    let block = options.same_service.filter(|_| relied_on);
    for span in block
        .into_iter()
        .chain(own.iter().filter_map(|m| m.same_service))
    {
        errors.at(span, message.clone());
    }
}

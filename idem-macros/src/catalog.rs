//! `tools![]`: the catalog of descriptors, with its compile-time checks (every entry
//! classified, no two entries with one name).

use std::collections::BTreeSet;

use proc_macro2::{Span, TokenStream, TokenTree};
use quote::{ToTokens, format_ident, quote, quote_spanned};
use syn::ext::IdentExt;
use syn::punctuated::Punctuated;
use syn::spanned::Spanned;
use syn::{Ident, Path, Token};

use crate::descriptor::descriptor_ident;
use crate::expand::respan;

/// `tools![$crate; a, b::c, Type::method]`.
pub(crate) fn tools(input: TokenStream) -> TokenStream {
    let mut tokens = input.into_iter();
    let krate: TokenStream = tokens
        .by_ref()
        .take_while(|t| !matches!(t, TokenTree::Punct(p) if p.as_char() == ';'))
        .collect();
    let private = quote!(#krate::__private);
    let rest: TokenStream = tokens.collect();
    let parser = Punctuated::<Path, Token![,]>::parse_terminated;
    let paths: Vec<Path> = match syn::parse::Parser::parse2(parser, rest.clone()) {
        Ok(paths) => paths.into_iter().collect(),
        Err(error) => {
            let error = match qualified_entry(rest) {
                // `<Type as Trait>::method`: the descriptor is the type's.
                Some(at) => syn::Error::new(
                    at,
                    "tools![] lists a method of a trait impl as `Type::method` (`tools![Ledger::transfer]`), \
                     not `<Type as Trait>::method`: `#[idem_tools::tool_impl]` puts its \
                     descriptor on the type",
                ),
                None => syn::Error::new(
                    error.span(),
                    format!(
                        "{error}: tools![] takes the paths of tools, separated by commas \
                         (`tools![send_email, billing::refund, Ledger::transfer]`)"
                    ),
                ),
            };
            let mut error = error.to_compile_error();
            error.extend(quote!(&[]));
            return error;
        }
    };
    let entries = paths.iter().map(|path| {
        let mut path = path.clone();
        if let Some(last) = path.segments.last_mut() {
            last.ident = descriptor_ident(&last.ident);
        }
        path
    });
    let fallbacks = fallbacks(&private, &paths);
    let functions = functions(&private, &paths);
    let unique = unique_names(&private, &paths);
    quote! {{
        #fallbacks
        const IDEM_TOOLS: &[#private::ToolInfo] = &[#(#entries),*];
        #functions
        #unique
        IDEM_TOOLS
    }}
}

/// Where an entry written `<Type as Trait>::…` starts, if one is.
fn qualified_entry(tokens: TokenStream) -> Option<Span> {
    let mut at_start = true;
    for token in tokens {
        match &token {
            TokenTree::Punct(p) if at_start && p.as_char() == '<' => return Some(p.span()),
            TokenTree::Punct(p) if p.as_char() == ',' => at_start = true,
            _ => at_start = false,
        }
    }
    None
}

/// For one-segment entries, a constant that fails to evaluate if the entry resolved to the
/// fallback `#[tool_impl]` emits for a method of that name (`tools![charge_card]` for
/// `Billing::charge_card`), with a message that names the path to write.
fn functions(private: &TokenStream, paths: &[Path]) -> TokenStream {
    let checks: Vec<TokenStream> = paths
        .iter()
        .enumerate()
        .filter(|(_, path)| path.leading_colon.is_none() && path.segments.len() == 1)
        .map(|(i, path)| {
            let at = path.span();
            let private = respan(private.clone(), at);
            quote_spanned!(at=> #private::listed_as_function(&IDEM_TOOLS[#i]);)
        })
        .collect();
    if checks.is_empty() {
        return TokenStream::new();
    }
    quote! {
        const _: () = { #(#checks)* };
    }
}

/// For `Type::method` entries: a trait in scope whose associated constant
/// `<method>__needs_idempotent_or_read_only` only exists for types implementing `__private::NoDescriptor`, which
/// none does, so that a method without a descriptor of its own is an error that says what to
/// do, rather than "no associated item named `<method>__needs_idempotent_or_read_only`". A type's own descriptor,
/// an inherent associated constant, takes precedence over the trait's. The error names the
/// method through a type named like it, in `idem_methods`.
fn fallbacks(private: &TokenStream, paths: &[Path]) -> TokenStream {
    let methods: BTreeSet<String> = paths
        .iter()
        .filter(|p| p.segments.len() > 1)
        .filter_map(|p| p.segments.last())
        .map(|s| s.ident.unraw().to_string())
        .collect();
    if methods.is_empty() {
        return TokenStream::new();
    }
    let markers = methods.iter().map(|m| method_ident(m));
    let traits = methods.iter().map(|method| {
        let marker = method_ident(method);
        let fallback = format_ident!("IdemFallback_{}", method);
        let descriptor = descriptor_ident(&marker);
        quote! {
            #[allow(non_camel_case_types, dead_code)]
            trait #fallback {
                const #descriptor: #private::ToolInfo;
            }
            impl<T: #private::NoDescriptor<idem_methods::#marker>> #fallback for T {
                const #descriptor: #private::ToolInfo = #private::ToolInfo::read_only("");
            }
        }
    });
    quote! {
        #[allow(non_camel_case_types, dead_code)]
        mod idem_methods {
            #(pub struct #markers {})*
        }
        #(#traits)*
    }
}

/// `method` as an identifier (raw if it is a keyword).
fn method_ident(method: &str) -> Ident {
    syn::parse_str::<Ident>(method).unwrap_or_else(|_| Ident::new_raw(method, Span::call_site()))
}

/// A constant that fails to evaluate, naming both entries, if two entries have one name.
fn unique_names(private: &TokenStream, paths: &[Path]) -> TokenStream {
    let labels: Vec<String> = paths.iter().map(label).collect();
    let mut checks = Vec::new();
    for j in 1..paths.len() {
        let at: Span = paths[j].span();
        for i in 0..j {
            let message = format!(
                "tools![]: `{}` and `{}` have the same tool name, so they would share \
                 idempotency keys; give one of them a name of its own, \
                 `#[idempotent(name = \"…\")]` (methods of an `impl` block under \
                 `#[idem_tools::tool_impl]` are named `Type__method`)",
                labels[i], labels[j]
            );
            // Spanned at the second entry, so that the error points there.
            let private = respan(private.clone(), at);
            checks.push(quote_spanned! {at=>
                if #private::same_name(&IDEM_TOOLS[#i], &IDEM_TOOLS[#j]) {
                    #private::duplicate_tool(#message);
                }
            });
        }
    }
    if checks.is_empty() {
        return TokenStream::new();
    }
    quote! {
        const _: () = { #(#checks)* };
    }
}

/// The entry as written, without spaces: `Wrapper::<u8>::call`.
fn label(path: &Path) -> String {
    path.to_token_stream()
        .to_string()
        .chars()
        .filter(|c| !c.is_whitespace())
        .collect()
}

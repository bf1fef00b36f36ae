//! The rules about a method's receiver: its type in the tool's name, and what of it identifies
//! the action (`self_key = …` or `same_service`, on the method or its `#[tool_impl]` block).

use proc_macro2::{TokenStream, TokenTree};
use quote::ToTokens;
use syn::ext::IdentExt;

use crate::ast::ToolFn;
use crate::attr::IdempotentOptions;
use crate::errors::Errors;

/// A method's default name needs its type, which only `#[tool_impl]` can give.
pub(super) fn named(tool: &ToolFn, options: &IdempotentOptions, errors: &mut Errors) {
    let Some(receiver) = &tool.receiver else {
        return;
    };
    if options.name.is_some() || options.impl_type.is_some() {
        return;
    }
    let method = tool.func.sig.ident.unraw();
    errors.spanned(
        receiver,
        format!(
            "an `#[idempotent]` method needs its type in its name, or two types' `{method}` \
             methods would share keys: add `#[idem_tools::tool_impl]` to the `impl` block (the \
             name becomes `Type__{method}`), or give the tool a name (the one way for a \
             trait's default method, which has no `impl` block, and for a method a macro \
             writes inside a `#[tool_impl]` block, which the block cannot see): \
             `#[idempotent(name = \"…\")]`"
        ),
    );
}

/// A method says what of `self` identifies the action: `self_key = …` (its identity, in the
/// key) or `same_service` (every instance is one service; both at once is a parse error); a
/// function without `self` says neither.
pub(super) fn identity(tool: &ToolFn, options: &IdempotentOptions, errors: &mut Errors) {
    let Some(receiver) = &tool.receiver else {
        if let Some(self_key) = &options.self_key {
            errors.at(
                self_key.span,
                "`self_key` puts the receiver's identity into the key, but this function has \
                 no `self`: remove `self_key` (every argument is already in the key)",
            );
        }
        if let Some(span) = options.same_service {
            errors.at(
                span,
                "`same_service` says that every instance of a method's type is the same \
                 service, but this function has no `self`: remove `same_service`",
            );
        }
        return;
    };
    if options.self_key.is_none() && options.same_service.is_none() {
        errors.spanned(receiver, missing(tool, options));
    }
}

/// The message for a method that says nothing about its receiver, with its own names.
fn missing(tool: &ToolFn, options: &IdempotentOptions) -> String {
    let method = tool.func.sig.ident.unraw();
    let (values, every, block) = match &options.impl_type {
        Some(ty) => {
            let ty = ty.unraw();
            (
                format!("two `{ty}` values"),
                format!("every `{ty}`"),
                format!("on `impl {ty}`"),
            )
        }
        None => (
            "two values of its type".to_owned(),
            "every value of its type".to_owned(),
            "on its `impl` block (a `#[tool_impl]` block's does not reach a method a macro \
             writes inside it, which the block cannot see: say it on the method)"
                .to_owned(),
        ),
    };
    let fields = fields_read(tool.func.block.to_token_stream());
    let read = if fields.is_empty() {
        String::new()
    } else {
        let fields: Vec<String> = fields.iter().map(|f| format!("`self.{f}`")).collect();
        format!("this method reads {}; ", fields.join(", "))
    };
    // A generic block's tool is one for every parameter: the key must name the parameter too.
    let generic = match options.impl_params.first() {
        Some(param) => format!(
            "; the block is generic: name `{param}` in it too, `self_key = ({param}::NAME, \
             self.<field>)`, or a second `{param}`'s call is refused at run time"
        ),
        None => String::new(),
    };
    format!(
        "`self` is not in the key of `{method}`: {values} calling it with the same arguments \
         in one turn would be one action, and the second would not run but get the first \
         one's result. Say what of `self` identifies the action, on this method or once {block}:\n\
         - if it has an identity (an account, a tenant, a sender), put it in the key: \
         `#[idempotent(self_key = self.<field>)]` or `#[idem_tools::tool_impl(self_key = \
         self.<field>)]` ({read}a `Serialize` field, or a tuple of fields{generic})\n\
         - if {every} is the same service (a client, a pool, a handle), say so: \
         `#[idempotent(same_service)]` or `#[idem_tools::tool_impl(same_service)]`"
    )
}

/// The fields read through `self` (or `__self`, after `#[async_trait]`) in `tokens`, in order,
/// each once; method calls left out.
fn fields_read(tokens: TokenStream) -> Vec<String> {
    fn walk(tokens: TokenStream, into: &mut Vec<String>) {
        let tokens: Vec<TokenTree> = tokens.into_iter().collect();
        for (i, token) in tokens.iter().enumerate() {
            match token {
                TokenTree::Group(group) => walk(group.stream(), into),
                TokenTree::Ident(ident) if ident == "self" || ident == "__self" => {
                    let (Some(TokenTree::Punct(dot)), Some(TokenTree::Ident(field))) =
                        (tokens.get(i + 1), tokens.get(i + 2))
                    else {
                        continue;
                    };
                    let call = matches!(tokens.get(i + 3), Some(TokenTree::Group(g))
                        if g.delimiter() == proc_macro2::Delimiter::Parenthesis)
                        || matches!(tokens.get(i + 3), Some(TokenTree::Punct(p)) if p.as_char() == ':');
                    let field = field.unraw().to_string();
                    if dot.as_char() == '.' && !call && !into.contains(&field) {
                        into.push(field);
                    }
                }
                _ => {}
            }
        }
    }
    let mut fields = Vec::new();
    walk(tokens, &mut fields);
    fields
}

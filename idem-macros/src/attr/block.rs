//! `#[tool_impl(...)]`: the options of an `impl` block, given to those of its methods that do
//! not give their own.

use proc_macro2::{Span, TokenStream};
use syn::Expr;
use syn::parse::Parser;
use syn::spanned::Spanned;

use super::{Located, contradiction, flag, joined, option_name, skip_value, value};
use crate::errors::Errors;

/// `#[tool_impl(...)]`, as written: what of `self` identifies the actions of the block's
/// `#[idempotent]` methods, for those that do not say it themselves.
#[derive(Default)]
pub(crate) struct ImplOptions {
    /// `self_key = EXPR`.
    pub self_key: Option<Located<Expr>>,
    /// `same_service`.
    pub same_service: Option<Span>,
}

impl ImplOptions {
    /// Parses the attribute's arguments; errors go to `errors`.
    pub(crate) fn parse(args: TokenStream, errors: &mut Errors) -> Self {
        let mut options = ImplOptions::default();
        let parser = syn::meta::parser(|meta| {
            let span = meta.path.span();
            let name = option_name(&meta.path).unwrap_or_default();
            let seen = match name.as_str() {
                "self_key" => options.self_key.is_some(),
                "same_service" => options.same_service.is_some(),
                _ => {
                    errors.at(
                        span,
                        "`#[tool_impl]` takes only `self_key = EXPR` or `same_service`, what of \
                         `self` identifies the actions of its methods; give the other options \
                         to each method's `#[idempotent(...)]` (including `crate = \"…\"` for a \
                         renamed `idem_tools`)",
                    );
                    return skip_value(&meta);
                }
            };
            if seen {
                errors.at(span, format!("duplicate option `{name}`"));
                return skip_value(&meta);
            }
            if name == "self_key" {
                let expr: Expr = value(&meta, "self_key = self.account_id")?;
                let value_span = expr.span();
                options.self_key = Some(joined(expr, span, value_span));
            } else {
                options.same_service = Some(flag(&meta, "same_service")?);
            }
            Ok(())
        });
        if let Err(error) = parser.parse2(args) {
            errors.push(error);
        }
        contradiction(options.self_key.as_ref(), options.same_service, errors);
        options
    }
}

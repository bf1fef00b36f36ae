//! The options of `#[idempotent(...)]`, parsed into [`IdempotentOptions`], every error kept.

use std::time::Duration;

use proc_macro2::{Span, TokenStream};
use syn::meta::ParseNestedMeta;
use syn::parse::Parser;
use syn::spanned::Spanned;
use syn::{Expr, Ident, LitInt, LitStr, Path, Token};

/// Errors gathered while expanding, reported all at once.
#[derive(Default)]
pub(crate) struct Errors(Option<syn::Error>);

impl Errors {
    pub(crate) fn push(&mut self, error: syn::Error) {
        match &mut self.0 {
            Some(errors) => errors.combine(error),
            None => self.0 = Some(error),
        }
    }

    pub(crate) fn at(&mut self, span: Span, message: impl std::fmt::Display) {
        self.push(syn::Error::new(span, message));
    }

    pub(crate) fn peek(&self) -> Option<&syn::Error> {
        self.0.as_ref()
    }

    pub(crate) fn into_compile_errors(self) -> Option<TokenStream> {
        self.0.map(|e| e.to_compile_error())
    }
}

/// `#[idempotent(...)]`, as written.
#[derive(Default)]
pub(crate) struct IdempotentOptions {
    /// `name = "…"`: the tool's name and key namespace.
    pub name: Option<LitStr>,
    /// `version = N`.
    pub version: Option<u32>,
    /// `skip(a, b)`.
    pub skip: Vec<Ident>,
    /// `ignore(a, b)`.
    pub ignore: Vec<Ident>,
    /// `ttl = "1h"`, parsed.
    pub ttl: Option<Duration>,
    /// `budget = N`.
    pub budget: Option<u32>,
    /// `store = EXPR`.
    pub store: Option<Expr>,
    /// `cache_errors`.
    pub cache_errors: bool,
    /// `crate = "…"`.
    pub krate: Option<Path>,
}

const OPTIONS: &str = "`name = \"…\"`, `version = N`, `skip(arg, …)`, `ignore(arg, …)`, `ttl = \"1h\"`, \
                       `budget = N`, `store = EXPR`, `cache_errors`, `crate = \"…\"`";

impl IdempotentOptions {
    /// Parses the attribute's arguments; errors go to `errors` and the option is left unset.
    pub(crate) fn parse(args: TokenStream, errors: &mut Errors) -> Self {
        let mut options = IdempotentOptions::default();
        let mut seen: Vec<String> = Vec::new();
        let parser = syn::meta::parser(|meta| {
            let Some(name) = option_name(&meta.path) else {
                errors.at(meta.path.span(), format!("expected an option: {OPTIONS}"));
                return skip_value(&meta);
            };
            if seen.contains(&name) {
                errors.at(meta.path.span(), format!("duplicate option `{name}`"));
                return skip_value(&meta);
            }
            seen.push(name.clone());
            if let Err(error) = options.parse_one(&name, &meta) {
                errors.push(error);
                return skip_value(&meta);
            }
            Ok(())
        });
        if let Err(error) = parser.parse2(args) {
            errors.push(error);
        }
        options
    }

    fn parse_one(&mut self, name: &str, meta: &ParseNestedMeta<'_>) -> syn::Result<()> {
        let span = meta.path.span();
        match name {
            "name" => {
                let lit = lit_str(meta, "name = \"send_email\"")?;
                if lit.value().is_empty() {
                    return Err(syn::Error::new(
                        lit.span(),
                        "the tool name must not be empty",
                    ));
                }
                self.name = Some(lit);
            }
            "version" => {
                let lit = lit_int(meta, "version = 2")?;
                self.version = Some(lit.base10_parse::<u32>().map_err(|_| {
                    syn::Error::new(
                        lit.span(),
                        "`version` must be an integer from 0 to u32::MAX",
                    )
                })?);
            }
            "budget" => {
                let lit = lit_int(meta, "budget = 3")?;
                let budget = lit.base10_parse::<u32>().ok().filter(|b| *b > 0);
                self.budget = Some(budget.ok_or_else(|| {
                    syn::Error::new(
                        lit.span(),
                        "`budget` is the number of attempts allowed per key per turn: an \
                         integer from 1 to u32::MAX",
                    )
                })?);
            }
            "ttl" => {
                let lit = lit_str(meta, "ttl = \"1h\"")?;
                let ttl = humantime::parse_duration(&lit.value()).map_err(|e| {
                    syn::Error::new(
                        lit.span(),
                        format!(
                            "invalid `ttl` {:?}: {e}; write a duration like \"30s\", \"15m\", \
                             \"1h\" or \"7days\"",
                            lit.value()
                        ),
                    )
                })?;
                if ttl.is_zero() {
                    return Err(syn::Error::new(
                        lit.span(),
                        "`ttl` must be longer than zero: a result kept for no time replays nothing",
                    ));
                }
                self.ttl = Some(ttl);
            }
            "store" => self.store = Some(meta.value()?.parse()?),
            "cache_errors" => {
                if !meta.input.is_empty() && !meta.input.peek(Token![,]) {
                    return Err(syn::Error::new(span, "`cache_errors` takes no value"));
                }
                self.cache_errors = true;
            }
            "crate" => {
                let lit = lit_str(meta, "crate = \"my_idem\"")?;
                self.krate = Some(lit.parse()?);
            }
            "skip" | "ignore" => {
                if !meta.input.peek(syn::token::Paren) {
                    return Err(syn::Error::new(span, format!("write `{name}(arg, …)`")));
                }
                let list = if name == "skip" {
                    &mut self.skip
                } else {
                    &mut self.ignore
                };
                meta.parse_nested_meta(|inner| match inner.path.get_ident() {
                    Some(ident) if inner.input.is_empty() || inner.input.peek(Token![,]) => {
                        list.push(ident.clone());
                        Ok(())
                    }
                    _ => Err(inner.error(format!(
                        "`{name}(..)` takes argument names: `{name}(client, trace_id)`"
                    ))),
                })?;
            }
            _ => {
                let hint = if name == "key" {
                    "; for a caller-supplied key, mark the parameter: `#[key] request_id: &str`"
                } else {
                    ""
                };
                return Err(syn::Error::new(
                    span,
                    format!("unknown option `{name}`: expected {OPTIONS}{hint}"),
                ));
            }
        }
        Ok(())
    }
}

/// The option's name: one identifier (or `crate`).
fn option_name(path: &Path) -> Option<String> {
    if path.leading_colon.is_some() || path.segments.len() != 1 {
        return None;
    }
    let segment = &path.segments[0];
    segment
        .arguments
        .is_none()
        .then(|| segment.ident.to_string())
}

/// The value of `option = "…"`.
fn lit_str(meta: &ParseNestedMeta<'_>, example: &str) -> syn::Result<LitStr> {
    match value(meta, example)? {
        Expr::Lit(syn::ExprLit {
            lit: syn::Lit::Str(lit),
            ..
        }) => Ok(lit),
        other => Err(syn::Error::new(
            other.span(),
            format!("expected a string literal: `{example}`"),
        )),
    }
}

/// The value of `option = N`.
fn lit_int(meta: &ParseNestedMeta<'_>, example: &str) -> syn::Result<LitInt> {
    match value(meta, example)? {
        Expr::Lit(syn::ExprLit {
            lit: syn::Lit::Int(lit),
            ..
        }) => Ok(lit),
        other => Err(syn::Error::new(
            other.span(),
            format!("expected an integer literal: `{example}`"),
        )),
    }
}

fn value(meta: &ParseNestedMeta<'_>, example: &str) -> syn::Result<Expr> {
    if !meta.input.peek(Token![=]) {
        return Err(meta.error(format!("expected a value: `{example}`")));
    }
    meta.value()?.parse()
}

/// Consumes what follows a rejected option (`= value` or `(…)`) so parsing can go on.
fn skip_value(meta: &ParseNestedMeta<'_>) -> syn::Result<()> {
    if meta.input.peek(Token![=]) {
        meta.value()?.parse::<Expr>()?;
    } else if meta.input.peek(syn::token::Paren) {
        let _content;
        syn::parenthesized!(_content in meta.input);
    }
    Ok(())
}

/// `#[read_only]` takes no options but `crate = "…"`.
pub(crate) fn parse_read_only(args: TokenStream, errors: &mut Errors) -> Option<Path> {
    let mut krate = None;
    let parser = syn::meta::parser(|meta| {
        if meta.path.is_ident("crate") && krate.is_none() {
            let lit = lit_str(&meta, "crate = \"my_idem\"")?;
            krate = Some(lit.parse()?);
            return Ok(());
        }
        errors.at(
            meta.path.span(),
            "`#[read_only]` takes no options: a read-only tool has no key, store or budget \
             (only `crate = \"…\"` is accepted, for a renamed `idem` dependency)",
        );
        skip_value(&meta)
    });
    if let Err(error) = parser.parse2(args) {
        errors.push(error);
    }
    krate
}

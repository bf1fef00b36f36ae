//! The attribute options: `#[idempotent(...)]` parsed into [`IdempotentOptions`], `#[read_only]`
//! into [`ReadOnlyOptions`]. Every error is kept, and every value keeps its span so that a later
//! rule can point at the option that caused an error.
//!
//! The options users never write, `__impl = Type` and `__impl_generic(…)`, are inserted by
//! `#[tool_impl]` into the attributes of the methods of its block: they give them the name of
//! the type they belong to, and say whether the block has generic parameters, and which.

use std::time::Duration;

use proc_macro2::{Span, TokenStream};
use syn::meta::ParseNestedMeta;
use syn::parse::Parser;
use syn::spanned::Spanned;
use syn::{Expr, Ident, LitInt, LitStr, Path, Token};

use crate::errors::Errors;

mod block;
pub(crate) use block::ImplOptions;

/// An option's value and where it was written.
#[derive(Clone, Copy)]
pub(crate) struct Located<T> {
    /// The parsed value.
    pub value: T,
    /// The option as written (name and value).
    pub span: Span,
}

/// The hidden option `#[tool_impl]` inserts: the name of the impl block's self type.
pub(crate) const IMPL_OPTION: &str = "__impl";
/// The hidden option `#[tool_impl]` inserts when the impl block has generic parameters (or an
/// anonymous lifetime in its self type), with its type and const parameters if it has any:
/// `__impl_generic(C, N)`, `__impl_generic`.
pub(crate) const IMPL_GENERIC_OPTION: &str = "__impl_generic";

/// The shortest and longest `lease`; the runtime checks the same bounds.
pub(crate) const LEASE_MIN: Duration = Duration::from_millis(10);
/// See [`LEASE_MIN`].
pub(crate) const LEASE_MAX: Duration = Duration::from_secs(24 * 60 * 60);

/// `#[idempotent(...)]`, as written.
#[derive(Default)]
pub(crate) struct IdempotentOptions {
    /// `name = "…"`: the tool's name and key namespace.
    pub name: Option<LitStr>,
    /// `version = N`.
    pub version: Option<Located<u32>>,
    /// `skip(a, b)`.
    pub skip: Vec<Ident>,
    /// `ignore(a, b)`.
    pub ignore: Vec<Ident>,
    /// `ttl = "1h"`, parsed.
    pub ttl: Option<Located<Duration>>,
    /// `lease = "30s"`, parsed and within bounds.
    pub lease: Option<Located<Duration>>,
    /// `budget = N`.
    pub budget: Option<Located<u32>>,
    /// `actions_per_turn = N`.
    pub actions_per_turn: Option<Located<u32>>,
    /// `store = EXPR`.
    pub store: Option<Expr>,
    /// `self_key = EXPR`: the receiver's identity, in the key as the argument `self`.
    pub self_key: Option<Located<Expr>>,
    /// `same_service`: every instance of the receiver's type is the same service, so `self`
    /// stays out of the key.
    pub same_service: Option<Span>,
    /// `cache_errors`.
    pub cache_errors: Option<Span>,
    /// `attached`: run the body in the caller's task.
    pub attached: Option<Span>,
    /// `release_on_cancel`: an attached body cancelled mid-run frees its key.
    pub release_on_cancel: Option<Span>,
    /// `crate = "…"`.
    pub krate: Option<Path>,
    /// `__impl = Type`, from `#[tool_impl]`.
    pub impl_type: Option<Ident>,
    /// `__impl_generic(…)`, from `#[tool_impl]`.
    pub impl_generic: bool,
    /// The generic block's type and const parameters, from `__impl_generic(…)`.
    pub impl_params: Vec<Ident>,
}

/// The options users can write, for error messages.
const OPTIONS: &str = "`name = \"…\"`, `version = N`, `skip(arg, …)`, `ignore(arg, …)`, \
                       `ttl = \"1h\"`, `lease = \"30s\"`, `budget = N`, `actions_per_turn = N`, \
                       `store = EXPR`, `self_key = EXPR`, `same_service`, `cache_errors`, `attached`, `release_on_cancel`, `crate = \"…\"`";

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
        contradiction(options.self_key.as_ref(), options.same_service, errors);
        options
    }

    fn parse_one(&mut self, name: &str, meta: &ParseNestedMeta<'_>) -> syn::Result<()> {
        let span = meta.path.span();
        match name {
            "name" => self.name = Some(tool_name(meta)?),
            "version" => {
                let lit = lit_int(meta, "version = 2")?;
                let value = lit.base10_parse::<u32>().map_err(|_| {
                    syn::Error::new(
                        lit.span(),
                        "`version` must be an integer from 0 to u32::MAX",
                    )
                })?;
                self.version = Some(joined(value, span, lit.span()));
            }
            "budget" => {
                let what = "the number of attempts allowed per key per turn";
                self.budget = Some(positive(meta, "budget = 3", what)?);
            }
            "actions_per_turn" => {
                let what = "the number of new actions the tool may start per turn";
                self.actions_per_turn = Some(positive(meta, "actions_per_turn = 5", what)?);
            }
            "ttl" => {
                let (ttl, lit) = duration(meta, "ttl")?;
                if ttl.is_zero() {
                    return Err(syn::Error::new(
                        lit.span(),
                        "`ttl` must be longer than zero: a result kept for no time replays nothing",
                    ));
                }
                self.ttl = Some(joined(ttl, span, lit.span()));
            }
            "lease" => {
                let (lease, lit) = duration(meta, "lease")?;
                if lease < LEASE_MIN || lease > LEASE_MAX {
                    return Err(syn::Error::new(
                        lit.span(),
                        format!(
                            "`lease` must be from 10ms to 24h, found {}: it is how long a call \
                             holds its key without renewal, so a crashed holder blocks retries \
                             at most that long",
                            humantime::format_duration(lease)
                        ),
                    ));
                }
                self.lease = Some(joined(lease, span, lit.span()));
            }
            "store" => self.store = Some(meta.value()?.parse()?),
            "self_key" => {
                let expr: Expr = value(meta, "self_key = self.account_id")?;
                let value_span = expr.span();
                self.self_key = Some(joined(expr, span, value_span));
            }
            "same_service" => self.same_service = Some(flag(meta, name)?),
            "cache_errors" => self.cache_errors = Some(flag(meta, name)?),
            "attached" => self.attached = Some(flag(meta, name)?),
            "release_on_cancel" => self.release_on_cancel = Some(flag(meta, name)?),
            "crate" => {
                let lit = lit_str(meta, "crate = \"my_idem\"")?;
                self.krate = Some(lit.parse()?);
            }
            IMPL_OPTION => self.impl_type = Some(impl_type(meta)?),
            IMPL_GENERIC_OPTION => {
                if meta.input.peek(syn::token::Paren) {
                    meta.parse_nested_meta(|param| {
                        self.impl_params.push(param.path.require_ident()?.clone());
                        Ok(())
                    })?;
                }
                self.impl_generic = true;
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

/// `#[read_only]`, as written: only `name = "…"` and `crate = "…"` (and the hidden `__impl`).
#[derive(Default)]
pub(crate) struct ReadOnlyOptions {
    /// `name = "…"`: the name a model is shown.
    pub name: Option<LitStr>,
    /// `crate = "…"`.
    pub krate: Option<Path>,
    /// `__impl = Type`, from `#[tool_impl]`.
    pub impl_type: Option<Ident>,
}

impl ReadOnlyOptions {
    /// Parses the attribute's arguments; errors go to `errors`.
    pub(crate) fn parse(args: TokenStream, errors: &mut Errors) -> Self {
        let mut options = ReadOnlyOptions::default();
        let parser = syn::meta::parser(|meta| {
            if meta.path.is_ident("name") && options.name.is_none() {
                options.name = Some(tool_name(&meta)?);
                return Ok(());
            }
            if meta.path.is_ident("crate") && options.krate.is_none() {
                let lit = lit_str(&meta, "crate = \"my_idem\"")?;
                options.krate = Some(lit.parse()?);
                return Ok(());
            }
            if meta.path.is_ident(IMPL_OPTION) && options.impl_type.is_none() {
                options.impl_type = Some(impl_type(&meta)?);
                return Ok(());
            }
            if let Some(name) = ["name", "crate"]
                .into_iter()
                .find(|name| meta.path.is_ident(name))
            {
                errors.at(meta.path.span(), format!("duplicate option `{name}`"));
                return skip_value(&meta);
            }
            errors.at(
                meta.path.span(),
                "`#[read_only]` takes no key, store or budget options: a read-only tool has \
                 none (it accepts `name = \"…\"`, the name a model is shown, and \
                 `crate = \"…\"`, for a renamed `idem_tools` dependency)",
            );
            skip_value(&meta)
        });
        if let Err(error) = parser.parse2(args) {
            errors.push(error);
        }
        options
    }
}

/// The value of `name = "…"`.
fn tool_name(meta: &ParseNestedMeta<'_>) -> syn::Result<LitStr> {
    let lit = lit_str(meta, "name = \"send_email\"")?;
    if lit.value().is_empty() {
        return Err(syn::Error::new(
            lit.span(),
            "the tool name must not be empty",
        ));
    }
    Ok(lit)
}

/// `self_key` and `same_service` together: reported at `same_service`, pointing at both.
fn contradiction(
    self_key: Option<&Located<Expr>>,
    same_service: Option<Span>,
    errors: &mut Errors,
) {
    if let (Some(self_key), Some(span)) = (self_key, same_service) {
        let mut error = syn::Error::new(
            span,
            "`same_service` says that `self` identifies nothing, `self_key` says what of `self` \
             identifies the action: keep one",
        );
        error.combine(syn::Error::new(self_key.span, "`self_key` is here"));
        errors.push(error);
    }
}

/// A value spanning from the option's name to its value.
fn joined<T>(value: T, name: Span, value_span: Span) -> Located<T> {
    Located {
        value,
        span: name.join(value_span).unwrap_or(value_span),
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

/// A count option (`budget = N`): an integer from 1 to `u32::MAX`, else an error saying it is
/// `what`.
fn positive(meta: &ParseNestedMeta<'_>, example: &str, what: &str) -> syn::Result<Located<u32>> {
    let lit = lit_int(meta, example)?;
    let value = lit.base10_parse::<u32>().ok().filter(|n| *n > 0);
    let name = example.split(' ').next().unwrap_or(example);
    let value = value.ok_or_else(|| {
        syn::Error::new(
            lit.span(),
            format!("`{name}` is {what}: an integer from 1 to u32::MAX"),
        )
    })?;
    Ok(joined(value, meta.path.span(), lit.span()))
}

/// A flag option (`cache_errors`): its span; a value is an error.
fn flag(meta: &ParseNestedMeta<'_>, name: &str) -> syn::Result<Span> {
    if !meta.input.is_empty() && !meta.input.peek(Token![,]) {
        return Err(syn::Error::new(
            meta.path.span(),
            format!("`{name}` takes no value"),
        ));
    }
    Ok(meta.path.span())
}

/// `__impl = Type`.
fn impl_type(meta: &ParseNestedMeta<'_>) -> syn::Result<Ident> {
    meta.value()?.parse()
}

/// The value of `option = "<humantime duration>"`, parsed.
fn duration(meta: &ParseNestedMeta<'_>, option: &str) -> syn::Result<(Duration, LitStr)> {
    let lit = lit_str(meta, &format!("{option} = \"1h\""))?;
    let parsed = humantime::parse_duration(&lit.value()).map_err(|e| {
        syn::Error::new(
            lit.span(),
            format!(
                "invalid `{option}` {:?}: {e}; write a duration like \"30s\", \"15m\", \"1h\" \
                 or \"7days\"",
                lit.value()
            ),
        )
    })?;
    Ok((parsed, lit))
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

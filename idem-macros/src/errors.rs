//! The error collector: every rule reports into one [`Errors`], and the expansion emits them
//! all at once, followed by the item so the rest of the crate and IDEs still see it.

use proc_macro2::{Span, TokenStream};

/// Errors gathered while expanding, reported all at once.
#[derive(Default)]
pub(crate) struct Errors(Option<syn::Error>);

impl Errors {
    /// Adds `error`.
    pub(crate) fn push(&mut self, error: syn::Error) {
        match &mut self.0 {
            Some(errors) => errors.combine(error),
            None => self.0 = Some(error),
        }
    }

    /// Adds an error at `span`.
    pub(crate) fn at(&mut self, span: Span, message: impl std::fmt::Display) {
        self.push(syn::Error::new(span, message));
    }

    /// Adds an error spanning all of `tokens` (not only their first token).
    pub(crate) fn spanned(
        &mut self,
        tokens: impl quote::ToTokens,
        message: impl std::fmt::Display,
    ) {
        self.push(syn::Error::new_spanned(tokens, message));
    }

    /// Whether any error was reported.
    pub(crate) fn any(&self) -> bool {
        self.0.is_some()
    }

    fn into_compile_errors(self) -> Option<TokenStream> {
        self.0.map(|e| e.to_compile_error())
    }
}

/// The errors, then the item unchanged.
pub(crate) fn fail(errors: Errors, item: TokenStream) -> TokenStream {
    let mut out = errors.into_compile_errors().unwrap_or_default();
    out.extend(item);
    out
}

//! The `self` rewrite for a body that runs on a clone of its receiver: every `self` that means
//! the method's receiver becomes a hygienic variable, which the generated code binds to the
//! clone (or to the borrowed receiver). The same idea as async-trait's: it has to see `self`
//! inside macro invocations too, and must leave alone the `self` of nested items and
//! `self::` paths.

use proc_macro2::{Group, Ident, Literal, Span, TokenStream, TokenTree};
use syn::visit_mut::{self, VisitMut};
use syn::{Expr, ExprPath, Item, Macro, Stmt};

/// The variable that stands for `self` in a rewritten body.
pub(crate) fn self_binding() -> Ident {
    Ident::new("idem_self", Span::mixed_site())
}

/// Rewrites `self` in `stmts` into [`self_binding`], each keeping its location (so errors
/// still point at the `self` the user wrote). Returns the string literals in macro inputs that
/// capture `self` by name (`"{self:?}"`): a format string's implicit capture resolves where the
/// literal was written, so it cannot be rewritten and would name the real receiver.
pub(crate) fn replace_self(stmts: &mut [Stmt]) -> Vec<Span> {
    let mut rewrite = ReplaceSelf::default();
    for stmt in stmts {
        rewrite.visit_stmt_mut(stmt);
    }
    rewrite.captures
}

#[derive(Default)]
struct ReplaceSelf {
    /// Format strings that capture `self` by name.
    captures: Vec<Span>,
}

impl VisitMut for ReplaceSelf {
    fn visit_expr_mut(&mut self, expr: &mut Expr) {
        if let Expr::Path(ExprPath {
            qself: None, path, ..
        }) = expr
            && path.leading_colon.is_none()
            && path.segments.len() == 1
            && path.segments[0].ident == "self"
        {
            let at = path.segments[0].ident.span();
            path.segments[0].ident = located(at);
            return;
        }
        visit_mut::visit_expr_mut(self, expr);
    }

    fn visit_item_mut(&mut self, item: &mut Item) {
        // A nested item (fn, impl, trait, mod, …) has its own `self`, or none. A local
        // `macro_rules!` may use the receiver, and `select!`-style macros in item position are
        // expressions.
        if let Item::Macro(item) = item
            && (item.mac.path.is_ident("macro_rules")
                || item
                    .mac
                    .path
                    .segments
                    .last()
                    .is_some_and(|s| s.ident == "select"))
        {
            self.visit_macro_mut(&mut item.mac);
        }
    }

    fn visit_macro_mut(&mut self, mac: &mut Macro) {
        // Whether a `self` inside a macro's input is the receiver cannot be known in general.
        // When the input defines a function, its `self` is more likely that function's own.
        if !contains_fn(mac.tokens.clone()) {
            let tokens = std::mem::take(&mut mac.tokens);
            mac.tokens = replace_in_tokens(tokens, &mut self.captures);
        }
    }
}

/// `self` tokens replaced, except in `self::…` paths; string literals that capture `self` by
/// name go to `captures`.
fn replace_in_tokens(tokens: TokenStream, captures: &mut Vec<Span>) -> TokenStream {
    let tokens: Vec<TokenTree> = tokens.into_iter().collect();
    let mut out = Vec::with_capacity(tokens.len());
    for (i, token) in tokens.iter().enumerate() {
        out.push(match token {
            TokenTree::Ident(ident) if ident == "self" && !starts_path(&tokens[i + 1..]) => {
                TokenTree::Ident(located(ident.span()))
            }
            TokenTree::Group(group) => {
                let stream = replace_in_tokens(group.stream(), captures);
                let mut new = Group::new(group.delimiter(), stream);
                new.set_span(group.span());
                TokenTree::Group(new)
            }
            TokenTree::Literal(literal) => {
                if captures_self(literal) {
                    captures.push(literal.span());
                }
                TokenTree::Literal(literal.clone())
            }
            other => other.clone(),
        });
    }
    out.into_iter().collect()
}

/// Whether `literal` is a string whose format arguments name `self` (`{self}`, `{self:?}`);
/// `{{self}}` is text.
fn captures_self(literal: &Literal) -> bool {
    let text = literal.to_string();
    // A string or a raw string (not a byte or C string, which no format macro takes).
    let string = text.starts_with('"') || text.starts_with("r\"") || text.starts_with("r#");
    if !string || !text.contains("self") {
        return false;
    }
    let mut chars = text.chars().peekable();
    while let Some(c) = chars.next() {
        if c != '{' {
            continue;
        }
        if chars.next_if_eq(&'{').is_some() {
            continue;
        }
        let name: String = chars
            .by_ref()
            .take_while(|&c| c != '}' && c != ':')
            .collect();
        if name.trim() == "self" {
            return true;
        }
    }
    false
}

/// Whether `rest` starts with `::`.
fn starts_path(rest: &[TokenTree]) -> bool {
    matches!(rest, [TokenTree::Punct(a), TokenTree::Punct(b), ..]
        if a.as_char() == ':' && b.as_char() == ':')
}

/// Whether `tokens` hold the `fn` keyword.
fn contains_fn(tokens: TokenStream) -> bool {
    tokens.into_iter().any(|token| match token {
        TokenTree::Ident(ident) => ident == "fn",
        TokenTree::Group(group) => contains_fn(group.stream()),
        TokenTree::Punct(_) | TokenTree::Literal(_) => false,
    })
}

/// [`self_binding`], located at `at`.
fn located(at: Span) -> Ident {
    let mut ident = self_binding();
    ident.set_span(ident.span().located_at(at));
    ident
}

#[cfg(test)]
mod tests {
    use quote::quote;
    use syn::Block;

    use super::*;

    fn rewrite(block: TokenStream) -> String {
        let mut block: Block = syn::parse2(block).unwrap();
        assert!(replace_self(&mut block.stmts).is_empty());
        quote!(#block).to_string()
    }

    #[test]
    fn the_receiver_is_replaced_everywhere_it_means_the_receiver() {
        let out = rewrite(quote!({
            let a = self.client.charge(self.id);
            let f = move || self.count();
            let g = async { &self };
            println!("{} {:?}", self.name, self::helper());
            self::helper(&self);
            Self::new(self)
        }));
        assert_eq!(out.matches("idem_self").count(), 7, "{out}");
        assert_eq!(out.matches("self :: helper").count(), 2, "{out}");
        assert!(!out.contains("(self)") && !out.contains("& self"), "{out}");
        assert!(out.contains("Self :: new"), "{out}");
    }

    #[test]
    fn nested_items_and_macros_defining_functions_keep_their_own_self() {
        let out = rewrite(quote!({
            impl Other {
                fn get(&self) -> u32 {
                    self.0
                }
            }
            fn free(x: &Other) -> u32 {
                x.get()
            }
            define! { fn method(&self) {} }
            self.get()
        }));
        assert_eq!(out.matches("idem_self").count(), 1, "{out}");
        assert_eq!(out.matches("self . 0").count(), 1, "{out}");
        assert!(out.contains("fn method (& self)"), "{out}");
    }

    #[test]
    fn format_strings_that_capture_self_by_name_are_found() {
        let mut block: Block = syn::parse2(quote!({
            let a = format!("{self:?} {n}");
            println!("{}", format!("{ self }"));
            let b = format!("{{self}} {} {selfish} {n:?}", self.id);
            let c = "{self}";
            let d = write!(out, r#"{self}"#);
            let e = format!(b"{self}");
            a
        }))
        .unwrap();
        let found = replace_self(&mut block.stmts);
        assert_eq!(
            found.len(),
            3,
            "only the three format strings naming `self`"
        );
    }
}

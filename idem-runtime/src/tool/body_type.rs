//! Which type a tool's code was compiled for, read from the type of its body: what tells two
//! instantiations of one generic item apart, in this process ([`Instance::admits`]) and in
//! the mark of its fingerprints ([`BodyType::owner`], docs/key-spec.md §5).

/// The type of a tool's body — a closure or `async` block of the tool's function, so its name
/// says what the function belongs to and what it was compiled for
/// (`<app::Stripe as app::Billing>::charge::{{closure}}`).
#[derive(Debug, Clone, Copy)]
#[doc(hidden)]
pub struct BodyType {
    name: &'static str,
}

impl BodyType {
    /// The body type named `name` (`std::any::type_name::<F>()` of the body's type `F`).
    pub fn named(name: &'static str) -> Self {
        BodyType { name }
    }

    /// The type's name, as `std::any::type_name` writes it.
    pub fn name(self) -> &'static str {
        self.name
    }

    /// What the tool's function belongs to, by name: the body's type name without its
    /// lifetimes, without the `::{{closure}}` segments it ends with and without the function's
    /// own segment (its name and generic arguments): `<app::Stripe as app::Billing>` for
    /// `<app::Stripe as app::Billing>::charge<'_, '_>::{{closure}}::{{closure}}`,
    /// `app::Account<app::Eur>` for `app::Account<app::Eur>::refund::{{closure}}`, `app::Invoice`
    /// for `app::Invoice::create::{{closure}}`, the module for a free function.
    pub(crate) fn owner(self) -> String {
        let name = without_lifetimes(self.name);
        let mut rest = name.as_str();
        while let Some(inner) = rest.strip_suffix("::{{closure}}") {
            rest = inner;
        }
        rest[..last_segment(rest)].to_owned()
    }
}

/// The instantiation of a tool that called first, with what its function belongs to (both
/// read once).
#[derive(Debug)]
pub(crate) struct Instance {
    body: BodyType,
    owner: String,
    closure: bool,
}

impl Instance {
    /// The instantiation whose body is of type `body`.
    pub(crate) fn of(body: BodyType) -> Self {
        let owner = body.owner();
        Instance {
            closure: names_a_closure(&owner),
            owner,
            body,
        }
    }

    /// Its body's type.
    pub(crate) fn body(&self) -> BodyType {
        self.body
    }

    /// What its function belongs to ([`BodyType::owner`]).
    pub(crate) fn owner(&self) -> &str {
        &self.owner
    }

    /// Whether what its function belongs to is named after a closure's type, which does not
    /// tell it from the other closures made in the same function (they print alike):
    /// `app::FnTool<app::main::{{closure}}>`, `<app::main::{{closure}} as app::Hook>` — not a
    /// tool defined inside a closure or `async` block (`app::main::{{closure}}::send`), nor
    /// one of a type defined there (`Local<app::main::{{closure}}::S>`, named by its path).
    pub(crate) fn names_a_closure(&self) -> bool {
        self.closure
    }

    /// Whether a body of type `other` is this tool: the same type name, or one that differs
    /// only in the function's own generic arguments (instantiations of a generic function are
    /// one tool, told apart by their arguments: `#[idempotent]` refuses a type or const
    /// parameter that is in no argument of the key).
    pub(crate) fn admits(&self, other: BodyType) -> bool {
        std::ptr::eq(self.body.name, other.name)
            || self.body.name == other.name
            || self.owner == other.owner()
    }
}

/// Whether `owner` holds a closure's type inside its `<…>` (see [`Instance::names_a_closure`]).
fn names_a_closure(owner: &str) -> bool {
    let closure = "{{closure}}";
    scan(owner).into_iter().any(|(at, depth)| {
        let rest = &owner[at..];
        depth > 0 && rest.starts_with(closure) && !rest[closure.len()..].starts_with("::")
    })
}

/// Where the last `::` outside `<…>` starts in `name` (0 if there is none).
fn last_segment(name: &str) -> usize {
    scan(name)
        .into_iter()
        .filter(|&(at, depth)| depth == 0 && name[at..].starts_with("::"))
        .filter(|&(at, _)| at == 0 || !name[..at].ends_with(':'))
        .map(|(at, _)| at)
        .next_back()
        .unwrap_or(0)
}

/// The positions of a type name without lifetimes, each with how many `<…>` it is inside,
/// leaving out what character constants hold (`'<'`, `'\''`); the `>` of a function
/// pointer's `->` closes nothing.
fn scan(name: &str) -> Vec<(usize, usize)> {
    let mut positions = Vec::with_capacity(name.len());
    let mut chars = name.char_indices().peekable();
    let (mut depth, mut previous) = (0_usize, ' ');
    while let Some((at, c)) = chars.next() {
        match c {
            '\'' => {
                // A character constant: its content and closing quote are skipped.
                while let Some((_, inner)) = chars.next() {
                    match inner {
                        '\\' => drop(chars.next()),
                        '\'' => break,
                        _ => {}
                    }
                }
            }
            '<' => depth += 1,
            '>' if previous != '-' => depth = depth.saturating_sub(1),
            _ => positions.push((at, depth)),
        }
        previous = c;
    }
    positions
}

/// `type_name` without its lifetimes (`'_`, `'static`), their separators, and the `<>` left
/// empty (`f<'_, '_>` → `f`, `X<'_, T>` → `X<T>`, `&'static str` → `&str`): `#[async_trait]`
/// gives a method lifetime parameters its native form lacks. A character constant (`X<'a'>`)
/// stays.
fn without_lifetimes(type_name: &str) -> String {
    let mut out = String::with_capacity(type_name.len());
    let mut chars = type_name.chars().peekable();
    while let Some(c) = chars.next() {
        if c != '\'' {
            out.push(c);
            continue;
        }
        let mut name = String::new();
        while let Some(&n) = chars.peek()
            && (n.is_alphanumeric() || n == '_')
        {
            name.push(n);
            chars.next();
        }
        if name.is_empty() || chars.peek() == Some(&'\'') {
            // Not a lifetime: a character constant's quote.
            out.push('\'');
            out.push_str(&name);
            continue;
        }
        // A lifetime: dropped with the separator after it, else the one before it.
        match chars.peek() {
            Some(',' | '+') => {
                chars.next();
                while chars.next_if_eq(&' ').is_some() {}
            }
            Some(' ') => while chars.next_if_eq(&' ').is_some() {},
            _ => {
                let kept = out.trim_end_matches(' ').len();
                out.truncate(kept);
                if out.ends_with([',', '+']) {
                    out.pop();
                    let kept = out.trim_end_matches(' ').len();
                    out.truncate(kept);
                }
            }
        }
        if out.ends_with('<') && chars.peek() == Some(&'>') {
            out.pop();
            chars.next();
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    fn named(name: &'static str) -> BodyType {
        BodyType { name }
    }

    #[test]
    fn the_owner_is_what_the_function_belongs_to() {
        let cases = [
            (
                "<app::Stripe as app::Billing>::charge::{{closure}}",
                "<app::Stripe as app::Billing>",
            ),
            (
                "<app::Sms as app::Sender>::send<'_, '_>::{{closure}}::{{closure}}",
                "<app::Sms as app::Sender>",
            ),
            (
                "<app::Stripe as app::Provider>::charge<&str>::{{closure}}",
                "<app::Stripe as app::Provider>",
            ),
            (
                "app::Account<app::Eur>::refund::{{closure}}::{{closure}}",
                "app::Account<app::Eur>",
            ),
            ("app::Invoice::create::{{closure}}", "app::Invoice"),
            (
                "app::<impl app::a::Client>::send::{{closure}}",
                "app::<impl app::a::Client>",
            ),
            (
                "app::Ptr<core::option::Option<fn(u64) -> app::Charge>>::call::{{closure}}",
                "app::Ptr<core::option::Option<fn(u64) -> app::Charge>>",
            ),
            ("app::notify::notify_user::{{closure}}", "app::notify"),
            ("app::generic<u32>::{{closure}}", "app"),
        ];
        for (name, owner) in cases {
            assert_eq!(named(name).owner(), owner, "{name}");
        }
        // A character constant holds no bracket.
        assert_eq!(
            named("app::Angle<'<', u8>::f::{{closure}}").owner(),
            "app::Angle<'<', u8>"
        );
        assert_ne!(
            named("app::Angle<'<', u8>::f::{{closure}}").owner(),
            named("app::Angle<'<', u16>::f::{{closure}}").owner(),
        );
        assert_eq!(
            named("app::Q<'\\'', T>::f::{{closure}}").owner(),
            "app::Q<'\\'', T>"
        );
        // Function pointers with other return types are other owners.
        assert_ne!(
            named("app::Ptr<fn(u64) -> app::Charge>::call::{{closure}}").owner(),
            named("app::Ptr<fn(u64) -> app::Refund>::call::{{closure}}").owner(),
        );
    }

    #[test]
    fn closures_are_named_as_such() {
        struct Tool<F>(F);
        impl<F: Fn(u64) -> u64> Tool<F> {
            async fn body(&self) -> u64 {
                (self.0)(1)
            }
        }
        fn body_of<F>(_: &F) -> BodyType {
            BodyType::named(std::any::type_name::<F>())
        }
        let (a, b) = (Tool(|x| x + 1), Tool(|x| x + 2));
        let (a, b) = (body_of(&a.body()), body_of(&b.body()));
        assert_eq!(a.name, b.name, "two closures of one function print alike");
        let closure = |name| Instance::of(named(name)).names_a_closure();
        assert!(Instance::of(a).names_a_closure());
        assert!(!closure("app::Tool<app::Charge>::call::{{closure}}"));
        assert!(closure(
            "<app::main::{{closure}} as app::Hook>::fire::{{closure}}"
        ));
        // A tool defined inside a closure or an `async` block is no closure's, nor one generic
        // over a type defined there.
        assert!(!closure("app::main::{{closure}}::send::{{closure}}"));
        assert!(!closure(
            "app::Local<app::f::{{closure}}::S>::send::{{closure}}"
        ));
        // The same name, whatever the function's own arguments, is the same tool.
        let (g1, g2) = (
            named("<app::S as app::T>::f<u8>::{{closure}}"),
            named("<app::S as app::T>::f<u16>::{{closure}}"),
        );
        let first = Instance::of(g1);
        assert!(first.admits(g1) && first.admits(g2));
        assert!(!first.admits(named("<app::R as app::T>::f<u8>::{{closure}}")));
    }

    #[test]
    fn lifetimes_are_left_out() {
        let cases = [
            ("f<'_>::g", "f::g"),
            ("a::X<'_, T>::f", "a::X<T>::f"),
            ("a::X<T, '_>::f", "a::X<T>::f"),
            ("a::X<T, 'static, U>", "a::X<T, U>"),
            ("a::X<&'static str>", "a::X<&str>"),
            ("a::X<dyn a::T + '_>", "a::X<dyn a::T>"),
            ("a::X<'a'>", "a::X<'a'>"),
            ("a::X<'\\''>", "a::X<'\\''>"),
        ];
        for (name, without) in cases {
            assert_eq!(without_lifetimes(name), without, "{name}");
        }
    }
}

//! When a detached tool whose arguments are all owned may return its call's future
//! (`fn tool(..) -> impl Future<Output = R>`) instead of being an `async fn`.

use syn::{Attribute, Type};

/// Whether `attr` is one of the compiler's own attributes that change nothing an attribute
/// macro below would expect (`doc`, lints, `cfg`, `must_use`, `inline`, …).
pub(crate) fn is_inert(attr: &Attribute) -> bool {
    const INERT: [&str; 12] = [
        "doc",
        "allow",
        "warn",
        "deny",
        "expect",
        "forbid",
        "cfg",
        "must_use",
        "inline",
        "cold",
        "deprecated",
        "track_caller",
    ];
    attr.path()
        .get_ident()
        .is_some_and(|ident| INERT.iter().any(|name| ident == name))
}

/// Whether `ty` is written as a path whose last segment is `Result` (`Result<T, E>`,
/// `anyhow::Result<T>`, `io::Result<T>`).
pub(crate) fn names_a_result(ty: &Type) -> bool {
    matches!(ty, Type::Path(path) if path.path.segments.last().is_some_and(|s| s.ident == "Result"))
}

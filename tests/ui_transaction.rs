//! Compile-fail tests of `#[transaction]` that depend on the `postgres` feature: the
//! parameter's type with it, the missing feature without it. (The misuses the macro itself
//! reports are in `tests/ui/`.) Regenerate with `TRYBUILD=overwrite`.

#[test]
fn ui_transaction() {
    let t = trybuild::TestCases::new();
    #[cfg(feature = "postgres")]
    t.compile_fail("tests/ui/postgres/*.rs");
    #[cfg(not(feature = "postgres"))]
    t.compile_fail("tests/ui/no_postgres/*.rs");
}

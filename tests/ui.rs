//! Compile-fail tests of the macros: each `.stderr` was reviewed for where the error points and
//! whether it says what to do. Regenerate with `TRYBUILD=overwrite cargo test --test ui`.

#[test]
fn ui() {
    let t = trybuild::TestCases::new();
    t.compile_fail("tests/ui/*.rs");
}

//! Compile-fail tests that need an optional feature: a rmcp server's `#[tool_router]` block and
//! a rig `Tool` impl (their other misuses are those of `tests/ui/`). Regenerate with
//! `TRYBUILD=overwrite cargo test --test ui_features --features rmcp,rig`.

#[test]
fn ui_features() {
    let t = trybuild::TestCases::new();
    #[cfg(feature = "rmcp")]
    t.compile_fail("tests/ui/rmcp/*.rs");
    #[cfg(feature = "rig")]
    t.compile_fail("tests/ui/rig/*.rs");
    let _ = t;
}

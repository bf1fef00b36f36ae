//! `IdemServer` forwards every method of rmcp's `ServerHandler` to the wrapped server: a method
//! it left out would silently get rmcp's default instead of the server's own. rmcp is a caret
//! requirement, so this reads the `ServerHandler` of the rmcp in use (CI runs it with the
//! lowest and the newest rmcp the requirement admits) and the methods `src/mcp/forward.rs`
//! implements.

use std::collections::BTreeSet;
use std::path::PathBuf;
use std::process::Command;

/// The names after `fn ` in `text` (as written by rustfmt: `fn name(` or `fn name<`).
fn fn_names(text: &str) -> BTreeSet<String> {
    text.split("fn ")
        .skip(1)
        .filter_map(|rest| {
            let name: String = rest
                .chars()
                .take_while(|c| c.is_ascii_alphanumeric() || *c == '_')
                .collect();
            let next = rest[name.len()..].chars().next();
            (!name.is_empty() && matches!(next, Some('(' | '<'))).then_some(name)
        })
        .collect()
}

/// The source directory of the rmcp this package is built with.
fn rmcp_src() -> PathBuf {
    let cargo = std::env::var("CARGO").unwrap_or_else(|_| "cargo".to_owned());
    let output = Command::new(cargo)
        .args(["metadata", "--format-version", "1"])
        .current_dir(env!("CARGO_MANIFEST_DIR"))
        .output()
        .expect("cargo metadata runs");
    assert!(
        output.status.success(),
        "{}",
        String::from_utf8_lossy(&output.stderr)
    );
    let metadata: serde_json::Value = serde_json::from_slice(&output.stdout).unwrap();
    let rmcp = metadata["packages"]
        .as_array()
        .unwrap()
        .iter()
        .find(|p| p["name"] == "rmcp")
        .expect("rmcp in the dependency graph");
    let manifest = PathBuf::from(rmcp["manifest_path"].as_str().unwrap());
    manifest.parent().unwrap().join("src")
}

#[test]
fn every_server_handler_method_of_the_rmcp_in_use_is_forwarded() {
    let handler = std::fs::read_to_string(rmcp_src().join("handler/server.rs")).unwrap();
    // The trait's methods are written in a macro that both `ServerHandler` variants expand.
    let start = handler
        .find("macro_rules! server_handler_methods")
        .expect("rmcp defines ServerHandler's methods in `server_handler_methods!`");
    let body = &handler[start..];
    let end = body.find("\n}\n").expect("the end of the macro");
    let rmcp_methods = fn_names(&body[..end]);
    assert!(rmcp_methods.len() > 20, "parsed: {rmcp_methods:?}");

    let forward = std::fs::read_to_string(
        PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("src/mcp/forward.rs"),
    )
    .unwrap();
    let start = forward
        .find("impl<S: ServerHandler> ServerHandler for IdemServer<S>")
        .unwrap();
    let mut forwarded = fn_names(&forward[start..]);
    // The `forward!` macro's entries are `name(args) -> Out;`.
    let list = &forward[forward[start..].find("forward! {").unwrap() + start..];
    for line in list.lines().skip(1) {
        let line = line.trim();
        if line == "}" {
            break;
        }
        if let Some((name, _)) = line.split_once('(')
            && name.chars().all(|c| c.is_ascii_lowercase() || c == '_')
            && !name.is_empty()
        {
            forwarded.insert(name.to_owned());
        }
    }
    let missing: Vec<_> = rmcp_methods.difference(&forwarded).collect();
    assert!(
        missing.is_empty(),
        "rmcp's ServerHandler has methods that IdemServer does not forward to the wrapped \
         server (add them to src/mcp/forward.rs): {missing:?}"
    );
}

//! The name the crate being compiled gives `idem-tools`: `idem = { package = "idem-tools", … }`
//! in its `Cargo.toml` makes the generated code's `::idem_tools` unresolved, and without this
//! every tool would need `crate = "::idem"`. Read from the manifest, as `proc-macro-crate` does,
//! with a line scanner rather than a TOML parser: a dependency table or inline table in the
//! usual forms. Anything else (a workspace-inherited rename, two renames) leaves `idem_tools`,
//! and `crate = "…"`, which always wins, says the name.

use std::cell::RefCell;
use std::collections::HashMap;

/// The package whose rename is looked for.
const PACKAGE: &str = "idem-tools";

/// The crate's name for `idem-tools` if its manifest renames it (`idem`), else `None`. Read
/// once per manifest and compilation.
pub(crate) fn renamed() -> Option<String> {
    thread_local! {
        static READ: RefCell<HashMap<String, Option<String>>> = RefCell::new(HashMap::new());
    }
    let dir = std::env::var("CARGO_MANIFEST_DIR").ok()?;
    READ.with(|read| {
        read.borrow_mut()
            .entry(dir.clone())
            .or_insert_with(|| {
                let path = std::path::Path::new(&dir).join("Cargo.toml");
                let manifest = std::fs::read_to_string(path).ok()?;
                renamed_in(&manifest)
            })
            .clone()
    })
}

/// [`renamed`] for the text of a manifest: the one key of a dependency on `idem-tools` under
/// another name, as a crate name (`-` read as `_`); `None` if the manifest also depends on it
/// under its own name, renames it twice, or not at all.
pub(crate) fn renamed_in(manifest: &str) -> Option<String> {
    let mut renames: Vec<String> = Vec::new();
    let mut direct = false;
    // The dependency whose table (`[dependencies.idem]`) the lines are in, if any.
    let mut table: Option<String> = None;
    // Whether the lines are in a table of dependencies (`[dependencies]`,
    // `[target.'cfg(unix)'.dev-dependencies]`, …).
    let mut in_dependencies = false;
    for line in manifest.lines() {
        let line = line.split(" #").next().unwrap_or(line).trim();
        if line.starts_with('[') {
            let header = line.trim_matches(|c| c == '[' || c == ']').trim();
            table = None;
            in_dependencies = false;
            if header.ends_with("dependencies") {
                in_dependencies = !header.starts_with("workspace.");
            } else if let Some((section, key)) = header.rsplit_once('.')
                && section.ends_with("dependencies")
                && !section.starts_with("workspace.")
            {
                let key = unquote(key);
                direct |= is_package(&key);
                table = Some(key);
            }
            continue;
        }
        let Some((key, value)) = line.split_once('=') else {
            continue;
        };
        let (key, value) = (unquote(key), value.trim());
        match &table {
            Some(dependency) if key == "package" && unquote(value) == PACKAGE => {
                renames.push(dependency.clone());
            }
            Some(_) => {}
            None if in_dependencies => {
                let package = value.strip_prefix('{').and_then(|inline| {
                    inline.match_indices("package").find_map(|(at, word)| {
                        let rest = inline[at + word.len()..].trim_start().strip_prefix('=')?;
                        rest.split([',', '}']).next().map(unquote)
                    })
                });
                match package {
                    Some(package) if package == PACKAGE => renames.push(key),
                    Some(_) => {}
                    None => direct |= is_package(&key),
                }
            }
            None => {}
        }
    }
    renames.sort();
    renames.dedup();
    match renames.as_slice() {
        [name] if !direct && !is_package(name) => {
            let name = name.replace('-', "_");
            syn::parse_str::<syn::Ident>(&name).ok().map(|_| name)
        }
        _ => None,
    }
}

/// Whether a dependency key is the package under its own name.
fn is_package(key: &str) -> bool {
    key == PACKAGE || key == "idem_tools"
}

/// `text` without spaces and quotes around it.
fn unquote(text: &str) -> String {
    text.trim()
        .trim_matches(|c| c == '"' || c == '\'')
        .to_owned()
}

#[cfg(test)]
mod tests {
    use super::renamed_in;

    #[test]
    fn an_inline_table_renames() {
        let manifest = r#"
[package]
name = "agent"

[dependencies]
serde = { version = "1", features = ["derive"] }
idem = { package = "idem-tools", version = "0.1" } # the tools
"#;
        assert_eq!(renamed_in(manifest).as_deref(), Some("idem"));
    }

    #[test]
    fn a_dependency_table_renames() {
        let manifest = r#"
[target.'cfg(unix)'.dependencies.my-idem]
version = "0.1"
package = "idem-tools"
features = ["sqlite"]

[dev-dependencies]
tokio = "1"
"#;
        assert_eq!(renamed_in(manifest).as_deref(), Some("my_idem"));
    }

    #[test]
    fn its_own_name_or_none_or_two_leave_the_default() {
        let own = "[dependencies]\nidem-tools = { version = \"0.1\" }\n";
        assert_eq!(renamed_in(own), None);
        let both = "[dependencies]\nidem-tools = \"0.1\"\n[dev-dependencies]\nidem = { package = \"idem-tools\" }\n";
        assert_eq!(renamed_in(both), None);
        let two =
            "[dependencies]\na = { package = \"idem-tools\" }\nb = { package = \"idem-tools\" }\n";
        assert_eq!(renamed_in(two), None);
        let other = "[dependencies]\nidem = { package = \"idem-core\" }\n";
        assert_eq!(renamed_in(other), None);
        let workspace = "[workspace.dependencies]\nidem = { package = \"idem-tools\" }\n";
        assert_eq!(renamed_in(workspace), None);
    }
}

//! The name the crate being compiled gives `idem-tools`: `idem = { package = "idem-tools", … }`
//! in its `Cargo.toml` makes the generated code's `::idem_tools` unresolved, and without this
//! every tool would need `crate = "::idem"`. Read from the manifest, as `proc-macro-crate` does,
//! with a line scanner rather than a TOML parser: a dependency table or inline table in the
//! usual forms, inherited from the workspace's `[workspace.dependencies]` or not. Anything else
//! (two renames, a form not recognised) leaves `idem_tools`, and `crate = "…"`, which always
//! wins, says the name.

use std::cell::RefCell;
use std::collections::HashMap;
use std::path::Path;

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
                let dir = Path::new(&dir);
                let manifest = std::fs::read_to_string(dir.join("Cargo.toml")).ok()?;
                // A dependency inherited from the workspace (`idem = { workspace = true }`) is
                // renamed in the workspace's manifest: this one, or the nearest above it that
                // has a `[workspace]`.
                let workspace = || {
                    dir.ancestors().skip(1).find_map(|up| {
                        let text = std::fs::read_to_string(up.join("Cargo.toml")).ok()?;
                        scan(&text).is_workspace.then_some(text)
                    })
                };
                renamed_in(&manifest, workspace)
            })
            .clone()
    })
}

/// What a manifest says of `idem-tools`.
#[derive(Default)]
struct Scan {
    /// The keys of the dependencies on it under another name.
    renames: Vec<String>,
    /// A dependency on it under its own name.
    direct: bool,
    /// The keys of dependencies inherited from the workspace (`workspace = true`).
    inherited: Vec<String>,
    /// The keys `[workspace.dependencies]` gives it under another name.
    workspace_renames: Vec<String>,
    /// Whether the manifest has a `[workspace]` table.
    is_workspace: bool,
}

/// [`renamed`] for the text of a manifest, and of its workspace's (read only if needed): the
/// one key of a dependency on `idem-tools` under another name, as a crate name (`-` read as
/// `_`); `None` if the manifest also depends on it under its own name, renames it twice, or not
/// at all.
pub(crate) fn renamed_in(
    manifest: &str,
    workspace: impl FnOnce() -> Option<String>,
) -> Option<String> {
    let scan = scan(manifest);
    let mut renames = scan.renames.clone();
    let mut direct = scan.direct;
    let inherited = scan.inherited.clone();
    if !inherited.is_empty() {
        let root = if scan.is_workspace {
            Some(scan)
        } else {
            workspace().map(|text| self::scan(&text))
        };
        for key in inherited {
            direct |= is_package(&key);
            if root
                .as_ref()
                .is_some_and(|root| root.workspace_renames.contains(&key))
            {
                renames.push(key);
            }
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

/// Reads the dependency tables of a manifest, line by line.
fn scan(manifest: &str) -> Scan {
    let mut scan = Scan::default();
    // The dependency whose table (`[dependencies.idem]`) the lines are in, if any, and whether
    // it is the workspace's.
    let mut table: Option<(String, bool)> = None;
    // Whether the lines are in a table of dependencies (`[dependencies]`,
    // `[target.'cfg(unix)'.dev-dependencies]`, `[workspace.dependencies]`), and whether it is
    // the workspace's.
    let mut in_dependencies: Option<bool> = None;
    for line in manifest.lines() {
        let line = line.split(" #").next().unwrap_or(line).trim();
        if line.starts_with('[') {
            let header = line.trim_matches(|c| c == '[' || c == ']').trim();
            // `[workspace]`, or only `[workspace.dependencies.idem]` as trybuild writes it
            // (a `workspace.` table makes the manifest a workspace's all the same).
            scan.is_workspace |= header == "workspace" || header.starts_with("workspace.");
            table = None;
            in_dependencies = None;
            if header.ends_with("dependencies") {
                in_dependencies = Some(header.starts_with("workspace."));
            } else if let Some((section, key)) = header.rsplit_once('.')
                && section.ends_with("dependencies")
            {
                let (key, of_workspace) = (unquote(key), section.starts_with("workspace."));
                scan.direct |= !of_workspace && is_package(&key);
                table = Some((key, of_workspace));
            }
            continue;
        }
        let Some((key, value)) = line.split_once('=') else {
            continue;
        };
        // A dotted key (`idem-tools.path = "…"`, `idem.package = "idem-tools"`) is a field of
        // the dependency before its first dot.
        let (key, field_of) = match key.split_once('.') {
            Some((dependency, field)) => (unquote(dependency), Some(unquote(field))),
            None => (unquote(key), None),
        };
        let value = value.trim();
        if let (None, Some(of_workspace), Some(field)) = (&table, in_dependencies, &field_of) {
            match field.as_str() {
                "workspace" if value == "true" && !of_workspace => scan.inherited.push(key),
                "package" if unquote(value) == PACKAGE => scan.rename(&key, of_workspace),
                _ => scan.direct |= !of_workspace && is_package(&key),
            }
            continue;
        }
        match (&table, in_dependencies) {
            (Some((dependency, of_workspace)), _) => {
                if key == "package" && unquote(value) == PACKAGE {
                    scan.rename(dependency, *of_workspace);
                } else if key == "workspace" && value == "true" && !of_workspace {
                    scan.inherited.push(dependency.clone());
                }
            }
            (None, Some(of_workspace)) => {
                let inline = value.strip_prefix('{');
                match inline.and_then(|inline| field(inline, "package")) {
                    Some(package) if package == PACKAGE => scan.rename(&key, of_workspace),
                    // `idem_tools = { package = "a-fork" }` still names `::idem_tools`.
                    Some(_) => scan.direct |= !of_workspace && is_package(&key),
                    None if !of_workspace
                        && inline
                            .and_then(|inline| field(inline, "workspace"))
                            .as_deref()
                            == Some("true") =>
                    {
                        scan.inherited.push(key);
                    }
                    None => scan.direct |= !of_workspace && is_package(&key),
                }
            }
            (None, None) => {}
        }
    }
    scan
}

impl Scan {
    fn rename(&mut self, key: &str, of_workspace: bool) {
        if of_workspace {
            self.workspace_renames.push(key.to_owned());
        } else {
            self.renames.push(key.to_owned());
        }
    }
}

/// The value of `name = …` in an inline table's text (after its `{`), unquoted.
fn field(inline: &str, name: &str) -> Option<String> {
    inline.match_indices(name).find_map(|(at, word)| {
        let rest = inline[at + word.len()..].trim_start().strip_prefix('=')?;
        rest.split([',', '}']).next().map(unquote)
    })
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
        assert_eq!(renamed_in(manifest, || None).as_deref(), Some("idem"));
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
        assert_eq!(renamed_in(manifest, || None).as_deref(), Some("my_idem"));
    }

    #[test]
    fn a_rename_inherited_from_the_workspace_renames() {
        let root = "[workspace]\nmembers = [\"agent\"]\n\n[workspace.dependencies]\nidem = { package = \"idem-tools\", version = \"0.1\" }\n";
        let member = "[package]\nname = \"agent\"\n\n[dependencies]\nidem = { workspace = true, features = [\"sqlite\"] }\n";
        assert_eq!(
            renamed_in(member, || Some(root.to_owned())).as_deref(),
            Some("idem")
        );
        let dotted = "[dependencies]\nidem.workspace = true\n";
        assert_eq!(
            renamed_in(dotted, || Some(root.to_owned())).as_deref(),
            Some("idem")
        );
        // A root package of its own workspace.
        let both = format!("{root}\n[dependencies]\nidem = {{ workspace = true }}\n");
        assert_eq!(renamed_in(&both, || None).as_deref(), Some("idem"));
        // Not renamed in the workspace, or no workspace found.
        let plain = "[workspace]\n[workspace.dependencies]\nidem-tools = \"0.1\"\n";
        let member = "[dependencies]\nidem-tools = { workspace = true }\n";
        assert_eq!(renamed_in(member, || Some(plain.to_owned())), None);
        assert_eq!(renamed_in(dotted, || None), None);
    }

    #[test]
    fn a_workspace_without_its_own_header_renames() {
        // As trybuild writes the manifest of the crate it builds the tests in.
        let trybuild = "[package]\nname = \"agent-tests\"\n\n[dependencies.idem]\nworkspace = true\n\n[workspace.dependencies.idem]\npath = \"/agent/idem\"\npackage = \"idem-tools\"\n";
        assert_eq!(renamed_in(trybuild, || None).as_deref(), Some("idem"));
        let commented = "[workspace] # the agents\n[workspace.dependencies]\nidem = { package = \"idem-tools\" }\n[dependencies]\nidem.workspace = true\n";
        assert_eq!(renamed_in(commented, || None).as_deref(), Some("idem"));
    }

    #[test]
    fn its_own_name_or_none_or_two_leave_the_default() {
        let own = "[dependencies]\nidem-tools = { version = \"0.1\" }\n";
        assert_eq!(renamed_in(own, || None), None);
        let both = "[dependencies]\nidem-tools = \"0.1\"\n[dev-dependencies]\nidem = { package = \"idem-tools\" }\n";
        assert_eq!(renamed_in(both, || None), None);
        let two =
            "[dependencies]\na = { package = \"idem-tools\" }\nb = { package = \"idem-tools\" }\n";
        assert_eq!(renamed_in(two, || None), None);
        let other = "[dependencies]\nidem = { package = \"idem-core\" }\n";
        assert_eq!(renamed_in(other, || None), None);
        let workspace = "[workspace.dependencies]\nidem = { package = \"idem-tools\" }\n";
        assert_eq!(renamed_in(workspace, || None), None);
    }

    #[test]
    fn a_dependency_under_its_own_name_in_dotted_keys_or_of_another_package_leaves_the_default() {
        // The library depends on `idem-tools` by dotted keys; the tests rename it: the library's
        // `::idem_tools` compiled, `::idem` would not.
        for own in [
            "idem-tools.path = \"../idem\"",
            "idem-tools.version = \"0.1\"",
            "\"idem-tools\".git = \"https://example.com/idem\"",
            "idem_tools = { package = \"idem-tools-fork\", version = \"0.1\" }",
        ] {
            let manifest = format!(
                "[dependencies]\n{own}\n\n[dev-dependencies]\nidem = {{ package = \"idem-tools\" }}\n"
            );
            assert_eq!(renamed_in(&manifest, || None), None, "{own}");
        }
        // A rename by dotted keys is one.
        let dotted = "[dependencies]\nidem.package = \"idem-tools\"\nidem.version = \"0.1\"\n";
        assert_eq!(renamed_in(dotted, || None).as_deref(), Some("idem"));
    }
}

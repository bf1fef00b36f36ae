//! `tools![]` entries that name a method as if it were a function: `#[tool_impl]` emits, for
//! each tool method, a fallback descriptor under the method's bare name, glob-imported so that
//! a real function's descriptor of that name wins. `tools![]` fails to evaluate when it lists
//! one, with a message that names the path to write.

use super::{ToolInfo, same_name};

/// The name of every fallback descriptor: no tool can have it (names are checked against
/// `^[a-zA-Z0-9_-]{1,64}$`).
const LISTED_AS_FUNCTION: &str = "\0a method listed as a function";

/// The fallback descriptor for a method; `message` says how to list it.
pub const fn method_listed_as_function(message: &'static str) -> ToolInfo {
    ToolInfo::read_only(LISTED_AS_FUNCTION).with_item(message)
}

/// Fails the evaluation of `tools![]`'s constant if `entry` is a fallback descriptor.
pub const fn listed_as_function(entry: &ToolInfo) {
    if same_name(entry, &method_listed_as_function("")) {
        panic!("{}", entry.item);
    }
}

//! One module per subcommand; each returns the text to print on stdout.

pub mod bench;
pub mod list;
mod remove;
mod show;
mod stats;
mod turn;

pub use list::list;
pub use remove::remove;
pub use show::show;
pub use stats::{purge, stats};
pub use turn::turn;

/// `value` as pretty JSON and a final newline.
fn json_text(value: &serde_json::Value) -> String {
    let mut text = serde_json::to_string_pretty(value).unwrap_or_else(|_| value.to_string());
    text.push('\n');
    text
}

//! Make LLM-agent tool calls safe to retry: idempotency keys, dedup stores and retry budgets.
//!
//! Annotate each tool: `#[idempotent]` for tools that change the world (a retry in the same
//! turn replays the first result instead of acting twice), `#[read_only]` for tools that only
//! read (zero cost, classification only). List them with [`tools!`] to get a catalog that fails
//! to compile if any tool is unclassified.
//!
//! ```
//! use idem::{Turn, idempotent, read_only};
//!
//! #[derive(serde::Serialize, serde::Deserialize)]
//! struct Receipt { id: u64 }
//!
//! /// Sends a message: runs once per turn and arguments, replays afterwards.
//! #[idempotent(ttl = "1h")]
//! async fn send_message(to: String, body: String) -> Result<Receipt, idem::Error> {
//!     Ok(Receipt { id: 7 })
//! }
//!
//! /// Searches the docs: no key, no store, no budget.
//! #[read_only]
//! async fn search_docs(query: &str) -> Vec<String> {
//!     vec![query.to_owned()]
//! }
//!
//! const TOOLS: &[idem::ToolInfo] = idem::tools![send_message, search_docs];
//!
//! # #[tokio::main(flavor = "current_thread")] async fn main() -> Result<(), idem::Error> {
//! Turn::new("conv-1/turn-1")
//!     .scope(async {
//!         let first = send_message("ada".into(), "hi".into()).await?;
//!         let retry = send_message("ada".into(), "hi".into()).await?; // replayed
//!         assert_eq!(first.id, retry.id);
//!         Ok::<_, idem::Error>(())
//!     })
//!     .await?;
//! assert!(TOOLS[1].read_only_hint() && !TOOLS[0].read_only_hint());
//! # Ok(()) }
//! ```
//!
//! See the `#[idempotent]` docs for every option and for how it stacks with other attributes.
#![forbid(unsafe_code)]
#![warn(missing_docs)]

pub use idem_macros::{idempotent, read_only};
pub use idem_runtime::*;

#[doc(hidden)]
#[path = "private.rs"]
pub mod __private;

/// A `&'static [ToolInfo]` catalog of annotated tools, in the order given; **fails to compile if
/// a listed tool is not annotated** with `#[idempotent]` or `#[read_only]` (the error names it).
///
/// Entries are paths to free functions (`send_email`, `mail::send_email`) or to `pub` methods
/// (`Mailer::send`). It is a constant expression, so it can initialise a `const`.
///
/// ```
/// use idem::{ToolInfo, ToolKind, idempotent, read_only};
///
/// #[idempotent(budget = 2)]
/// async fn send_email(to: String) -> Result<(), idem::Error> { Ok(()) }
///
/// mod docs {
///     #[idem::read_only]
///     pub fn search(query: &str) -> usize { query.len() }
/// }
///
/// const TOOLS: &[ToolInfo] = idem::tools![send_email, docs::search];
/// for tool in TOOLS {
///     // MCP tool annotations
///     println!(
///         "{}: readOnlyHint={} idempotentHint={} destructiveHint={}",
///         tool.name, tool.read_only_hint(), tool.idempotent_hint(), tool.destructive_hint(),
///     );
/// }
/// assert_eq!(TOOLS[0].kind, ToolKind::Idempotent);
/// assert_eq!(TOOLS[0].budget, Some(2));
/// assert_eq!(TOOLS[1].kind, ToolKind::ReadOnly);
/// ```
///
/// An unannotated function is rejected:
///
/// ```compile_fail
/// async fn not_annotated() {}
/// const TOOLS: &[idem::ToolInfo] = idem::tools![not_annotated];
/// ```
#[macro_export]
macro_rules! tools {
    ($($tool:tt)*) => {
        $crate::__private::tools_impl!($crate; $($tool)*)
    };
}

//! Tools written against `idem-tools` renamed `idem` in `Cargo.toml`, with no `crate = "…"`:
//! every macro finds the crate under its new name (tests/renamed.rs runs them).

use idem::{Error, idempotent, read_only, tool_impl};

/// A free function: detached, returns its future.
#[idempotent]
pub async fn book(room: u32) -> Result<u32, Error> {
    Ok(room)
}

/// Read-only.
#[read_only]
pub fn search(query: &str) -> usize {
    query.len()
}

/// A type whose `&self` tools run on a clone, and one that runs attached.
#[derive(Clone)]
pub struct Desk {
    /// The desk's identity.
    pub id: u32,
}

#[tool_impl(self_key = self.id)]
impl Desk {
    /// On a clone of `self`.
    #[idempotent]
    pub async fn reserve(&self, seat: u32) -> Result<u32, Error> {
        Ok(self.id * 100 + seat)
    }

    /// Attached: borrows its argument.
    #[idempotent]
    pub async fn label(&self, text: &str) -> Result<String, Error> {
        Ok(format!("{}:{text}", self.id))
    }
}

/// The catalog.
pub const TOOLS: &[idem::ToolInfo] = idem::tools![book, search, Desk::reserve, Desk::label];

//! Runtime for [`idem-tools`](https://docs.rs/idem-tools): canonical idempotency keys, turns and retry budgets,
//! dedup stores and the execution engine that `#[idempotent]` tools run through.
//!
//! The pipeline, one module each: arguments → [`key`] → [`turn`] budget → [`store`] →
//! [`engine`] → [`replay`].
#![forbid(unsafe_code)]
#![cfg_attr(docsrs, feature(doc_cfg))]
#![warn(missing_docs)]

pub mod clock;
pub mod conversation;
pub mod engine;
pub mod error;
mod flight;
pub mod key;
#[cfg(feature = "rmcp")]
pub mod mcp;
mod model_text;
pub mod replay;
pub mod stats;
pub mod store;
pub mod tool;
pub mod turn;

pub use conversation::Conversation;
pub use engine::{Call, Codec, current_key, execute, execute_detached, spawn};
pub use error::{Earlier, Error, KeyKept, Mismatch, Result, Unkeyed};
pub use key::{Fingerprint, Key};
pub use stats::{Outcome, Stats, stats};
#[cfg(feature = "postgres")]
pub use store::PostgresStore;
#[cfg(feature = "redis")]
pub use store::RedisStore;
#[cfg(feature = "sqlite")]
pub use store::SqliteStore;
pub use store::{MemoryStore, Store, default_store, set_default_store};
pub use tool::{ToolInfo, ToolKind};
pub use turn::Turn;

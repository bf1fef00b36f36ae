//! Tool descriptors: the compile-time classification of every tool.

use std::time::Duration;

/// Whether a tool changes the world.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum ToolKind {
    /// Reads only: runs directly, with no key, store or budget.
    ReadOnly,
    /// Changes something: runs through the engine, so a repeated call is replayed.
    Idempotent,
}

/// Everything idem knows about one tool; `#[idempotent]` and `#[read_only]` generate one as a
/// constant for each annotated function.
///
/// ```
/// use std::time::Duration;
/// use idem_runtime::{ToolInfo, ToolKind};
///
/// const SEND: ToolInfo = ToolInfo::idempotent("send_message").with_budget(2);
/// assert_eq!(SEND.kind, ToolKind::Idempotent);
/// assert!(SEND.idempotent_hint() && !SEND.read_only_hint());
/// ```
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[non_exhaustive]
pub struct ToolInfo {
    /// The key namespace of the tool (its function name unless renamed).
    pub name: &'static str,
    /// Read-only or idempotent.
    pub kind: ToolKind,
    /// Bumping it gives every call new keys.
    pub version: u32,
    /// How long completed results are kept (`None`: [`DEFAULT_TTL`](crate::store::DEFAULT_TTL)).
    pub ttl: Option<Duration>,
    /// Attempts per key per turn (`None`: the turn's limit).
    pub budget: Option<u32>,
    /// Whether `Err` results are stored and replayed too.
    pub cache_errors: bool,
    /// How long a claim lasts without renewal (`None`: [`DEFAULT_LEASE`](crate::store::DEFAULT_LEASE)).
    pub lease: Option<Duration>,
    /// For a tool that runs in its caller's task: whether a call dropped mid-run releases the
    /// key (a retry runs the tool again) instead of keeping it as interrupted.
    pub release_on_cancel: bool,
}

impl ToolInfo {
    /// A state-changing tool with default settings.
    pub const fn idempotent(name: &'static str) -> Self {
        ToolInfo {
            name,
            kind: ToolKind::Idempotent,
            version: 0,
            ttl: None,
            budget: None,
            cache_errors: false,
            lease: None,
            release_on_cancel: false,
        }
    }

    /// A read-only tool.
    pub const fn read_only(name: &'static str) -> Self {
        ToolInfo {
            kind: ToolKind::ReadOnly,
            ..ToolInfo::idempotent(name)
        }
    }

    /// Sets the version.
    pub const fn with_version(mut self, version: u32) -> Self {
        self.version = version;
        self
    }

    /// Sets the TTL of completed results.
    pub const fn with_ttl(mut self, ttl: Duration) -> Self {
        self.ttl = Some(ttl);
        self
    }

    /// Sets the attempts allowed per key per turn.
    pub const fn with_budget(mut self, budget: u32) -> Self {
        self.budget = Some(budget);
        self
    }

    /// Stores `Err` results too, so a failed call is replayed as failed (Stripe-style).
    pub const fn with_cache_errors(mut self) -> Self {
        self.cache_errors = true;
        self
    }

    /// Sets the lease duration.
    pub const fn with_lease(mut self, lease: Duration) -> Self {
        self.lease = Some(lease);
        self
    }

    /// A call dropped mid-run releases the key, so a retry runs the tool again (the default
    /// keeps the key as interrupted: a retry is told the outcome is unknown).
    pub const fn with_release_on_cancel(mut self) -> Self {
        self.release_on_cancel = true;
        self
    }

    /// MCP `readOnlyHint`: the tool does not modify its environment.
    pub const fn read_only_hint(&self) -> bool {
        matches!(self.kind, ToolKind::ReadOnly)
    }

    /// MCP `idempotentHint`: calling it again with the same arguments has no additional effect.
    /// True for both kinds: reads change nothing, idempotent tools replay.
    pub const fn idempotent_hint(&self) -> bool {
        true
    }

    /// MCP `destructiveHint`: whether the tool may perform destructive updates. idem cannot know
    /// what a state-changing tool destroys, so it answers like MCP's default: true unless
    /// read-only.
    pub const fn destructive_hint(&self) -> bool {
        !self.read_only_hint()
    }
}

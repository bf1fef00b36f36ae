//! Tool descriptors: the compile-time classification of every tool, and the slot that makes
//! sure two different tools never reach the engine under one name.

use std::collections::BTreeMap;
use std::sync::atomic::{AtomicU8, Ordering};
use std::sync::{Mutex, OnceLock};
use std::time::Duration;

use crate::error::Error;
use crate::key::Fingerprint;

mod body_type;
pub use body_type::BodyType;
use body_type::Instance;

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
/// # extern crate idem_tools_runtime as idem_tools;
/// use std::time::Duration;
/// use idem_tools::{ToolInfo, ToolKind};
///
/// const SEND: ToolInfo = ToolInfo::idempotent("send_message").with_budget(2);
/// assert_eq!(SEND.kind, ToolKind::Idempotent);
/// assert!(SEND.idempotent_hint() && !SEND.read_only_hint());
/// ```
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[non_exhaustive]
pub struct ToolInfo {
    /// The tool's name, part of every key and what a model is shown: `name = "…"` if given,
    /// else `Type__method` for a method under `#[tool_impl]`, else the function's name. The
    /// macros check that it matches `^[a-zA-Z0-9_-]{1,64}$`, the pattern OpenAI and Anthropic
    /// accept for tool names.
    pub name: &'static str,
    /// The Rust item as written, without `r#`: `charge_card` for the method
    /// `Billing::charge_card`, whose name is `Billing__charge_card`. What a framework that
    /// names a tool after its function (rmcp's `#[tool]`) serves it under. Never part of a key.
    pub item: &'static str,
    /// Read-only or idempotent.
    pub kind: ToolKind,
    /// Bumping it gives every call new keys.
    pub version: u32,
    /// How long completed results are kept (`None`: [`DEFAULT_TTL`](crate::store::DEFAULT_TTL);
    /// a longer TTL than [`MAX_DURATION`](crate::store::MAX_DURATION) is taken as that).
    pub ttl: Option<Duration>,
    /// Attempts per key per turn (`None`: the turn's limit).
    pub budget: Option<u32>,
    /// New actions this tool may start per turn (`None`: the turn's limit,
    /// [`DEFAULT_ACTIONS_PER_TOOL`](crate::turn::DEFAULT_ACTIONS_PER_TOOL) unless
    /// [`Turn::with_actions_per_tool`](crate::Turn::with_actions_per_tool) says otherwise).
    pub actions_per_turn: Option<u32>,
    /// Whether `Err` results are stored and replayed too.
    pub cache_errors: bool,
    /// How long a claim lasts without renewal (`None`: [`DEFAULT_LEASE`](crate::store::DEFAULT_LEASE)).
    pub lease: Option<Duration>,
    /// For a tool that runs in its caller's task: whether a call dropped mid-run releases the
    /// key (a retry runs the tool again) instead of keeping it as interrupted.
    pub release_on_cancel: bool,
    /// The arguments in `skip(..)`, in the fingerprint (if `Serialize`) but not in the key:
    /// when a derived key is reused with other arguments, one of these differs
    /// ([`Error::PayloadMismatch`] names them).
    pub skipped: &'static [&'static str],
}

impl ToolInfo {
    /// A state-changing tool with default settings; its [`item`](ToolInfo::item) is `name`
    /// until [`with_item`](ToolInfo::with_item) says otherwise.
    pub const fn idempotent(name: &'static str) -> Self {
        ToolInfo {
            name,
            item: name,
            kind: ToolKind::Idempotent,
            version: 0,
            ttl: None,
            budget: None,
            actions_per_turn: None,
            cache_errors: false,
            lease: None,
            release_on_cancel: false,
            skipped: &[],
        }
    }

    /// A read-only tool.
    pub const fn read_only(name: &'static str) -> Self {
        ToolInfo {
            kind: ToolKind::ReadOnly,
            ..ToolInfo::idempotent(name)
        }
    }

    /// Sets the Rust item name (see [`item`](ToolInfo::item)).
    pub const fn with_item(mut self, item: &'static str) -> Self {
        self.item = item;
        self
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

    /// How long this tool's results are kept: its TTL or the default, at most
    /// [`MAX_DURATION`](crate::store::MAX_DURATION).
    pub(crate) fn record_ttl(&self) -> Duration {
        let ttl = self.ttl.unwrap_or(crate::store::DEFAULT_TTL);
        ttl.min(crate::store::MAX_DURATION)
    }

    /// Sets the attempts allowed per key per turn.
    pub const fn with_budget(mut self, budget: u32) -> Self {
        self.budget = Some(budget);
        self
    }

    /// Sets the new actions this tool may start per turn (its own value wins over the turn's).
    pub const fn with_actions_per_turn(mut self, actions: u32) -> Self {
        self.actions_per_turn = Some(actions);
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

    /// Sets [`skipped`](ToolInfo::skipped).
    pub const fn with_skipped(mut self, skipped: &'static [&'static str]) -> Self {
        self.skipped = skipped;
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

/// The tools registered by [`ToolSlot`]s: (name, version) → address of the slot that registered
/// it. The version is part of the identity: two versions of a tool derive different keys.
static REGISTRY: Mutex<BTreeMap<(&'static str, u32), usize>> = Mutex::new(BTreeMap::new());

/// The BLAKE3 context of a tool's mark ([`ToolSlot::own`]).
const ORIGIN_CONTEXT: &str = "idem 2026-12-06 tool origin v2";

const UNREGISTERED: u8 = 0;
const REGISTERED: u8 = 1;
const DUPLICATE: u8 = 2;

/// The identity of one tool in the process: `#[idempotent]` emits one `static` slot per tool
/// and checks it before every call, so that two different tools reaching the engine under one
/// name (and so sharing keys) are refused instead of replaying each other's results.
///
/// The first call registers `(name, version) → this slot` in a global map (under a mutex);
/// every later call is a single atomic load. Two versions of one name are two tools (their keys
/// differ), so they may coexist.
///
/// ```
/// # extern crate idem_tools_runtime as idem_tools;
/// use idem_tools::ToolInfo;
/// use idem_tools::tool::ToolSlot;
///
/// static TOOL: ToolInfo = ToolInfo::idempotent("doc_example_tool");
/// static FIRST: ToolSlot = ToolSlot::new(module_path!());
/// static SECOND: ToolSlot = ToolSlot::new(module_path!());
/// assert!(FIRST.register(&TOOL).is_ok());
/// assert!(FIRST.register(&TOOL).is_ok()); // the same tool again
/// assert!(SECOND.register(&TOOL).is_err()); // another tool, same name
/// ```
#[derive(Debug)]
#[doc(hidden)]
pub struct ToolSlot {
    /// Where the tool is defined: the module path of its code (`app::slack`).
    origin: &'static str,
    state: AtomicU8,
    /// The instantiation that called first, for a tool whose code may be compiled for several
    /// types ([`ToolSlot::same_instance`]).
    instance: OnceLock<Instance>,
    /// What marks this tool's fingerprints ([`ToolSlot::own`]).
    mark: OnceLock<[u8; 8]>,
}

impl ToolSlot {
    /// An unregistered slot, for a `static`, of a tool defined in the module `origin`
    /// (`module_path!()`), which marks its fingerprints ([`ToolSlot::own`]).
    pub const fn new(origin: &'static str) -> Self {
        ToolSlot {
            origin,
            state: AtomicU8::new(UNREGISTERED),
            instance: OnceLock::new(),
            mark: OnceLock::new(),
        }
    }

    /// `fingerprint` marked as this tool's ([`Fingerprint::marked`]): its last 8 bytes are a
    /// digest of where the tool is defined (the slot's `origin`) and, for a tool whose code
    /// is compiled for several types (checked by [`same_instance`](Self::same_instance)), of
    /// what its function belongs to, for the type it runs with ([`BodyType::owner`]; computed
    /// once). Stores keep the marked fingerprint, so
    /// a call of the same key by another tool of the same name — defined elsewhere, in another
    /// process sharing the store, or the same generic code compiled for another type — is
    /// told from a call with other arguments, and refused ([`Error::NameClash`]) instead of
    /// replaying a result that is not its own. The key is not marked: it depends on the name
    /// and arguments alone (docs/key-spec.md, §5).
    pub fn own(&'static self, fingerprint: Fingerprint) -> Fingerprint {
        let mark = self.mark.get_or_init(|| {
            let instance = self.instance.get().map_or("", Instance::owner);
            let mut material = Vec::with_capacity(self.origin.len() + instance.len() + 16);
            for part in [self.origin, instance] {
                material.extend_from_slice(&(part.len() as u64).to_le_bytes());
                material.extend_from_slice(part.as_bytes());
            }
            let digest = blake3::derive_key(ORIGIN_CONTEXT, &material);
            let mut mark = [0; 8];
            mark.copy_from_slice(&digest[..8]);
            mark
        });
        fingerprint.marked(mark)
    }

    /// Checks that `body` (the type of the tool's body, a closure or `async` block of its
    /// function, which names the types it was compiled for:
    /// `<Stripe as Billing>::charge::{{closure}}`) is the same tool as the one that called first
    /// (`Instance::admits`). One `static` slot serves every instantiation of a generic
    /// item — a trait's default method for each implementing type, a method of a generic `impl`
    /// block for each of its parameters (closures among them) — and the name, and so the key,
    /// is the same for all of them: calls on two types would replay each other's results. The
    /// first type keeps the tool; the others are refused. A tool that belongs to a closure's
    /// type is refused altogether: two closures made in one function are named alike.
    ///
    /// # Errors
    /// [`Error::SharedAcrossTypes`] for an instantiation other than the first;
    /// [`Error::Config`] for one named after a closure.
    pub fn same_instance(&'static self, tool: &ToolInfo, body: BodyType) -> Result<(), Error> {
        let first = self.instance.get_or_init(|| Instance::of(body));
        if first.names_a_closure() {
            return Err(Error::Config(format!(
                "tool `{}` runs for a closure's type (`{}`), and two closures made in one \
                 function are named alike, so idem cannot tell this tool from one made with \
                 another closure: the call was refused. Put what tells such tools apart in \
                 the `self_key`, with a mention of the type that varies: in a \
                 `#[idem_tools::tool_impl]` block, its type parameter (`self_key = (&self.name, \
                 std::marker::PhantomData::<F>)`, with your field and parameter); on a trait's \
                 default method or outside `#[tool_impl]`, `Self` (`self_key = (&self.name, \
                 std::marker::PhantomData::<Self>)`)",
                tool.name,
                first.owner()
            )));
        }
        if first.admits(body) {
            return Ok(());
        }
        Err(Error::SharedAcrossTypes {
            name: tool.name,
            first: first.body().name(),
            now: body.name(),
        })
    }

    /// Registers this slot as `tool` (its name and version), or checks that it is.
    ///
    /// # Errors
    /// [`Error::DuplicateTool`] if another slot registered that name and version first.
    pub fn register(&'static self, tool: &ToolInfo) -> Result<(), Error> {
        let name = tool.name;
        match self.state.load(Ordering::Acquire) {
            REGISTERED => return Ok(()),
            DUPLICATE => return Err(Error::DuplicateTool { name }),
            _ => {}
        }
        let address = std::ptr::from_ref(self) as usize;
        let mut registry = REGISTRY
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner);
        let owner = *registry.entry((name, tool.version)).or_insert(address);
        drop(registry);
        if owner == address {
            self.state.store(REGISTERED, Ordering::Release);
            Ok(())
        } else {
            self.state.store(DUPLICATE, Ordering::Release);
            Err(Error::DuplicateTool { name })
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_second_slot_with_a_taken_name_is_refused_every_time() {
        static A: ToolSlot = ToolSlot::new(module_path!());
        static B: ToolSlot = ToolSlot::new(module_path!());
        static C: ToolSlot = ToolSlot::new(module_path!());
        static D: ToolSlot = ToolSlot::new(module_path!());
        let tool = ToolInfo::idempotent("slot_test_tool");
        A.register(&tool).unwrap();
        for _ in 0..2 {
            let error = B.register(&tool).unwrap_err();
            assert!(matches!(
                error,
                Error::DuplicateTool {
                    name: "slot_test_tool"
                }
            ));
        }
        A.register(&tool).unwrap();
        C.register(&ToolInfo::idempotent("slot_test_other"))
            .unwrap();
        D.register(&tool.with_version(2)).unwrap();
    }
}

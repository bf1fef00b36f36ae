//! `#[tool_impl]`: descriptors for tool methods with a receiver and no visibility (trait impls,
//! rmcp-style servers) and for associated functions of trait impls, so that `tools![]` can list
//! them.

use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::Duration;

use idem_tools::{Error, MemoryStore, ToolInfo, ToolKind, Turn, idempotent, read_only, tool_impl};

/// An agent framework's tool trait, with a native `async fn`.
trait Tool {
    async fn call(&self, to: String) -> Result<usize, Error>;
}

/// `Clone`, its state behind an `Arc`: its `&self` tool runs detached, on a clone that shares
/// the count.
#[derive(Clone, Default)]
struct SendEmail {
    runs: Arc<AtomicUsize>,
}

#[tool_impl(same_service)]
impl Tool for SendEmail {
    #[idempotent(name = "send_email", ttl = "30m", budget = 2)]
    async fn call(&self, to: String) -> Result<usize, Error> {
        self.runs.fetch_add(1, Ordering::SeqCst);
        Ok(to.len())
    }
}

/// An rmcp-style server: an inherent impl whose tool methods have no visibility.
#[derive(Default)]
struct Server {
    runs: AtomicUsize,
}

#[tool_impl(same_service)]
impl Server {
    /// Not `Clone`: `attached` says it runs in the caller's task (no warning).
    #[idem_tools::idempotent(version = 2, ttl = "1h", attached)]
    async fn create_ticket(&self, title: String) -> Result<u64, Error> {
        self.runs.fetch_add(1, Ordering::SeqCst);
        Ok(title.len() as u64)
    }

    #[read_only]
    fn search(&self, query: &str) -> usize {
        query.len()
    }

    /// Has a visibility: its own attribute emits the descriptor, `#[tool_impl]` does not.
    #[idempotent(attached)]
    pub async fn close_ticket(&self, id: u64) -> Result<u64, Error> {
        Ok(id)
    }

    /// Not a tool: ignored.
    fn helper(&self) -> usize {
        self.runs.load(Ordering::SeqCst)
    }
}

/// `#[async_trait]`, above and below `#[tool_impl]`.
#[async_trait::async_trait]
trait Payments {
    async fn pay(&self, cents: u64) -> Result<u64, Error>;
}

/// `Clone`: under `#[async_trait]` too, the tool runs detached on a clone.
#[derive(Clone)]
struct Bank;

#[tool_impl(same_service)]
#[async_trait::async_trait]
impl Payments for Bank {
    #[idempotent(budget = 5)]
    async fn pay(&self, cents: u64) -> Result<u64, Error> {
        Ok(cents)
    }
}

#[derive(Clone)]
struct Vault;

#[async_trait::async_trait]
#[tool_impl(same_service)]
impl Payments for Vault {
    #[idempotent]
    async fn pay(&self, cents: u64) -> Result<u64, Error> {
        Ok(cents)
    }
}

/// A generic trait implemented for a generic type: `M` is left off the inherent impl (it does
/// not appear in the self type), `T` and its bound are kept.
trait Handler<M> {
    async fn handle(&self, message: M) -> Result<String, Error>;
}

struct Wrapper<T: Clone>(T);

#[tool_impl]
impl<T, M> Handler<M> for Wrapper<T>
where
    T: Clone + Sync,
    M: serde::Serialize + Send + Sync,
{
    #[read_only]
    async fn handle(&self, message: M) -> Result<String, Error> {
        let _ = (self.0.clone(), message);
        Ok("handled".into())
    }
}

/// A trait whose tools are associated functions, without `self`: a trait impl holds no items but
/// the trait's, so their descriptors come from `#[tool_impl]` (without it, rustc reports the
/// descriptor as "not a member of trait `Tickets`").
trait Tickets {
    async fn open(title: String) -> Result<u64, Error>;
    fn count(title: &str) -> usize;
}

struct Desk;

static DESK_RUNS: AtomicUsize = AtomicUsize::new(0);

#[tool_impl]
impl Tickets for Desk {
    #[idempotent]
    async fn open(title: String) -> Result<u64, Error> {
        DESK_RUNS.fetch_add(1, Ordering::SeqCst);
        Ok(title.len() as u64)
    }

    #[read_only]
    fn count(title: &str) -> usize {
        title.len()
    }
}

#[tool_impl]
impl Desk {
    /// An associated function with no visibility in an inherent block: `#[tool_impl]` emits its
    /// descriptor too.
    #[idempotent]
    async fn close(id: u64) -> Result<u64, Error> {
        Ok(id)
    }

    /// One tool compiled one way or the other: its descriptor follows its `cfg`.
    #[cfg(unix)]
    #[read_only]
    fn platform() -> &'static str {
        "unix"
    }

    #[cfg(not(unix))]
    #[read_only]
    fn platform() -> &'static str {
        "other"
    }
}

const TOOLS: &[ToolInfo] = idem_tools::tools![
    SendEmail::call,
    Server::create_ticket,
    Server::search,
    Server::close_ticket,
    Bank::pay,
    Vault::pay,
    Wrapper::<u8>::handle,
    Desk::open,
    Desk::count,
    Desk::close,
    Desk::platform,
];

#[test]
fn the_catalog_lists_trait_impl_and_visibility_less_methods() {
    let names: Vec<_> = TOOLS.iter().map(|t| t.name).collect();
    assert_eq!(
        names,
        [
            "send_email",
            "Server__create_ticket",
            "Server__search",
            "Server__close_ticket",
            "Bank__pay",
            "Vault__pay",
            "Wrapper__handle",
            "Desk__open",
            "Desk__count",
            "Desk__close",
            "Desk__platform"
        ]
    );
    use ToolKind::{Idempotent, ReadOnly};
    let kinds: Vec<_> = TOOLS.iter().map(|t| t.kind).collect();
    assert_eq!(
        kinds,
        [
            Idempotent, Idempotent, ReadOnly, Idempotent, Idempotent, Idempotent, ReadOnly,
            Idempotent, ReadOnly, Idempotent, ReadOnly
        ]
    );
    let send = TOOLS[0];
    assert_eq!(send.budget, Some(2));
    assert_eq!(send.ttl, Some(Duration::from_secs(30 * 60)));
    assert_eq!(send.version, 0);
    assert!(!send.cache_errors);
    let create = TOOLS[1];
    assert_eq!((create.version, create.cache_errors), (2, false));
    assert_eq!(
        (create.budget, create.ttl),
        (None, Some(Duration::from_secs(3600)))
    );
    assert!(TOOLS[2].read_only_hint());
    assert_eq!(TOOLS[4].budget, Some(5));
    // The same descriptors the method-level attributes build.
    assert_eq!(
        TOOLS[0],
        ToolInfo::idempotent("send_email")
            .with_item("call")
            .with_ttl(Duration::from_secs(1800))
            .with_budget(2)
    );
    assert_eq!(
        TOOLS[2],
        ToolInfo::read_only("Server__search").with_item("search")
    );
    assert_eq!(
        TOOLS[6],
        ToolInfo::read_only("Wrapper__handle").with_item("handle")
    );
    let items: Vec<_> = TOOLS.iter().map(|t| t.item).collect();
    assert_eq!(
        items,
        [
            "call",
            "create_ticket",
            "search",
            "close_ticket",
            "pay",
            "pay",
            "handle",
            "open",
            "count",
            "close",
            "platform"
        ]
    );
}

#[tokio::test]
async fn the_methods_still_dedup() {
    let store = Arc::new(MemoryStore::new());
    let email = SendEmail::default();
    let server = Server::default();
    Turn::new("conv-1/turn-1")
        .with_store(store.clone())
        .scope(async {
            assert_eq!(email.call("ada".into()).await?, 3);
            assert_eq!(email.call("ada".into()).await?, 3); // replayed
            assert_eq!(server.create_ticket("bug".into()).await?, 3);
            assert_eq!(server.create_ticket("bug".into()).await?, 3); // replayed
            assert_eq!(server.close_ticket(9).await?, 9);
            assert_eq!(Bank.pay(5).await?, 5);
            assert_eq!(Vault.pay(6).await?, 6);
            assert_eq!(Desk::open("printer".into()).await?, 7);
            assert_eq!(Desk::open("printer".into()).await?, 7); // replayed
            assert_eq!(Desk::close(4).await?, 4);
            Ok::<_, Error>(())
        })
        .await
        .unwrap();
    assert_eq!(email.runs.load(Ordering::SeqCst), 1);
    assert_eq!(server.helper(), 1);
    assert_eq!(server.search("abcd"), 4);
    assert_eq!(Wrapper(1_u8).handle(()).await.unwrap(), "handled");
    assert_eq!(DESK_RUNS.load(Ordering::SeqCst), 1);
    assert_eq!(Desk::count("abc"), 3);
    assert_eq!(Desk::platform(), if cfg!(unix) { "unix" } else { "other" });
    assert_eq!(store.len(), 7);
}

/// `Clone`: its `&self` tools run on a clone of the receiver. A format string cannot name
/// `self` there (refused, `tests/ui/self_in_format_string.rs`); the two ways the error offers
/// both compile, keep the receiver in the output and dedup.
#[derive(Clone, Debug, Default)]
struct Describer {
    name: &'static str,
    runs: Arc<AtomicUsize>,
}

#[tool_impl(same_service)]
impl Describer {
    /// On a clone: `self` passed as an argument.
    #[idempotent]
    async fn describe(&self, n: u64) -> Result<String, Error> {
        self.runs.fetch_add(1, Ordering::SeqCst);
        Ok(format!("{me}:{n}", me = self.name))
    }

    /// On the borrowed receiver: `self` named inside the string.
    #[idempotent(attached)]
    async fn describe_attached(&self, n: u64) -> Result<String, Error> {
        self.runs.fetch_add(1, Ordering::SeqCst);
        let shown = format!("{self:?}");
        Ok(format!("{n}:{}", shown.contains("\"ada\"")))
    }
}

#[tokio::test]
async fn a_receiver_in_a_format_string_the_ways_the_error_offers() {
    let describer = Describer {
        name: "ada",
        ..Describer::default()
    };
    Turn::new("conv-1/turn-1")
        .with_store(Arc::new(MemoryStore::new()))
        .scope(async {
            assert_eq!(describer.describe(1).await?, "ada:1");
            assert_eq!(describer.describe(1).await?, "ada:1"); // replayed
            assert_eq!(describer.describe_attached(2).await?, "2:true");
            assert_eq!(describer.describe_attached(2).await?, "2:true"); // replayed
            Ok::<_, Error>(())
        })
        .await
        .unwrap();
    assert_eq!(describer.runs.load(Ordering::SeqCst), 2);
}

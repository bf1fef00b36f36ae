//! Schedules found by a fourth review of the overlap handshake (`conversation/overlap.rs`), on
//! a store that reads records by namespace and gives keys back over a network.

#[path = "overlap_common/mod.rs"]
mod overlap_common;

use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicU32, Ordering};
use std::time::{Duration, Instant};

use idem_tools_runtime::engine::{Codec, execute};
use idem_tools_runtime::key::Key;
use idem_tools_runtime::store::{
    Begin, BeginRequest, Lease, MemoryStore, Record, Removed, Store, StoreFuture,
};
use idem_tools_runtime::{Error, ToolInfo, Turn};

use overlap_common::*;

static NOTIFY: ToolInfo = ToolInfo::idempotent("notify").with_release_on_cancel();

// ---------------------------------------------------------------------------------------------
// (1) a model reads a failure of a call another run made
// ---------------------------------------------------------------------------------------------

/// Runs A and B on one store that reads a record by namespace and key (as `SqliteStore`,
/// `RedisStore` and `PostgresStore` do; `MemoryStore` ignores the namespace, so it is wrapped
/// here), each with its tools called on an edit of its run's `Turn` in a namespace of their
/// own (`turn.with_namespace("tools")`). A's charge fails (key given back). B (steps replayed)
/// charges, and it goes through. A's step 1 reads the key in the tool's namespace, finds B's
/// charge, and stops.
#[tokio::test]
async fn a_charge_on_a_namespace_of_its_own_another_run_made_is_seen_by_the_next_step() {
    let store: Arc<dyn Store> = Arc::new(Net::new(false));
    let a = stepped_on(turn_on(&store)).await;
    let ok = AtomicU32::new(0);
    let tools_a = a.turn().clone().with_namespace("tools");
    let read_a = a
        .model_tool_call("charge", &500, charge(&tools_a, &ok, true))
        .await;
    assert!(read_a.is_err());

    let b = turn_on(&store).conversation("assistant");
    b.step("step 0", model(0)).await.expect("b replays step 0");
    let tools_b = b.turn().clone().with_namespace("tools");
    let read_b = b
        .model_tool_call("charge", &500, charge(&tools_b, &ok, false))
        .await;
    assert_eq!(read_b, Ok(500));
    assert_eq!(ok.load(Ordering::SeqCst), 1, "B's body charged");

    let (next, asked) = next_step(&a, 1, &read_a).await;
    assert!(
        !asked,
        "A's model was asked (step 1: {next:?}) reading {read_a:?}, while B charged"
    );
}

// ---------------------------------------------------------------------------------------------
// (2)/(3) a lone run
// ---------------------------------------------------------------------------------------------

/// One run (in-flight wait 300 ms). After step 0 the model asks for a charge that the
/// application runs in the background, alongside the conversation's next step, whose model
/// takes 600 ms. The charge claims its key and finds the next step held by this very run: it
/// runs at once.
#[tokio::test]
async fn a_lone_runs_background_call_alongside_its_own_next_step_is_not_refused() {
    let store: Arc<dyn Store> = Arc::new(MemoryStore::new());
    let turn = turn_on(&store).with_in_flight_wait(Duration::from_millis(300));
    let a = stepped_on(turn).await;
    let ok = AtomicU32::new(0);
    let slow_step = a.step("step 1", async {
        tokio::time::sleep(Duration::from_millis(600)).await;
        model(1).await
    });
    let started = Instant::now();
    let background = async {
        tokio::time::sleep(Duration::from_millis(50)).await; // step 1 is being asked
        let charged = a
            .model_tool_call("charge", &500, charge(a.turn(), &ok, false))
            .await;
        (charged, started.elapsed())
    };
    let (next, (charged, took)) = tokio::join!(slow_step, background);
    next.expect("step 1");
    assert_eq!(
        charged,
        Ok(500),
        "one run, no overlap: the charge was refused after {took:?}"
    );
    assert!(
        took < Duration::from_millis(250),
        "the charge waited {took:?} for its own run's step"
    );
}

/// A `MemoryStore` as a store over a network behaves: `get` reads by namespace and key (as
/// SQLite, Redis and Postgres do), and fails while `down`; if `slow_release`, `release`
/// answers after a few milliseconds.
struct Net {
    inner: Arc<dyn Store>,
    slow_release: bool,
    down: AtomicBool,
}

impl Net {
    fn new(slow_release: bool) -> Net {
        Net {
            inner: Arc::new(MemoryStore::new()),
            slow_release,
            down: AtomicBool::new(false),
        }
    }
}

impl Store for Net {
    fn begin<'a>(&'a self, req: BeginRequest<'a>) -> StoreFuture<'a, Begin> {
        self.inner.begin(req)
    }
    fn renew<'a>(&'a self, lease: &'a Lease, duration: Duration) -> StoreFuture<'a, ()> {
        self.inner.renew(lease, duration)
    }
    fn complete<'a>(
        &'a self,
        lease: &'a Lease,
        result: &'a [u8],
        ttl: Duration,
    ) -> StoreFuture<'a, ()> {
        self.inner.complete(lease, result, ttl)
    }
    fn release<'a>(&'a self, lease: &'a Lease) -> StoreFuture<'a, ()> {
        StoreFuture::new(async move {
            if self.slow_release {
                tokio::time::sleep(Duration::from_millis(20)).await;
            }
            self.inner.release(lease).await
        })
    }
    fn get<'a>(&'a self, namespace: &'a str, key: &'a Key) -> StoreFuture<'a, Option<Record>> {
        if self.down.load(Ordering::SeqCst) {
            return StoreFuture::new(async { Err(Error::store("get", "the store is down")) });
        }
        StoreFuture::new(async move {
            let record = self.inner.get(namespace, key).await?;
            Ok(record.filter(|record| &*record.namespace == namespace))
        })
    }
    fn purge_expired(&self) -> StoreFuture<'_, u64> {
        self.inner.purge_expired()
    }
    fn list<'a>(
        &'a self,
        namespace: Option<&'a str>,
        limit: usize,
    ) -> StoreFuture<'a, Vec<Record>> {
        self.inner.list(namespace, limit)
    }
    fn remove<'a>(&'a self, namespace: &'a str, key: &'a Key) -> StoreFuture<'a, bool> {
        self.inner.remove(namespace, key)
    }
    fn remove_shown<'a>(&'a self, shown: &'a Record) -> StoreFuture<'a, Removed> {
        self.inner.remove_shown(shown)
    }
}

/// One run, on a store whose `release` takes a few ms (a `MemoryStore` behind a network hop).
/// After step 0 the model asks for `notify` (a `release_on_cancel` tool); its caller cuts it
/// off by a timeout mid-body: the guard gives the key back in the background. The model reads
/// the timeout and the next step is asked at once: it waits for its own claim to be given back
/// before it reads the key, and goes on.
#[tokio::test]
async fn a_lone_run_whose_cancelled_call_is_still_being_given_back_is_not_stopped() {
    let store: Arc<dyn Store> = Arc::new(Net::new(true));
    let a = stepped_on(turn_on(&store)).await;
    let turn = a.turn().clone();
    let cut_off = async {
        let slow = async {
            tokio::time::sleep(Duration::from_secs(5)).await;
            Ok::<u32, Failed>(1)
        };
        let call = execute(call_of(&NOTIFY, &turn, 500), Codec::ok_only(), slow);
        match tokio::time::timeout(Duration::from_millis(20), call).await {
            Ok(sent) => sent,
            Err(_) => Err(Failed("notify timed out".into())),
        }
    };
    let read = a.model_tool_call("notify", &500, cut_off).await;
    assert!(read.is_err());
    let (next, _) = next_step(&a, 1, &read).await;
    assert!(next.is_ok(), "one run, no overlap: {next:?}");
}

// ---------------------------------------------------------------------------------------------
// A tool that runs the conversation, and records its `Err`s
// ---------------------------------------------------------------------------------------------

static AGENT: ToolInfo = ToolInfo::idempotent("agent");

/// A call of `agent` (`cache_errors`), whose body runs a conversation: step 0, a charge that
/// fails, step 1 — read while the store's `get` is down if `down`.
async fn agent(turn: &Turn, store: &Net, down: bool) -> Result<String, Failed> {
    let ok = AtomicU32::new(0);
    execute(call_of(&AGENT, turn, 1), Codec::ok_and_err(), async {
        let chat = turn.conversation("assistant");
        chat.step("step 0", model(0)).await?;
        let read = chat
            .model_tool_call("charge", &500, charge(turn, &ok, true))
            .await;
        store.down.store(down, Ordering::SeqCst);
        let next = chat.step(&format!("after {read:?}"), model(1)).await;
        store.down.store(false, Ordering::SeqCst);
        Ok(next?)
    })
    .await
}

/// The step after a failed call reads the call's key first (`overlap::outdated`); the store
/// did not answer that read, and the step failed with the store's error, which says nothing of
/// the tool that runs the conversation. A `cache_errors` tool returning it does not record it:
/// the call again, the store up, runs the tool.
#[tokio::test]
async fn a_store_error_of_a_step_is_not_recorded_by_the_tool_that_runs_the_conversation() {
    let flaky = Arc::new(Net::new(false));
    let store: Arc<dyn Store> = flaky.clone();
    let turn = turn_on(&store);
    let Failed(down) = agent(&turn, &flaky, true).await.unwrap_err();
    assert!(down.contains("call it again"), "{down}");
    assert_eq!(
        agent(&turn, &flaky, false).await,
        Ok("step 1: charge 500".to_owned()),
        "the call again runs the tool"
    );
}

//! `#[idempotent]` on every supported shape, and what each option does at run time.

use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, LazyLock};
use std::time::Duration;

use idem_tools::clock::ManualClock;
use idem_tools::{Error, MemoryStore, Mismatch, Store, Turn, current_key, idempotent};
use serde::{Deserialize, Serialize};

/// The key of the running tool, as a string (results must be `Serialize`).
fn key() -> String {
    current_key().expect("inside a tool").to_hex()
}

fn turn(id: &str) -> Turn {
    Turn::new(id).with_store(Arc::new(MemoryStore::new()))
}

// ---------------------------------------------------------------------------------------------
// Replay: a second call with the same arguments in the same turn does not run the body.

static SENT: AtomicUsize = AtomicUsize::new(0);

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Receipt {
    /// Counts messages sent.
    pub id: usize,
    /// The recipient.
    pub to: String,
}

/// Doc comments and other attributes are kept.
#[idempotent]
#[allow(clippy::unused_async)]
pub async fn send_message(to: String, body: &str) -> Result<Receipt, Error> {
    assert!(!body.is_empty());
    let id = SENT.fetch_add(1, Ordering::SeqCst) + 1;
    Ok(Receipt { id, to })
}

#[tokio::test]
async fn a_retry_in_the_same_turn_replays_without_running_the_body() {
    let before = SENT.load(Ordering::SeqCst);
    let t = turn("replay");
    t.clone()
        .scope(async {
            let first = send_message("ada".into(), "hi").await.unwrap();
            let retry = send_message("ada".into(), "hi").await.unwrap();
            assert_eq!(first, retry);
            let other = send_message("grace".into(), "hi").await.unwrap();
            assert_ne!(first.id, other.id);
        })
        .await;
    assert_eq!(SENT.load(Ordering::SeqCst) - before, 2);
    assert_eq!((t.stats().executed, t.stats().replayed), (2, 1));
    // A new turn is a new action.
    turn("replay-2")
        .scope(async { send_message("ada".into(), "hi").await.unwrap() })
        .await;
    assert_eq!(SENT.load(Ordering::SeqCst) - before, 3);
}

/// Counts the runs of `notify`, which only the next test calls.
static NOTIFIED: AtomicUsize = AtomicUsize::new(0);

#[idempotent]
async fn notify(to: String) -> Result<usize, Error> {
    let _ = to;
    Ok(NOTIFIED.fetch_add(1, Ordering::SeqCst) + 1)
}

#[tokio::test]
async fn outside_a_turn_the_tool_fails_with_no_turn_and_does_not_run() {
    let error = notify("ada".into()).await.unwrap_err();
    assert!(matches!(error, Error::NoTurn { tool: "notify" }), "{error}");
    assert_eq!(NOTIFIED.load(Ordering::SeqCst), 0, "the body did not run");
}

// ---------------------------------------------------------------------------------------------
// The turn as a parameter (`&Turn` or `Turn`), left out of the key.

#[idempotent]
async fn with_turn_ref(turn: &Turn, n: u32) -> Result<(String, String), Error> {
    Ok((format!("{}:{n}", turn.id()), key()))
}

#[idempotent]
async fn with_turn_owned(n: u32, turn: Turn) -> Result<(String, String), Error> {
    Ok((format!("{}:{n}", turn.id()), key()))
}

#[tokio::test]
async fn the_turn_can_be_a_parameter() {
    let t = turn("param");
    let (id, key) = with_turn_ref(&t, 1).await.unwrap();
    assert_eq!(id, "param:1");
    assert_eq!(with_turn_ref(&t, 1).await.unwrap().1, key);
    assert_eq!(t.stats().replayed, 1);
    let (id, _) = with_turn_owned(2, t.clone()).await.unwrap();
    assert_eq!(id, "param:2");
}

/// A type named `Turn` that holds idem's (`Borrow<Turn>`, which the turn parameter took before
/// `TurnParam`): still the turn.
mod shared {
    pub type Turn = std::sync::Arc<idem_tools::Turn>;
}

#[idempotent]
async fn with_turn_shared(turn: shared::Turn, n: u32) -> Result<(String, String), Error> {
    Ok((format!("{}:{n}", turn.id()), key()))
}

#[tokio::test]
async fn a_shared_turn_can_be_a_parameter() {
    let t = turn("shared");
    let (id, key) = with_turn_shared(std::sync::Arc::new(t.clone()), 1)
        .await
        .unwrap();
    assert_eq!(id, "shared:1");
    let (_, again) = with_turn_shared(std::sync::Arc::new(t.clone()), 1)
        .await
        .unwrap();
    assert_eq!(again, key);
    assert_eq!(t.stats().replayed, 1);
}

// ---------------------------------------------------------------------------------------------
// Pattern parameters are keyed positionally: `argN`.

static PAIRS: AtomicUsize = AtomicUsize::new(0);

#[idempotent(skip(arg1))]
async fn pattern_args((a, b): (u32, u32), Wrapper(c): Wrapper) -> Result<u32, Error> {
    PAIRS.fetch_add(1, Ordering::SeqCst);
    Ok(a + b + c)
}

#[derive(Serialize)]
struct Wrapper(u32);

#[tokio::test]
async fn pattern_parameters_are_keyed_by_position() {
    turn("patterns")
        .scope(async {
            assert_eq!(pattern_args((1, 2), Wrapper(3)).await.unwrap(), 6);
            assert_eq!(pattern_args((1, 2), Wrapper(3)).await.unwrap(), 6);
            assert_eq!(pattern_args((2, 1), Wrapper(3)).await.unwrap(), 6);
        })
        .await;
    assert_eq!(PAIRS.load(Ordering::SeqCst), 2);
}

// ---------------------------------------------------------------------------------------------
// A parameter under `#[cfg(…)]` is in the key when configured in, out of it when configured out
// (as it is out of the function): two alternatives may share a name.

#[idempotent(skip(trace))]
async fn configured_args(
    #[cfg(not(test))] region: String,
    #[cfg(test)] cents: u64,
    #[cfg(any())] (a, b): (u32, u32),
    #[cfg(unix)] path: String,
    #[cfg(not(unix))] path: u32,
    #[cfg(test)] trace: u64,
) -> Result<String, Error> {
    let _ = (cents, path, trace);
    Ok(key())
}

#[tokio::test]
async fn parameters_under_cfg_are_keyed_as_configured() {
    let t = turn("configured");
    t.clone()
        .scope(async {
            #[cfg(unix)]
            let path = String::from("/tmp");
            #[cfg(not(unix))]
            let path = 7_u32;
            let key = configured_args(5, path.clone(), 1).await.unwrap();
            let mut digest = idem_tools::key::ArgsDigest::new("configured_args");
            digest.arg("cents", &5_u64).unwrap();
            digest.arg("path", &path).unwrap();
            digest.fingerprint_arg("trace", &1_u64).unwrap();
            let (expected, _) = digest.finish(t.namespace(), t.id(), "configured_args", 0);
            assert_eq!(key, expected.to_hex());
        })
        .await;
}

// ---------------------------------------------------------------------------------------------
// An `Ok` type with a `'static` lifetime owns what it holds once deserialized: it is replayed.

static GREETED: AtomicUsize = AtomicUsize::new(0);

#[idempotent]
async fn greet(to: String) -> Result<std::borrow::Cow<'static, str>, Error> {
    GREETED.fetch_add(1, Ordering::SeqCst);
    Ok(if to.is_empty() {
        std::borrow::Cow::Borrowed("hello")
    } else {
        std::borrow::Cow::Owned(format!("hello {to}"))
    })
}

#[tokio::test]
async fn an_ok_type_with_a_static_lifetime_is_replayed() {
    turn("cow")
        .scope(async {
            assert_eq!(greet("ada".into()).await.unwrap(), "hello ada");
            assert_eq!(greet("ada".into()).await.unwrap(), "hello ada");
        })
        .await;
    assert_eq!(GREETED.load(Ordering::SeqCst), 1);
}

// A parameter configured out still counts in a pattern's `argN` (its position as written).
#[idempotent]
async fn configured_position(#[cfg(any())] gone: u8, (b, c): (u8, u8)) -> Result<String, Error> {
    let _ = (b, c);
    Ok(key())
}

#[tokio::test]
async fn a_parameter_configured_out_counts_in_a_patterns_position() {
    let t = turn("configured position");
    t.clone()
        .scope(async {
            let key = configured_position((1, 2)).await.unwrap();
            let mut digest = idem_tools::key::ArgsDigest::new("configured_position");
            digest.arg("arg1", &(1_u8, 2_u8)).unwrap();
            let (expected, _) = digest.finish(t.namespace(), t.id(), "configured_position", 0);
            assert_eq!(key, expected.to_hex());
        })
        .await;
}

// `skip(..)` and `ignore(..)` apply to every alternative of the name they list, not only to the
// first one written.
#[idempotent(skip(note), ignore(trace))]
async fn configured_skip(
    #[cfg(not(unix))] note: u32,
    #[cfg(unix)] note: String,
    #[cfg(not(unix))] trace: u32,
    #[cfg(unix)] trace: String,
    item: u32,
) -> Result<String, Error> {
    let _ = (note, trace, item);
    Ok(key())
}

#[tokio::test]
async fn skip_and_ignore_apply_to_every_cfg_alternative() {
    let t = turn("configured skip");
    t.clone()
        .scope(async {
            #[cfg(unix)]
            let (note, trace) = (String::from("n"), String::from("t"));
            #[cfg(not(unix))]
            let (note, trace) = (1_u32, 2_u32);
            let key = configured_skip(note.clone(), trace, 3).await.unwrap();
            let mut digest = idem_tools::key::ArgsDigest::new("configured_skip");
            digest.fingerprint_arg("note", &note).unwrap();
            digest.arg("item", &3_u32).unwrap();
            let (expected, _) = digest.finish(t.namespace(), t.id(), "configured_skip", 0);
            assert_eq!(key, expected.to_hex());
        })
        .await;
}

// ---------------------------------------------------------------------------------------------
// `skip(..)`: out of the key, still in the fingerprint when `Serialize`; any type can be skipped.

/// Not `Serialize`: only usable skipped.
struct HttpClient {
    calls: AtomicUsize,
}

#[idempotent(skip(client, trace_id))]
async fn charge(client: &HttpClient, cents: u64, trace_id: String) -> Result<String, Error> {
    client.calls.fetch_add(1, Ordering::SeqCst);
    let _ = (cents, trace_id);
    Ok(key())
}

#[idempotent(skip(note))]
async fn refund(#[key] request_id: &str, cents: u64, note: String) -> Result<u64, Error> {
    let _ = note;
    Ok(cents)
}

#[tokio::test]
async fn skipped_arguments_are_not_in_the_key_but_are_in_the_fingerprint() {
    let client = HttpClient {
        calls: AtomicUsize::new(0),
    };
    turn("skip")
        .scope(async {
            let key = charge(&client, 500, "trace-1".into()).await.unwrap();
            assert_eq!(charge(&client, 500, "trace-1".into()).await.unwrap(), key);
            // Same key, other fingerprint: the engine refuses to replay another payload.
            let error = charge(&client, 500, "trace-2".into()).await.unwrap_err();
            // The error names the argument that differs, and what a retry must do.
            assert!(
                matches!(error, Error::PayloadMismatch { differs: Mismatch::Unkeyed(unkeyed), .. }
                    if unkeyed.names().eq(["trace_id"])),
                "{error:?}"
            );
            // `client` is skipped too, but not `Serialize`: in neither, so not named.
            let text = error.to_string();
            assert!(
                text.contains("and `trace_id`, which is in `skip(..)`"),
                "{text}"
            );
            assert_ne!(charge(&client, 600, "trace-1".into()).await.unwrap(), key);
        })
        .await;
    assert_eq!(client.calls.load(Ordering::SeqCst), 2);
}

// `ignore(..)`: in neither the key nor the fingerprint, for values that change between retries.

#[idempotent(ignore(trace_id))]
async fn reserve_table(table: u32, trace_id: String) -> Result<String, Error> {
    let _ = (table, trace_id);
    Ok(key())
}

#[tokio::test]
async fn ignored_arguments_may_change_between_retries() {
    let t = turn("ignore");
    t.clone()
        .scope(async {
            let key = reserve_table(7, "trace-1".into()).await.unwrap();
            // A retry with a fresh trace id is still the same action: replayed, no mismatch.
            assert_eq!(reserve_table(7, "trace-2".into()).await.unwrap(), key);
            assert_ne!(reserve_table(8, "trace-1".into()).await.unwrap(), key);
        })
        .await;
    assert_eq!((t.stats().executed, t.stats().replayed), (2, 1));
    assert_eq!(t.stats().payload_mismatch, 0);
}

/// A tool's one structured argument (rmcp's `Parameters<T>`, say), with a field the model
/// rewords left out of the key by `idem_tools::key::ignored`.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct NewRefund {
    order: u64,
    #[serde(serialize_with = "idem_tools::key::ignored")]
    memo: String,
}

/// The refund made, with the memo it was made with: a result type may mark a field too (a
/// result is recorded whole).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Refunded {
    id: usize,
    #[serde(serialize_with = "idem_tools::key::ignored")]
    memo: String,
}

static REFUNDED: AtomicUsize = AtomicUsize::new(0);

#[idempotent]
async fn open_refund(refund: NewRefund) -> Result<Refunded, Error> {
    let _ = refund.order;
    let id = REFUNDED.fetch_add(1, Ordering::SeqCst);
    Ok(Refunded {
        id,
        memo: refund.memo,
    })
}

#[tokio::test]
async fn a_field_marked_ignored_may_be_reworded_between_retries() {
    let t = turn("ignored-field");
    let refund = |order: u64, memo: &str| NewRefund {
        order,
        memo: memo.to_owned(),
    };
    t.clone()
        .scope(async {
            let first = open_refund(refund(7, "customer asked")).await.unwrap();
            // The model rewords the memo: the same action, replayed whole (memo included).
            let again = open_refund(refund(7, "The customer asked for a refund")).await;
            assert_eq!(again.unwrap(), first);
            assert_eq!(first.memo, "customer asked");
            // Another order is another action.
            let other = open_refund(refund(8, "customer asked")).await.unwrap();
            assert_ne!(other.id, first.id);
        })
        .await;
    assert_eq!((t.stats().executed, t.stats().replayed), (2, 1));
    assert_eq!(t.stats().payload_mismatch, 0);
}

#[tokio::test]
async fn a_caller_key_spans_turns_and_rejects_another_payload() {
    let store: Arc<dyn Store> = Arc::new(MemoryStore::new());
    let in_turn = |id: &str| Turn::new(id).with_store(Arc::clone(&store));
    let first = in_turn("t1").scope(refund("req-1", 100, "a".into())).await;
    assert_eq!(first.unwrap(), 100);
    let t2 = in_turn("t2");
    // Another turn, same caller key and arguments: replayed.
    assert_eq!(
        t2.clone()
            .scope(refund("req-1", 100, "a".into()))
            .await
            .unwrap(),
        100
    );
    assert_eq!(t2.stats().replayed, 1);
    // A skipped argument changed under the same caller key: a payload mismatch.
    let error = t2
        .clone()
        .scope(refund("req-1", 100, "b".into()))
        .await
        .unwrap_err();
    let caller_key = Mismatch::KeyArgument("request_id");
    assert!(
        matches!(error, Error::PayloadMismatch { differs, .. } if differs == caller_key),
        "{error}"
    );
    let error = t2
        .clone()
        .scope(refund("req-1", 999, "a".into()))
        .await
        .unwrap_err();
    assert!(matches!(error, Error::PayloadMismatch { .. }), "{error}");
}

/// A key the application wraps, taken apart by a pattern parameter.
struct RequestId(String);

impl AsRef<str> for RequestId {
    fn as_ref(&self) -> &str {
        &self.0
    }
}

#[idempotent]
async fn refund_wrapped(#[key] RequestId(id): RequestId, cents: u64) -> Result<u64, Error> {
    let _ = id;
    Ok(cents)
}

#[tokio::test]
async fn a_key_pattern_is_not_named_to_the_model_by_its_position() {
    let t = turn("wrapped key");
    let call = |cents| refund_wrapped(RequestId("req-9".into()), cents);
    assert_eq!(t.clone().scope(call(100)).await.unwrap(), 100);
    let error = t.clone().scope(call(999)).await.unwrap_err();
    // Not `KeyArgument("arg0")`: the model has no argument named so.
    assert!(
        matches!(
            error,
            Error::PayloadMismatch {
                differs: Mismatch::KeyArgument(""),
                ..
            }
        ),
        "{error}"
    );
}

// ---------------------------------------------------------------------------------------------
// `version` and `name`.

mod v1 {
    #[idem_tools::idempotent(name = "create_invoice")]
    pub async fn create_invoice(cents: u64) -> Result<String, idem_tools::Error> {
        let _ = cents;
        Ok(super::key())
    }
}

mod v2 {
    /// The result type changed: `version` gives new keys.
    #[idem_tools::idempotent(name = "create_invoice", version = 2)]
    pub async fn create_invoice_v2(cents: u64) -> Result<(String, bool), idem_tools::Error> {
        let _ = cents;
        Ok((super::key(), true))
    }
}

#[tokio::test]
async fn name_keeps_keys_across_modules_and_version_changes_them() {
    let t = turn("versions");
    t.clone()
        .scope(async {
            let key = v1::create_invoice(10).await.unwrap();
            // The key is made of the name, not the module path: a function moved to another
            // module (and renamed) under the same `name` keeps its keys.
            let mut digest = idem_tools::key::ArgsDigest::new("create_invoice");
            digest.arg("cents", &10_u64).unwrap();
            let (expected, _) = digest.finish(t.namespace(), t.id(), "create_invoice", 0);
            assert_eq!(key, expected.to_hex());
            let (key2, _) = v2::create_invoice_v2(10).await.unwrap();
            assert_ne!(key2, key);
        })
        .await;
    assert_eq!((t.stats().executed, t.stats().replayed), (2, 0));
    assert_eq!(
        v2::create_invoice_v2__needs_idempotent_or_read_only.version,
        2
    );
}

// ---------------------------------------------------------------------------------------------
// `ttl` and `store`.

static CLOCK: LazyLock<ManualClock> = LazyLock::new(|| ManualClock::new(1_000_000));
static TTL_STORE: LazyLock<Arc<dyn Store>> =
    LazyLock::new(|| Arc::new(MemoryStore::with_clock(Arc::new(CLOCK.clone()))));
static BOOKED: AtomicUsize = AtomicUsize::new(0);

#[idempotent(ttl = "1h", store = TTL_STORE)]
async fn book_room(room: u32) -> Result<usize, Error> {
    let _ = room;
    Ok(BOOKED.fetch_add(1, Ordering::SeqCst))
}

fn manual_store() -> (ManualClock, Arc<MemoryStore>) {
    let clock = ManualClock::new(1_000_000);
    (
        clock.clone(),
        Arc::new(MemoryStore::with_clock(Arc::new(clock))),
    )
}

static RESERVED: AtomicUsize = AtomicUsize::new(0);

#[idempotent(ttl = "10m")]
async fn reserve(seat: u32) -> Result<usize, Error> {
    let _ = seat;
    Ok(RESERVED.fetch_add(1, Ordering::SeqCst))
}

#[tokio::test]
async fn a_result_is_replayed_until_its_ttl_expires() {
    // `store =` a static; the turn's store (none here) is not used.
    let t = Turn::new("ttl");
    t.clone()
        .scope(async {
            let first = book_room(7).await.unwrap();
            CLOCK.advance(Duration::from_secs(59 * 60));
            assert_eq!(book_room(7).await.unwrap(), first);
            CLOCK.advance(Duration::from_secs(2 * 60));
            assert_ne!(book_room(7).await.unwrap(), first, "expired after 1h");
        })
        .await;
    assert_eq!(BOOKED.load(Ordering::SeqCst), 2);

    // The store given by the turn.
    let (clock, store) = manual_store();
    let t = Turn::new("ttl-2")
        .with_store(store.clone())
        .with_max_attempts_per_key(5);
    t.scope(async {
        let first = reserve(1).await.unwrap();
        assert_eq!(store.len(), 1);
        clock.advance(Duration::from_secs(9 * 60));
        assert_eq!(reserve(1).await.unwrap(), first);
        clock.advance(Duration::from_secs(2 * 60));
        assert_ne!(reserve(1).await.unwrap(), first, "expired after 10m");
    })
    .await;
}

fn per_call_store() -> Arc<MemoryStore> {
    static STORE: LazyLock<Arc<MemoryStore>> = LazyLock::new(|| Arc::new(MemoryStore::new()));
    Arc::clone(&STORE)
}

#[idempotent(store = per_call_store())]
async fn stored_by_fn(n: u32) -> Result<u32, Error> {
    Ok(n)
}

#[tokio::test]
async fn store_can_be_an_expression_evaluated_per_call() {
    let before = per_call_store().len();
    Turn::new("store-fn")
        .scope(async { stored_by_fn(3).await.unwrap() })
        .await;
    assert_eq!(per_call_store().len(), before + 1);
}

static AUDIT_STORE: LazyLock<Arc<MemoryStore>> = LazyLock::new(|| Arc::new(MemoryStore::new()));
static CAPPED_STARTS: AtomicUsize = AtomicUsize::new(0);

#[idempotent]
async fn open_case(n: u32) -> Result<u32, Error> {
    CAPPED_STARTS.fetch_add(1, Ordering::SeqCst);
    Ok(n)
}

#[idempotent(store = AUDIT_STORE)]
async fn audit_case(n: u32) -> Result<u32, Error> {
    CAPPED_STARTS.fetch_add(1, Ordering::SeqCst);
    Ok(n)
}

/// `Turn::with_max_calls` is counted in the store each call uses (its counts are kept with the
/// claims, atomically): a tool with a store of its own (`store = …`) has the turn's cap counted
/// there, apart from the turn's store, as the docs say. Each store refuses past the cap.
#[tokio::test]
async fn the_turns_cap_is_counted_in_each_store_its_tools_use() {
    let t = Turn::new("cap-across-stores")
        .with_store(Arc::new(MemoryStore::new()))
        .with_max_calls(2);
    let results = t
        .scope(async {
            vec![
                open_case(1).await,
                open_case(2).await,
                open_case(3).await,
                audit_case(1).await,
                audit_case(2).await,
                audit_case(3).await,
            ]
        })
        .await;
    assert_eq!(
        CAPPED_STARTS.load(Ordering::SeqCst),
        4,
        "two new actions in each store: {results:?}"
    );
    for refused in [&results[2], &results[5]] {
        assert!(
            matches!(refused, Err(Error::TurnBudgetExhausted { .. })),
            "{results:?}"
        );
    }
}

// ---------------------------------------------------------------------------------------------
// `budget` and `cache_errors`.

static FLAKY: AtomicUsize = AtomicUsize::new(0);

#[idempotent(budget = 2)]
async fn flaky(n: u32) -> Result<u32, Error> {
    FLAKY.fetch_add(1, Ordering::SeqCst);
    Err(Error::Config(format!("upstream timeout {n}")))
}

#[tokio::test]
async fn the_budget_stops_a_retry_loop() {
    let t = turn("budget").with_max_attempts_per_key(10);
    let errors: Vec<Error> = t
        .clone()
        .scope(async {
            let mut errors = Vec::new();
            for _ in 0..4 {
                errors.push(flaky(1).await.unwrap_err());
            }
            errors
        })
        .await;
    assert!(matches!(errors[1], Error::Config(_)));
    assert!(
        matches!(
            errors[2],
            Error::BudgetExhausted {
                attempts: 2,
                limit: 2,
                ..
            }
        ),
        "{}",
        errors[2]
    );
    assert_eq!(
        FLAKY.load(Ordering::SeqCst),
        2,
        "the tool ran past its budget"
    );
    assert_eq!(t.stats().budget_exhausted, 2);
}

static CHARGED: AtomicUsize = AtomicUsize::new(0);

#[idempotent(actions_per_turn = 2, ignore(memo))]
async fn charge_twice(cents: u32, memo: String) -> Result<u32, Error> {
    let _ = memo;
    Ok(CHARGED.fetch_add(1, Ordering::SeqCst) as u32 + cents)
}

/// `actions_per_turn` caps the new actions of the tool in a turn, over the turn's own setting:
/// a third charge of another amount is refused, the two made still replay.
#[tokio::test]
async fn actions_per_turn_caps_a_tools_new_actions() {
    let t = turn("actions").with_actions_per_tool(100);
    let answers = t
        .clone()
        .scope(async {
            let mut answers = Vec::new();
            for cents in [100, 200, 300, 100] {
                answers.push(charge_twice(cents, format!("memo {cents}")).await);
            }
            answers
        })
        .await;
    assert_eq!(CHARGED.load(Ordering::SeqCst), 2, "{answers:?}");
    assert!(
        matches!(
            answers[2],
            Err(Error::ToolBudgetExhausted {
                calls: 2,
                limit: 2,
                ..
            })
        ),
        "{answers:?}"
    );
    assert_eq!(
        answers[3].as_ref().ok(),
        answers[0].as_ref().ok(),
        "a replay"
    );
}

#[derive(Debug, PartialEq, Serialize, Deserialize)]
enum TicketError {
    Rejected(String),
    Idem(String),
}

impl From<Error> for TicketError {
    fn from(error: Error) -> Self {
        TicketError::Idem(error.to_string())
    }
}

static TICKETS: AtomicUsize = AtomicUsize::new(0);

#[idempotent(cache_errors)]
async fn open_ticket(title: String) -> Result<u32, TicketError> {
    TICKETS.fetch_add(1, Ordering::SeqCst);
    Err(TicketError::Rejected(title))
}

#[tokio::test]
async fn with_cache_errors_an_error_is_replayed() {
    turn("cache-errors")
        .scope(async {
            let first = open_ticket("dup".into()).await;
            assert_eq!(first, Err(TicketError::Rejected("dup".into())));
            assert_eq!(open_ticket("dup".into()).await, first);
        })
        .await;
    assert_eq!(TICKETS.load(Ordering::SeqCst), 1);
    // Errors from idem come out as the tool's own error type.
    let outside = open_ticket("x".into()).await.unwrap_err();
    assert!(matches!(outside, TicketError::Idem(m) if m.contains("outside of a turn")));
}

// ---------------------------------------------------------------------------------------------
// Error types: `anyhow::Error`, `?` in the body, an alias of `Result`.

#[idempotent]
async fn with_anyhow(n: u32) -> anyhow::Result<u32> {
    let parsed: u32 = "41".parse()?;
    if n == 0 {
        anyhow::bail!("zero");
    }
    Ok(parsed + n)
}

#[tokio::test]
async fn anyhow_errors_work() {
    assert_eq!(Turn::new("anyhow").scope(with_anyhow(1)).await.unwrap(), 42);
    assert_eq!(
        Turn::new("anyhow")
            .scope(with_anyhow(0))
            .await
            .unwrap_err()
            .to_string(),
        "zero"
    );
    let error = with_anyhow(1).await.unwrap_err();
    assert!(matches!(
        error.downcast_ref::<Error>(),
        Some(Error::NoTurn { .. })
    ));
}

// ---------------------------------------------------------------------------------------------
// Generics, `impl Trait`, `crate =`.

#[idempotent]
async fn generic<T>(value: T, label: impl Serialize + Send) -> Result<String, Error>
where
    T: Serialize + std::fmt::Debug + Send,
{
    let _ = label;
    Ok(format!("{value:?}"))
}

mod reexport {
    pub use ::idem_tools;
}

#[idempotent(crate = "crate::reexport::idem_tools")]
async fn through_a_renamed_crate(n: u32) -> Result<u32, Error> {
    Ok(n)
}

#[tokio::test]
async fn generic_and_impl_trait_arguments_and_crate_override() {
    Turn::new("generic")
        .scope(async {
            assert_eq!(generic(3_u8, "x").await.unwrap(), "3");
            assert_eq!(generic(vec![1], 2).await.unwrap(), "[1]");
            assert_eq!(through_a_renamed_crate(4).await.unwrap(), 4);
        })
        .await;
}

// ---------------------------------------------------------------------------------------------
// Methods: `&self`, `&mut self`, `self: Arc<Self>`, associated functions, trait impls.

/// `Clone`, with its count behind an `Arc`: its `&self` tools run detached, on a clone that
/// shares the count; its `&mut self` tool runs attached, on the mailer itself.
#[derive(Clone, Default)]
struct Mailer {
    sent: Arc<AtomicUsize>,
    log: Vec<String>,
}

/// Under `#[tool_impl]`, every tool method is named `Mailer__method`.
#[idem_tools::tool_impl(same_service)]
impl Mailer {
    /// `pub` methods get a descriptor: `Mailer::send__needs_idempotent_or_read_only`.
    #[idempotent]
    pub async fn send(&self, to: String) -> Result<usize, Error> {
        let _ = to;
        Ok(self.sent.fetch_add(1, Ordering::SeqCst) + 1)
    }

    #[idempotent]
    async fn record(&mut self, line: String) -> Result<usize, Error> {
        self.log.push(line);
        Ok(self.log.len())
    }

    #[idempotent(name = "mailer_shared")]
    pub async fn shared(self: Arc<Self>, to: String) -> Result<usize, Error> {
        let _ = to;
        Ok(self.sent.fetch_add(1, Ordering::SeqCst) + 1)
    }

    #[idempotent]
    pub async fn associated(n: u32) -> Result<u32, Error> {
        Ok(n)
    }
}

trait Notifier {
    async fn notify(&self, who: String) -> Result<usize, Error>;
}

#[idem_tools::tool_impl(same_service)]
impl Notifier for Mailer {
    #[idempotent]
    async fn notify(&self, who: String) -> Result<usize, Error> {
        let _ = who;
        Ok(self.sent.fetch_add(1, Ordering::SeqCst) + 1)
    }
}

#[tokio::test]
async fn methods_of_every_receiver_kind() {
    let mut mailer = Mailer::default();
    Turn::new("methods")
        .scope(async {
            assert_eq!(mailer.send("a".into()).await.unwrap(), 1);
            assert_eq!(mailer.send("a".into()).await.unwrap(), 1);
            assert_eq!(mailer.notify("b".into()).await.unwrap(), 2);
            assert_eq!(mailer.notify("b".into()).await.unwrap(), 2);
            assert_eq!(mailer.record("x".into()).await.unwrap(), 1);
            assert_eq!(mailer.record("x".into()).await.unwrap(), 1);
            assert_eq!(mailer.log.len(), 1);
            assert_eq!(Mailer::associated(5).await.unwrap(), 5);
            let shared = Arc::new(mailer);
            assert_eq!(Arc::clone(&shared).shared("c".into()).await.unwrap(), 3);
            assert_eq!(Arc::clone(&shared).shared("c".into()).await.unwrap(), 3);
        })
        .await;
    assert_eq!(
        Mailer::send__needs_idempotent_or_read_only.name,
        "Mailer__send"
    );
    assert_eq!(
        Mailer::record__needs_idempotent_or_read_only.name,
        "Mailer__record"
    );
    assert_eq!(
        Mailer::notify__needs_idempotent_or_read_only.name,
        "Mailer__notify"
    );
    assert_eq!(
        Mailer::associated__needs_idempotent_or_read_only.name,
        "Mailer__associated"
    );
    assert_eq!(
        Mailer::shared__needs_idempotent_or_read_only.name,
        "mailer_shared"
    );
}

/// A receiver whose tool runs on a clone: `self` in every position of the body means the
/// clone, except in nested items, which have their own.
#[derive(Clone)]
struct Clerk {
    name: String,
    /// Shared with every clone.
    filed: Arc<AtomicUsize>,
    /// Copied into each clone.
    scratch: u32,
}

fn shout(text: &str) -> String {
    text.to_uppercase()
}

#[idem_tools::tool_impl(same_service)]
impl Clerk {
    const DESK: &'static str = "desk";

    #[idempotent]
    pub async fn file(&self, form: String) -> Result<String, Error> {
        struct Stamp(u32);
        impl Stamp {
            fn value(&self) -> u32 {
                self.0
            }
        }
        let by = format!("{}@{}", self.name, Self::DESK); // in a macro
        let tag = move |n: usize| format!("{n}:{}", self.scratch); // in a closure
        let loud = async { self::shout(&self.name) }.await; // in an async block, by `self::`
        let clerk: &Clerk = self; // as a value
        tokio::time::sleep(Duration::from_millis(60)).await;
        let n = clerk.filed.fetch_add(1, Ordering::SeqCst) + 1;
        Ok(format!(
            "{form} by {by} ({loud}) #{} {}",
            tag(n),
            Stamp(7).value()
        ))
    }
}

#[tokio::test]
async fn a_clone_receiver_finishes_after_its_caller_gives_up() {
    let clerk = Clerk {
        name: "ada".into(),
        filed: Arc::new(AtomicUsize::new(0)),
        scratch: 5,
    };
    Turn::new("clerk")
        .with_store(Arc::new(MemoryStore::new()))
        .scope(async {
            let cut = tokio::time::timeout(Duration::from_millis(10), clerk.file("w-9".into()));
            assert!(cut.await.is_err(), "the caller gave up");
            // The clone finished the job: the retry gets its result, the body ran once.
            let filed = clerk.file("w-9".into()).await.unwrap();
            assert_eq!(filed, "w-9 by ada@desk (ADA) #1:5 7");
        })
        .await;
    assert_eq!(clerk.filed.load(Ordering::SeqCst), 1);
}

// ---------------------------------------------------------------------------------------------
// Stacking with `#[async_trait]` and `#[tracing::instrument]`.

#[async_trait::async_trait]
trait Payments {
    async fn pay(&self, cents: u64) -> Result<usize, Error>;
}

struct Bank {
    paid: AtomicUsize,
}

#[async_trait::async_trait]
#[idem_tools::tool_impl(same_service)]
impl Payments for Bank {
    /// `#[async_trait]` on the impl expands first; `#[idempotent]` recognises its output. `Bank`
    /// is not `Clone`: `attached` runs it in the caller's task, without a warning.
    #[idempotent(budget = 5, attached)]
    async fn pay(&self, cents: u64) -> Result<usize, Error> {
        let _ = cents;
        Ok(self.paid.fetch_add(1, Ordering::SeqCst) + 1)
    }
}

#[tokio::test]
async fn stacks_with_async_trait() {
    let bank: Arc<dyn Payments + Send + Sync> = Arc::new(Bank {
        paid: AtomicUsize::new(0),
    });
    let t = turn("async-trait");
    let handle = tokio::spawn(t.clone().scope(async move {
        assert_eq!(bank.pay(10).await.unwrap(), 1);
        assert_eq!(
            bank.pay(10).await.unwrap(),
            1,
            "replayed, through dyn Payments"
        );
        assert_eq!(bank.pay(20).await.unwrap(), 2);
    }));
    handle.await.unwrap();
    assert_eq!(t.stats().replayed, 1);
}

#[async_trait::async_trait]
trait Transfers {
    async fn transfer(&self, route: (u64, u64), cents: u64) -> Result<(String, usize), Error>;
}

struct Ledger;

static TRANSFERS: AtomicUsize = AtomicUsize::new(0);

#[async_trait::async_trait]
impl Transfers for Ledger {
    /// A pattern parameter, which async-trait renames `__arg1` before `#[idempotent]` sees it:
    /// its key argument is `arg1` (docs/key-spec.md §5).
    #[idempotent(name = "ledger_transfer", same_service, attached)]
    async fn transfer(&self, (from, to): (u64, u64), cents: u64) -> Result<(String, usize), Error> {
        let _ = (from, to, cents);
        let key = idem_tools::current_key()
            .map(|k| k.to_hex())
            .unwrap_or_default();
        Ok((key, TRANSFERS.fetch_add(1, Ordering::SeqCst)))
    }
}

#[tokio::test]
async fn a_pattern_parameter_under_async_trait_is_an_argument() {
    let t = turn("async-trait-pattern");
    let (key, first) = t.clone().scope(Ledger.transfer((1, 2), 5)).await.unwrap();
    let mut digest = idem_tools::key::ArgsDigest::new("ledger_transfer");
    digest.arg("arg1", &(1_u64, 2_u64)).unwrap();
    digest.arg("cents", &5_u64).unwrap();
    let (expected, _) = digest.finish(t.namespace(), t.id(), "ledger_transfer", 0);
    assert_eq!(key, expected.to_hex());
    let replayed = t.clone().scope(Ledger.transfer((1, 2), 5)).await.unwrap();
    assert_eq!(replayed, (key.clone(), first), "replayed");
    let (other, _) = t.clone().scope(Ledger.transfer((2, 1), 5)).await.unwrap();
    assert_ne!(other, key, "other values of the pattern are another action");
    assert_eq!((t.stats().executed, t.stats().replayed), (2, 1));
}

/// The key's name for each parameter (docs/key-spec.md §5): a pattern's `N` counts every typed
/// parameter but the receiver, those out of the key too (`Turn`, `ignore`), and an identifier
/// `__argN` is taken for async-trait's renaming even without async-trait (`__arg01` → `arg1`).
#[idempotent(name = "spec_parameter_names", ignore(trace))]
async fn parameter_names(
    turn: &Turn,
    trace: u64,
    (a, b): (u8, u8),
    __arg01: u8,
) -> Result<String, Error> {
    let _ = (turn.id(), trace, a, b, __arg01);
    Ok(current_key().map(|k| k.to_hex()).unwrap_or_default())
}

#[async_trait::async_trait]
trait Routes {
    async fn route(&self, pair: &(u64, u64), other: (u64, u64)) -> Result<String, Error>;
}

#[async_trait::async_trait]
impl Routes for Ledger {
    /// async-trait renames the second pattern `__arg2` (it counts the receiver) but leaves the
    /// first, of a reference type, which is named by the native rule: `arg0`.
    #[idempotent(name = "ledger_route", same_service, attached)]
    async fn route(&self, &(a, b): &(u64, u64), (c, d): (u64, u64)) -> Result<String, Error> {
        let _ = (a, b, c, d);
        Ok(current_key().map(|k| k.to_hex()).unwrap_or_default())
    }
}

#[tokio::test]
async fn parameter_names_in_the_key_are_the_specs() {
    let t = turn("parameter-names");
    let key = t
        .clone()
        .scope(async {
            let here = Turn::current().expect("in a turn");
            parameter_names(&here, 7, (1, 2), 3).await
        })
        .await
        .unwrap();
    let mut digest = idem_tools::key::ArgsDigest::new("spec_parameter_names");
    digest.arg("arg2", &(1_u8, 2_u8)).unwrap();
    digest.arg("arg1", &3_u8).unwrap();
    let (expected, _) = digest.finish(t.namespace(), t.id(), "spec_parameter_names", 0);
    assert_eq!(key, expected.to_hex());

    let key = t
        .clone()
        .scope(Ledger.route(&(1, 2), (3, 4)))
        .await
        .unwrap();
    let mut digest = idem_tools::key::ArgsDigest::new("ledger_route");
    digest.arg("arg0", &(1_u64, 2_u64)).unwrap();
    digest.arg("arg2", &(3_u64, 4_u64)).unwrap();
    let (expected, _) = digest.finish(t.namespace(), t.id(), "ledger_route", 0);
    assert_eq!(key, expected.to_hex());
}

/// The fingerprint a store keeps is marked with the tool's origin (docs/key-spec.md §5): for a
/// method of a trait impl, the module and `Self as Trait` — not the lifetime parameters
/// async-trait gives the method, which its native form does not have.
#[tokio::test]
async fn an_async_trait_method_is_marked_like_its_native_form() {
    use idem_tools::store::Store as _;
    let store = Arc::new(MemoryStore::new());
    let t = Turn::new("async-trait-mark").with_store(store.clone());
    t.scope(Ledger.transfer((3, 4), 5)).await.unwrap();
    let records = store.list(None, 10).await.unwrap();
    let [record] = &records[..] else {
        panic!("one record: {records:?}")
    };
    let mut material = Vec::new();
    for part in [
        module_path!(),
        "<idempotent::Ledger as idempotent::Transfers>",
    ] {
        material.extend_from_slice(&(part.len() as u64).to_le_bytes());
        material.extend_from_slice(part.as_bytes());
    }
    let mark = blake3::derive_key("idem 2026-12-06 tool origin v2", &material);
    assert_eq!(record.fingerprint.as_bytes()[24..], mark[..8]);
}

static TRACED: AtomicUsize = AtomicUsize::new(0);

/// Recommended order: `#[idempotent]` outermost, so the span covers replays too.
#[idempotent]
#[tracing::instrument(level = "info")]
async fn traced_outer(n: u32) -> Result<usize, Error> {
    let _ = n;
    Ok(TRACED.fetch_add(1, Ordering::SeqCst))
}

/// Also compiles: the span then only covers executions (it is created in the body).
#[tracing::instrument(level = "info", skip(n))]
#[idempotent]
async fn traced_inner(n: u32) -> Result<usize, Error> {
    let _ = n;
    Ok(TRACED.fetch_add(1, Ordering::SeqCst))
}

#[tokio::test]
async fn stacks_with_tracing_instrument_in_both_orders() {
    let before = TRACED.load(Ordering::SeqCst);
    Turn::new("traced")
        .scope(async {
            assert_eq!(
                traced_outer(1).await.unwrap(),
                traced_outer(1).await.unwrap()
            );
            assert_eq!(
                traced_inner(1).await.unwrap(),
                traced_inner(1).await.unwrap()
            );
        })
        .await;
    assert_eq!(TRACED.load(Ordering::SeqCst) - before, 2);
}

#[tokio::test]
async fn the_body_is_not_polled_on_replay() {
    static RUNS: AtomicUsize = AtomicUsize::new(0);
    /// Hangs forever if it runs a second time.
    #[idempotent]
    async fn once(n: u32) -> Result<u32, Error> {
        if RUNS.fetch_add(1, Ordering::SeqCst) > 0 {
            std::future::pending::<()>().await;
        }
        Ok(n)
    }
    let t = turn("no-poll");
    let replay = t.clone().scope(async {
        assert_eq!(once(1).await.unwrap(), 1);
        once(1).await.unwrap()
    });
    let replayed = tokio::time::timeout(Duration::from_secs(5), replay).await;
    assert_eq!(replayed.expect("the body ran again and hung"), 1);
    assert_eq!(RUNS.load(Ordering::SeqCst), 1);
}

// ---------------------------------------------------------------------------------------------
// Tools a `macro_rules!` macro writes, the parameter's name one of its fragments.

static WRITTEN: AtomicUsize = AtomicUsize::new(0);

/// A tool per invocation, named, with its parameter's name and type, by the caller.
macro_rules! reserving_tool {
    ($name:ident, $param:ident: $ty:ty) => {
        #[idempotent]
        async fn $name($param: $ty) -> Result<String, Error> {
            WRITTEN.fetch_add(1, Ordering::SeqCst);
            Ok(format!("reserved {}", $param))
        }
    };
}

reserving_tool!(reserve_room, room: u32);
reserving_tool!(reserve_guest, guest: String);
reserving_tool!(reserve_underscored, _slot: u32);

#[tokio::test]
async fn a_tool_a_macro_writes_keys_and_replays_its_parameter() {
    turn("macro-tools")
        .scope(async {
            assert_eq!(reserve_room(7).await.unwrap(), "reserved 7");
            assert_eq!(reserve_room(7).await.unwrap(), "reserved 7");
            assert_eq!(reserve_room(8).await.unwrap(), "reserved 8");
            assert_eq!(reserve_guest("ada".into()).await.unwrap(), "reserved ada");
            assert_eq!(reserve_underscored(9).await.unwrap(), "reserved 9");
            assert_eq!(reserve_underscored(9).await.unwrap(), "reserved 9");
            assert_eq!(WRITTEN.load(Ordering::SeqCst), 4, "the retries replayed");
        })
        .await;
}

/// A parameter whose name starts with `_`, bound again in the body by the macro: its name is in
/// the key as written (the key did not change when it was).
#[idempotent]
async fn tag_order(_order: u64, mut label: String) -> Result<String, Error> {
    label.push('!');
    Ok(format!("{label} {}", key()))
}

#[tokio::test]
async fn an_underscored_parameter_is_in_the_key_by_its_name() {
    let t = turn("underscored");
    let tagged = t.clone().scope(tag_order(7, "gift".into())).await.unwrap();
    let mut digest = idem_tools::key::ArgsDigest::new("tag_order");
    digest.arg("_order", &7_u64).unwrap();
    digest.arg("label", "gift").unwrap();
    let (expected, _) = digest.finish(t.namespace(), t.id(), "tag_order", 0);
    assert_eq!(tagged, format!("gift! {}", expected.to_hex()));
}

// ---------------------------------------------------------------------------------------------
// An `Err` that is a refusal of a call the body made.

/// The error of `relay`: recorded with `cache_errors`.
#[derive(Debug, PartialEq, serde::Serialize, serde::Deserialize)]
struct RelayError(String);

impl From<Error> for RelayError {
    fn from(error: Error) -> Self {
        RelayError(error.model_text())
    }
}

static RELAYED: AtomicUsize = AtomicUsize::new(0);

/// The action `relay`'s calls share: 300 ms.
#[idempotent]
async fn deliver_parcel(parcel: u32) -> Result<u32, Error> {
    tokio::time::sleep(Duration::from_millis(300)).await;
    Ok(parcel)
}

#[idempotent(cache_errors)]
async fn relay(route: u32, parcel: u32) -> Result<String, RelayError> {
    RELAYED.fetch_add(1, Ordering::SeqCst);
    let parcel = deliver_parcel(parcel).await?;
    Ok(format!("parcel {parcel} on route {route}"))
}

/// A `cache_errors` tool whose call of another tool is refused as still running (the turn's
/// in-flight wait ended) fails with that refusal, which says "wait, then call again". It was
/// recorded as the tool's own error, and every call again got it back for the record's TTL,
/// long after the action it waited for had finished. An `Err` of a body that a call it made
/// was refused in is not recorded: the call again runs the tool, which gets the action's result.
#[tokio::test]
async fn a_refusal_of_a_call_the_body_made_is_not_recorded_as_its_error() {
    let t = Turn::new("relay-refusal")
        .with_store(Arc::new(MemoryStore::new()))
        .with_in_flight_wait(Duration::from_millis(50));
    t.scope(async {
        let (first, second) = tokio::join!(relay(1, 6), async {
            tokio::time::sleep(Duration::from_millis(30)).await;
            relay(2, 6).await
        });
        assert_eq!(first.unwrap(), "parcel 6 on route 1");
        let RelayError(refusal) = second.unwrap_err();
        assert!(refusal.contains("call it again"), "{refusal}");
        tokio::time::sleep(Duration::from_millis(400)).await;
        assert_eq!(
            relay(2, 6).await.expect("the call again runs the tool"),
            "parcel 6 on route 2"
        );
    })
    .await;
    assert_eq!(RELAYED.load(Ordering::SeqCst), 3);
}

static RELAYED_ON: AtomicUsize = AtomicUsize::new(0);

/// A plain tool between `relay_on` and the action: its `Err` is that of the call it made.
#[idempotent]
async fn hand_over(route: u32, parcel: u32) -> Result<u32, Error> {
    let _ = route;
    deliver_parcel(parcel).await
}

#[idempotent(cache_errors)]
async fn relay_on(route: u32, parcel: u32) -> Result<String, RelayError> {
    RELAYED_ON.fetch_add(1, Ordering::SeqCst);
    let parcel = hand_over(route, parcel).await?;
    Ok(format!("parcel {parcel} on route {route}"))
}

/// The refusal is made in a tool the body called, which returns it as its own `Err` (given
/// back: it records no `Err`s, and idem refused a call it made): the body gets it as that
/// tool's `Err`, not as idem's answer to its own call, and must not record it either.
#[tokio::test]
async fn a_refusal_returned_by_a_tool_the_body_called_is_not_recorded_as_its_error() {
    let t = Turn::new("relay-on-refusal")
        .with_store(Arc::new(MemoryStore::new()))
        .with_in_flight_wait(Duration::from_millis(50));
    t.scope(async {
        let (first, second) = tokio::join!(relay_on(1, 8), async {
            tokio::time::sleep(Duration::from_millis(30)).await;
            relay_on(2, 8).await
        });
        assert_eq!(first.unwrap(), "parcel 8 on route 1");
        let RelayError(refusal) = second.unwrap_err();
        assert!(refusal.contains("call it again"), "{refusal}");
        tokio::time::sleep(Duration::from_millis(400)).await;
        assert_eq!(
            relay_on(2, 8).await.expect("the call again runs the tool"),
            "parcel 8 on route 2"
        );
    })
    .await;
    assert_eq!(RELAYED_ON.load(Ordering::SeqCst), 3);
}

static RELAYED_SPAWNED: AtomicUsize = AtomicUsize::new(0);

#[idempotent(cache_errors)]
async fn relay_spawned(route: u32, parcel: u32) -> Result<String, RelayError> {
    RELAYED_SPAWNED.fetch_add(1, Ordering::SeqCst);
    let delivered = idem_tools::spawn(deliver_parcel(parcel));
    let parcel = delivered.await.expect("the task ran")?;
    Ok(format!("parcel {parcel} on route {route}"))
}

/// The call refused is made in a task the body handed it to (`idem_tools::spawn`): the body
/// returns that refusal, and does not record it either.
#[tokio::test]
async fn a_refusal_of_a_call_made_in_a_task_the_body_spawned_is_not_recorded_as_its_error() {
    let t = Turn::new("relay-spawned-refusal")
        .with_store(Arc::new(MemoryStore::new()))
        .with_in_flight_wait(Duration::from_millis(50));
    t.scope(async {
        let (first, second) = tokio::join!(relay_spawned(1, 9), async {
            tokio::time::sleep(Duration::from_millis(30)).await;
            relay_spawned(2, 9).await
        });
        assert_eq!(first.unwrap(), "parcel 9 on route 1");
        let RelayError(refusal) = second.unwrap_err();
        assert!(refusal.contains("call it again"), "{refusal}");
        tokio::time::sleep(Duration::from_millis(400)).await;
        assert_eq!(
            relay_spawned(2, 9)
                .await
                .expect("the call again runs the tool"),
            "parcel 9 on route 2"
        );
    })
    .await;
    assert_eq!(RELAYED_SPAWNED.load(Ordering::SeqCst), 3);
}

static DECLINED: AtomicUsize = AtomicUsize::new(0);

/// Fails, always: its `Err` is its own, recorded.
#[idempotent(cache_errors)]
#[allow(clippy::unused_async)]
async fn decline(card: u32) -> Result<u32, RelayError> {
    DECLINED.fetch_add(1, Ordering::SeqCst);
    Err(RelayError(format!("card {card} declined")))
}

/// Calls `decline` beside a call of `deliver_parcel` that may be refused.
#[idempotent]
async fn pay_beside(card: u32, parcel: u32) -> Result<String, Error> {
    let (delivered, declined) = tokio::join!(deliver_parcel(parcel), decline(card));
    Ok(format!("{:?} {:?}", delivered.is_ok(), declined.is_ok()))
}

/// A refusal of a call made beside a tool's (in the caller's body) is not that tool's: its
/// own `Err` is recorded, and replayed.
#[tokio::test]
async fn a_refusal_beside_a_tool_does_not_keep_its_own_err_from_being_recorded() {
    let t = Turn::new("pay-beside-refusal")
        .with_store(Arc::new(MemoryStore::new()))
        .with_in_flight_wait(Duration::from_millis(50));
    t.scope(async {
        let (first, second) = tokio::join!(pay_beside(1, 10), async {
            tokio::time::sleep(Duration::from_millis(30)).await;
            pay_beside(2, 10).await
        });
        assert_eq!(first.unwrap(), "true false");
        assert_eq!(second.unwrap(), "false false", "the delivery was refused");
        assert_eq!(
            decline(2).await,
            Err(RelayError("card 2 declined".to_owned()))
        );
    })
    .await;
    assert_eq!(
        DECLINED.load(Ordering::SeqCst),
        2,
        "each card's decline is replayed"
    );
}

//! A key reused with other arguments is refused, and a model that keeps doing it is told to
//! stop (`Error::PayloadMismatch`'s `refused`, counted per key in a process-wide bounded map) —
//! with texts that are true whether the key's call is still running or recorded. A binary of
//! its own: the count is process-wide, and a test here fills the map. (Cases found by a review
//! of the change that added the count.)

use std::sync::Arc;
use std::time::Duration;

use idem_tools_runtime::key::ArgsDigest;
use idem_tools_runtime::store::{MemoryStore, Store};
use idem_tools_runtime::{Call, Codec, Error, Outcome, ToolInfo, Turn, execute};

/// `memo` is left out of the key (as `#[idempotent(skip(memo))]` does), kept in the fingerprint.
static CHARGE: ToolInfo = ToolInfo::idempotent("charge").with_skipped(&["memo"]);

fn call(turn: &Turn, account: &str, memo: &str) -> Call {
    let mut args = ArgsDigest::new(CHARGE.name);
    args.arg("account", account).unwrap();
    args.fingerprint_arg("memo", memo).unwrap();
    let (key, fp) = args.finish(turn.namespace(), turn.id(), CHARGE.name, CHARGE.version);
    Call::new(&CHARGE, turn, key, fp).with_unkeyed(Some(0b1))
}

async fn charge(turn: &Turn, account: &str, memo: &str) -> Result<String, Error> {
    let memo_owned = memo.to_owned();
    execute(call(turn, account, memo), Codec::ok_only(), async move {
        Ok::<_, Error>(format!("charged ({memo_owned})"))
    })
    .await
}

fn refused(answer: Result<String, Error>) -> (u32, String) {
    match answer {
        Err(error @ Error::PayloadMismatch { refused, .. }) => (refused, error.model_text()),
        other => panic!("expected a PayloadMismatch: {other:?}"),
    }
}

/// The key is still running (a call in another process: its claim is in the store) when it is
/// refused twice: the model is not told the action was done, nor to stop — the running call
/// then fails (an `Err`, not recorded: its claim is given back), and the model's call runs.
#[tokio::test]
async fn a_refusal_over_a_running_call_does_not_say_it_was_done() {
    use idem_tools_runtime::store::{Begin, BeginRequest, Charge, Lease, LeaseToken};
    let store: Arc<dyn Store> = Arc::new(MemoryStore::new());
    let turn = Turn::new("running").with_store(Arc::clone(&store));
    // Another process runs charge(acct-1, memo x): it holds the key.
    let elsewhere = call(&turn, "acct-1", "x");
    let (key, fp) = (elsewhere.key(), fp_of(&turn, "acct-1", "x"));
    let token = LeaseToken::generate();
    let claimed = store
        .begin(BeginRequest {
            namespace: turn.namespace(),
            key: &key,
            tool: CHARGE.name,
            turn: turn.id(),
            fingerprint: &fp,
            lease: Duration::from_secs(30),
            ttl: Duration::from_secs(60),
            token,
            charge: Charge::unlimited(),
        })
        .await
        .unwrap();
    assert!(matches!(claimed, Begin::Claimed), "{claimed:?}");
    let (one, _) = refused(charge(&turn, "acct-1", "y").await);
    let (two, text) = refused(charge(&turn, "acct-1", "y").await);
    assert_eq!((one, two), (1, 2));
    // The other process's call fails: its claim is given back, nothing recorded.
    let lease = Lease {
        namespace: Arc::from(turn.namespace()),
        key,
        token,
    };
    store.release(&lease).await.unwrap();
    // Nothing was done: the key is free, and the model's call now runs.
    assert_eq!(charge(&turn, "acct-1", "y").await.unwrap(), "charged (y)");
    assert!(
        !text.contains("tell the user what was done"),
        "the second refusal over a call that was still running (and then failed) told the \
         model the action was done and to stop: {text}"
    );
}

fn fp_of(turn: &Turn, account: &str, memo: &str) -> idem_tools_runtime::key::Fingerprint {
    let mut args = ArgsDigest::new(CHARGE.name);
    args.arg("account", account).unwrap();
    args.fingerprint_arg("memo", memo).unwrap();
    args.finish(turn.namespace(), turn.id(), CHARGE.name, CHARGE.version)
        .1
}

/// A looping model whose key is refused again after 4096 other keys were refused in the
/// process (the map's bound) is still told to stop: the key refused longest ago is forgotten,
/// not every count at once.
#[tokio::test]
async fn a_loop_is_told_to_stop_whatever_else_the_process_refuses() {
    let store: Arc<dyn Store> = Arc::new(MemoryStore::new());
    let turn = Turn::new("busy").with_store(Arc::clone(&store));
    charge(&turn, "looping", "x").await.unwrap();
    let mut counts = Vec::new();
    for round in 0..3 {
        counts.push(refused(charge(&turn, "looping", "reworded").await).0);
        // Meanwhile the server refuses 4096 other keys (other clients, other turns).
        for n in 0..4096 {
            let other = Turn::new(format!("other-{round}-{n}")).with_store(Arc::clone(&store));
            charge(&other, "acct", "x").await.unwrap();
            refused(charge(&other, "acct", "reworded").await);
        }
    }
    assert!(
        counts.iter().any(|&count| count > 1),
        "the looping key was refused {} times and never told to stop: counts {counts:?}",
        counts.len()
    );
}

/// A key reused with other arguments while the first call runs *in this process* is refused
/// as a mismatch at once: it does not join the first call's flight (it could not take its
/// result), wait out the in-flight wait and be told `InFlight` "with these same arguments".
#[tokio::test]
async fn a_reworded_call_of_a_key_running_here_is_a_mismatch_at_once() {
    let store: Arc<dyn Store> = Arc::new(MemoryStore::new());
    let turn = Turn::new("running-here")
        .with_store(Arc::clone(&store))
        .with_in_flight_wait(Duration::from_millis(300));
    let (done, finish) = tokio::sync::oneshot::channel::<()>();
    let first = {
        let turn = turn.clone();
        tokio::spawn(async move {
            execute(call(&turn, "acct-1", "x"), Codec::ok_only(), async move {
                let _ = finish.await;
                Ok::<_, Error>("charged (x)".to_owned())
            })
            .await
        })
    };
    tokio::time::sleep(Duration::from_millis(50)).await;
    let asked = tokio::time::Instant::now();
    let reworded = charge(&turn, "acct-1", "y").await;
    assert!(
        asked.elapsed() < Duration::from_millis(200),
        "refused at once"
    );
    let _ = done.send(());
    first.await.unwrap().unwrap();
    match &reworded {
        Err(Error::PayloadMismatch { .. }) => {}
        Err(error) => panic!("told {error:?}, whose text reads: {}", error.model_text()),
        Ok(value) => panic!("ran: {value}"),
    }
}

/// The texts that say the earlier call's action was done ("already did this action", "it was
/// done", "the earlier call stands").
fn says_it_was_done(text: &str) -> bool {
    [
        "already did this action",
        "it was done",
        "earlier call stands",
    ]
    .iter()
    .any(|claim| text.contains(claim))
}

/// An attached call cut off mid-run leaves its key interrupted (the action may or may not have
/// taken effect). A reworded retry (the memo, left out of the key, differs) is the same action:
/// it must not be told that the action was done — the model would tell the user a charge went
/// through that may never have happened — but that its outcome is unknown.
#[tokio::test]
async fn a_reworded_call_of_an_interrupted_action_is_not_told_it_was_done() {
    let store: Arc<dyn Store> = Arc::new(MemoryStore::new());
    let turn = Turn::new("interrupted").with_store(Arc::clone(&store));
    let cut_off = tokio::time::timeout(
        Duration::from_millis(50),
        execute(call(&turn, "acct-1", "x"), Codec::ok_only(), async {
            std::future::pending::<()>().await;
            Ok::<_, Error>("charged (x)".to_owned())
        }),
    )
    .await;
    assert!(cut_off.is_err(), "the caller gave up mid-run");
    // The same arguments: told the outcome is unknown.
    let same = charge(&turn, "acct-1", "x").await;
    assert!(matches!(same, Err(Error::Interrupted { .. })), "{same:?}");
    // Reworded, once then again (the second refusal of the key is where a model is told to
    // stop and tell the user "what was done").
    for _ in 0..2 {
        let reworded = charge(&turn, "acct-1", "reworded").await;
        let text = match &reworded {
            Err(error) => error.model_text(),
            Ok(value) => panic!("ran the interrupted action again: {value}"),
        };
        assert!(
            !says_it_was_done(&text) && text.contains("may or may not have taken effect"),
            "a reworded call of an interrupted action ({reworded:?}) reads: {text}"
        );
    }
}

/// `cache_errors`: the first call's `Err` (the card was declined) is recorded. A reworded retry
/// (the memo, left out of the key, differs) must not be told that the action was done: the
/// model would tell the user the charge went through.
#[tokio::test]
async fn a_reworded_call_of_an_action_that_failed_is_not_told_it_was_done() {
    static CACHED: ToolInfo = ToolInfo::idempotent("charge_cached")
        .with_skipped(&["memo"])
        .with_cache_errors();
    let store: Arc<dyn Store> = Arc::new(MemoryStore::new());
    let turn = Turn::new("declined").with_store(Arc::clone(&store));
    let charge = |memo: &'static str| {
        let mut args = ArgsDigest::new(CACHED.name);
        args.arg("account", "acct-1").unwrap();
        args.fingerprint_arg("memo", memo).unwrap();
        let (key, fp) = args.finish(turn.namespace(), turn.id(), CACHED.name, CACHED.version);
        let call = Call::new(&CACHED, &turn, key, fp).with_unkeyed(Some(0b1));
        execute(call, Codec::ok_and_err(), async {
            Err::<String, _>(Declined("the card was declined".to_owned()))
        })
    };
    let first = charge("x").await;
    assert_eq!(first, Err(Declined("the card was declined".to_owned())));
    // The same arguments replay the failure.
    assert_eq!(charge("x").await, first);
    for _ in 0..2 {
        let reworded = charge("reworded").await;
        let text = match &reworded {
            Err(Declined(text)) => text.clone(),
            Ok(value) => panic!("ran the failed action again: {value}"),
        };
        assert!(
            !says_it_was_done(&text),
            "a reworded call of an action that failed ({reworded:?}) reads: {text}"
        );
    }
}

/// A tool's own error, recorded with `cache_errors`; idem's errors are given as their model
/// text.
#[derive(Debug, Clone, PartialEq, serde::Serialize, serde::Deserialize)]
struct Declined(String);

impl From<Error> for Declined {
    fn from(error: Error) -> Self {
        Declined(error.model_text())
    }
}

/// `cache_errors` with an error type whose record does not replay as it was returned (two
/// untagged variants that serialize alike): the failure was recorded as "ran, result not
/// replayable", and a retry with the same arguments read "This action already ran … the action
/// is done" — of a charge that was declined. Such an `Err` is not recorded: its key is given
/// back, as without `cache_errors`, and a retry runs the tool again (found by a review of
/// reworded retries).
#[tokio::test]
async fn a_failure_that_cannot_be_replayed_is_not_called_done() {
    #[derive(Debug, Clone, PartialEq, serde::Serialize, serde::Deserialize)]
    struct Declined {
        text: String,
    }
    #[derive(Debug, Clone, PartialEq, serde::Serialize, serde::Deserialize)]
    struct Refused {
        text: String,
    }
    /// Untagged: `Card` replays as `Idem`, a type of another name (the check refuses it).
    #[derive(Debug, Clone, PartialEq, serde::Serialize, serde::Deserialize)]
    #[serde(untagged)]
    enum Lossy {
        Idem(Refused),
        Card(Declined),
    }
    impl From<Error> for Lossy {
        fn from(error: Error) -> Self {
            Lossy::Idem(Refused {
                text: error.model_text(),
            })
        }
    }
    static LOSSY: ToolInfo = ToolInfo::idempotent("charge_lossy").with_cache_errors();
    let store: Arc<dyn Store> = Arc::new(MemoryStore::new());
    let turn = Turn::new("lossy").with_store(Arc::clone(&store));
    let runs = std::sync::atomic::AtomicU32::new(0);
    let charge = || {
        let mut args = ArgsDigest::new(LOSSY.name);
        args.arg("account", "acct-1").unwrap();
        let (key, fp) = args.finish(turn.namespace(), turn.id(), LOSSY.name, LOSSY.version);
        execute(
            Call::new(&LOSSY, &turn, key, fp),
            Codec::ok_and_err(),
            async {
                runs.fetch_add(1, std::sync::atomic::Ordering::SeqCst);
                Err::<String, _>(Lossy::Card(Declined {
                    text: "the card was declined".to_owned(),
                }))
            },
        )
    };
    let first = charge().await;
    assert!(matches!(&first, Err(Lossy::Card(_))), "{first:?}");
    let retry = charge().await;
    let text = match &retry {
        Err(Lossy::Card(Declined { text }) | Lossy::Idem(Refused { text })) => text.clone(),
        Ok(value) => panic!("{value}"),
    };
    assert!(
        !text.contains("the action is done"),
        "a retry of a declined charge reads: {text}"
    );
    assert_eq!(
        text, "the card was declined",
        "the retry ran the tool again"
    );
    assert_eq!(runs.load(std::sync::atomic::Ordering::SeqCst), 2);
    assert_eq!(turn.stats().get(Outcome::Failed), 2);
}

/// A record that cannot be read (damaged, or written by a newer version of idem) says nothing
/// of what became of its action (it may be a newer idem's record of a failure). A reworded call
/// of it (the memo, left out of the key, differs) was told "This tool already did this action …
/// it was done": a model would tell the user that a charge went through that may have failed or
/// never happened (found by a review of the reworded-retry fixes).
#[tokio::test]
async fn a_reworded_call_of_an_unreadable_record_is_not_told_it_was_done() {
    use idem_tools_runtime::store::{Begin, BeginRequest, Charge, LeaseToken};
    let store: Arc<dyn Store> = Arc::new(MemoryStore::new());
    let turn = Turn::new("unreadable").with_store(Arc::clone(&store));
    let key = call(&turn, "acct-1", "x").key();
    let fp = fp_of(&turn, "acct-1", "x");
    let request = BeginRequest {
        namespace: turn.namespace(),
        key: &key,
        tool: CHARGE.name,
        turn: turn.id(),
        fingerprint: &fp,
        lease: Duration::from_secs(30),
        ttl: Duration::from_secs(60),
        token: LeaseToken::generate(),
        charge: Charge::unlimited(),
    };
    let lease = request.lease();
    let claimed = store.begin(request).await.unwrap();
    assert!(matches!(claimed, Begin::Claimed), "{claimed:?}");
    store
        .complete(
            &lease,
            b"not a record idem can read",
            Duration::from_secs(60),
        )
        .await
        .unwrap();
    let same = charge(&turn, "acct-1", "x").await;
    assert!(
        same.is_err(),
        "ran the action of an unreadable record again: {same:?}"
    );
    for _ in 0..2 {
        let reworded = charge(&turn, "acct-1", "reworded").await;
        let text = match &reworded {
            Err(error) => error.model_text(),
            Ok(value) => panic!("ran the action of an unreadable record again: {value}"),
        };
        assert!(
            !says_it_was_done(&text) && !text.contains("what was done"),
            "a reworded call of an unreadable record ({reworded:?}) reads: {text}"
        );
    }
}

/// A failure recorded with `cache_errors` that a later build cannot decode (`cache_errors`
/// removed, or the error type changed): a retry with the same arguments read "This action
/// already ran … the action is done" of a charge that was declined. A record that cannot be
/// decoded says no more than that an earlier call left it.
#[tokio::test]
async fn a_failure_recorded_that_cannot_be_decoded_is_not_called_done() {
    static CACHED: ToolInfo = ToolInfo::idempotent("charge_redeployed").with_cache_errors();
    let store: Arc<dyn Store> = Arc::new(MemoryStore::new());
    let turn = Turn::new("redeployed").with_store(Arc::clone(&store));
    let call = || {
        let mut args = ArgsDigest::new(CACHED.name);
        args.arg("account", "acct-1").unwrap();
        let (key, fp) = args.finish(turn.namespace(), turn.id(), CACHED.name, CACHED.version);
        Call::new(&CACHED, &turn, key, fp)
    };
    let first = execute(call(), Codec::ok_and_err(), async {
        Err::<String, _>(Declined("the card was declined".to_owned()))
    })
    .await;
    assert_eq!(first, Err(Declined("the card was declined".to_owned())));
    // The next build records `Ok` results only: the recorded `Err` does not decode.
    let retry = execute(call(), Codec::ok_only(), async {
        Ok::<_, Error>("charged".to_owned())
    })
    .await;
    let text = match &retry {
        Err(error) => error.model_text(),
        Ok(value) => panic!("ran the failed action again: {value}"),
    };
    assert!(
        !says_it_was_done(&text) && !text.contains("the action is done"),
        "a retry of a declined charge ({retry:?}) reads: {text}"
    );
}

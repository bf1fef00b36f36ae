//! A key reused with other arguments is refused, and a model that keeps doing it is told to
//! stop (`Error::PayloadMismatch`'s `refused`, counted per key in a process-wide bounded map) —
//! with texts that are true whether the key's call is still running or recorded. A binary of
//! its own: the count is process-wide, and a test here fills the map. (Cases found by a review
//! of the change that added the count.)

use std::sync::Arc;
use std::time::Duration;

use idem_tools_runtime::key::ArgsDigest;
use idem_tools_runtime::store::{MemoryStore, Store};
use idem_tools_runtime::{Call, Codec, Error, ToolInfo, Turn, execute};

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

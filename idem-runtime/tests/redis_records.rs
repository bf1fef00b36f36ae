//! `RedisStore` records as Redis holds them, written by hand: corrupt ones are errors, and one
//! whose `exp` has come is absent although Redis still keeps the key (`IDEM_REDIS_URL`).
#![cfg(feature = "redis")]

mod redis_common;

use idem_tools_runtime::store::Charge;
use std::sync::Arc;
use std::time::Duration;

use idem_tools_runtime::Error;
use idem_tools_runtime::store::{Begin, BeginRequest, Lease, LeaseToken, RedisStore, Store};
use redis_common::{cleanup, fingerprint, key, raw, redis_url, unique_prefix};

const LONG: Duration = Duration::from_secs(30);

async fn store(url: &str, tag: &str) -> RedisStore {
    RedisStore::connect(url)
        .await
        .expect("connect")
        .with_prefix(unique_prefix(tag))
}

fn request<'a>(
    namespace: &'a str,
    key: &'a idem_tools_runtime::Key,
    fp: &'a idem_tools_runtime::Fingerprint,
    lease: Duration,
) -> BeginRequest<'a> {
    BeginRequest {
        namespace,
        key,
        tool: "send_message",
        turn: "t",
        fingerprint: fp,
        lease,
        ttl: Duration::from_secs(60),
        token: LeaseToken::generate(),
        charge: Charge::unlimited(),
    }
}

/// Hash fields written by hand.
type Fields = Vec<(&'static str, Vec<u8>)>;

#[tokio::test]
async fn corrupt_records_are_errors_not_panics() {
    let Some(url) = redis_url("corrupt_records_are_errors_not_panics") else {
        return;
    };
    let store = store(&url, "corrupt").await;
    let mut conn = raw(&url).await;
    let fp = fingerprint("corrupt");
    let good = |state: &str| {
        vec![
            ("state", state.as_bytes().to_vec()),
            ("fp", fp.as_bytes().to_vec()),
            ("tool", b"send_message".to_vec()),
            ("created", b"1000".to_vec()),
            // Far in the future: an expired record would simply be absent.
            ("exp", b"99999999999999".to_vec()),
            ("res", b"ok".to_vec()),
        ]
    };
    let mut cases: Vec<(&str, Fields)> = Vec::new();
    let mut bad_state = good("completed");
    bad_state[0].1 = b"finished?".to_vec();
    cases.push(("bad state", bad_state));
    let mut short_fp = good("completed");
    short_fp[1].1 = vec![0; 5];
    cases.push(("short fingerprint", short_fp));
    let mut no_time = good("completed");
    no_time[3].1 = b"yesterday".to_vec();
    cases.push(("bad time", no_time));
    let mut bad_tool = good("in_progress");
    bad_tool[2].1 = vec![0xff, 0xfe];
    cases.push(("tool not UTF-8", bad_tool));
    let no_result = good("completed")[..5].to_vec();
    cases.push(("completed without result", no_result));
    let mut no_expiry = good("completed");
    no_expiry.remove(4);
    cases.push(("fields but no expiry", no_expiry));

    for (label, fields) in &cases {
        let k = key(label);
        let redis_key = store.redis_key("ns", &k);
        let _: () = redis::cmd("HSET")
            .arg(&redis_key)
            .arg(fields.as_slice())
            .query_async(&mut conn)
            .await
            .unwrap();
        let begin = store.begin(request("ns", &k, &fp, LONG)).await;
        assert!(
            matches!(begin, Err(Error::CorruptRecord { .. })),
            "{label}: {begin:?}"
        );
        let get = store.get("ns", &k).await;
        assert!(
            matches!(get, Err(Error::CorruptRecord { .. })),
            "{label}: {get:?}"
        );
    }

    // A hash with none of a record's fields holds no record (the scripts read only theirs):
    // nothing to get, and a claim takes the key over.
    let k = key("no fields we know");
    let _: () = redis::cmd("HSET")
        .arg(store.redis_key("ns", &k))
        .arg("junk")
        .arg(1)
        .query_async(&mut conn)
        .await
        .unwrap();
    assert_eq!(store.get("ns", &k).await.unwrap(), None);
    let begin = store.begin(request("ns", &k, &fp, LONG)).await;
    assert!(matches!(begin, Ok(Begin::Claimed)), "{begin:?}");
    assert!(store.remove("ns", &k).await.unwrap());

    // Garbage of another Redis type under a record's key.
    let k = key("string");
    let _: () = redis::cmd("SET")
        .arg(store.redis_key("ns", &k))
        .arg(b"\x00\xffgarbage".as_slice())
        .query_async(&mut conn)
        .await
        .unwrap();
    let begin = store.begin(request("ns", &k, &fp, LONG)).await;
    let Err(Error::CorruptRecord { message, .. }) = begin else {
        panic!("expected a corrupt record, got {begin:?}");
    };
    assert!(message.contains("string"), "{message}");
    assert!(matches!(
        store.get("ns", &k).await,
        Err(Error::CorruptRecord { .. })
    ));
    let token = Lease {
        namespace: Arc::from("ns"),
        key: k,
        token: LeaseToken(7),
    };
    for outcome in [
        store.complete(&token, b"x", LONG).await,
        store.renew(&token, LONG).await,
        store.release(&token).await,
    ] {
        assert!(
            matches!(outcome, Err(Error::LeaseLost { .. })),
            "{outcome:?}"
        );
    }

    // The admin API skips corrupt records when listing, and removes them.
    let listed = store.list(Some("ns"), 100).await.unwrap();
    assert!(listed.is_empty(), "{listed:?}");
    assert!(store.remove("ns", &k).await.unwrap());
    let begin = store.begin(request("ns", &k, &fp, LONG)).await.unwrap();
    assert!(matches!(begin, Begin::Claimed), "{begin:?}");
    cleanup(&url, store.prefix()).await;
}

/// *after* its `PEXPIREAT` instant: the scripts treat a record whose `exp` has come as absent.
#[tokio::test]
async fn a_record_is_gone_at_its_expiry_instant() {
    let Some(url) = redis_url("a_record_is_gone_at_its_expiry_instant") else {
        return;
    };
    let store = store(&url, "boundary").await;
    let (k, fp) = (key("boundary"), fingerprint("boundary"));
    let mut conn = raw(&url).await;
    let (secs, micros): (u64, u64) = redis::cmd("TIME").query_async(&mut conn).await.unwrap();
    let now_ms = secs * 1000 + micros / 1000;
    // A completed record whose `exp` is now, but which Redis itself keeps for another minute.
    let redis_key = store.redis_key("ns", &k);
    let () = redis::pipe()
        .cmd("HSET")
        .arg(&redis_key)
        .arg("state")
        .arg("completed")
        .arg("tok")
        .arg("1")
        .arg("fp")
        .arg(fp.as_bytes().as_slice())
        .arg("tool")
        .arg("send_message")
        .arg("created")
        .arg(now_ms - 1000)
        .arg("exp")
        .arg(now_ms)
        .arg("res")
        .arg("old")
        .ignore()
        .cmd("PEXPIREAT")
        .arg(&redis_key)
        .arg(now_ms + 60_000)
        .ignore()
        .query_async(&mut conn)
        .await
        .unwrap();
    assert_eq!(store.get("ns", &k).await.unwrap(), None, "gone at exp");
    let begun = store.begin(request("ns", &k, &fp, LONG)).await.unwrap();
    assert_eq!(begun, Begin::Claimed, "claimable at exp");
    cleanup(&url, store.prefix()).await;
}

//! `maxmemory-policy` at connect: anything but `noeviction` is refused unless allowed, and a
//! server that does not permit `CONFIG` is accepted with a warning. Each test runs its own
//! `redis-server`, so changing its configuration disturbs nobody.
#![cfg(feature = "redis")]

mod redis_common;

use idem_tools_runtime::Error;
use idem_tools_runtime::store::Charge;
use idem_tools_runtime::store::{Begin, BeginRequest, LeaseToken, RedisStore, Store};
use redis_common::{PrivateServer, fingerprint, key, raw, redis_url};

async fn set_policy(url: &str, policy: &str) {
    let mut conn = raw(url).await;
    let () = redis::cmd("CONFIG")
        .arg("SET")
        .arg("maxmemory-policy")
        .arg(policy)
        .query_async(&mut conn)
        .await
        .unwrap();
}

#[tokio::test]
async fn an_evicting_server_is_refused_unless_allowed() {
    let Some(_) = redis_url("an_evicting_server_is_refused_unless_allowed") else {
        return;
    };
    let server = PrivateServer::start(false);
    let url = server.url();
    RedisStore::connect(&url)
        .await
        .expect("noeviction (the default) is accepted");
    for policy in [
        "volatile-lru",
        "allkeys-lru",
        "volatile-ttl",
        "allkeys-random",
    ] {
        set_policy(&url, policy).await;
        let refused = RedisStore::connect(&url).await;
        let Err(Error::Config(message)) = &refused else {
            panic!("{policy}: expected Error::Config, got {refused:?}");
        };
        assert!(
            message.contains(policy)
                && message.contains("noeviction")
                && message.contains("allow_eviction"),
            "{message}"
        );
        let allowed = RedisStore::builder()
            .allow_eviction(true)
            .connect(&url)
            .await
            .expect("allowed explicitly");
        // And it works.
        let (k, fp) = (key(policy), fingerprint(policy));
        let begun = allowed
            .begin(BeginRequest {
                namespace: "ns",
                key: &k,
                tool: "t",
                turn: "t",
                fingerprint: &fp,
                lease: std::time::Duration::from_secs(5),
                ttl: std::time::Duration::from_secs(60),
                token: LeaseToken::generate(),
                charge: Charge::unlimited(),
            })
            .await
            .unwrap();
        assert_eq!(begun, Begin::Claimed);
    }
    set_policy(&url, "noeviction").await;
    RedisStore::connect(&url).await.expect("noeviction again");
}

#[tokio::test]
async fn a_server_that_forbids_config_is_accepted_with_a_warning() {
    let Some(_) = redis_url("a_server_that_forbids_config_is_accepted_with_a_warning") else {
        return;
    };
    let server = PrivateServer::start(false);
    let url = server.url();
    // Evicting, but the store's user may not read the configuration (as on managed Redis).
    set_policy(&url, "allkeys-lru").await;
    let mut conn = raw(&url).await;
    let () = redis::cmd("ACL")
        .arg("SETUSER")
        .arg("idem")
        .arg("on")
        .arg(">secret")
        .arg("~*")
        .arg("+@all")
        .arg("-config")
        .query_async(&mut conn)
        .await
        .unwrap();
    let port = url.rsplit(':').next().unwrap();
    let restricted = format!("redis://idem:secret@127.0.0.1:{port}");
    let store = RedisStore::connect(&restricted)
        .await
        .expect("CONFIG not permitted: a warning, not an error");
    let (k, fp) = (key("acl"), fingerprint("acl"));
    let begun = store
        .begin(BeginRequest {
            namespace: "ns",
            key: &k,
            tool: "t",
            turn: "t",
            fingerprint: &fp,
            lease: std::time::Duration::from_secs(5),
            ttl: std::time::Duration::from_secs(60),
            token: LeaseToken::generate(),
            charge: Charge::unlimited(),
        })
        .await
        .unwrap();
    assert_eq!(begun, Begin::Claimed);
    // The default user, who may read it, is still refused.
    assert!(matches!(
        RedisStore::connect(&url).await,
        Err(Error::Config(_))
    ));
}

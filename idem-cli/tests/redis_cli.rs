//! The `idem` binary against a real `redis-server`, with records prepared by the engine.
//!
//! Like the runtime's Redis tests, these run when `IDEM_REDIS_URL` names a server
//! (`scripts/redis-test-server.sh run cargo test ...` provides one); without it they print a
//! skip notice, unless `IDEM_REQUIRE_REDIS` is set (as in CI), when they fail.

mod common;

use std::sync::Arc;
use std::sync::atomic::{AtomicU32, Ordering};
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use common::{
    REFUND, SEND, assert_no_debug_text, call, check_turn_view, claim, every_state, idem, key_of,
    listed_keys, run_as_printed, short, turn,
};
use idem_tools_runtime::store::{RecordState, RedisStore, Store};
use idem_tools_runtime::{Error, ToolInfo};

/// Kept for two seconds: expires during the test.
static FLEETING: ToolInfo = ToolInfo::idempotent("fleeting").with_ttl(Duration::from_secs(2));

/// The shared test server's URL, or `None` (after a skip notice) when `IDEM_REDIS_URL` is unset.
fn redis_url(test: &str) -> Option<String> {
    match std::env::var("IDEM_REDIS_URL") {
        Ok(url) if !url.is_empty() => Some(url),
        _ => {
            assert!(
                std::env::var_os("IDEM_REQUIRE_REDIS").is_none(),
                "{test}: IDEM_REQUIRE_REDIS is set (as in CI) but IDEM_REDIS_URL is not"
            );
            eprintln!(
                "SKIPPED {test}: IDEM_REDIS_URL is not set; run scripts/redis-test-server.sh \
                 or export IDEM_REDIS_URL=redis://127.0.0.1:PORT to run the Redis tests"
            );
            None
        }
    }
}

/// A prefix no other test run uses, so tests can share one server.
fn unique_prefix(tag: &str) -> String {
    let nanos = SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map_or(0, |d| d.as_nanos());
    format!("idem-cli-test-{tag}-{}-{nanos}", std::process::id())
}

/// A store under `prefix`.
async fn open(url: &str, prefix: &str) -> Arc<dyn Store> {
    Arc::new(
        RedisStore::connect(url)
            .await
            .expect("the test server is reachable")
            .with_prefix(prefix),
    )
}

/// Deletes every record of `store` (a failed test leaves its unique prefix behind, harmless).
async fn cleanup(store: &dyn Store) {
    for r in store.list(None, usize::MAX).await.expect("list") {
        store.remove(&r.namespace, &r.key).await.expect("remove");
    }
    assert!(store.list(None, 1).await.expect("list").is_empty());
}

#[tokio::test]
async fn list_show_and_stats_read_the_records_under_the_prefix() {
    let Some(url) = redis_url("list_show_and_stats_read_the_records_under_the_prefix") else {
        return;
    };
    let prefix = unique_prefix("list");
    let store = open(&url, &prefix).await;
    let other = open(&url, &format!("{prefix}-other")).await;
    let runs = AtomicU32::new(0);
    let t = turn("turn-1", "");
    call(&store, &SEND, &t, "a@x", &runs).await.unwrap();
    tokio::time::sleep(Duration::from_millis(5)).await;
    call(&store, &REFUND, &turn("turn-1", "tenant-2"), "b@x", &runs)
        .await
        .unwrap();
    tokio::time::sleep(Duration::from_millis(5)).await;
    let (stuck, _) = claim(&*store, &SEND, &t, "c@x", Duration::from_secs(600)).await;
    // Another prefix's record is not this store's business.
    call(&other, &SEND, &t, "z@x", &runs).await.unwrap();
    let a = key_of(&SEND, &t, "a@x").0;
    let b = key_of(&REFUND, &turn("turn-1", "tenant-2"), "b@x").0;

    let base = ["--redis", url.as_str(), "--prefix", prefix.as_str()];
    let args = |extra: &[&'static str]| -> Vec<String> {
        base.iter()
            .copied()
            .chain(extra.iter().copied())
            .map(str::to_owned)
            .collect()
    };
    let run = |extra: &[&'static str]| {
        let args = args(extra);
        idem(&args.iter().map(String::as_str).collect::<Vec<_>>())
    };

    let listed = run(&["list"]).expect_code(0);
    assert_eq!(
        listed_keys(&listed.stdout),
        [
            stuck.short().to_hex(),
            b.short().to_hex(),
            a.short().to_hex()
        ]
    );
    let completed = run(&["list", "--state", "completed", "--tool", "send_email"]).expect_code(0);
    assert_eq!(listed_keys(&completed.stdout), [a.short().to_hex()]);

    let short = a.short().to_hex();
    let mut show_args = args(&["show"]);
    show_args.push(short.clone());
    let shown = idem(&show_args.iter().map(String::as_str).collect::<Vec<_>>()).expect_code(0);
    assert!(shown.stdout.contains(&a.to_hex()), "{}", shown.stdout);
    assert!(
        shown.stdout.contains("Ok({\n") && shown.stdout.contains("  \"sent_to\": \"a@x\""),
        "{}",
        shown.stdout
    );

    let json = run(&["--json", "stats"]).expect_code(0).json();
    assert_eq!(json["by_state"]["total"], 3);
    assert_eq!(json["by_state"]["in-progress"], 1);
    assert_eq!(json["by_tool"]["send_email"]["total"], 2);

    // Without --prefix the CLI reads the default prefix, where these records are not.
    let default = idem(&["--redis", &url, "show", &short]).expect_code(1);
    assert!(
        default.stderr.contains("no live record"),
        "{}",
        default.stderr
    );
    cleanup(&*store).await;
    cleanup(&*other).await;
}

#[tokio::test]
async fn remove_frees_completed_and_stuck_keys_for_the_engine() {
    let Some(url) = redis_url("remove_frees_completed_and_stuck_keys_for_the_engine") else {
        return;
    };
    let prefix = unique_prefix("remove");
    let store = open(&url, &prefix).await;
    let runs = AtomicU32::new(0);
    let t = turn("turn-1", "tenant");
    call(&store, &SEND, &t, "done@x", &runs).await.unwrap();
    let (stuck, _) = claim(&*store, &SEND, &t, "stuck@x", Duration::from_secs(600)).await;
    let blocked = call(&store, &SEND, &turn("turn-1", "tenant"), "stuck@x", &runs).await;
    assert!(
        matches!(blocked, Err(Error::InFlight { .. })),
        "{blocked:?}"
    );
    let done = key_of(&SEND, &t, "done@x").0;

    let base = [
        "--redis",
        url.as_str(),
        "--prefix",
        prefix.as_str(),
        "--namespace",
        "tenant",
    ];
    let remove = |key: &str, yes: bool| {
        let mut args: Vec<&str> = base.to_vec();
        args.extend(["remove", key]);
        if yes {
            args.push("--yes");
        }
        idem(&args)
    };
    let refused = remove(&done.short().to_hex(), false).expect_code(1);
    assert!(refused.stderr.contains("pass --yes"), "{}", refused.stderr);
    assert!(store.get("tenant", &done).await.unwrap().is_some());

    remove(&done.short().to_hex(), true).expect_code(0);
    // The stuck key: with what `show` suggests, as printed (store, prefix and namespace).
    let mut show: Vec<&str> = base.to_vec();
    let stuck_hex = stuck.to_hex();
    show.extend(["show", stuck_hex.as_str()]);
    let shown = idem(&show).expect_code(0);
    let suggested = shown
        .stdout
        .lines()
        .find(|line| line.trim_start().starts_with("idem "))
        .unwrap_or_else(|| panic!("a suggested command: {}", shown.stdout));
    run_as_printed(&format!("{suggested} --yes")).expect_code(0);
    let again = call(&store, &SEND, &turn("turn-1", "tenant"), "done@x", &runs)
        .await
        .unwrap();
    assert_eq!(again["run"], 2, "the completed tool ran again");
    call(&store, &SEND, &turn("turn-1", "tenant"), "stuck@x", &runs)
        .await
        .unwrap();
    assert_eq!(
        runs.load(Ordering::SeqCst),
        3,
        "the stuck key ran once it was released"
    );
    let record = store
        .get("tenant", &stuck)
        .await
        .unwrap()
        .expect("recorded");
    assert_eq!(record.state, RecordState::Completed);
    cleanup(&*store).await;
}

#[tokio::test]
async fn expired_records_vanish_and_purge_says_redis_expires_them() {
    let Some(url) = redis_url("expired_records_vanish_and_purge_says_redis_expires_them") else {
        return;
    };
    let prefix = unique_prefix("purge");
    let store = open(&url, &prefix).await;
    let runs = AtomicU32::new(0);
    let t = turn("turn-1", "");
    call(&store, &FLEETING, &t, "x", &runs).await.unwrap();
    let key = key_of(&FLEETING, &t, "x").0;
    let base = ["--redis", url.as_str(), "--prefix", prefix.as_str()];
    let with = |extra: &[&str]| {
        let mut args: Vec<&str> = base.to_vec();
        args.extend_from_slice(extra);
        idem(&args)
    };
    let short = key.short().to_hex();
    with(&["show", &short]).expect_code(0);
    tokio::time::sleep(Duration::from_millis(2300)).await;
    let gone = with(&["show", &short]).expect_code(1);
    assert!(gone.stderr.contains("no live record"), "{}", gone.stderr);
    assert_eq!(
        with(&["list"]).expect_code(0).stdout,
        "no live records match\n"
    );
    let purged = with(&["purge"]).expect_code(0);
    assert_eq!(
        purged.stdout,
        "purged 0 expired records (Redis deletes expired records by itself)\n"
    );
    cleanup(&*store).await;
}

#[test]
fn an_unreachable_server_is_a_connection_error() {
    // A port that was free a moment ago: nothing listens there.
    let port = std::net::TcpListener::bind("127.0.0.1:0")
        .and_then(|l| l.local_addr())
        .expect("a free port")
        .port();
    let url = format!("redis://user:secret@127.0.0.1:{port}");
    let run = idem(&["--redis", &url, "list"]).expect_code(2);
    assert!(
        run.stderr.contains("cannot reach the Redis server"),
        "{}",
        run.stderr
    );
    assert!(run.stderr.contains("user:***@127.0.0.1"), "{}", run.stderr);
    assert!(
        !run.stderr.contains("secret"),
        "the password leaked: {}",
        run.stderr
    );
    let bad = idem(&["--redis", "http://nope", "list"]).expect_code(2);
    assert!(bad.stderr.contains("redis://"), "{}", bad.stderr);
}

/// The seed URLs of the test cluster, or `None` (after a skip notice) without
/// `IDEM_REDIS_CLUSTER_URLS` (`scripts/redis-cluster.sh run …` provides one).
fn cluster_urls(test: &str) -> Option<Vec<String>> {
    match std::env::var("IDEM_REDIS_CLUSTER_URLS") {
        Ok(urls) if !urls.is_empty() => Some(urls.split(',').map(str::to_owned).collect()),
        _ => {
            assert!(
                std::env::var_os("IDEM_REQUIRE_REDIS").is_none(),
                "{test}: IDEM_REQUIRE_REDIS is set (as in CI) but IDEM_REDIS_CLUSTER_URLS is not"
            );
            eprintln!(
                "SKIPPED {test}: IDEM_REDIS_CLUSTER_URLS is not set; run scripts/redis-cluster.sh"
            );
            None
        }
    }
}

#[tokio::test]
async fn a_redis_cluster_is_listed_across_its_masters_and_repaired() {
    let Some(urls) = cluster_urls("a_redis_cluster_is_listed_across_its_masters_and_repaired")
    else {
        return;
    };
    let prefix = unique_prefix("cluster");
    let store: Arc<dyn Store> = Arc::new(
        RedisStore::connect_cluster(&urls)
            .await
            .expect("the test cluster is reachable")
            .with_prefix(&prefix),
    );
    let runs = AtomicU32::new(0);
    let t = turn("turn-cluster", "");
    // Enough keys that they land on every master.
    let targets: Vec<String> = (0..12).map(|i| format!("user{i}@x")).collect();
    for to in &targets {
        call(&store, &SEND, &t, to, &runs).await.unwrap();
    }
    let joined = urls.join(",");
    let args = |rest: &[&str]| -> Vec<String> {
        let mut all = vec![
            "--redis-cluster".to_owned(),
            joined.clone(),
            "--prefix".to_owned(),
            prefix.clone(),
        ];
        all.extend(rest.iter().map(|s| (*s).to_owned()));
        all
    };
    let run = |rest: &[&str]| {
        let all = args(rest);
        idem(&all.iter().map(String::as_str).collect::<Vec<_>>())
    };
    let listed = run(&["list"]).expect_code(0);
    assert_eq!(
        listed_keys(&listed.stdout).len(),
        targets.len(),
        "every master's records are listed: {}",
        listed.stdout
    );
    let (key, _) = key_of(&SEND, &t, "user3@x");
    let shown = run(&["show", &key.short().to_hex()]).expect_code(0);
    assert!(
        shown.stdout.contains("\"sent_to\": \"user3@x\""),
        "{}",
        shown.stdout
    );
    run(&["remove", &key.to_hex(), "--yes"]).expect_code(0);
    let again = call(&store, &SEND, &t, "user3@x", &runs).await.unwrap();
    assert_eq!(
        again["run"], 13,
        "the tool ran again after the record was removed"
    );
    cleanup(&*store).await;
}

#[tokio::test]
async fn every_state_is_named_and_keys_are_found_in_any_namespace() {
    let Some(url) = redis_url("every_state_is_named_and_keys_are_found_in_any_namespace") else {
        return;
    };
    let prefix = unique_prefix("states");
    let store = open(&url, &prefix).await;
    let p = every_state(&store).await;
    let tenant = turn("turn-1", "tenant-2");
    call(&store, &SEND, &tenant, "t@x", &p.runs).await.unwrap();
    let in_tenant = key_of(&SEND, &tenant, "t@x").0;
    let run = |extra: &[&str]| {
        let mut args = vec!["--redis", url.as_str(), "--prefix", prefix.as_str()];
        args.extend_from_slice(extra);
        let run = idem(&args);
        assert_no_debug_text(&run);
        run
    };

    for (state, key) in [
        ("in-progress", p.in_progress),
        ("completed", p.completed),
        ("failed", p.failed),
        ("interrupted", p.interrupted),
        ("not-replayable", p.unrecorded),
    ] {
        let listed = run(&["list", "--state", state, "--namespace", ""]).expect_code(0);
        assert_eq!(listed_keys(&listed.stdout), [short(&key)], "{state}");
        let shown = run(&["--json", "show", &short(&key)]).expect_code(0).json();
        assert_eq!(shown["state"], state);
    }
    let shown = run(&["--json", "show", &short(&p.interrupted)])
        .expect_code(0)
        .json();
    assert_eq!(shown["marker"]["kind"], "interrupted");
    assert_eq!(shown["attempts"], 0);
    let stats = run(&["--json", "stats"]).expect_code(0).json();
    assert_eq!(stats["by_state"]["completed"], 2, "{stats}");
    assert_eq!(stats["by_state"]["interrupted"], 1, "{stats}");

    // A key of another namespace, found without --namespace, and removed there.
    let shown = run(&["show", &short(&in_tenant)]).expect_code(0);
    assert!(
        shown.stdout.contains("namespace    tenant-2\n"),
        "{}",
        shown.stdout
    );
    run(&["remove", &short(&in_tenant), "--yes"]).expect_code(0);
    assert!(store.get("tenant-2", &in_tenant).await.unwrap().is_none());

    // Removing the interrupted key lets the next call run the tool again.
    let removed = run(&["remove", &short(&p.interrupted), "--yes"]).expect_code(0);
    assert!(
        removed
            .stdout
            .contains("check first whether the interrupted call took effect"),
        "{}",
        removed.stdout
    );
    let before = p.runs.load(Ordering::SeqCst);
    call(&store, &SEND, &turn("turn-1", ""), "cut@x", &p.runs)
        .await
        .unwrap();
    assert_eq!(p.runs.load(Ordering::SeqCst), before + 1);
    cleanup(&*store).await;
}

/// `idem turn` on Redis, and on a Redis Cluster when one is set: the turn's records through its
/// index, in claim order, with their outcomes.
#[tokio::test]
async fn turn_shows_a_turns_records_on_redis_and_a_cluster() {
    let test = "turn_shows_a_turns_records_on_redis_and_a_cluster";
    let mut stores: Vec<(Arc<dyn Store>, Vec<String>)> = Vec::new();
    if let Some(url) = redis_url(test) {
        let prefix = unique_prefix("turn");
        let args = vec![
            "--redis".to_owned(),
            url.clone(),
            "--prefix".to_owned(),
            prefix.clone(),
        ];
        stores.push((open(&url, &prefix).await, args));
    }
    if let Some(urls) = cluster_urls(test) {
        let prefix = unique_prefix("turn-cluster");
        let store = RedisStore::connect_cluster(&urls)
            .await
            .expect("the test cluster is reachable")
            .with_prefix(&prefix);
        let args = vec![
            "--redis-cluster".to_owned(),
            urls.join(","),
            "--prefix".to_owned(),
            prefix,
        ];
        stores.push((Arc::new(store), args));
    }
    for (store, args) in stores {
        let p = every_state(&store).await;
        let runs = AtomicU32::new(0);
        let other_turn = turn("turn-2", "");
        call(&store, &SEND, &other_turn, "done@x", &runs)
            .await
            .expect("another turn's call");
        let other = key_of(&SEND, &other_turn, "done@x").0;
        let args: Vec<&str> = args.iter().map(String::as_str).collect();
        check_turn_view(&args, &p, &other);
        cleanup(&*store).await;
    }
}

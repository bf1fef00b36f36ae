//! The child processes: this test binary re-executed, running only [`child`], with
//! `IDEM_PG_CHILD` saying what to do.

use std::io::{BufRead, BufReader};
use std::process::{Child, Command, Stdio};
use std::sync::mpsc;
use std::time::Duration;

use rand::Rng;
use rand::seq::SliceRandom;

use crate::tools::{RACE_KEYS, crash_in_body, open, pay, plain};

const CHILD_ENV: &str = "IDEM_PG_CHILD";

/// A child process of this test binary.
pub(crate) fn spawn_child(mode: &str, url: &str, schema: &str, extra: &[(&str, String)]) -> Child {
    let mut command = Command::new(std::env::current_exe().expect("the test binary"));
    command
        .args([
            "--exact",
            "children::child",
            "--nocapture",
            "--test-threads=1",
        ])
        .env(CHILD_ENV, mode)
        .env("IDEM_PG_URL", url)
        .env("IDEM_PG_SCHEMA", schema)
        .stdout(Stdio::piped())
        .stderr(Stdio::null());
    for (name, value) in extra {
        command.env(name, value);
    }
    command.spawn().expect("spawn a child")
}

/// What children say, line by line, tagged with the child's number.
pub(crate) fn listen(child: &mut Child, n: usize, lines: mpsc::Sender<(usize, String)>) {
    let stdout = child.stdout.take().expect("piped");
    std::thread::spawn(move || {
        for line in BufReader::new(stdout).lines().map_while(Result::ok) {
            if lines.send((n, line)).is_err() {
                return;
            }
        }
    });
}

/// The child: does what `IDEM_PG_CHILD` says (nothing without it).
#[test]
fn child() {
    let Ok(mode) = std::env::var(CHILD_ENV) else {
        return;
    };
    let var = |name: &str| std::env::var(name).expect(name);
    let (url, schema) = (var("IDEM_PG_URL"), var("IDEM_PG_SCHEMA"));
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .expect("a runtime");
    // The test harness has printed `test child ... ` without a newline: end that line first.
    println!();
    runtime.block_on(async move {
        let say = |line: String| println!("{line}");
        match mode.as_str() {
            // Calls random keys forever (until killed), saying where it is and what it got.
            "worker" => {
                let keys: usize = var("IDEM_PG_KEYS").parse().expect("a number");
                let store = loop {
                    match open(&url, &schema, "idem-fault-worker").await {
                        Ok(store) => break store,
                        Err(_) => tokio::time::sleep(Duration::from_millis(50)).await,
                    }
                };
                loop {
                    let key = rand::rng().random_range(0..keys);
                    let memo = format!("key-{key}");
                    say(format!("call {memo}"));
                    match pay(&store, &memo, 5, |phase| say(format!("phase {phase}"))).await {
                        Ok(id) => say(format!("ack {memo} {id}")),
                        Err(error) => {
                            say(format!("err {memo} {error:?}").replace('\n', " "));
                            tokio::time::sleep(Duration::from_millis(20)).await;
                        }
                    }
                }
            }
            // One call of the crash loop's key, once told to go.
            "crash" => {
                let store = open(&url, &schema, "idem-crash-loop").await.expect("open");
                say("ready".to_owned());
                match pay(&store, "crash", 10, |phase| say(format!("phase {phase}"))).await {
                    Ok(id) => say(format!("ack crash {id}")),
                    Err(error) => say(format!("err crash {error:?}").replace('\n', " ")),
                }
                // Wait to be killed: every run of the loop ends with a SIGKILL.
                tokio::time::sleep(Duration::from_secs(60)).await;
            }
            // One call of the crash-budget key: killed in its body, or refused.
            "crash-budget" => {
                let store = open(&url, &schema, "idem-crash-budget")
                    .await
                    .expect("open");
                match crash_in_body(&store).await {
                    Ok(id) => say(format!("ack crash-budget {id}")),
                    Err(error) => say(format!("err crash-budget {error:?}").replace('\n', " ")),
                }
                tokio::time::sleep(Duration::from_secs(60)).await;
            }
            // Plain (not transactional) calls of every key of the race, in a random order.
            "store-race" => {
                let store = open(&url, &schema, "idem-store-race").await.expect("open");
                let mut keys: Vec<usize> = (0..RACE_KEYS).collect();
                keys.shuffle(&mut rand::rng());
                for key in keys {
                    let memo = format!("race-{key}");
                    match plain(&store, &memo, Duration::from_millis(2)).await {
                        Ok(id) => say(format!("ack {memo} {id}")),
                        Err(error) => say(format!("err {memo} {error:?}").replace('\n', " ")),
                    }
                }
            }
            // A plain call that never finishes: killed mid-call.
            "store-hang" => {
                let store = open(&url, &schema, "idem-store-hang").await.expect("open");
                let _ = plain(&store, "hang", Duration::from_secs(60)).await;
            }
            other => panic!("unknown child mode {other}"),
        }
    });
}

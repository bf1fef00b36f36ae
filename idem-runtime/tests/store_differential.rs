//! The same random sequences of store operations on `MemoryStore` and `SqliteStore`, one
//! `ManualClock` for both: every answer must be the same (the stores share one contract).
#![cfg(feature = "sqlite")]

mod sqlite_common;

use std::sync::Arc;
use std::time::Duration;

use idem_tools_runtime::clock::ManualClock;
use idem_tools_runtime::key::{Fingerprint, Key};
use idem_tools_runtime::store::budget::TurnIdentity;
use idem_tools_runtime::store::{
    Begin, BeginRequest, Charge, Lease, LeaseToken, MemoryStore, Record, SqliteStore, Store,
};
use rand::rngs::StdRng;
use rand::{Rng, SeedableRng};
use sqlite_common::TempDir;

const TOOLS: [&str; 2] = ["a", "b"];
const TURNS: [&str; 2] = ["t1", "t2"];
const MS: [u64; 10] = [0, 1, 9, 10, 11, 19, 20, 21, 50, 1000];

fn ns_of(k: u8) -> &'static str {
    if k < 2 { "ns0" } else { "ns1" }
}

fn pick<T: Copy>(rng: &mut StdRng, items: &[T]) -> T {
    items[rng.random_range(0..items.len())]
}

fn ms(n: u64) -> Duration {
    Duration::from_millis(n)
}

fn begun(answer: &idem_tools_runtime::Result<Begin>) -> String {
    match answer {
        Ok(Begin::Claimed) => "claimed".into(),
        Ok(Begin::Completed(first)) => {
            format!("completed {:?} {:?}", first.fingerprint, &first.result[..])
        }
        Ok(Begin::InFlight { fingerprint }) => format!("in flight {fingerprint:?}"),
        Ok(Begin::Refused(e)) => format!("refused {e:?}"),
        Err(e) => format!("error {e}"),
    }
}

fn done(answer: &idem_tools_runtime::Result<()>) -> String {
    match answer {
        Ok(()) => "ok".into(),
        Err(e) => format!("error {e}"),
    }
}

fn record(r: &Record) -> String {
    format!(
        "{} {:?} {} {} {:?} {:?} {:?} att={} created={} exp={}",
        r.namespace,
        r.key,
        r.tool,
        r.turn,
        r.state,
        r.fingerprint,
        r.result,
        r.attempts,
        r.created_at_ms,
        r.expires_at_ms
    )
}

fn records(answer: &idem_tools_runtime::Result<Vec<Record>>, sort: bool) -> String {
    match answer {
        Ok(list) => {
            let mut lines: Vec<String> = list.iter().map(record).collect();
            if sort {
                lines.sort();
            }
            lines.join("; ")
        }
        Err(e) => format!("error {e}"),
    }
}

async fn run(seed: u64, steps: usize, two_handles: bool) -> Result<(), String> {
    let mut rng = StdRng::seed_from_u64(seed);
    let clock = ManualClock::new(1_000_000);
    let dir = TempDir::new("diff");
    let sqlite = SqliteStore::open(dir.path("d.db"))
        .map_err(|e| e.to_string())?
        .with_clock(Arc::new(clock.clone()));
    // A second handle on the same file, as another process would have: each operation goes
    // to one of the two at random.
    let other = SqliteStore::open(dir.path("d.db"))
        .map_err(|e| e.to_string())?
        .with_clock(Arc::new(clock.clone()));
    let memory = MemoryStore::with_clock(Arc::new(clock.clone()));
    let mut stores: [&dyn Store; 2] = [&memory, &sqlite];
    let mut leases: Vec<Lease> = Vec::new();
    let mut shown: Vec<Record> = Vec::new();
    let mut log = Vec::new();
    for step in 0..steps {
        let op = rng.random_range(0..100);
        stores[1] = if two_handles && rng.random_bool(0.5) {
            &other
        } else {
            &sqlite
        };
        let (what, answers): (String, Vec<String>) = match op {
            0..=39 => {
                let k = rng.random_range(0..4u8);
                let key = Key::from_bytes([k; 32]);
                let fp = Fingerprint::from_bytes([rng.random_range(0..2u8); 32]);
                let turn = pick(&mut rng, &TURNS);
                let tool = pick(&mut rng, &TOOLS);
                let lease = ms(pick(&mut rng, &[10, 20, 50, 1000]));
                let charge = Charge {
                    turn: TurnIdentity::new(ns_of(k), turn),
                    max_attempts: rng.random_range(1..4),
                    max_calls: pick(&mut rng, &[None, Some(1), Some(2), Some(3)]),
                    max_tool_actions: pick(&mut rng, &[None, Some(1), Some(2)]),
                    window: ms(pick(&mut rng, &[10, 20, 100, 10_000])),
                };
                let token = LeaseToken::generate();
                let req = BeginRequest {
                    namespace: ns_of(k),
                    key: &key,
                    tool,
                    turn,
                    fingerprint: &fp,
                    lease,
                    ttl: ms(60_000),
                    token,
                    charge,
                };
                let mut answers = Vec::new();
                for store in stores {
                    answers.push(begun(&store.begin(req).await));
                }
                if answers[0] == "claimed" || answers[1] == "claimed" {
                    leases.push(req.lease());
                }
                (
                    format!("begin k{k} {turn} {tool} {lease:?} {charge:?}"),
                    answers,
                )
            }
            40..=54 if !leases.is_empty() => {
                let lease = leases[rng.random_range(0..leases.len())].clone();
                let ttl = ms(pick(&mut rng, &[0, 10, 20, 50, 60_000]));
                let result = vec![rng.random_range(0..255u8); 3];
                let mut answers = Vec::new();
                for store in stores {
                    answers.push(done(&store.complete(&lease, &result, ttl).await));
                }
                (format!("complete {:?} ttl {ttl:?}", lease.key), answers)
            }
            55..=62 if !leases.is_empty() => {
                let lease = leases[rng.random_range(0..leases.len())].clone();
                let mut answers = Vec::new();
                for store in stores {
                    answers.push(done(&store.release(&lease).await));
                }
                (format!("release {:?}", lease.key), answers)
            }
            63..=69 if !leases.is_empty() => {
                let lease = leases[rng.random_range(0..leases.len())].clone();
                let by = ms(pick(&mut rng, &[10, 20, 50, 1000]));
                let mut answers = Vec::new();
                for store in stores {
                    answers.push(done(&store.renew(&lease, by).await));
                }
                (format!("renew {:?} {by:?}", lease.key), answers)
            }
            70..=74 => {
                let k = rng.random_range(0..4u8);
                let key = Key::from_bytes([k; 32]);
                let mut answers = Vec::new();
                let mut got = Vec::new();
                for store in stores {
                    let answer = store.get(ns_of(k), &key).await;
                    answers.push(match &answer {
                        Ok(Some(r)) => record(r),
                        Ok(None) => "none".into(),
                        Err(e) => format!("error {e}"),
                    });
                    got.push(answer);
                }
                if let Ok(Some(r)) = &got[0] {
                    shown.push(r.clone());
                }
                (format!("get k{k}"), answers)
            }
            75..=77 if !shown.is_empty() => {
                let r = shown[rng.random_range(0..shown.len())].clone();
                let mut answers = Vec::new();
                for store in stores {
                    answers.push(format!("{:?}", store.remove_shown(&r).await));
                }
                (format!("remove_shown {:?}", r.key), answers)
            }
            78..=79 => {
                let k = rng.random_range(0..4u8);
                let key = Key::from_bytes([k; 32]);
                let mut answers = Vec::new();
                for store in stores {
                    answers.push(format!("{:?}", store.remove(ns_of(k), &key).await));
                }
                (format!("remove k{k}"), answers)
            }
            80..=83 => {
                let ns = pick(&mut rng, &["ns0", "ns1"]);
                let turn = pick(&mut rng, &TURNS);
                let mut answers = Vec::new();
                for store in stores {
                    answers.push(records(&store.list_turn(ns, turn, 100).await, false));
                }
                (format!("list_turn {ns} {turn}"), answers)
            }
            84..=86 => {
                let mut answers = Vec::new();
                for store in stores {
                    answers.push(records(&store.list(None, 100).await, true));
                }
                ("list".to_owned(), answers)
            }
            _ => {
                let by = pick(&mut rng, &MS);
                clock.advance(ms(by));
                continue;
            }
        };
        log.push(format!("{step}: {what} -> {:?}", answers[0]));
        if answers[0] != answers[1] {
            let tail: Vec<&String> = log.iter().rev().take(25).rev().collect();
            return Err(format!(
                "seed {seed} step {step}: {what}\n  memory: {}\n  sqlite: {}\nlast steps:\n{}",
                answers[0],
                answers[1],
                tail.iter()
                    .map(|l| l.as_str())
                    .collect::<Vec<_>>()
                    .join("\n")
            ));
        }
    }
    Ok(())
}

#[tokio::test]
async fn memory_and_sqlite_answer_every_sequence_alike() {
    let seeds: u64 = std::env::var("IDEM_DIFF_SEEDS")
        .ok()
        .and_then(|s| s.parse().ok())
        .unwrap_or(200);
    let mut failures = Vec::new();
    for seed in 0..seeds {
        if let Err(report) = run(seed, 120, seed % 2 == 1).await {
            failures.push(report);
            if failures.len() >= 3 {
                break;
            }
        }
    }
    assert!(failures.is_empty(), "{}", failures.join("\n\n"));
}

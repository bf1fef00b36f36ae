//! What the logs say after the chaos: duplicate charges per logical action, model requests for
//! steps already recorded, turns unfinished or finished with another answer.

use std::collections::{BTreeMap, BTreeSet, HashSet};
use std::path::Path;
use std::sync::Arc;

use idem_tools_runtime::conversation::MODEL_STEP;
use idem_tools_runtime::key::ArgsDigest;
use idem_tools_runtime::store::{RecordState, Store};
use idem_tools_runtime::{Key, Turn};

use crate::agent::{LABEL, Logs, accounts, append, turn_id};

fn lines(file: &Path) -> Vec<String> {
    std::fs::read_to_string(file)
        .map(|text| text.lines().map(str::to_owned).collect())
        .unwrap_or_default()
}

/// The key of step `step` of the conversation of turn `n`, as [`Conversation`] makes it
/// (checked at the end: every answered step is found under it).
///
/// [`Conversation`]: idem_tools_runtime::Conversation
fn step_key(n: u32, step: u32) -> (String, Key) {
    let turn = Turn::new(turn_id(n));
    let mut args = ArgsDigest::new(MODEL_STEP.name);
    args.arg("conversation", LABEL).expect("encodes");
    args.arg("step", &step).expect("encodes");
    let (key, _) = args.finish(
        turn.namespace(),
        turn.id(),
        MODEL_STEP.name,
        MODEL_STEP.version,
    );
    (turn.namespace().to_owned(), key)
}

/// Whether the store has step `step` of turn `n` recorded.
async fn is_recorded(store: &Arc<dyn Store>, n: u32, step: u32) -> bool {
    let (namespace, key) = step_key(n, step);
    let record = store
        .get(&namespace, &key)
        .await
        .expect("the store answers");
    record.is_some_and(|r| r.state == RecordState::Completed)
}

/// Called while no child runs: every step requested so far and not yet known to be recorded
/// is looked up in the store, and those found are logged as `recorded`, so that a request
/// the next run sends for one of them counts as a request for a recorded step (a run killed
/// after its step was recorded and before it logged `answered`).
pub async fn probe(store: &Arc<dyn Store>, logs: &Logs) {
    let mut known = HashSet::new();
    let mut asked = BTreeSet::new();
    for line in lines(&logs.requests) {
        let words: Vec<&str> = line.split(' ').collect();
        if let [what, n, _, step, _] = words.as_slice() {
            let id = (
                n.parse::<u32>().expect("n"),
                step.parse::<u32>().expect("step"),
            );
            match *what {
                "request" => {
                    asked.insert(id);
                }
                _ => {
                    known.insert(id);
                }
            }
        }
    }
    for (n, step) in asked {
        if !known.contains(&(n, step)) && is_recorded(store, n, step).await {
            append(
                &logs.requests,
                &format!("recorded {n} {LABEL} {step} parent"),
            );
        }
    }
}

/// The figures of one chaos run.
#[derive(Debug, Default)]
pub struct Found {
    /// Requests the model received.
    pub requests: usize,
    /// Requests for a step a run had asked before without getting it recorded (a kill
    /// landed while it was asked).
    pub re_requests: usize,
    /// Requests for a step whose response was recorded (or answered) before it was sent.
    pub requests_for_recorded: usize,
    /// Steps answered (or recorded) whose record the store does not have under the key
    /// `Conversation` gives them: a probe that could not see a recorded step.
    pub probe_misses: usize,
    /// Ledger lines: the tool's body ran.
    pub executions: usize,
    /// Distinct keys charged: what the provider, deduplicating by key, charged.
    pub charges: usize,
    /// Logical actions charged (turn, account).
    pub actions: usize,
    /// Charges past the first of a logical action (under another key).
    pub duplicates: usize,
    /// Logical actions of a finished turn never charged.
    pub missing: usize,
    /// Final answers logged.
    pub finals: usize,
    /// Turns with no final answer.
    pub unfinished: usize,
    /// Final answers that are not the one a run without kills gives.
    pub wrong_finals: usize,
    pub examples: Vec<String>,
}

/// Reads the logs of turns `0..turns`; `reference[n]` is turn `n`'s answer in a run without
/// kills.
pub async fn check(store: &Arc<dyn Store>, logs: &Logs, reference: &[String]) -> Found {
    let mut found = Found::default();
    let mut recorded: HashSet<(u32, u32)> = HashSet::new();
    let mut asked: HashSet<(u32, u32)> = HashSet::new();
    for line in lines(&logs.requests) {
        let words: Vec<&str> = line.split(' ').collect();
        let [what, n, _, step, _] = words.as_slice() else {
            continue;
        };
        let id = (
            n.parse::<u32>().expect("n"),
            step.parse::<u32>().expect("step"),
        );
        if *what == "request" {
            found.requests += 1;
            if recorded.contains(&id) {
                found.requests_for_recorded += 1;
                if found.examples.len() < 5 {
                    found
                        .examples
                        .push(format!("request for a recorded step: {line}"));
                }
            } else if !asked.insert(id) {
                found.re_requests += 1;
            }
        } else {
            recorded.insert(id);
        }
    }
    for &(n, step) in &recorded {
        if !is_recorded(store, n, step).await {
            found.probe_misses += 1;
        }
    }

    // The ledger: `charge KEY N ACCOUNT CENTS PID MEMO…`.
    let mut keys: BTreeMap<(u32, String), BTreeSet<String>> = BTreeMap::new();
    for line in lines(&logs.ledger) {
        let words: Vec<&str> = line.splitn(7, ' ').collect();
        let [_, key, n, account, ..] = words.as_slice() else {
            panic!("a ledger line: {line}");
        };
        found.executions += 1;
        let action = (n.parse::<u32>().expect("n"), (*account).to_owned());
        keys.entry(action).or_default().insert((*key).to_owned());
    }
    found.actions = keys.len();
    found.charges = keys.values().map(BTreeSet::len).sum();
    for ((n, account), charged) in &keys {
        if charged.len() > 1 {
            found.duplicates += charged.len() - 1;
            if found.examples.len() < 10 {
                let memos: Vec<String> = lines(&logs.ledger)
                    .into_iter()
                    .filter(|l| l.split(' ').nth(2) == Some(&n.to_string()))
                    .filter(|l| l.split(' ').nth(3) == Some(account.as_str()))
                    .collect();
                found.examples.push(format!(
                    "turn {n} charged {account} {} times: {memos:?}",
                    charged.len()
                ));
            }
        }
    }

    // The final answers: `final N PID ANSWER…`.
    let mut finished: BTreeSet<u32> = BTreeSet::new();
    for line in lines(&logs.finals) {
        let words: Vec<&str> = line.splitn(4, ' ').collect();
        let [_, n, _, answer] = words.as_slice() else {
            panic!("a final line: {line}");
        };
        let n: u32 = n.parse().expect("n");
        found.finals += 1;
        finished.insert(n);
        if reference.get(n as usize).map(String::as_str) != Some(*answer) {
            found.wrong_finals += 1;
            if found.examples.len() < 15 {
                found.examples.push(format!(
                    "turn {n} answered {answer:?}, not {:?}",
                    reference.get(n as usize)
                ));
            }
        }
    }
    for n in 0..u32::try_from(reference.len()).expect("few turns") {
        if !finished.contains(&n) {
            found.unfinished += 1;
            continue;
        }
        for account in accounts(n) {
            if !keys.contains_key(&(n, account)) {
                found.missing += 1;
            }
        }
    }
    found
}

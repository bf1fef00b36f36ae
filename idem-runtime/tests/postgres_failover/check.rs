//! The check after the failovers: every key called once more on a fresh store, and the ledgers.

use std::collections::{BTreeMap, BTreeSet};
use std::time::{Duration, Instant};

use idem_tools_runtime::store::PostgresStore;

use crate::load::{Answer, Key, Shared, Tool, call};

/// What the check found.
#[derive(Debug, Default)]
pub struct Found {
    /// Keys called.
    pub keys: usize,
    /// Acknowledged results the final call does not replay.
    pub lost: usize,
    /// Of those, results of the transactional tool.
    pub lost_transactional: usize,
    /// Ledger rows of a transactional key beyond its first.
    pub duplicates: usize,
    /// Plain side effects performed after the key's result was acknowledged.
    pub second_runs: usize,
    /// Final calls told the key is still in flight: a claim nobody holds.
    pub orphans: usize,
    /// Final calls that found the key interrupted.
    pub interrupted: usize,
    /// Final calls that failed otherwise (the store must answer by then).
    pub failed: Vec<(Key, Answer)>,
}

/// Calls every key of the run once more on `store` (8 at a time) and checks what it answers
/// against what callers were told, and the ledgers.
pub async fn check(store: &PostgresStore, ledger: &str, log: &Shared) -> Found {
    let (keys, acks) = {
        let log = log.lock().expect("the log");
        let keys: BTreeSet<Key> = log.calls.iter().map(|c| c.key.clone()).collect();
        let mut acks: BTreeMap<Key, (BTreeSet<i64>, Instant)> = BTreeMap::new();
        for c in &log.calls {
            if let Answer::Ok(id) = c.answer {
                let entry = acks
                    .entry(c.key.clone())
                    .or_insert((BTreeSet::new(), c.ended));
                entry.0.insert(id);
                entry.1 = entry.1.min(c.ended);
            }
        }
        (keys, acks)
    };
    let mut found = Found {
        keys: keys.len(),
        ..Found::default()
    };
    let keys: Vec<Key> = keys.into_iter().collect();
    for batch in keys.chunks(8) {
        let finals = batch.iter().map(|key| {
            let (store, key, ledger, log) =
                (store.clone(), key.clone(), ledger.to_owned(), log.clone());
            tokio::spawn(async move {
                let answer = call(&store, 2, &key, &ledger, &log).await;
                (key, answer)
            })
        });
        for handle in finals.collect::<Vec<_>>() {
            let (key, answer) = handle.await.expect("a final call");
            match answer {
                Answer::Ok(id) => {
                    let acked = acks
                        .get(&key)
                        .map(|(ids, _)| ids.clone())
                        .unwrap_or_default();
                    let lost = acked.iter().filter(|a| **a != id).count();
                    found.lost += lost;
                    if key.tool == Tool::Transactional {
                        found.lost_transactional += lost;
                    }
                }
                Answer::InFlight => found.orphans += 1,
                Answer::Interrupted => found.interrupted += 1,
                other => found.failed.push((key, other)),
            }
        }
    }
    found.second_runs = {
        let log = log.lock().expect("the log");
        let after_ack = |(key, effects): (&Key, &Vec<Instant>)| {
            acks.get(key).map_or(0, |(_, first_ack)| {
                effects.iter().filter(|at| *at > first_ack).count()
            })
        };
        log.effects.iter().map(after_ack).sum()
    };
    let mut conn = store.pool().acquire().await.expect("a connection");
    let extra: i64 = sqlx::query_scalar(&format!(
        "SELECT coalesce(sum(n - 1), 0)::bigint FROM (SELECT count(*) AS n FROM {ledger} \
         GROUP BY memo) AS rows_per_key"
    ))
    .fetch_one(&mut *conn)
    .await
    .expect("count the ledger's rows");
    found.duplicates = usize::try_from(extra).unwrap_or(usize::MAX);
    found
}

/// For each switch, how long after it each store (0, 1) first answered a call `Ok`.
pub fn recoveries(log: &Shared, switches: &[Instant]) -> [Vec<Duration>; 2] {
    let log = log.lock().expect("the log");
    let mut out = [Vec::new(), Vec::new()];
    for switch in switches {
        for (store, times) in out.iter_mut().enumerate() {
            let first = log
                .calls
                .iter()
                .filter(|c| {
                    c.store == store && c.ended > *switch && matches!(c.answer, Answer::Ok(_))
                })
                .map(|c| c.ended - *switch)
                .min();
            if let Some(first) = first {
                times.push(first);
            }
        }
    }
    out
}

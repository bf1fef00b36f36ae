//! The check after the chaos: the ledger and idem's records, key by key.

use std::collections::{BTreeMap, BTreeSet};

use idem_tools_runtime::Error;

use crate::postgres_common::Failure;
use idem_tools_runtime::store::PostgresStore;

use crate::tools::{open, pay};

/// What the checks found.
#[derive(Default, Debug)]
pub(crate) struct Ledger {
    pub(crate) duplicates: usize,
    pub(crate) lost: usize,
    pub(crate) interrupted: usize,
    pub(crate) orphans: usize,
    pub(crate) rows: i64,
}

/// Checks the ledger and idem's records after the chaos: every key called once more in a
/// clean process state must answer (replay or run), every acknowledged id must be the one
/// replayed, and no `(memo, part)` may have two rows.
pub(crate) async fn check(
    url: &str,
    schema: &str,
    memos: &BTreeSet<String>,
    acks: &BTreeMap<String, BTreeSet<i64>>,
) -> Ledger {
    let store = open(url, schema, "idem-fault-check").await.expect("open");
    let mut found = Ledger::default();
    // Every key with a row, whether or not its call was heard.
    let written: Vec<String> = sqlx::query_scalar("SELECT DISTINCT memo FROM ledger")
        .fetch_all(store.pool())
        .await
        .expect("read the ledger");
    let memos: BTreeSet<String> = memos.iter().cloned().chain(written).collect();
    let memos = &memos;
    // Nothing may be left claimed: a transactional claim never commits in progress.
    let claimed = live_records(&store, "in_progress").await;
    found.orphans += usize::try_from(claimed).unwrap_or(usize::MAX);
    for memo in memos {
        match pay(&store, memo, 0, |_| {}).await {
            Ok(id) => {
                let acked = acks.get(memo).cloned().unwrap_or_default();
                // Every id a caller was given is the one the record replays.
                found.lost += acked.iter().filter(|a| **a != id).count();
            }
            Err(Failure::Idem(Error::Interrupted { .. })) => found.interrupted += 1,
            Err(other) => panic!("the final call of {memo} failed: {other:?}"),
        }
    }
    let duplicated: i64 = sqlx::query_scalar(
        "SELECT count(*) FROM (SELECT memo, part FROM ledger GROUP BY memo, part \
         HAVING count(*) > 1) AS d",
    )
    .fetch_one(store.pool())
    .await
    .expect("count duplicates");
    found.duplicates = usize::try_from(duplicated).unwrap_or(usize::MAX);
    found.rows = sqlx::query_scalar("SELECT count(*) FROM ledger")
        .fetch_one(store.pool())
        .await
        .expect("count rows");
    // Every key ran exactly once: its two rows, and a completed record.
    let complete = live_records(&store, "completed").await;
    assert_eq!(found.rows, 2 * memos.len() as i64, "two rows per key");
    assert_eq!(complete, memos.len() as i64, "one record per key");
    found
}

/// How many of idem's records in `state` have not expired.
pub(crate) async fn live_records(store: &PostgresStore, state: &str) -> i64 {
    sqlx::query_scalar(
        "SELECT count(*) FROM idem_records WHERE state = $1 AND expires_at_ms > idem_now_ms()",
    )
    .bind(state)
    .fetch_one(store.pool())
    .await
    .expect("count idem's records")
}

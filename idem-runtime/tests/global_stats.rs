//! The process-wide counters see every outcome, exactly once. Alone in its test binary: no
//! other test's calls move the counters meanwhile, so the deltas are exact.

use std::sync::Arc;

use idem_tools_runtime::key::ArgsDigest;
use idem_tools_runtime::store::MemoryStore;
use idem_tools_runtime::{Call, Codec, Error, Outcome, Stats, ToolInfo, Turn, execute, stats};

static SEND: ToolInfo = ToolInfo::idempotent("global_stats_send");

fn delta(before: Stats, after: Stats) -> Vec<(Outcome, u64)> {
    Outcome::ALL
        .iter()
        .map(|o| (*o, after.get(*o) - before.get(*o)))
        .filter(|(_, n)| *n > 0)
        .collect()
}

#[tokio::test]
async fn the_global_counters_see_every_outcome_once() {
    let turn = Turn::new("t").with_store(Arc::new(MemoryStore::new()));
    let call = || {
        let mut args = ArgsDigest::new(SEND.name);
        args.arg("to", "ada").unwrap();
        let (key, fp) = args.finish(turn.namespace(), turn.id(), SEND.name, SEND.version);
        Call::new(&SEND, &turn, key, fp)
    };
    let before = stats();
    execute(call(), Codec::ok_only(), async { Ok::<_, Error>(1) })
        .await
        .unwrap();
    execute(call(), Codec::ok_only(), async { Ok::<_, Error>(2) })
        .await
        .unwrap();
    assert_eq!(
        delta(before, stats()),
        [(Outcome::Executed, 1), (Outcome::Replayed, 1)]
    );
    assert_eq!(
        delta(Stats::default(), turn.stats()),
        delta(before, stats())
    );
}

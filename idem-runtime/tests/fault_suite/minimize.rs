//! Shrinks a failing schedule with proptest's value tree: each step tries a simpler schedule
//! (fewer chains, attempts or faults, simpler choices), keeps it if it still fails, and backs
//! off towards the last failing one if it does not.

use proptest::strategy::ValueTree;

use crate::run::Verdict;
use crate::schedule::{Schedule, Shape};

/// The smallest schedule found from the schedule of `seed` (which fails under `check` with
/// `verdict`) that still fails, with its verdict.
pub fn minimize(
    seed: u64,
    shape: Shape,
    verdict: Verdict,
    check: impl Fn(&Schedule) -> Verdict,
) -> (Schedule, Verdict) {
    let mut tree = Schedule::tree(seed, shape);
    let mut best = (tree.current(), verdict);
    let mut moved = tree.simplify();
    // Proptest's trees end their walk; the bound is a guard against a check that is not
    // deterministic.
    for _ in 0..2_000 {
        if !moved {
            break;
        }
        let candidate = tree.current();
        let verdict = check(&candidate);
        moved = if verdict.failed() {
            best = (candidate, verdict);
            tree.simplify()
        } else {
            tree.complicate()
        };
    }
    best
}

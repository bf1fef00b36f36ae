//! Shrinks a failing schedule greedily: drops chains, attempts and faults, and simplifies
//! attempts, as long as the smaller schedule still fails.

use crate::run::Verdict;
use crate::schedule::Schedule;

/// The smallest schedule found from `schedule` (which fails under `check`) that still fails,
/// with its verdict.
pub fn minimize(
    schedule: &Schedule,
    verdict: Verdict,
    check: impl Fn(&Schedule) -> Verdict,
) -> (Schedule, Verdict) {
    let mut best = (schedule.clone(), verdict);
    // Every accepted step makes the schedule strictly simpler, so this ends; the bound is a
    // guard against a check that is not deterministic.
    for _ in 0..200 {
        let next = best.0.shrinks().into_iter().find_map(|smaller| {
            let verdict = check(&smaller);
            verdict.failed().then_some((smaller, verdict))
        });
        match next {
            Some(smaller) => best = smaller,
            None => break,
        }
    }
    best
}

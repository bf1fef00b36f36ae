//! The suite's modes over the memory store, and the self-test that the harness catches a broken
//! store.

use std::sync::Arc;

use idem_tools_runtime::store::{MemoryStore, Store};

use crate::minimize::minimize;
use crate::modes::{SHAPE, budget, mode, realtime_shape, seeds, shape};
use crate::run::{self, Backend, Opener};
use crate::schedule::Schedule;

#[test]
fn mem_paused() {
    let _serial = crate::serial();
    let seeds = seeds(0, budget(20_000, 2_000_000));
    let (totals, failing) = mode(
        "mem-paused",
        "fault_suite mem_paused",
        &seeds,
        shape(),
        |s| run::paused(s, Backend::Memory),
    );
    assert!(
        totals.executions > 0 && totals.effects > 0,
        "the schedules ran no tool"
    );
    assert!(failing.is_empty(), "failing seeds: {failing:?}");
}

#[test]
fn mem_realtime() {
    let _serial = crate::serial();
    let seeds = seeds(1 << 40, budget(60, 20_000));
    let (totals, failing) = mode(
        "mem-realtime",
        "fault_suite mem_realtime",
        &seeds,
        realtime_shape(),
        |s| run::realtime(s, Backend::Memory),
    );
    assert!(totals.executions > 0, "the schedules ran no tool");
    assert!(failing.is_empty(), "failing seeds: {failing:?}");
}

/// Two handles on one memory store, as two processes sharing a store: a chain's calls join
/// only calls of their own handle, and wait for the other's through the store.
#[test]
fn mem_paused_two_processes() {
    let _serial = crate::serial();
    let open: Opener = Arc::new(|clock| {
        let shared: Arc<dyn Store> = Arc::new(MemoryStore::with_clock(clock));
        Box::pin(std::future::ready(Ok(vec![Arc::clone(&shared), shared])))
    });
    let seeds = seeds(1 << 20, budget(10_000, 1_000_000));
    let (totals, failing) = mode(
        "mem-paused-2proc",
        "fault_suite mem_paused_two_processes",
        &seeds,
        shape(),
        |s| run::paused(s, Backend::Handles(Arc::clone(&open))),
    );
    assert!(totals.executions > 0, "the schedules ran no tool");
    assert!(failing.is_empty(), "failing seeds: {failing:?}");
}

/// The self-test: a store that forgets completions must be caught.
#[test]
fn the_harness_catches_a_store_that_forgets_completions() {
    let _serial = crate::serial();
    let seeds: Vec<u64> = (0..300).collect();
    let (totals, failing) = mode(
        "self-test-forgetful",
        "fault_suite the_harness_catches",
        &seeds,
        SHAPE,
        |s| run::paused(s, Backend::Forgetful),
    );
    assert!(
        totals.duplicates > 0 && !failing.is_empty(),
        "the harness did not notice a store that forgets completions: {totals:?}"
    );
    // The same seeds on the real store pass: the violations are the broken store's.
    let (_, clean) = mode(
        "self-test-control",
        "fault_suite the_harness_catches",
        &failing,
        SHAPE,
        |s| run::paused(s, Backend::Memory),
    );
    assert!(
        clean.is_empty(),
        "seeds failing on the correct store too: {clean:?}"
    );
}

/// A failing seed reproduces alone, and minimizing keeps it failing while making it smaller.
#[test]
fn a_failing_seed_reproduces_and_minimizes() {
    let _serial = crate::serial();
    let check = |s: &Schedule| run::paused(s, Backend::Forgetful);
    let seed = (0..300)
        .find(|&seed| {
            let schedule = Schedule::generate(seed, SHAPE);
            schedule.size() > 4 && check(&schedule).failed()
        })
        .expect("some schedule of several parts exposes the forgetful store");
    let schedule = Schedule::generate(seed, SHAPE);
    assert_eq!(
        schedule,
        Schedule::generate(seed, SHAPE),
        "a seed is one schedule"
    );
    assert_ne!(
        schedule,
        Schedule::generate(seed + 1, SHAPE),
        "another seed another"
    );
    let first = check(&schedule);
    let again = check(&schedule);
    assert_eq!(first.counts, again.counts, "a paused run is deterministic");
    let (small, verdict) = minimize(seed, SHAPE, first, check);
    assert!(verdict.failed(), "the minimized schedule still fails");
    assert_eq!(check(&small).counts, verdict.counts, "and reproduces");
    assert!(
        small.size() < schedule.size(),
        "minimizing made it smaller: {} parts, from {}",
        small.size(),
        schedule.size()
    );
}

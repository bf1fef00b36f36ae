//! Exact counts of one kind of call, for `valgrind --tool=callgrind` and heap allocations:
//! the bench's small arguments through `#[idempotent]` on a `MemoryStore`, next to the floor
//! (`support::floor`).
//!
//! ```text
//! cargo bench --bench count -- replay 1000     # 1000 replays, then the allocations per call
//! scripts/count-instructions.sh                # callgrind at two counts, per call, every kind
//! ```
//!
//! Kinds: `floor` (BLAKE3 over `serde_json` bytes and a map lookup), `replay` (attached:
//! borrowed arguments), `replay_owned` (detached: owned arguments, the caller's clone
//! included), `first` and `first_owned` (a fresh key per call), `step_live` (a conversation's
//! next model step, the model answering at once) and `step_replay` (a restarted run's step
//! answered from the store); `sizes` prints the size of a
//! call's future (every byte of it is moved as the future is built and awaited). Each run makes one warm-up call
//! of its kind, then `n` measured calls, and prints `allocations per call: X` for those: the
//! count of the global allocator's `alloc` calls, divided by `n`.

#[path = "support/mod.rs"]
mod support;

use std::alloc::{GlobalAlloc, Layout, System};
use std::hint::black_box;
use std::sync::atomic::{AtomicU64, Ordering};

use support::floor::Floor;
use support::{
    Args, SIZES, bare, current_thread, memory_store, ok, receipt, send, send_owned, turn,
};

/// The system allocator, counting allocations.
struct Counting;

static ALLOCATIONS: AtomicU64 = AtomicU64::new(0);

// SAFETY: forwards every call to `System` unchanged; only counts them. (Allowed here: a bench
// binary, not a published crate.)
#[allow(unsafe_code)]
unsafe impl GlobalAlloc for Counting {
    unsafe fn alloc(&self, layout: Layout) -> *mut u8 {
        ALLOCATIONS.fetch_add(1, Ordering::Relaxed);
        // SAFETY: the caller's contract is `System`'s.
        unsafe { System.alloc(layout) }
    }

    unsafe fn dealloc(&self, ptr: *mut u8, layout: Layout) {
        // SAFETY: as above.
        unsafe { System.dealloc(ptr, layout) }
    }

    unsafe fn realloc(&self, ptr: *mut u8, layout: Layout, new_size: usize) -> *mut u8 {
        ALLOCATIONS.fetch_add(1, Ordering::Relaxed);
        // SAFETY: as above.
        unsafe { System.realloc(ptr, layout, new_size) }
    }
}

#[global_allocator]
static GLOBAL: Counting = Counting;

fn main() {
    let mut args = std::env::args().skip(1).filter(|a| a != "--bench");
    let kind = args.next().unwrap_or_else(|| "replay".to_owned());
    let n: u64 = args
        .next()
        .map_or(Ok(1000), |n| n.parse())
        .unwrap_or_else(|e| panic!("the count: {e}"));
    if kind == "sizes" {
        return sizes();
    }
    let rt = current_thread();
    let store = memory_store();
    let small = Args::new(SIZES[0], 0);
    let before = match kind.as_str() {
        "floor" => {
            let floor = Floor::default();
            ok(
                "floor",
                floor.insert(&small, ok("bare", rt.block_on(bare(&small)))),
            );
            let _ = ok("floor", floor.get(&small));
            let before = ALLOCATIONS.load(Ordering::Relaxed);
            for _ in 0..n {
                black_box(ok("floor", floor.get(black_box(&small))));
            }
            before
        }
        "replay" | "replay_owned" => {
            let owned = kind == "replay_owned";
            rt.block_on(turn("count", store).scope(async {
                let once = async || {
                    if owned {
                        ok("replay", send_owned(black_box(&small).clone()).await)
                    } else {
                        ok("replay", send(black_box(&small)).await)
                    }
                };
                once().await;
                let before = ALLOCATIONS.load(Ordering::Relaxed);
                for _ in 0..n {
                    black_box(once().await);
                }
                before
            }))
        }
        "first" | "first_owned" => {
            let owned = kind == "first_owned";
            rt.block_on(turn("count", store).scope(async {
                // A fresh key per call: `n` changes in place (the owned call clones, as a
                // caller of a tool that owns its arguments does).
                let mut args = small.clone();
                args.n = u64::MAX;
                if owned {
                    ok("first", send_owned(args.clone()).await);
                } else {
                    ok("first", send(&args).await);
                }
                let before = ALLOCATIONS.load(Ordering::Relaxed);
                for i in 1..=n {
                    args.n = i;
                    if owned {
                        black_box(ok("first", send_owned(black_box(&args).clone()).await));
                    } else {
                        black_box(ok("first", send(black_box(&args)).await));
                    }
                }
                before
            }))
        }
        "step_live" => rt.block_on(async {
            // `n` steps of one conversation, each asking the (instant) model: a step's key
            // derived from the turn, label and index, its request fingerprinted, claimed and
            // recorded.
            let chat = turn("count", store).conversation("chat");
            let ask = |args: &Args| {
                let answer = receipt(args);
                async move { Ok::<_, idem_tools::Error>(answer) }
            };
            ok("step", chat.step(&small, ask(&small)).await);
            let before = ALLOCATIONS.load(Ordering::Relaxed);
            for _ in 0..n {
                black_box(ok("step", chat.step(black_box(&small), ask(&small)).await));
            }
            before
        }),
        "step_replay" => rt.block_on(async {
            // A restarted run's first step, replayed: each time a new `Turn` value of the same
            // turn (a new run), its conversation, and step 0 answered from the store.
            let replay = || async {
                let chat = turn("count", store.clone()).conversation("chat");
                let answer = receipt(&small);
                chat.step(&small, async move { Ok::<_, idem_tools::Error>(answer) })
                    .await
            };
            ok("step", replay().await);
            let before = ALLOCATIONS.load(Ordering::Relaxed);
            for _ in 0..n {
                black_box(ok("step", replay().await));
            }
            before
        }),
        other => panic!(
            "unknown kind {other}: floor, replay, replay_owned, first, first_owned, step_live, \
             step_replay"
        ),
    };
    let allocations = ALLOCATIONS.load(Ordering::Relaxed) - before;
    #[allow(clippy::cast_precision_loss)] // counts far below 2^52
    let per_call = allocations as f64 / n as f64;
    println!("{kind}: {n} calls, allocations per call: {per_call:.2}");
}
/// The size of the futures of `send` and `send_owned` calls.
fn sizes() {
    let small = Args::new(SIZES[0], 0);
    eprintln!(
        "send future: {} bytes",
        std::mem::size_of_val(&send(&small))
    );
    eprintln!(
        "send_owned future: {} bytes",
        std::mem::size_of_val(&send_owned(small.clone()))
    );
}

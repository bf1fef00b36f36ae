//! Wall-clock time for stores, injectable so tests cover expiry without sleeping.

use std::fmt::Debug;
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{Duration, SystemTime, UNIX_EPOCH};

/// A source of wall-clock time in milliseconds since the Unix epoch.
///
/// Stores read time through a `Clock` so that TTL and lease expiry can be tested with a
/// [`ManualClock`] instead of sleeping.
pub trait Clock: Send + Sync + Debug + 'static {
    /// Milliseconds since the Unix epoch.
    fn now_ms(&self) -> u64;
}

/// The system's wall clock.
#[derive(Debug, Default, Clone, Copy)]
pub struct SystemClock;

impl Clock for SystemClock {
    fn now_ms(&self) -> u64 {
        SystemTime::now()
            .duration_since(UNIX_EPOCH)
            .map_or(0, duration_ms)
    }
}

/// Wall-clock milliseconds that only move forward at the rate of the monotonic clock.
///
/// It reads the wall clock once, when created, and adds the monotonic time elapsed since: a
/// wall-clock step (NTP, a resumed VM, an operator) cannot shorten or lengthen a lease measured
/// on it. Timestamps stay close to wall time for display. Clones share the anchor.
#[derive(Debug, Clone, Copy)]
pub struct MonotonicClock {
    wall_ms: u64,
    start: std::time::Instant,
}

impl MonotonicClock {
    /// A clock anchored at the wall clock's current reading.
    pub fn new() -> Self {
        MonotonicClock {
            wall_ms: SystemClock.now_ms(),
            start: std::time::Instant::now(),
        }
    }
}

impl Default for MonotonicClock {
    fn default() -> Self {
        Self::new()
    }
}

impl Clock for MonotonicClock {
    fn now_ms(&self) -> u64 {
        self.wall_ms
            .saturating_add(duration_ms(self.start.elapsed()))
    }
}

/// A clock that only moves when told to; clones share the same time.
///
/// ```
/// # extern crate idem_tools_runtime as idem_tools;
/// use std::time::Duration;
/// use idem_tools::clock::{Clock, ManualClock};
///
/// let clock = ManualClock::new(1_000);
/// clock.advance(Duration::from_secs(2));
/// assert_eq!(clock.now_ms(), 3_000);
/// ```
#[derive(Debug, Clone, Default)]
pub struct ManualClock(Arc<AtomicU64>);

impl ManualClock {
    /// A clock reading `start_ms` milliseconds since the epoch.
    pub fn new(start_ms: u64) -> Self {
        ManualClock(Arc::new(AtomicU64::new(start_ms)))
    }

    /// Moves the clock forward.
    pub fn advance(&self, by: Duration) {
        self.0.fetch_add(duration_ms(by), Ordering::SeqCst);
    }

    /// Sets the clock to `ms` milliseconds since the epoch.
    pub fn set(&self, ms: u64) {
        self.0.store(ms, Ordering::SeqCst);
    }
}

impl Clock for ManualClock {
    fn now_ms(&self) -> u64 {
        self.0.load(Ordering::SeqCst)
    }
}

/// A duration in whole milliseconds, saturating at `u64::MAX`.
pub(crate) fn duration_ms(d: Duration) -> u64 {
    u64::try_from(d.as_millis()).unwrap_or(u64::MAX)
}

//! Timestamps (ms since the Unix epoch) as people read them.

use std::time::{Duration, SystemTime, UNIX_EPOCH};

/// The first ms that RFC 3339 (four-digit years) cannot show: year 10000.
const YEAR_10000_MS: u64 = 253_402_300_800_000;

/// Now, in ms since the Unix epoch.
pub fn now_ms() -> u64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map_or(0, |d| u64::try_from(d.as_millis()).unwrap_or(u64::MAX))
}

/// `ms` as RFC 3339 UTC with milliseconds (`2026-12-02T16:44:12.123Z`); times past year 9999
/// are clamped to its last millisecond.
pub fn rfc3339(ms: u64) -> String {
    let ms = ms.min(YEAR_10000_MS - 1);
    humantime::format_rfc3339_millis(UNIX_EPOCH + Duration::from_millis(ms)).to_string()
}

/// `at` relative to `now`, to the second: `in 23h 59m 58s`, `5s ago`, `now`.
pub fn relative(at: u64, now: u64) -> String {
    let seconds = |ms: u64| humantime::format_duration(Duration::from_secs(ms / 1000));
    if at / 1000 > now / 1000 {
        format!("in {}", seconds(at - now))
    } else if now / 1000 > at / 1000 {
        format!("{} ago", seconds(now - at))
    } else {
        "now".to_owned()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn timestamps_are_rfc3339_with_milliseconds() {
        assert_eq!(rfc3339(0), "1970-01-01T00:00:00.000Z");
        assert_eq!(rfc3339(1_796_229_852_123), "2026-12-02T16:44:12.123Z");
        // Never panics, however far the record says it expires.
        assert_eq!(rfc3339(u64::MAX), "9999-12-31T23:59:59.999Z");
    }

    #[test]
    fn relative_times_read_naturally() {
        assert_eq!(relative(90_500, 0), "in 1m 30s");
        assert_eq!(relative(0, 3_600_000), "1h ago");
        assert_eq!(relative(1_200, 1_900), "now");
    }
}

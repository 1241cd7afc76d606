//! Time as the gateway sees it.
//!
//! Everything that expires (tasks, rate-limit budgets, cached credential verdicts) asks a
//! [`Clock`] instead of the operating system, so tests can move time forward instead of
//! sleeping.

use std::sync::Arc;
use std::sync::atomic::{AtomicI64, Ordering};
use std::time::{SystemTime, UNIX_EPOCH};

/// A source of wall-clock time in milliseconds since the Unix epoch.
pub trait Clock: Send + Sync + 'static {
    /// Milliseconds since 1970-01-01T00:00:00Z.
    fn now_millis(&self) -> i64;

    /// Nanoseconds on a clock that never goes back (not the wall clock: a step of the system
    /// time must not refill or drain every rate-limit budget), for rate limiting. Only
    /// differences between two readings mean anything.
    fn monotonic_nanos(&self) -> i64 {
        self.now_millis().saturating_mul(1_000_000)
    }
}

/// The operating system's clock.
#[derive(Debug, Clone, Copy, Default)]
pub struct SystemClock;

impl Clock for SystemClock {
    fn now_millis(&self) -> i64 {
        SystemTime::now()
            .duration_since(UNIX_EPOCH)
            .map(|d| i64::try_from(d.as_millis()).unwrap_or(i64::MAX))
            .unwrap_or(0)
    }

    fn monotonic_nanos(&self) -> i64 {
        static START: std::sync::OnceLock<std::time::Instant> = std::sync::OnceLock::new();
        // Offset by a day so that "long ago" (a key never seen) stays far below any reading.
        let since_start = START.get_or_init(std::time::Instant::now).elapsed();
        i64::try_from(since_start.as_nanos())
            .unwrap_or(i64::MAX)
            .saturating_add(86_400_000_000_000)
    }
}

/// A clock that only moves when told to; for tests.
#[derive(Debug, Clone)]
pub struct ManualClock {
    millis: Arc<AtomicI64>,
}

impl ManualClock {
    /// A clock standing at `start_millis`.
    pub fn new(start_millis: i64) -> Self {
        Self {
            millis: Arc::new(AtomicI64::new(start_millis)),
        }
    }

    /// Moves the clock forward by `by`.
    pub fn advance(&self, by: std::time::Duration) {
        let by = i64::try_from(by.as_millis()).unwrap_or(i64::MAX);
        self.millis.fetch_add(by, Ordering::SeqCst);
    }
}

impl Clock for ManualClock {
    fn now_millis(&self) -> i64 {
        self.millis.load(Ordering::SeqCst)
    }
}

/// Formats epoch milliseconds as RFC 3339 UTC with millisecond precision,
/// the form the A2A spec asks for (`2025-10-28T10:30:00.000Z`).
pub fn rfc3339_millis(epoch_millis: i64) -> String {
    match jiff::Timestamp::from_millisecond(epoch_millis) {
        Ok(at) => at.strftime("%Y-%m-%dT%H:%M:%S%.3fZ").to_string(),
        // Outside years -9999..=9999: no store or clock here produces such a time.
        Err(_) => "9999-12-31T23:59:59.999Z".to_owned(),
    }
}

/// The UTC day of epoch milliseconds, `YYYY-MM-DD`.
pub fn utc_day(epoch_millis: i64) -> String {
    rfc3339_millis(epoch_millis)[..10].to_owned()
}

/// Parses `YYYY-MM-DD` (midnight UTC) or RFC 3339 (`YYYY-MM-DDTHH:MM:SS[.fff]` with `Z` or an
/// offset such as `+02:00`) into epoch milliseconds. Nothing looser: no missing seconds, no
/// missing offset, no space for the `T`.
pub fn parse_rfc3339(text: &str) -> Option<i64> {
    let b = text.as_bytes();
    if b.len() == 10 {
        let date: jiff::civil::Date = text.parse().ok()?;
        let midnight = jiff::tz::TimeZone::UTC
            .to_timestamp(date.to_datetime(jiff::civil::Time::midnight()))
            .ok()?;
        return Some(midnight.as_millisecond());
    }
    let shaped = b.len() >= 20
        && matches!(b[10], b'T' | b't')
        && b[13] == b':'
        && b[16] == b':'
        && matches!(b[19], b'.' | b'Z' | b'z' | b'+' | b'-');
    if !shaped {
        return None;
    }
    let at: jiff::Timestamp = text.parse().ok()?;
    Some(at.as_millisecond())
}

/// Which way an age such as `24h` counts from now.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Relative {
    /// Back from now: `since=24h` is a day ago.
    Ago,
    /// Forward from now: an expiry of `7d` is a week from now.
    FromNow,
}

/// What [`parse_time`] accepts, for error messages.
pub const TIME_SYNTAX: &str = "RFC 3339 with any offset (2027-01-31T09:00:00Z, 2027-01-31T10:00:00+01:00), a date (2027-01-31, midnight UTC) or an age (30m, 24h, 7d)";

/// The one time syntax of the command line and the admin API: RFC 3339 with any offset, a
/// date (midnight UTC), or an age in minutes, hours or days counted from `now` the way
/// `relative` says. Epoch milliseconds.
pub fn parse_time(text: &str, now: i64, relative: Relative) -> Option<i64> {
    let text = text.trim();
    if let Some(at) = parse_rfc3339(text) {
        return Some(at);
    }
    let age = [("m", 60_000i64), ("h", 3_600_000), ("d", 86_400_000)]
        .into_iter()
        .find_map(|(suffix, unit)| {
            let digits = text.strip_suffix(suffix)?;
            if digits.is_empty() || !digits.bytes().all(|b| b.is_ascii_digit()) {
                return None;
            }
            digits.parse::<i64>().ok()?.checked_mul(unit)
        })?;
    Some(match relative {
        Relative::Ago => now.saturating_sub(age),
        Relative::FromNow => now.saturating_add(age),
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn formats_known_instants() {
        assert_eq!(rfc3339_millis(0), "1970-01-01T00:00:00.000Z");
        assert_eq!(rfc3339_millis(951_782_400_123), "2000-02-29T00:00:00.123Z");
        assert_eq!(
            rfc3339_millis(1_798_761_599_999),
            "2026-12-31T23:59:59.999Z"
        );
    }

    #[test]
    fn parses_what_it_formats() {
        for millis in [0, 1_795_996_800_123, 951_782_400_000, -86_400_000] {
            assert_eq!(parse_rfc3339(&rfc3339_millis(millis)), Some(millis));
        }
        assert_eq!(parse_rfc3339("2026-11-30"), Some(1_795_996_800_000));
        for bad in [
            "2026-02-30",
            "2026-13-01",
            "2026-11-30T24:00:00Z",
            "2026-11-30T10:00:00",
            "30/11/2026",
            "2026-11-30T10:00",
            "2026-11-30 10:00:00Z",
        ] {
            assert_eq!(parse_rfc3339(bad), None, "{bad}");
        }
    }

    #[test]
    fn one_time_syntax_offsets_dates_and_ages() {
        let noon = parse_rfc3339("2026-11-30T12:00:00Z").unwrap();
        for same in [
            "2026-11-30T12:00:00Z",
            "2026-11-30T13:00:00+01:00",
            "2026-11-30T07:00:00.000-05:00",
            " 2026-11-30T12:00:00z ",
        ] {
            assert_eq!(parse_time(same, 0, Relative::Ago), Some(noon), "{same}");
        }
        assert_eq!(
            parse_time("2026-11-30", 0, Relative::Ago),
            parse_rfc3339("2026-11-30T00:00:00Z")
        );
        let hour = 3_600_000;
        assert_eq!(
            parse_time("30m", noon, Relative::Ago),
            Some(noon - hour / 2)
        );
        assert_eq!(
            parse_time("24h", noon, Relative::Ago),
            Some(noon - 24 * hour)
        );
        assert_eq!(
            parse_time("7d", noon, Relative::FromNow),
            Some(noon + 168 * hour)
        );
        for bad in [
            "",
            "h",
            "-5h",
            "5w",
            "1.5h",
            "yesterday",
            "99999999999999999d",
        ] {
            assert_eq!(parse_time(bad, noon, Relative::Ago), None, "{bad}");
        }
    }

    #[test]
    fn manual_clock_moves_only_when_told() {
        let clock = ManualClock::new(1_000);
        assert_eq!(clock.now_millis(), 1_000);
        clock.advance(std::time::Duration::from_secs(2));
        assert_eq!(clock.now_millis(), 3_000);
    }
}

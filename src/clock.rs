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
    let secs = epoch_millis.div_euclid(1000);
    let millis = epoch_millis.rem_euclid(1000);
    let days = secs.div_euclid(86_400);
    let secs_of_day = secs.rem_euclid(86_400);
    let (year, month, day) = civil_from_days(days);
    format!(
        "{year:04}-{month:02}-{day:02}T{:02}:{:02}:{:02}.{millis:03}Z",
        secs_of_day / 3600,
        (secs_of_day / 60) % 60,
        secs_of_day % 60
    )
}

/// Days since the epoch to a proleptic Gregorian date (Howard Hinnant's algorithm).
fn civil_from_days(days: i64) -> (i64, u32, u32) {
    let z = days + 719_468;
    let era = z.div_euclid(146_097);
    let doe = z.rem_euclid(146_097);
    let yoe = (doe - doe / 1460 + doe / 36_524 - doe / 146_096) / 365;
    let doy = doe - (365 * yoe + yoe / 4 - yoe / 100);
    let mp = (5 * doy + 2) / 153;
    let day = (doy - (153 * mp + 2) / 5 + 1) as u32;
    let month = if mp < 10 { mp + 3 } else { mp - 9 } as u32;
    let year = yoe + era * 400 + i64::from(month <= 2);
    (year, month, day)
}

/// Days since 1970-01-01 of a proleptic Gregorian date (the inverse of `civil_from_days`).
fn days_from_civil(year: i64, month: u32, day: u32) -> i64 {
    let year = if month <= 2 { year - 1 } else { year };
    let era = year.div_euclid(400);
    let yoe = year - era * 400;
    let mp = (i64::from(month) + 9) % 12;
    let doy = (153 * mp + 2) / 5 + i64::from(day) - 1;
    let doe = yoe * 365 + yoe / 4 - yoe / 100 + doy;
    era * 146_097 + doe - 719_468
}

/// Parses `YYYY-MM-DD` (midnight UTC) or `YYYY-MM-DDTHH:MM:SS[.fff]Z` into epoch milliseconds.
pub fn parse_rfc3339(text: &str) -> Option<i64> {
    let number = |range: std::ops::Range<usize>| -> Option<i64> {
        let digits = text.get(range)?;
        digits
            .bytes()
            .all(|b| b.is_ascii_digit())
            .then(|| digits.parse().ok())?
    };
    let b = text.as_bytes();
    if b.len() < 10 || b[4] != b'-' || b[7] != b'-' {
        return None;
    }
    let (year, month, day) = (number(0..4)?, number(5..7)?, number(8..10)?);
    let month = u32::try_from(month).ok().filter(|m| (1..=12).contains(m))?;
    let day = u32::try_from(day).ok().filter(|d| (1..=31).contains(d))?;
    let days = days_from_civil(year, month, day);
    // A day past the month's end (2026-02-30) would roll over: refuse it.
    if civil_from_days(days) != (year, month, day) {
        return None;
    }
    let mut millis = days * 86_400_000;
    if b.len() == 10 {
        return Some(millis);
    }
    let rest = &text[10..];
    let rest = rest.strip_prefix('T').or_else(|| rest.strip_prefix('t'))?;
    let rest = rest.strip_suffix('Z').or_else(|| rest.strip_suffix('z'))?;
    let (clock, fraction) = rest.split_once('.').unwrap_or((rest, ""));
    let parts: Vec<&str> = clock.split(':').collect();
    let [h, m, sec] = parts.as_slice() else {
        return None;
    };
    let field = |t: &str, max: i64| -> Option<i64> {
        (t.len() == 2 && t.bytes().all(|c| c.is_ascii_digit()))
            .then(|| t.parse().ok())?
            .filter(|v| *v <= max)
    };
    millis += field(h, 23)? * 3_600_000 + field(m, 59)? * 60_000 + field(sec, 59)? * 1000;
    if !fraction.is_empty() {
        if fraction.len() > 9 || !fraction.bytes().all(|c| c.is_ascii_digit()) {
            return None;
        }
        let ms: String = fraction.chars().chain("000".chars()).take(3).collect();
        millis += ms.parse::<i64>().ok()?;
    }
    Some(millis)
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
            "2026-11-30T10:00:00+01:00",
        ] {
            assert_eq!(parse_rfc3339(bad), None, "{bad}");
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

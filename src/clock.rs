//! Time as the gateway sees it.
//!
//! Everything that expires (tasks, rate-limit budgets, cached credential verdicts) asks a
//! [`Clock`] instead of the operating system, so tests can move time forward instead of
//! sleeping.

use std::sync::Arc;
use std::sync::atomic::{AtomicI64, Ordering};
use std::time::Duration;

pub use jiff::Timestamp;

/// A source of wall-clock time.
pub trait Clock: Send + Sync + 'static {
    /// The current instant.
    fn now(&self) -> Timestamp;

    /// Nanoseconds on a clock that never goes back (not the wall clock: a step of the system
    /// time must not refill or drain every rate-limit budget), for rate limiting. Only
    /// differences between two readings mean anything.
    fn monotonic_nanos(&self) -> i64 {
        i64::try_from(self.now().as_nanosecond()).unwrap_or(i64::MAX)
    }
}

/// The operating system's clock.
#[derive(Debug, Clone, Copy, Default)]
pub struct SystemClock;

impl Clock for SystemClock {
    fn now(&self) -> Timestamp {
        Timestamp::now()
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
    /// A clock standing at `start` (to the millisecond).
    pub fn new(start: Timestamp) -> Self {
        Self {
            millis: Arc::new(AtomicI64::new(start.as_millisecond())),
        }
    }

    /// Moves the clock forward by `by`.
    pub fn advance(&self, by: Duration) {
        let by = i64::try_from(by.as_millis()).unwrap_or(i64::MAX);
        self.millis.fetch_add(by, Ordering::SeqCst);
    }
}

impl Clock for ManualClock {
    fn now(&self) -> Timestamp {
        from_millis(self.millis.load(Ordering::SeqCst))
    }
}

/// `at` plus `by`, or the last representable instant: an expiry that far away never comes.
pub fn later(at: Timestamp, by: Duration) -> Timestamp {
    at.saturating_add(by).unwrap_or(Timestamp::MAX)
}

/// `at` minus `by`, or the first representable instant.
pub fn earlier(at: Timestamp, by: Duration) -> Timestamp {
    at.saturating_sub(by).unwrap_or(Timestamp::MIN)
}

/// How long from `from` to `to`; zero when `to` is not later.
pub fn elapsed(from: Timestamp, to: Timestamp) -> Duration {
    Duration::try_from(to.duration_since(from)).unwrap_or(Duration::ZERO)
}

/// The instant `millis` after the Unix epoch, saturating at jiff's range (years -9999..=9999):
/// the stores keep time as epoch milliseconds, and this reads them back.
pub fn from_millis(millis: i64) -> Timestamp {
    Timestamp::from_millisecond(millis).unwrap_or(if millis < 0 {
        Timestamp::MIN
    } else {
        Timestamp::MAX
    })
}

/// Formats an instant as RFC 3339 UTC with millisecond precision, the form the A2A spec asks
/// for (`2025-10-28T10:30:00.000Z`).
pub fn rfc3339_millis(at: Timestamp) -> String {
    at.strftime("%Y-%m-%dT%H:%M:%S%.3fZ").to_string()
}

/// A UTC calendar day: what budgets count by and a retiring key is published until. Shown
/// and stored as `YYYY-MM-DD`, the form whose text order is its order.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct UtcDay(jiff::civil::Date);

impl UtcDay {
    /// The day `at` falls on, in UTC.
    pub fn of(at: Timestamp) -> Self {
        Self(jiff::tz::TimeZone::UTC.to_datetime(at).date())
    }

    /// Reads `YYYY-MM-DD`, a real day and nothing else.
    pub fn parse(text: &str) -> Option<Self> {
        let shaped = text.len() == 10 && text.as_bytes()[4] == b'-' && text.as_bytes()[7] == b'-';
        shaped.then(|| text.parse().ok().map(Self)).flatten()
    }

    /// The month it is in.
    pub fn month(self) -> UtcMonth {
        UtcMonth(self.0.first_of_month())
    }
}

impl std::fmt::Display for UtcDay {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(
            f,
            "{:04}-{:02}-{:02}",
            self.0.year(),
            self.0.month(),
            self.0.day()
        )
    }
}

impl<'de> serde::Deserialize<'de> for UtcDay {
    fn deserialize<D: serde::Deserializer<'de>>(deserializer: D) -> Result<Self, D::Error> {
        let text = String::deserialize(deserializer)?;
        Self::parse(&text)
            .ok_or_else(|| serde::de::Error::custom("must be a date such as 2027-01-31"))
    }
}

/// A UTC calendar month, shown and stored as `YYYY-MM` (the prefix of its days' form).
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct UtcMonth(jiff::civil::Date);

impl UtcMonth {
    /// Reads `YYYY-MM`.
    pub fn parse(text: &str) -> Option<Self> {
        let day = UtcDay::parse(&format!(
            "{}-01",
            text.get(..7).filter(|_| text.len() == 7)?
        ))?;
        Some(day.month())
    }
}

impl std::fmt::Display for UtcMonth {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "{:04}-{:02}", self.0.year(), self.0.month())
    }
}

/// A day or a month, as the usage a report or a budget asks for.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum UtcPeriod {
    /// One day.
    Day(UtcDay),
    /// One month.
    Month(UtcMonth),
}

impl UtcPeriod {
    /// Reads `YYYY-MM-DD` or `YYYY-MM`.
    pub fn parse(text: &str) -> Option<Self> {
        match text.len() {
            10 => UtcDay::parse(text).map(Self::Day),
            _ => UtcMonth::parse(text).map(Self::Month),
        }
    }
}

impl std::fmt::Display for UtcPeriod {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Self::Day(day) => day.fmt(f),
            Self::Month(month) => month.fmt(f),
        }
    }
}

impl From<UtcDay> for UtcPeriod {
    fn from(day: UtcDay) -> Self {
        Self::Day(day)
    }
}

impl From<UtcMonth> for UtcPeriod {
    fn from(month: UtcMonth) -> Self {
        Self::Month(month)
    }
}

/// Parses `YYYY-MM-DD` (midnight UTC) or RFC 3339 (`YYYY-MM-DDTHH:MM:SS[.fff]` with `Z` or an
/// offset such as `+02:00`). Nothing looser: no missing seconds, no missing offset, no space
/// for the `T`.
pub fn parse_rfc3339(text: &str) -> Option<Timestamp> {
    let b = text.as_bytes();
    if b.len() == 10 {
        let date: jiff::civil::Date = text.parse().ok()?;
        return jiff::tz::TimeZone::UTC
            .to_timestamp(date.to_datetime(jiff::civil::Time::midnight()))
            .ok();
    }
    let shaped = b.len() >= 20
        && matches!(b[10], b'T' | b't')
        && b[13] == b':'
        && b[16] == b':'
        && matches!(b[19], b'.' | b'Z' | b'z' | b'+' | b'-');
    if !shaped {
        return None;
    }
    text.parse().ok()
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
/// `relative` says.
pub fn parse_time(text: &str, now: Timestamp, relative: Relative) -> Option<Timestamp> {
    let text = text.trim();
    if let Some(at) = parse_rfc3339(text) {
        return Some(at);
    }
    let age = [("m", 60u64), ("h", 3_600), ("d", 86_400)]
        .into_iter()
        .find_map(|(suffix, unit)| {
            let digits = text.strip_suffix(suffix)?;
            if digits.is_empty() || !digits.bytes().all(|b| b.is_ascii_digit()) {
                return None;
            }
            digits.parse::<u64>().ok()?.checked_mul(unit)
        })?;
    let age = Duration::from_secs(age);
    match relative {
        Relative::Ago => now.checked_sub(age).ok(),
        Relative::FromNow => now.checked_add(age).ok(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn at(millis: i64) -> Timestamp {
        Timestamp::from_millisecond(millis).unwrap()
    }

    #[test]
    fn formats_known_instants() {
        assert_eq!(rfc3339_millis(at(0)), "1970-01-01T00:00:00.000Z");
        assert_eq!(
            rfc3339_millis(at(951_782_400_123)),
            "2000-02-29T00:00:00.123Z"
        );
        assert_eq!(
            rfc3339_millis(at(1_798_761_599_999)),
            "2026-12-31T23:59:59.999Z"
        );
        let day = UtcDay::of(at(1_798_761_599_999));
        assert_eq!(day.to_string(), "2026-12-31");
        assert_eq!(day.month().to_string(), "2026-12");
        assert_eq!(UtcDay::of(at(-1)).to_string(), "1969-12-31");
    }

    #[test]
    fn days_and_months_read_back_what_they_show_and_nothing_looser() {
        for text in ["2026-12-31", "2024-02-29", "0001-01-01"] {
            assert_eq!(UtcDay::parse(text).unwrap().to_string(), text);
            assert_eq!(UtcPeriod::parse(text).unwrap().to_string(), text);
        }
        assert_eq!(UtcPeriod::parse("2026-02").unwrap().to_string(), "2026-02");
        for bad in [
            "2026-02-30",
            "2026-2-03",
            "20260203",
            "2026-13",
            "2026-1",
            "2026-02-",
            "",
        ] {
            assert_eq!(UtcPeriod::parse(bad), None, "{bad}");
        }
        let (day, month) = (
            UtcDay::parse("2026-12-05").unwrap(),
            UtcMonth::parse("2026-12"),
        );
        assert_eq!(Some(day.month()), month);
        assert!(UtcDay::parse("2026-12-04").unwrap() < day);
    }

    #[test]
    fn parses_what_it_formats() {
        for millis in [0, 1_795_996_800_123, 951_782_400_000, -86_400_000] {
            assert_eq!(parse_rfc3339(&rfc3339_millis(at(millis))), Some(at(millis)));
        }
        assert_eq!(parse_rfc3339("2026-11-30"), Some(at(1_795_996_800_000)));
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
        let epoch = Timestamp::UNIX_EPOCH;
        for same in [
            "2026-11-30T12:00:00Z",
            "2026-11-30T13:00:00+01:00",
            "2026-11-30T07:00:00.000-05:00",
            " 2026-11-30T12:00:00z ",
        ] {
            assert_eq!(parse_time(same, epoch, Relative::Ago), Some(noon), "{same}");
        }
        assert_eq!(
            parse_time("2026-11-30", epoch, Relative::Ago),
            parse_rfc3339("2026-11-30T00:00:00Z")
        );
        let hour = Duration::from_secs(3_600);
        assert_eq!(
            parse_time("30m", noon, Relative::Ago),
            Some(earlier(noon, hour / 2))
        );
        assert_eq!(
            parse_time("24h", noon, Relative::Ago),
            Some(earlier(noon, hour * 24))
        );
        assert_eq!(
            parse_time("7d", noon, Relative::FromNow),
            Some(later(noon, hour * 168))
        );
        for bad in [
            "",
            "h",
            "-5h",
            "5w",
            "1.5h",
            "yesterday",
            "99999999999999999d",
            "999999999d",
        ] {
            assert_eq!(parse_time(bad, noon, Relative::Ago), None, "{bad}");
        }
    }

    #[test]
    fn arithmetic_saturates_instead_of_panicking() {
        let far = Duration::from_secs(u64::MAX);
        assert_eq!(later(Timestamp::UNIX_EPOCH, far), Timestamp::MAX);
        assert_eq!(earlier(Timestamp::UNIX_EPOCH, far), Timestamp::MIN);
        assert_eq!(from_millis(i64::MAX), Timestamp::MAX);
        assert_eq!(from_millis(i64::MIN), Timestamp::MIN);
        let (a, b) = (at(1_000), at(3_500));
        assert_eq!(elapsed(a, b), Duration::from_millis(2_500));
        assert_eq!(elapsed(b, a), Duration::ZERO);
    }

    #[test]
    fn manual_clock_moves_only_when_told() {
        let clock = ManualClock::new(at(1_000));
        assert_eq!(clock.now(), at(1_000));
        clock.advance(Duration::from_secs(2));
        assert_eq!(clock.now(), at(3_000));
    }
}

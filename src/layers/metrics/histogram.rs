//! A fixed-bucket histogram of relaxed atomic counters, written in Prometheus's text format:
//! observing is a few additions, and only a series that counted anything is written.

use std::fmt::Write as _;
use std::sync::atomic::{AtomicU64, Ordering};

/// Seconds: from 5 ms to a minute.
pub const SECONDS: [f64; 13] = crate::telemetry::conventions::SECONDS_BOUNDARIES;

/// Tokens: the GenAI conventions' buckets for token usage.
pub const TOKENS: [f64; 13] = crate::telemetry::conventions::TOKEN_BOUNDARIES;

/// One series.
#[derive(Debug)]
pub struct Histogram {
    bounds: &'static [f64; 13],
    buckets: [AtomicU64; 13],
    count: AtomicU64,
    /// The sum, in millionths of the unit.
    sum_micros: AtomicU64,
}

impl Histogram {
    /// A series over `bounds`.
    pub fn new(bounds: &'static [f64; 13]) -> Self {
        Self {
            bounds,
            buckets: std::array::from_fn(|_| AtomicU64::new(0)),
            count: AtomicU64::new(0),
            sum_micros: AtomicU64::new(0),
        }
    }

    /// Counts `value`: in the one bucket it falls in (the exposition sums them), so an
    /// observation is three atomic additions however many buckets there are.
    pub fn observe(&self, value: f64) {
        if let Some(at) = self.bounds.iter().position(|bound| value <= *bound) {
            self.buckets[at].fetch_add(1, Ordering::Relaxed);
        }
        self.count.fetch_add(1, Ordering::Relaxed);
        let micros = (value * 1e6).clamp(0.0, u64::MAX as f64) as u64;
        self.sum_micros.fetch_add(micros, Ordering::Relaxed);
    }

    /// Writes the series `name{labels}` (`labels` without braces, empty for none), unless it
    /// counted nothing.
    pub fn write(&self, out: &mut String, name: &str, labels: &str) {
        let count = self.count.load(Ordering::Relaxed);
        if count == 0 {
            return;
        }
        let comma = if labels.is_empty() { "" } else { "," };
        let mut below = 0;
        for (bound, bucket) in self.bounds.iter().zip(&self.buckets) {
            below += bucket.load(Ordering::Relaxed);
            let _ = writeln!(
                out,
                "{name}_bucket{{{labels}{comma}le=\"{bound}\"}} {below}"
            );
        }
        let _ = writeln!(out, "{name}_bucket{{{labels}{comma}le=\"+Inf\"}} {count}");
        let sum = self.sum_micros.load(Ordering::Relaxed) as f64 / 1e6;
        let braced = if labels.is_empty() {
            String::new()
        } else {
            format!("{{{labels}}}")
        };
        let _ = writeln!(out, "{name}_sum{braced} {sum}");
        let _ = writeln!(out, "{name}_count{braced} {count}");
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_value_counts_in_every_bucket_at_or_above_it_and_an_empty_series_is_not_written() {
        let histogram = Histogram::new(&SECONDS);
        let mut out = String::new();
        histogram.write(&mut out, "x_seconds", "a=\"b\"");
        assert!(out.is_empty());
        histogram.observe(0.3);
        histogram.write(&mut out, "x_seconds", "a=\"b\"");
        assert!(
            out.contains("x_seconds_bucket{a=\"b\",le=\"0.25\"} 0"),
            "{out}"
        );
        assert!(
            out.contains("x_seconds_bucket{a=\"b\",le=\"0.5\"} 1"),
            "{out}"
        );
        assert!(
            out.contains("x_seconds_bucket{a=\"b\",le=\"+Inf\"} 1"),
            "{out}"
        );
        assert!(out.contains("x_seconds_sum{a=\"b\"} 0.3"), "{out}");
    }
}

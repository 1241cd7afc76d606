//! The circuit breaker in front of Redis: a Redis that hangs (stopped, swapping, behind a
//! network that drops packets) must not hold every request for a timeout.
//!
//! A Redis that refuses connections fails fast, and each engine answers without it at once. A
//! Redis that accepts and never answers costs a request the whole response timeout
//! (`cluster.redis_timeout_ms`) per call. After `cluster.redis_breaker_timeouts` timeouts
//! within a window (one second, or that many timeouts' worth when longer, so that one caller's
//! calls timing out one after the other still open it) the breaker opens: every engine stops asking Redis and answers as it
//! does when Redis refuses connections (limits in process, turns ordered per instance,
//! spending counted here). A probe asks Redis for a `PING` every half second, itself bounded by
//! the timeout; the first answer in time closes the breaker. Each change is logged once, and
//! shown on `/ready` (Redis `degraded`) and in `peergate_part_up{part="redis"}`.
//!
//! Under load the breaker opens within the first timeout: the requests in flight when Redis
//! stopped time out together. A request alone may meet up to the threshold's number of timeouts
//! before it opens; that bound is the price of not opening on one slow answer. What it does not
//! do: reconnect. A socket black-holed by the network keeps the probe's `PING` unanswered until
//! the kernel gives the connection up.

use redis::aio::ConnectionManager;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::time::Duration;
use tokio::time::Instant;

/// How often an open breaker asks Redis whether it answers again.
pub const PROBE_EVERY: Duration = Duration::from_millis(500);
/// The shortest window the timeouts are counted in.
pub const WINDOW: Duration = Duration::from_secs(1);

/// Whether Redis is asked at all (see the module's documentation).
pub struct Breaker {
    open: AtomicBool,
    run: TimeoutRun,
    base: Instant,
    /// Timeouts within [`WINDOW`] that open it.
    after: u32,
    /// How long the probe waits for its `PING`.
    timeout: Duration,
    connection: ConnectionManager,
}

impl std::fmt::Debug for Breaker {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Breaker")
            .field("open", &self.is_open())
            .field("after", &self.after)
            .finish_non_exhaustive()
    }
}

impl Breaker {
    /// A closed breaker that opens after `after` timeouts within [`WINDOW`] and probes over
    /// `connection`, waiting `timeout` for each answer.
    pub fn new(connection: ConnectionManager, after: u32, timeout: Duration) -> Self {
        Self {
            open: AtomicBool::new(false),
            run: TimeoutRun::new(WINDOW.max(timeout.saturating_mul(after.max(1)))),
            base: Instant::now(),
            after: after.max(1),
            timeout,
            connection,
        }
    }

    /// Whether requests stop asking Redis.
    pub fn is_open(&self) -> bool {
        self.open.load(Ordering::Relaxed)
    }

    /// Redis answered a call: the timeouts so far were not a run.
    pub fn answered(&self) {
        self.run.clear();
    }

    /// A call timed out; the one that completes the run opens the breaker and starts the
    /// probe.
    pub fn timed_out(self: &Arc<Self>) {
        let now = u64::try_from(self.base.elapsed().as_millis()).unwrap_or(u64::MAX);
        let count = self.run.record(now);
        // Without a runtime there would be no probe to close it again: stay closed.
        let Ok(runtime) = tokio::runtime::Handle::try_current() else {
            return;
        };
        if count >= self.after && !self.open.swap(true, Ordering::Relaxed) {
            tracing::warn!(
                timeouts = count,
                "Redis does not answer in time: the circuit breaker is open, each instance answers on its own without waiting on Redis"
            );
            runtime.spawn(self.clone().probe());
        }
    }

    /// Asks Redis every [`PROBE_EVERY`] until it answers in time, then closes.
    async fn probe(self: Arc<Self>) {
        loop {
            tokio::time::sleep(PROBE_EVERY).await;
            if super::pings(self.connection.clone(), self.timeout).await {
                self.run.clear();
                self.open.store(false, Ordering::Relaxed);
                tracing::info!("Redis answers in time again: the circuit breaker is closed");
                return;
            }
        }
    }
}

/// A run of timeouts within a window: when the window started (ms, the high 48 bits of one
/// word) and how many (the low 16), changed in one compare-and-swap, so timeouts that arrive
/// together all count.
#[derive(Debug)]
struct TimeoutRun {
    run: AtomicU64,
    window_ms: u64,
}

impl TimeoutRun {
    fn new(window: Duration) -> Self {
        Self {
            run: AtomicU64::new(0),
            window_ms: u64::try_from(window.as_millis()).unwrap_or(u64::MAX >> 16),
        }
    }

    /// Counts a timeout at `now_ms`; returns how many the run now holds.
    fn record(&self, now_ms: u64) -> u32 {
        // At least 1, so a run's start is never the "no run" zero.
        let now = now_ms.clamp(1, u64::MAX >> 16);
        let mut current = self.run.load(Ordering::Relaxed);
        loop {
            let (start, count) = (current >> 16, current & 0xffff);
            let (start, count) = if start == 0 || now.saturating_sub(start) > self.window_ms {
                (now, 1)
            } else {
                (start, (count + 1).min(0xffff))
            };
            match self.run.compare_exchange_weak(
                current,
                (start << 16) | count,
                Ordering::Relaxed,
                Ordering::Relaxed,
            ) {
                Ok(_) => return u32::try_from(count).unwrap_or(u32::MAX),
                Err(actual) => current = actual,
            }
        }
    }

    /// An answer came: the run is over.
    fn clear(&self) {
        // Read first, so that the hot path (every answer, nearly always with no run) does not
        // write the shared line.
        if self.run.load(Ordering::Relaxed) != 0 {
            self.run.store(0, Ordering::Relaxed);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn timeouts_one_after_another_still_make_a_run_and_an_answer_ends_it() {
        // Three timeouts of 500 ms: a window of 1.5 s, so one caller's calls timing out in
        // turn (at 0.5, 1.0 and 1.5 s) count as one run.
        let run = TimeoutRun::new(WINDOW.max(Duration::from_millis(500) * 3));
        assert_eq!(run.record(500), 1);
        assert_eq!(run.record(1000), 2);
        assert_eq!(run.record(1500), 3);
        // Past the window, a new run.
        assert_eq!(run.record(3100), 1);
        assert_eq!(run.record(3200), 2);
        run.clear();
        assert_eq!(run.record(3300), 1, "an answer ends the run");
    }

    #[test]
    fn timeouts_arriving_together_all_count() {
        let run = std::sync::Arc::new(TimeoutRun::new(WINDOW));
        let threads: Vec<_> = (0..8)
            .map(|_| {
                let run = run.clone();
                std::thread::spawn(move || {
                    for _ in 0..100 {
                        run.record(10);
                    }
                })
            })
            .collect();
        for thread in threads {
            thread.join().unwrap();
        }
        assert_eq!(run.record(10), 801);
    }
}

//! The circuit breaker in front of Redis: a Redis that hangs (stopped, swapping, behind a
//! network that drops packets) must not hold every request for a timeout.
//!
//! A Redis that refuses connections fails fast, and each engine answers without it at once. A
//! Redis that accepts and never answers costs a request the whole response timeout
//! (`cluster.redis_timeout_ms`) per call. After `cluster.redis_breaker_timeouts` timeouts
//! within one second the breaker opens: every engine stops asking Redis and answers as it
//! does when Redis refuses connections (limits in process, turns ordered per instance,
//! spending counted here). A probe asks Redis for a `PING` every half second, itself bounded by
//! the timeout; the first answer in time closes the breaker. Each change is logged once, shown
//! on `/ready` (Redis `degraded`) and in `peergate_redis_breaker_open`.
//!
//! Under load the breaker opens within the first timeout: the requests in flight when Redis
//! stopped time out together. A request alone may meet up to the threshold's number of timeouts
//! before it opens; that bound is the price of not opening on one slow answer.

use redis::aio::ConnectionManager;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicU32, AtomicU64, Ordering};
use std::time::Duration;
use tokio::time::Instant;

/// How often an open breaker asks Redis whether it answers again.
pub const PROBE_EVERY: Duration = Duration::from_millis(500);
/// The window the timeouts are counted in.
pub const WINDOW: Duration = Duration::from_secs(1);

/// Whether Redis is asked at all (see the module's documentation).
pub struct Breaker {
    open: AtomicBool,
    /// Timeouts counted in the window that started at `window_start` (ms since `base`).
    timeouts: AtomicU32,
    window_start: AtomicU64,
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
            timeouts: AtomicU32::new(0),
            window_start: AtomicU64::new(0),
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
        if self.timeouts.load(Ordering::Relaxed) != 0 {
            self.timeouts.store(0, Ordering::Relaxed);
        }
    }

    /// A call timed out; the one that completes the run opens the breaker and starts the
    /// probe.
    pub fn timed_out(self: &Arc<Self>) {
        let now = u64::try_from(self.base.elapsed().as_millis()).unwrap_or(u64::MAX);
        let start = self.window_start.load(Ordering::Relaxed);
        let window = u64::try_from(WINDOW.as_millis()).unwrap_or(u64::MAX);
        let count = if now.saturating_sub(start) > window {
            self.window_start.store(now, Ordering::Relaxed);
            self.timeouts.store(1, Ordering::Relaxed);
            1
        } else {
            self.timeouts.fetch_add(1, Ordering::Relaxed) + 1
        };
        if count >= self.after && !self.open.swap(true, Ordering::Relaxed) {
            tracing::warn!(
                timeouts = count,
                "Redis does not answer in time: the circuit breaker is open, each instance answers on its own without waiting on Redis"
            );
            if let Ok(runtime) = tokio::runtime::Handle::try_current() {
                runtime.spawn(self.clone().probe());
            }
        }
    }

    /// Asks Redis every [`PROBE_EVERY`] until it answers in time, then closes.
    async fn probe(self: Arc<Self>) {
        loop {
            tokio::time::sleep(PROBE_EVERY).await;
            let mut connection = self.connection.clone();
            let ping = redis::cmd("PING");
            let answer = ping.query_async::<String>(&mut connection);
            if matches!(tokio::time::timeout(self.timeout, answer).await, Ok(Ok(_))) {
                self.timeouts.store(0, Ordering::Relaxed);
                self.open.store(false, Ordering::Relaxed);
                tracing::info!("Redis answers in time again: the circuit breaker is closed");
                return;
            }
        }
    }
}

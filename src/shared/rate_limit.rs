//! The rate-limit seam: check, refund and peek against a per-key quota.
//!
//! Every limit (per client address, per peer, failed authentications) asks a
//! [`RateLimiter`]. The in-process engine, [`LocalLimiter`], runs the GCRA of
//! [`crate::shared::gcra`] on the gateway's monotonic clock and answers at once; an engine that
//! asks another process (Redis, for several instances) answers later. [`LimitCheck`] carries
//! either, so the in-process path allocates nothing and a remote engine still fits.
//!
//! ```
//! use peergate::clock::ManualClock;
//! use peergate::layers::limit::{Decision, Quota};
//! use peergate::shared::rate_limit::{LocalLimiter, RateLimiter};
//! use std::sync::Arc;
//!
//! let clock = ManualClock::new(peergate::clock::Timestamp::UNIX_EPOCH);
//! let limiter = LocalLimiter::new(100, Arc::new(clock.clone()));
//! let quota = Quota::per_minute(1);
//! assert!(limiter.check(&"alice", quota).ready().unwrap().is_allowed());
//! assert!(!limiter.check(&"alice", quota).ready().unwrap().is_allowed());
//! clock.advance(std::time::Duration::from_secs(60));
//! assert!(limiter.peek(&"alice", quota).ready().unwrap().is_allowed());
//! ```

use crate::clock::Clock;
use crate::shared::gcra::{Decision, KeyedGcra, Quota};
use std::future::Future;
use std::hash::Hash;
use std::pin::Pin;
use std::sync::Arc;
use std::task::{Context, Poll};

/// Counts requests per key against a quota the caller gives with each check (so one limiter
/// serves keys with different quotas, such as peers with their own limits).
pub trait RateLimiter<K>: Send + Sync + std::fmt::Debug {
    /// Counts one request of `key`.
    fn check(&self, key: &K, quota: Quota) -> LimitCheck;
    /// Whether one request of `key` would pass now, without counting it.
    fn peek(&self, key: &K, quota: Quota) -> LimitCheck;
    /// Gives back one request counted for `key` against `quota` (an attempt that turned out to
    /// succeed).
    fn refund(&self, key: &K, quota: Quota);
    /// Forgets keys whose budget is whole again (they hold no information).
    fn forget_rested(&self);
}

/// A limiter's answer: now, or once a remote engine replies. Not boxed when it is ready.
pub enum LimitCheck {
    /// Decided in process.
    Ready(Decision),
    /// Waiting for another process.
    Pending(Pin<Box<dyn Future<Output = Decision> + Send>>),
}

impl LimitCheck {
    /// The decision, if it was made at once.
    pub fn ready(self) -> Option<Decision> {
        match self {
            Self::Ready(decision) => Some(decision),
            Self::Pending(_) => None,
        }
    }
}

impl std::fmt::Debug for LimitCheck {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Self::Ready(decision) => f.debug_tuple("Ready").field(decision).finish(),
            Self::Pending(_) => f.write_str("Pending"),
        }
    }
}

impl Future for LimitCheck {
    type Output = Decision;

    fn poll(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Decision> {
        match self.get_mut() {
            Self::Ready(decision) => Poll::Ready(*decision),
            Self::Pending(future) => future.as_mut().poll(cx),
        }
    }
}

/// The in-process engine: a bounded GCRA per key on the gateway's monotonic clock.
pub struct LocalLimiter<K> {
    gcra: KeyedGcra<K>,
    clock: Arc<dyn Clock>,
}

impl<K> std::fmt::Debug for LocalLimiter<K> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("LocalLimiter").finish_non_exhaustive()
    }
}

impl<K: Hash + Eq + Clone> LocalLimiter<K> {
    /// Tracks at most about `capacity` keys; past that, new keys are refused (fails closed).
    pub fn new(capacity: usize, clock: Arc<dyn Clock>) -> Self {
        Self {
            gcra: KeyedGcra::new(capacity),
            clock,
        }
    }

    /// Keys currently tracked.
    pub fn len(&self) -> usize {
        self.gcra.len()
    }

    /// Whether no key is tracked.
    pub fn is_empty(&self) -> bool {
        self.gcra.is_empty()
    }
}

impl<K: Hash + Eq + Clone + Send + Sync> RateLimiter<K> for LocalLimiter<K> {
    fn check(&self, key: &K, quota: Quota) -> LimitCheck {
        LimitCheck::Ready(self.gcra.check(key, quota, self.clock.monotonic_nanos()))
    }

    fn peek(&self, key: &K, quota: Quota) -> LimitCheck {
        LimitCheck::Ready(self.gcra.peek(key, quota, self.clock.monotonic_nanos()))
    }

    fn refund(&self, key: &K, _quota: Quota) {
        // The key's own interval is kept with its budget.
        self.gcra.refund(key, self.clock.monotonic_nanos());
    }

    fn forget_rested(&self) {
        self.gcra.purge(self.clock.monotonic_nanos());
    }
}

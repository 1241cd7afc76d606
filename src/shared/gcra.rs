//! The generic cell rate algorithm (GCRA): a token bucket without a background timer.
//!
//! Each key keeps one number, its theoretical arrival time (TAT). A quota of `n` per `period`
//! with a burst of `b` admits a request at time `t` when `max(TAT, t) + interval - b·interval`
//! is not after `t`, where `interval = period / n`. Over any stretch of time `L` a key is
//! therefore admitted at most `b + L / interval` times, and a refused caller is told exactly
//! when the next request will pass.
//!
//! Time comes in as nanoseconds from a [`Clock`](crate::clock::Clock), so tests move it.
//!
//! A key's quota may change between calls (an administrator raises a peer's limit). The
//! requests already counted keep counting as requests: the outstanding debt is rescaled to the
//! new interval, so raising a quota gives the new headroom at once.

use crate::locks::Locked;
use std::collections::HashMap;
use std::hash::{BuildHasher, Hash};
use std::sync::Mutex;
use std::time::Duration;

/// How many requests a key may make.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Quota {
    /// Requests per period.
    pub count: u32,
    /// The period.
    pub period: Duration,
    /// Requests allowed at once from a rested key.
    pub burst: u32,
}

impl Quota {
    /// `count` requests a minute, all of them allowed at once.
    pub fn per_minute(count: u32) -> Self {
        Self {
            count: count.max(1),
            period: Duration::from_secs(60),
            burst: count.max(1),
        }
    }

    fn interval_nanos(&self) -> i64 {
        let period = i64::try_from(self.period.as_nanos()).unwrap_or(i64::MAX);
        (period / i64::from(self.count.max(1))).max(1)
    }

    fn burst_nanos(&self) -> i64 {
        self.interval_nanos()
            .saturating_mul(i64::from(self.burst.max(1)))
    }
}

/// The outcome of one check.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Decision {
    /// Admitted.
    Allowed {
        /// Requests still allowed right now.
        remaining: u32,
        /// Time until the key's budget is whole again.
        reset: Duration,
    },
    /// Refused.
    Denied {
        /// Time until one request will be admitted.
        retry_after: Duration,
    },
}

impl Decision {
    /// Whether the request was admitted.
    pub fn is_allowed(&self) -> bool {
        matches!(self, Self::Allowed { .. })
    }
}

const SHARDS: usize = 16;

/// How often a full shard may be swept for rested keys; between sweeps a new key makes room by
/// evicting one key from a small sample, so a flood of new keys cannot make every request scan
/// a full shard.
const SWEEP_EVERY_NANOS: i64 = 1_000_000_000;

/// How many keys a full shard looks at to choose the one to evict.
const EVICTION_SAMPLE: usize = 16;

#[derive(Debug)]
struct Shard<K> {
    /// Per key: the TAT and the interval it was computed with.
    keys: HashMap<K, (i64, i64)>,
    last_sweep: i64,
}

/// A GCRA limiter over many keys, with bounded memory: at most `capacity` keys (rounded up to
/// a multiple of 16), each an entry of a key, two `i64`s and the map's overhead.
///
/// A key whose TAT has passed holds no information (it behaves exactly like a new key), so such
/// entries are dropped whenever a shard is full (at most once a second). When a shard is still
/// full of live keys, a new key evicts the one closest to rested among a sample of 16, and is
/// counted. Refusing new keys instead let a flood from many addresses (17k requests/s from
/// distinct IPv6 /64s filled the default table) lock out every client the table had not seen.
/// Evicting the least-indebted key keeps the ones with the most debt, such as an address that
/// spent its failed-attempt budget, longest; an evicted key starts again with a whole budget,
/// which an attacker who owns that many addresses has anyway.
#[derive(Debug)]
pub struct KeyedGcra<K> {
    shards: Vec<Mutex<Shard<K>>>,
    hasher: std::collections::hash_map::RandomState,
    shard_capacity: usize,
}

impl<K: Hash + Eq + Clone> KeyedGcra<K> {
    /// A limiter that tracks at most about `capacity` keys.
    pub fn new(capacity: usize) -> Self {
        Self {
            shards: (0..SHARDS)
                .map(|_| {
                    Mutex::new(Shard {
                        keys: HashMap::new(),
                        last_sweep: i64::MIN,
                    })
                })
                .collect(),
            hasher: std::collections::hash_map::RandomState::new(),
            shard_capacity: capacity.div_ceil(SHARDS).max(1),
        }
    }

    /// Counts one request of `key` at `monotonic_nanos` against `quota`.
    pub fn check(&self, key: &K, quota: Quota, monotonic_nanos: i64) -> Decision {
        self.check_n(key, quota, monotonic_nanos, 1)
    }

    /// Whether one request of `key` would be admitted now, without counting it.
    pub fn peek(&self, key: &K, quota: Quota, monotonic_nanos: i64) -> Decision {
        self.check_n(key, quota, monotonic_nanos, 0)
    }

    /// Gives back one request counted for `key` (a failed attempt that turned out to succeed).
    pub fn refund(&self, key: &K, monotonic_nanos: i64) {
        let mut shard = self.shard(key);
        if let Some((tat, interval)) = shard.keys.get_mut(key) {
            *tat = (*tat - *interval).max(monotonic_nanos);
        }
    }

    fn shard(&self, key: &K) -> std::sync::MutexGuard<'_, Shard<K>> {
        self.shards[(self.hasher.hash_one(key) as usize) % SHARDS].locked()
    }

    fn check_n(&self, key: &K, quota: Quota, now: i64, cost: i64) -> Decision {
        let mut shard = self.shard(key);
        let interval = quota.interval_nanos();
        let burst = quota.burst_nanos();
        let tat = match shard.keys.get(key).copied() {
            None => now,
            Some((tat, _)) if tat <= now => now,
            Some((tat, old_interval)) if old_interval == interval => tat,
            // Same number of requests owed, at the new interval.
            Some((tat, old_interval)) => {
                let owed = i128::from(tat - now) * i128::from(interval) / i128::from(old_interval);
                now.saturating_add(i64::try_from(owed).unwrap_or(i64::MAX))
            }
        };
        // With cost 0 (peek), ask whether one more request would pass.
        let new_tat = tat.saturating_add(interval.saturating_mul(cost.max(1)));
        let allow_at = new_tat.saturating_sub(burst);
        if now < allow_at {
            return Decision::Denied {
                retry_after: nanos(allow_at - now),
            };
        }
        if cost > 0 {
            if !shard.keys.contains_key(key) && shard.keys.len() >= self.shard_capacity {
                if now.saturating_sub(shard.last_sweep) >= SWEEP_EVERY_NANOS {
                    shard.last_sweep = now;
                    shard.keys.retain(|_, (tat, _)| *tat > now);
                }
                if shard.keys.len() >= self.shard_capacity {
                    // Full of live budgets: make room rather than grow or refuse.
                    let evicted = shard
                        .keys
                        .iter()
                        .take(EVICTION_SAMPLE)
                        .min_by_key(|(_, (tat, _))| *tat)
                        .map(|(evicted, _)| evicted.clone());
                    if let Some(evicted) = evicted {
                        shard.keys.remove(&evicted);
                    }
                }
            }
            shard.keys.insert(key.clone(), (new_tat, interval));
        }
        let used = if cost > 0 { new_tat } else { tat };
        let remaining = (now.saturating_add(burst).saturating_sub(used)) / interval;
        Decision::Allowed {
            remaining: u32::try_from(remaining.max(0)).unwrap_or(u32::MAX),
            reset: nanos(used - now),
        }
    }

    /// Keys currently tracked (for tests and metrics).
    pub fn len(&self) -> usize {
        self.shards.iter().map(|s| s.locked().keys.len()).sum()
    }

    /// Whether no key is tracked.
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// Drops every key whose budget is whole again.
    pub fn purge(&self, monotonic_nanos: i64) {
        for shard in &self.shards {
            shard
                .locked()
                .keys
                .retain(|_, (tat, _)| *tat > monotonic_nanos);
        }
    }
}

fn nanos(n: i64) -> Duration {
    Duration::from_nanos(u64::try_from(n.max(0)).unwrap_or(0))
}

/// Whole seconds to wait, rounded up and at least one: waiting that long always suffices.
pub fn retry_after_seconds(wait: Duration) -> u64 {
    let secs = wait.as_secs() + u64::from(wait.subsec_nanos() > 0);
    secs.max(1)
}

#[cfg(test)]
mod tests {
    use super::*;

    const SEC: i64 = 1_000_000_000;

    #[test]
    fn admits_the_burst_then_one_per_interval() {
        let limiter = KeyedGcra::new(100);
        let quota = Quota::per_minute(30);
        for i in 0..30 {
            match limiter.check(&"k", quota, 0) {
                Decision::Allowed { remaining, .. } => assert_eq!(remaining, 29 - i),
                d => panic!("request {i}: {d:?}"),
            }
        }
        let Decision::Denied { retry_after } = limiter.check(&"k", quota, 0) else {
            panic!("31st admitted")
        };
        assert_eq!(retry_after, Duration::from_secs(2));
        assert!(!limiter.check(&"k", quota, 2 * SEC - 1).is_allowed());
        assert!(limiter.check(&"k", quota, 2 * SEC).is_allowed());
        assert!(!limiter.check(&"k", quota, 2 * SEC).is_allowed());
        // Other keys are independent.
        assert!(limiter.check(&"other", quota, 0).is_allowed());
    }

    #[test]
    fn a_changed_quota_keeps_the_requests_already_counted() {
        let limiter = KeyedGcra::new(100);
        assert!(limiter.check(&"k", Quota::per_minute(1), 0).is_allowed());
        assert!(!limiter.check(&"k", Quota::per_minute(1), 0).is_allowed());
        let raised = Quota::per_minute(120);
        for i in 0..119 {
            assert!(limiter.check(&"k", raised, 0).is_allowed(), "request {i}");
        }
        assert!(!limiter.check(&"k", raised, 0).is_allowed());
        // Lowering it again: 120 owed at 1/min is far beyond the burst of 1.
        let Decision::Denied { retry_after } = limiter.check(&"k", Quota::per_minute(1), 0) else {
            panic!("admitted")
        };
        assert_eq!(retry_after, Duration::from_secs(120 * 60 - 60 + 60));
    }

    #[test]
    fn a_refund_gives_back_one_request() {
        let limiter = KeyedGcra::new(100);
        let quota = Quota::per_minute(2);
        assert!(limiter.check(&"k", quota, 0).is_allowed());
        assert!(limiter.check(&"k", quota, 0).is_allowed());
        assert!(!limiter.check(&"k", quota, 0).is_allowed());
        limiter.refund(&"k", 0);
        assert!(limiter.check(&"k", quota, 0).is_allowed());
        assert!(!limiter.check(&"k", quota, 0).is_allowed());
    }

    #[test]
    fn a_full_limiter_admits_new_keys_by_evicting_the_least_indebted() {
        let limiter = KeyedGcra::new(4 * SHARDS);
        let quota = Quota::per_minute(10);
        // One key spends its whole budget: the most debt in the table.
        let spender = u32::MAX;
        while limiter.check(&spender, quota, 0).is_allowed() {}
        // A flood of new keys, each with one request: every one is admitted.
        for key in 0..1_000u32 {
            assert!(limiter.check(&key, quota, 0).is_allowed(), "{key}");
        }
        assert!(limiter.len() <= 4 * SHARDS, "grew to {}", limiter.len());
        // The spender was never the one evicted: it is still refused.
        assert!(!limiter.check(&spender, quota, 0).is_allowed());
    }

    #[test]
    fn peek_counts_nothing() {
        let limiter = KeyedGcra::new(100);
        let quota = Quota::per_minute(1);
        assert!(limiter.peek(&1, quota, 0).is_allowed());
        assert!(limiter.peek(&1, quota, 0).is_allowed());
        assert!(limiter.check(&1, quota, 0).is_allowed());
        assert!(!limiter.peek(&1, quota, 0).is_allowed());
    }

    #[test]
    fn memory_stays_bounded_and_rested_keys_are_forgotten() {
        let limiter = KeyedGcra::new(64);
        let quota = Quota::per_minute(10);
        for key in 0..10_000u32 {
            limiter.check(&key, quota, 0);
        }
        assert!(limiter.len() <= 64 + SHARDS, "{}", limiter.len());
        // Once their budgets are whole again, new keys take their place.
        assert!(limiter.check(&99_999, quota, 60 * SEC).is_allowed());
        limiter.purge(60 * SEC);
        assert_eq!(limiter.len(), 1);
    }

    #[test]
    fn retry_after_rounds_up() {
        assert_eq!(retry_after_seconds(Duration::from_millis(1)), 1);
        assert_eq!(retry_after_seconds(Duration::from_millis(2000)), 2);
        assert_eq!(retry_after_seconds(Duration::from_millis(2001)), 3);
        assert_eq!(retry_after_seconds(Duration::ZERO), 1);
    }
}

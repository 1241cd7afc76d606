//! The rate-limit seam across instances: the same GCRA, kept in Redis.
//!
//! Each check is one atomic script on the key's theoretical arrival time, on Redis's own clock
//! (`TIME`), so instances whose clocks differ still share one budget; a key expires once its
//! budget is whole again, so Redis holds only live budgets.
//!
//! While Redis cannot be reached, each instance falls back to its in-process limiter with the
//! full quota (so a key may get up to the quota once per instance), logs one warning when it
//! falls back and one when Redis answers again, and counts the checks it answered locally
//! ([`RedisLimiter::local_answers`]). The door keeps answering: a peer within its quota is not
//! refused because Redis is away.

use super::{Degradation, Redis};
use crate::clock::Clock;
use crate::shared::gcra::{Decision, Quota};
use crate::shared::rate_limit::{LimitCheck, LocalLimiter, RateLimiter};
use redis::aio::ConnectionManager;
use std::fmt::Display;
use std::hash::Hash;
use std::sync::Arc;
use std::time::Duration;

/// GCRA on one key. KEYS[1]: the key. ARGV: interval (µs), burst tolerance (µs), cost (1 to
/// count, 0 to peek, -1 to give one back). Returns {allowed, remaining or wait (µs), reset
/// (µs)}.
const GCRA: &str = r"
local t = redis.call('TIME')
local now = tonumber(t[1]) * 1000000 + tonumber(t[2])
local interval = tonumber(ARGV[1])
local burst = tonumber(ARGV[2])
local cost = tonumber(ARGV[3])
local tat = tonumber(redis.call('GET', KEYS[1]) or now)
if tat < now then tat = now end
if cost < 0 then
  local earlier = tat - interval
  if earlier > now then
    redis.call('SET', KEYS[1], earlier, 'PX', math.ceil((earlier - now) / 1000) + 1)
  else
    redis.call('DEL', KEYS[1])
  end
  return {1, 0, 0}
end
local new_tat = tat + interval
local allow_at = new_tat - burst
if now < allow_at then
  return {0, allow_at - now, 0}
end
local used = tat
if cost > 0 then
  used = new_tat
  redis.call('SET', KEYS[1], new_tat, 'PX', math.ceil((new_tat - now) / 1000) + 1)
end
return {1, math.floor((now + burst - used) / interval), used - now}
";

/// A GCRA limiter whose budgets live in Redis, shared by every instance that uses the same
/// Redis and prefix.
pub struct RedisLimiter<K> {
    connection: ConnectionManager,
    script: Arc<redis::Script>,
    prefix: Arc<str>,
    fallback: Arc<LocalLimiter<K>>,
    health: Degradation,
}

impl<K> std::fmt::Debug for RedisLimiter<K> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("RedisLimiter")
            .field("prefix", &self.prefix)
            .finish_non_exhaustive()
    }
}

impl<K: Hash + Eq + Clone + Send + Sync + Display + 'static> RedisLimiter<K> {
    /// Budgets kept in `redis` under `prefix:`. The in-process fallback tracks at most
    /// `capacity` keys on `clock`.
    pub fn new(redis: &Redis, prefix: &str, capacity: usize, clock: Arc<dyn Clock>) -> Self {
        Self {
            connection: redis.connection(),
            script: Arc::new(redis::Script::new(GCRA)),
            prefix: prefix.into(),
            fallback: Arc::new(LocalLimiter::new(capacity, clock)),
            health: redis.degradation("rate limits"),
        }
    }

    /// The in-process limiter that answers while Redis does not.
    pub fn fallback(&self) -> Arc<LocalLimiter<K>> {
        self.fallback.clone()
    }

    /// Checks answered by the in-process fallback because Redis was away.
    pub fn local_answers(&self) -> u64 {
        self.health.local_answers()
    }

    fn run(&self, key: &K, quota: Quota, cost: i64) -> LimitCheck {
        let interval = (quota.period.as_micros() / u128::from(quota.count.max(1))).max(1);
        let interval = i64::try_from(interval).unwrap_or(i64::MAX);
        let burst = interval.saturating_mul(i64::from(quota.burst.max(1)));
        let redis_key = format!("{}:{key}", self.prefix);
        let script = self.script.clone();
        let mut connection = self.connection.clone();
        let (fallback, health) = (self.fallback.clone(), self.health.clone());
        let key = key.clone();
        LimitCheck::Pending(Box::pin(async move {
            // With the breaker open, straight to the fallback: nothing waits on Redis.
            let answer: Result<(i64, i64, i64), Option<redis::RedisError>> = if health.bypassed() {
                Err(None)
            } else {
                script
                    .key(redis_key)
                    .arg(interval)
                    .arg(burst)
                    .arg(cost)
                    .invoke_async(&mut connection)
                    .await
                    .map_err(Some)
            };
            match answer {
                Ok((allowed, value, reset)) => {
                    health.answered();
                    let micros = |v: i64| Duration::from_micros(u64::try_from(v).unwrap_or(0));
                    if allowed == 1 {
                        Decision::Allowed {
                            remaining: u32::try_from(value.max(0)).unwrap_or(u32::MAX),
                            reset: micros(reset),
                        }
                    } else {
                        Decision::Denied {
                            retry_after: micros(value),
                        }
                    }
                }
                Err(error) => {
                    if let Some(error) = error {
                        health.failed(&error);
                    }
                    match cost {
                        0 => fallback.peek(&key, quota).await,
                        c if c < 0 => {
                            fallback.refund(&key, quota);
                            Decision::Allowed {
                                remaining: 0,
                                reset: Duration::ZERO,
                            }
                        }
                        _ => fallback.check(&key, quota).await,
                    }
                }
            }
        }))
    }
}

impl<K: Hash + Eq + Clone + Send + Sync + Display + 'static> RateLimiter<K> for RedisLimiter<K> {
    fn check(&self, key: &K, quota: Quota) -> LimitCheck {
        self.run(key, quota, 1)
    }

    fn peek(&self, key: &K, quota: Quota) -> LimitCheck {
        self.run(key, quota, 0)
    }

    fn refund(&self, key: &K, quota: Quota) {
        // Given back without waiting: the answer that earned it is already on its way.
        if let LimitCheck::Pending(refund) = self.run(key, quota, -1) {
            tokio::spawn(refund);
        }
    }

    fn forget_rested(&self) {
        // Redis expires rested keys itself.
        self.fallback.forget_rested();
    }
}

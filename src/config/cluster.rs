//! `[cluster]`: how instances serving one store together tell the live from the gone. Read
//! only when a gateway serves a PostgreSQL store with Redis (several instances).

use super::{Invalid, invalid};
use serde::Deserialize;

/// `[cluster]`
#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ClusterPolicy {
    /// How long an instance's lease lasts; it is renewed every third of that. An instance
    /// whose lease lapsed a whole lease ago is gone: a survivor fails its working tasks as
    /// interrupted within about `lease_seconds` × 7/3 of its death.
    #[serde(default = "default_lease_seconds")]
    pub lease_seconds: u32,
    /// How long a call to Redis waits for its answer, in milliseconds.
    #[serde(default = "default_redis_timeout_ms")]
    pub redis_timeout_ms: u64,
    /// Timeouts within a second that open the breaker in front of Redis.
    #[serde(default = "default_redis_breaker_timeouts")]
    pub redis_breaker_timeouts: u32,
}

impl Default for ClusterPolicy {
    fn default() -> Self {
        Self {
            lease_seconds: default_lease_seconds(),
            redis_timeout_ms: default_redis_timeout_ms(),
            redis_breaker_timeouts: default_redis_breaker_timeouts(),
        }
    }
}

fn default_lease_seconds() -> u32 {
    15
}

fn default_redis_timeout_ms() -> u64 {
    u64::try_from(crate::shared::redis::DEFAULT_TIMEOUT.as_millis()).unwrap_or(500)
}

fn default_redis_breaker_timeouts() -> u32 {
    crate::shared::redis::DEFAULT_BREAKER_TIMEOUTS
}

impl ClusterPolicy {
    pub(super) fn validate(&self) -> Result<(), Invalid> {
        // Shorter leases lapse on a busy store's hiccup; longer ones leave a dead instance's
        // peers waiting.
        if !(2..=300).contains(&self.lease_seconds) {
            return Err(invalid(
                "cluster.lease_seconds",
                "must be between 2 and 300",
            ));
        }
        if !(50..=10_000).contains(&self.redis_timeout_ms) {
            return Err(invalid(
                "cluster.redis_timeout_ms",
                "must be between 50 and 10000",
            ));
        }
        if !(1..=100).contains(&self.redis_breaker_timeouts) {
            return Err(invalid(
                "cluster.redis_breaker_timeouts",
                "must be between 1 and 100",
            ));
        }
        Ok(())
    }
}

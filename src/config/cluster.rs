//! `[cluster]`: how instances serving one store together tell the live from the gone. Read
//! only when a gateway serves a PostgreSQL store with Redis (several instances).

use crate::units::{Bounded, Seconds};
use serde::Deserialize;

/// `[cluster]`
#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ClusterPolicy {
    /// How long an instance's lease lasts; it is renewed every third of that. An instance
    /// whose lease lapsed a whole lease ago is gone: a survivor fails its working tasks as
    /// interrupted within about `lease_seconds` × 7/3 of its death. Shorter leases lapse on a
    /// busy store's hiccup; longer ones leave a dead instance's peers waiting.
    #[serde(default = "default_lease_seconds")]
    pub lease_seconds: Seconds<2, 300>,
    /// How long a call to Redis waits for its answer, in milliseconds.
    #[serde(default = "default_redis_timeout_ms")]
    pub redis_timeout_ms: Bounded<50, 10_000>,
    /// Timeouts within a second that open the breaker in front of Redis.
    #[serde(default = "default_redis_breaker_timeouts")]
    pub redis_breaker_timeouts: Bounded<1, 100>,
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

fn default_lease_seconds() -> Seconds<2, 300> {
    const { Seconds::of(15) }
}

fn default_redis_timeout_ms() -> Bounded<50, 10_000> {
    const { Bounded::of(crate::shared::redis::DEFAULT_TIMEOUT.as_millis() as u64) }
}

fn default_redis_breaker_timeouts() -> Bounded<1, 100> {
    const { Bounded::of(crate::shared::redis::DEFAULT_BREAKER_TIMEOUTS as u64) }
}

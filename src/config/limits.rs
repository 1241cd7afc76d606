//! `[limits]`: requests per client address, failed authentications, and how many addresses
//! the limiters track.

use crate::units::Bounded;
use serde::Deserialize;

/// `[limits]`
#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct LimitsPolicy {
    /// Requests per minute per client address (IPv6 per /64), on the card and the door.
    #[serde(default = "default_per_ip_per_minute")]
    pub per_ip_per_minute: Bounded<1, { crate::admin::MAX_RATE_PER_MINUTE as u64 }>,
    /// Failed authentications per minute per client address.
    #[serde(default = "default_failed_auth_per_ip_per_minute")]
    pub failed_auth_per_ip_per_minute: Bounded<1, { crate::admin::MAX_RATE_PER_MINUTE as u64 }>,
    /// Client addresses each limiter tracks at most.
    #[serde(default = "default_tracked_addresses")]
    pub tracked_addresses: Bounded<16, 10_000_000>,
    /// Streams one peer may hold open at once, unless its own record says otherwise.
    #[serde(default = "default_streams_per_peer")]
    pub streams_per_peer: Bounded<1, { crate::admin::MAX_STREAMS_PER_PEER as u64 }>,
}

impl Default for LimitsPolicy {
    fn default() -> Self {
        Self {
            per_ip_per_minute: default_per_ip_per_minute(),
            failed_auth_per_ip_per_minute: default_failed_auth_per_ip_per_minute(),
            tracked_addresses: default_tracked_addresses(),
            streams_per_peer: default_streams_per_peer(),
        }
    }
}

fn default_per_ip_per_minute() -> Bounded<1, { crate::admin::MAX_RATE_PER_MINUTE as u64 }> {
    const { Bounded::of(120) }
}
fn default_failed_auth_per_ip_per_minute()
-> Bounded<1, { crate::admin::MAX_RATE_PER_MINUTE as u64 }> {
    const { Bounded::of(10) }
}
fn default_tracked_addresses() -> Bounded<16, 10_000_000> {
    const { Bounded::of(100_000) }
}
fn default_streams_per_peer() -> Bounded<1, { crate::admin::MAX_STREAMS_PER_PEER as u64 }> {
    const { Bounded::of(8) }
}

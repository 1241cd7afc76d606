//! `[limits]`: requests per client address, failed authentications, and how many addresses
//! the limiters track.

use super::{Invalid, invalid};
use crate::admin::MAX_RATE_PER_MINUTE;
use serde::Deserialize;

/// `[limits]`
#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct LimitsPolicy {
    /// Requests per minute per client address (IPv6 per /64), on the card and the door.
    #[serde(default = "default_per_ip_per_minute")]
    pub per_ip_per_minute: u32,
    /// Failed authentications per minute per client address.
    #[serde(default = "default_failed_auth_per_ip_per_minute")]
    pub failed_auth_per_ip_per_minute: u32,
    /// Client addresses each limiter tracks at most.
    #[serde(default = "default_tracked_addresses")]
    pub tracked_addresses: usize,
    /// Streams one peer may hold open at once, unless its own record says otherwise.
    #[serde(default = "default_streams_per_peer")]
    pub streams_per_peer: u32,
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

fn default_per_ip_per_minute() -> u32 {
    120
}
fn default_failed_auth_per_ip_per_minute() -> u32 {
    10
}
fn default_tracked_addresses() -> usize {
    100_000
}
fn default_streams_per_peer() -> u32 {
    8
}

impl LimitsPolicy {
    pub(super) fn validate(&self) -> Result<(), Invalid> {
        for (key, value) in [
            ("limits.per_ip_per_minute", self.per_ip_per_minute),
            (
                "limits.failed_auth_per_ip_per_minute",
                self.failed_auth_per_ip_per_minute,
            ),
        ] {
            if !(1..=MAX_RATE_PER_MINUTE).contains(&value) {
                return Err(invalid(key, "must be between 1 and 1000000000"));
            }
        }
        if !(16..=10_000_000).contains(&self.tracked_addresses) {
            return Err(invalid(
                "limits.tracked_addresses",
                "must be between 16 and 10000000",
            ));
        }
        if !(1..=crate::admin::MAX_STREAMS_PER_PEER).contains(&self.streams_per_peer) {
            return Err(invalid(
                "limits.streams_per_peer",
                "must be between 1 and 10000",
            ));
        }
        Ok(())
    }
}

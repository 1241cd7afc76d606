//! Rate limits: GCRA per client address, per peer, and a budget of failed authentications
//! per client address.
//!
//! Every refusal is a [`RateLimited`] naming the [`Limit`] that tripped; the refusal map
//! ([`crate::guard::refusal`]) turns it into the only 429 shape: an integer `Retry-After` of at
//! least one second, rounded up from the real wait (so a retry after that many seconds passes),
//! the `RateLimit-Policy` and `RateLimit` headers of the IETF httpapi draft, and a small JSON
//! body.

pub mod per_ip;
pub mod per_peer;
pub mod settle;

pub use crate::guard::limited::{Limit, RateLimited, insert_rate_limit_headers};
pub use crate::shared::gcra::{Decision, KeyedGcra, Quota, retry_after_seconds};
pub use per_ip::PerIpLimitLayer;
pub use per_peer::PerPeerLimitLayer;
pub use settle::SettleLayer;

/// Why a limit layer could not be built.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum LimitConfigError {
    /// A quota of zero requests would refuse everything.
    #[error("a quota must allow at least one request")]
    ZeroQuota,
    /// Tracking no keys cannot work.
    #[error("the limiter must be able to track at least one key")]
    ZeroCapacity,
}

pub(crate) fn check_config(quota: Quota, capacity: usize) -> Result<(), LimitConfigError> {
    if quota.count == 0 || quota.burst == 0 || quota.period.is_zero() {
        return Err(LimitConfigError::ZeroQuota);
    }
    if capacity == 0 {
        return Err(LimitConfigError::ZeroCapacity);
    }
    Ok(())
}

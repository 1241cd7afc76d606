//! Rate limits: GCRA per client address, per peer, and a budget of failed authentications
//! per client address.
//!
//! Every refusal is a [`RateLimited`] naming the [`Limit`] that tripped; the refusal map
//! ([`crate::http::refusal`]) turns it into the only 429 shape: an integer `Retry-After` of at
//! least one second, rounded up from the real wait (so a retry after that many seconds passes),
//! the `RateLimit-Policy` and `RateLimit` headers of the IETF httpapi draft, and a small JSON
//! body.

pub mod per_ip;
pub mod per_peer;

pub use crate::shared::gcra::{Decision, KeyedGcra, Quota, retry_after_seconds};
pub use per_ip::PerIpLimitLayer;
pub use per_peer::PerPeerLimitLayer;

use crate::http::refusal::Refusal;
use axum::http::{HeaderMap, HeaderValue};
use axum::response::{IntoResponse, Response};
use std::time::Duration;

/// Which limit a request ran into.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[non_exhaustive]
pub enum Limit {
    /// Requests per client address.
    PerIp,
    /// Failed authentications per client address.
    FailedAuth,
    /// Requests per authenticated peer.
    PerPeer,
}

impl Limit {
    /// The name used in the JSON body and the `RateLimit` headers.
    pub fn name(self) -> &'static str {
        match self {
            Self::PerIp => "per_ip",
            Self::FailedAuth => "failed_auth",
            Self::PerPeer => "per_peer",
        }
    }
}

/// A request refused by a rate limit.
#[derive(Debug, Clone, Copy, PartialEq, Eq, thiserror::Error)]
#[error("rate limit {} exceeded; retry after {} s", limit.name(), retry_after_seconds(*retry_after))]
pub struct RateLimited {
    /// The limit that tripped.
    pub limit: Limit,
    /// The real wait until one request passes.
    pub retry_after: Duration,
    /// The quota of that limit.
    pub quota: Quota,
}

impl IntoResponse for RateLimited {
    fn into_response(self) -> Response {
        Refusal::RateLimited(self).into_response()
    }
}

/// Adds `RateLimit-Policy: "<limit>";q=<count>;w=<window>` and
/// `RateLimit: "<limit>";r=<remaining>;t=<seconds>` (draft-ietf-httpapi-ratelimit-headers).
/// Each limit a request passed appends its own item.
pub fn insert_rate_limit_headers(
    headers: &mut HeaderMap,
    limit: Limit,
    quota: Quota,
    remaining: u32,
    reset_seconds: u64,
) {
    let name = limit.name();
    let mut policy = String::with_capacity(40);
    for piece in [
        "\"",
        name,
        "\";q=",
        &quota.count.to_string(),
        ";w=",
        &quota.period.as_secs().max(1).to_string(),
    ] {
        policy.push_str(piece);
    }
    let mut state = String::with_capacity(40);
    for piece in [
        "\"",
        name,
        "\";r=",
        &remaining.to_string(),
        ";t=",
        &reset_seconds.to_string(),
    ] {
        state.push_str(piece);
    }
    if let Ok(value) = HeaderValue::try_from(policy) {
        headers.append("ratelimit-policy", value);
    }
    if let Ok(value) = HeaderValue::try_from(state) {
        headers.append("ratelimit", value);
    }
}

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

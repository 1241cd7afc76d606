//! A request refused by a rate limit: which [`Limit`] tripped, the honest wait, and the
//! `RateLimit` headers every answer that passed a limit carries.

use super::reason::RefusalReason;
use crate::shared::gcra::{Quota, retry_after_seconds};
use axum::http::{HeaderMap, HeaderValue};
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

impl Limit {
    /// What `/metrics` counts a refusal by this limit under.
    pub fn reason(self) -> RefusalReason {
        match self {
            Self::PerIp => RefusalReason::PerIp,
            Self::FailedAuth => RefusalReason::FailedAuth,
            Self::PerPeer => RefusalReason::PerPeer,
        }
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

//! Rate limits: GCRA per client address, per peer, and a budget of failed authentications
//! per client address.
//!
//! Every refusal is a [`RateLimited`] naming the [`Limit`] that tripped; it becomes the only
//! 429 response shape: an integer `Retry-After` of at least one second, rounded up from the real
//! wait (so a retry after that many seconds passes), the `RateLimit-Policy` and `RateLimit`
//! headers of the IETF httpapi draft, and a small JSON body.

pub mod gcra;
pub mod per_ip;
pub mod per_peer;

pub use gcra::{Decision, KeyedGcra, Quota};
pub use per_ip::PerIpLimitLayer;
pub use per_peer::PerPeerLimitLayer;

use axum::http::{HeaderMap, HeaderValue, StatusCode, header};
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
#[error("rate limit {} exceeded; retry after {} s", limit.name(), gcra::retry_after_seconds(*retry_after))]
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
        let seconds = gcra::retry_after_seconds(self.retry_after);
        let name = self.limit.name();
        let (count, window) = (self.quota.count, self.quota.period.as_secs().max(1));
        // Assembled by hand: floods of 429 are the hot path of an abusive client.
        let (seconds_text, count_text, window_text) =
            (seconds.to_string(), count.to_string(), window.to_string());
        let mut body = String::with_capacity(192);
        for piece in [
            "{\"error\":{\"code\":\"rate_limited\",\"limit\":\"",
            name,
            "\",\"message\":\"too many requests (",
            name,
            " limit of ",
            &count_text,
            " per ",
            &window_text,
            " s); retry after ",
            &seconds_text,
            " s\",\"retryAfterSeconds\":",
            &seconds_text,
            "}}",
        ] {
            body.push_str(piece);
        }
        let mut response = (
            StatusCode::TOO_MANY_REQUESTS,
            [(
                header::CONTENT_TYPE,
                HeaderValue::from_static("application/json"),
            )],
            body,
        )
            .into_response();
        let headers = response.headers_mut();
        headers.insert(header::RETRY_AFTER, HeaderValue::from(seconds));
        insert_rate_limit_headers(headers, self.limit, self.quota, 0, seconds);
        response
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

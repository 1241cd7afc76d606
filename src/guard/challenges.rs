//! The `WWW-Authenticate` challenges a listener answers an unauthenticated request with.

use super::reason::RefusalReason;
use axum::http::HeaderValue;
use std::sync::Arc;

/// The `WWW-Authenticate` challenges of one listener, one per enabled scheme. A Bearer
/// challenge answering a token that was presented and refused carries `error="invalid_token"`
/// (RFC 6750 §3.1); both forms are built once.
#[derive(Debug, Clone)]
pub struct Challenges {
    pub(super) plain: Arc<[HeaderValue]>,
    pub(super) invalid_token: Arc<[HeaderValue]>,
    /// The reason the listener's refusals are counted under.
    pub(super) counted_as: RefusalReason,
    /// The schemes the listener accepts, as its policy names them, for the 401's body.
    pub(super) accepted: Arc<[&'static str]>,
}

impl Challenges {
    /// Challenges from their texts (`Bearer realm="…"`, `Basic realm="…"`, …).
    pub fn new<I: IntoIterator<Item = String>>(texts: I) -> Self {
        let texts: Vec<String> = texts.into_iter().collect();
        let build = |invalid: bool| -> Arc<[HeaderValue]> {
            texts
                .iter()
                .filter_map(|text| {
                    let text = if invalid && text.starts_with("Bearer ") {
                        format!(r#"{text}, error="invalid_token""#)
                    } else {
                        text.clone()
                    };
                    HeaderValue::try_from(text).ok()
                })
                .collect()
        };
        Self {
            plain: build(false),
            invalid_token: build(true),
            counted_as: RefusalReason::Unauthenticated,
            accepted: Arc::from(Vec::new()),
        }
    }

    /// The same challenges, on a listener accepting the schemes named `accepted`.
    pub fn accepting(mut self, accepted: Vec<&'static str>) -> Self {
        self.accepted = accepted.into();
        self
    }

    /// The same challenges, for a listener whose refusals are counted under `reason` (the
    /// admin API's as [`RefusalReason::AdminUnauthenticated`]).
    pub fn counted_as(mut self, reason: RefusalReason) -> Self {
        self.counted_as = reason;
        self
    }
}

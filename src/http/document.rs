//! Documents served with HTTP caching (RFC 9110): the Agent Card, later the JWKS.
//!
//! A [`CachedDocument`] holds exact bytes, a strong `ETag` over them, a `Last-Modified` that the
//! store keeps across restarts (it changes only when the bytes change), and a `Cache-Control`
//! value. [`CachedDocument::respond`] answers `If-None-Match` (one tag, a list, the weak form,
//! `*`) and, when that header is absent, `If-Modified-Since`, with 304 and no body.

use axum::body::Bytes;
use axum::http::{HeaderMap, HeaderValue, StatusCode, header};
use axum::response::{IntoResponse, Response};
use base64::Engine as _;
use sha2::{Digest, Sha256};
use std::time::{Duration, UNIX_EPOCH};

/// A document with its validators, built once per change.
#[derive(Debug, Clone)]
pub struct CachedDocument {
    bytes: Bytes,
    etag: HeaderValue,
    last_modified_secs: i64,
    last_modified: HeaderValue,
    cache_control: HeaderValue,
    vary: Option<HeaderValue>,
}

impl CachedDocument {
    /// A document whose content last changed at `last_modified`.
    pub fn new(
        bytes: Bytes,
        last_modified: crate::clock::Timestamp,
        cache_control: &'static str,
    ) -> Self {
        let last_modified_secs = last_modified.as_second();
        let time = UNIX_EPOCH + Duration::from_secs(u64::try_from(last_modified_secs).unwrap_or(0));
        Self {
            etag: HeaderValue::from_str(&etag_for(&bytes))
                .unwrap_or(HeaderValue::from_static("\"0\"")),
            last_modified: HeaderValue::from_str(&httpdate::fmt_http_date(time))
                .unwrap_or(HeaderValue::from_static("Thu, 01 Jan 1970 00:00:00 GMT")),
            last_modified_secs,
            bytes,
            cache_control: HeaderValue::from_static(cache_control),
            vary: None,
        }
    }

    /// Also answers with `Vary: <headers>`, for a URL whose document depends on them.
    pub fn varying_on(mut self, headers: &str) -> Self {
        self.vary = HeaderValue::from_str(headers).ok();
        self
    }

    /// Other bytes served as this document is (its time, cache control and `Vary`), with
    /// their own entity tag.
    pub fn with_bytes(&self, bytes: Bytes) -> Self {
        Self {
            etag: HeaderValue::from_str(&etag_for(&bytes))
                .unwrap_or(HeaderValue::from_static("\"0\"")),
            bytes,
            ..self.clone()
        }
    }

    /// The strong entity tag, quoted.
    pub fn etag(&self) -> &str {
        self.etag.to_str().unwrap_or_default()
    }

    /// The exact bytes served.
    pub fn bytes(&self) -> &Bytes {
        &self.bytes
    }

    /// 200 with the document, or 304 when the request's validators match.
    pub fn respond(&self, request: &HeaderMap) -> Response {
        let not_modified = match request.get(header::IF_NONE_MATCH) {
            // When If-None-Match is present, If-Modified-Since is ignored (RFC 9110 §13.1.3).
            Some(value) => value
                .to_str()
                .is_ok_and(|tags| none_match_hits(tags, self.etag())),
            None => request
                .get(header::IF_MODIFIED_SINCE)
                .and_then(|v| v.to_str().ok())
                .and_then(|v| httpdate::parse_http_date(v).ok())
                .and_then(|since| since.duration_since(UNIX_EPOCH).ok())
                .is_some_and(|since| {
                    i64::try_from(since.as_secs()).unwrap_or(i64::MAX) >= self.last_modified_secs
                }),
        };
        let mut response = if not_modified {
            StatusCode::NOT_MODIFIED.into_response()
        } else {
            (
                [(
                    header::CONTENT_TYPE,
                    HeaderValue::from_static("application/json"),
                )],
                self.bytes.clone(),
            )
                .into_response()
        };
        let headers = response.headers_mut();
        headers.insert(header::ETAG, self.etag.clone());
        headers.insert(header::LAST_MODIFIED, self.last_modified.clone());
        headers.insert(header::CACHE_CONTROL, self.cache_control.clone());
        if let Some(vary) = &self.vary {
            headers.insert(header::VARY, vary.clone());
        }
        response
    }
}

/// A strong entity tag: the base64url SHA-256 of the exact bytes.
pub fn etag_for(bytes: &[u8]) -> String {
    let digest = Sha256::digest(bytes);
    format!(
        "\"{}\"",
        base64::engine::general_purpose::URL_SAFE_NO_PAD.encode(digest)
    )
}

/// Whether an `If-None-Match` value matches `etag` by weak comparison (the rule for this header).
fn none_match_hits(value: &str, etag: &str) -> bool {
    let value = value.trim();
    if value == "*" {
        return true;
    }
    let opaque = etag.trim_start_matches("W/");
    value
        .split(',')
        .map(|tag| tag.trim().trim_start_matches("W/"))
        .any(|tag| tag == opaque)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn if_none_match_forms() {
        let etag = "\"abc\"";
        for hit in ["\"abc\"", "W/\"abc\"", "\"x\", \"abc\"", "*", " \"abc\" "] {
            assert!(none_match_hits(hit, etag), "{hit}");
        }
        for miss in ["\"abd\"", "abc", "\"x\", \"y\"", ""] {
            assert!(!none_match_hits(miss, etag), "{miss}");
        }
    }
}

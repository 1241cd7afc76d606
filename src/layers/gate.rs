//! The A2A protocol gate: version and required extensions, checked before any backend work.
//!
//! * `A2A-Version` (header, or the `A2A-Version` query parameter): `1` or `1.x` passes; any other
//!   explicit version is JSON-RPC `-32009`. A request naming none passes as 1.0, unless the policy
//!   asks for strictness (the spec reads a missing version as 0.3, which this door does not speak).
//! * `A2A-Extensions` (comma-separated URIs, several header lines allowed): every extension the
//!   policy marks `required` must be listed, exactly, else `-32008`. The answer's
//!   `A2A-Extensions` lists the requested extensions this agent supports, the ones activated.
//!
//! Refusals are JSON-RPC errors inside HTTP 200 that echo the request's id, so the gate reads the
//! body, bounded by the body limit, on the refusal path only.
//!
//! ```
//! use axum::{Router, routing::post, body::Body, http::{Request, StatusCode}};
//! use peergate::layers::gate::GateLayer;
//! use tower::ServiceExt;
//! # tokio::runtime::Runtime::new().unwrap().block_on(async {
//! let app = Router::new()
//!     .route("/", post(|| async { "served" }))
//!     .layer(GateLayer::new(false, vec![], 1 << 20));
//! let request = Request::post("/")
//!     .header("a2a-version", "0.3")
//!     .body(Body::from(r#"{"jsonrpc":"2.0","id":7,"method":"GetTask"}"#))
//!     .unwrap();
//! let response = app.oneshot(request).await.unwrap();
//! assert_eq!(response.status(), StatusCode::OK);
//! let body = axum::body::to_bytes(response.into_body(), 4096).await.unwrap();
//! let body: serde_json::Value = serde_json::from_slice(&body).unwrap();
//! assert_eq!((body["id"].as_i64(), body["error"]["code"].as_i64()), (Some(7), Some(-32009)));
//! # });
//! ```

use crate::guard::future::{GuardFuture, take_readied};
use crate::guard::refusal::RefusalReason;
use crate::protocol::error::A2aError;
use crate::protocol::jsonrpc::{self, RpcId};
use axum::Extension;
use axum::body::Body;
use axum::http::{HeaderMap, HeaderName, HeaderValue, Request, header};
use axum::response::{IntoResponse, Response};
use std::sync::Arc;
use std::task::{Context, Poll};
use tower::{Layer, Service};

/// Checks the protocol version and required extensions of each request.
#[derive(Debug, Clone)]
pub struct GateLayer {
    shared: Arc<GateSettings>,
}

#[derive(Debug)]
struct GateSettings {
    /// Refusals in the HTTP+JSON binding's shape instead of JSON-RPC's.
    http_json: bool,
    require_version: bool,
    /// (URI, required) for every extension the card declares.
    extensions: Vec<(String, bool)>,
    max_body_bytes: usize,
}

impl GateLayer {
    /// A gate; `extensions` pairs each supported extension URI with whether it is required.
    pub fn new(
        require_version: bool,
        extensions: Vec<(String, bool)>,
        max_body_bytes: usize,
    ) -> Self {
        Self {
            shared: Arc::new(GateSettings {
                http_json: false,
                require_version,
                extensions,
                max_body_bytes,
            }),
        }
    }

    /// The same gate in front of the HTTP+JSON binding: a refusal is a `google.rpc.Status`
    /// body with the binding's HTTP status, and no body is read.
    pub fn for_http_json(&self) -> Self {
        Self {
            shared: Arc::new(GateSettings {
                http_json: true,
                require_version: self.shared.require_version,
                extensions: self.shared.extensions.clone(),
                max_body_bytes: self.shared.max_body_bytes,
            }),
        }
    }
}

impl<S> Layer<S> for GateLayer {
    type Service = Gate<S>;

    fn layer(&self, inner: S) -> Self::Service {
        Gate {
            inner,
            shared: self.shared.clone(),
        }
    }
}

/// The service made by [`GateLayer`].
#[derive(Debug, Clone)]
pub struct Gate<S> {
    inner: S,
    shared: Arc<GateSettings>,
}

impl GateSettings {
    /// The refusal for this request, if any, and the extensions it activates.
    fn check(&self, request: &Request<Body>) -> Result<Vec<&str>, A2aError> {
        let version = requested_version(request)?;
        match version.as_deref() {
            None if self.require_version => {
                return Err(A2aError::VersionNotSupported {
                    requested: String::new(),
                });
            }
            None => {}
            Some(v) if is_v1(v) => {}
            Some(v) => {
                return Err(A2aError::VersionNotSupported {
                    requested: v.chars().take(16).collect(),
                });
            }
        }
        let requested = requested_extensions(request.headers());
        let missing: Vec<String> = self
            .extensions
            .iter()
            .filter(|(uri, required)| *required && !requested.contains(&uri.as_str()))
            .map(|(uri, _)| uri.clone())
            .collect();
        if !missing.is_empty() {
            return Err(A2aError::ExtensionSupportRequired { missing });
        }
        Ok(self
            .extensions
            .iter()
            .map(|(uri, _)| uri.as_str())
            .filter(|uri| requested.contains(uri))
            .collect())
    }
}

/// `1`, `1.0`, `1.1`, …: major version 1, with patch numbers ignored as the spec asks.
fn is_v1(version: &str) -> bool {
    let mut parts = version.trim().split('.');
    parts.next() == Some("1")
        && parts.all(|p| !p.is_empty() && p.bytes().all(|b| b.is_ascii_digit()))
}

/// The version the request names. Named twice (two header lines, or two query parameters) is
/// refused rather than first-wins: a proxy in front and the gateway behind it could otherwise
/// each act on a different one.
fn requested_version(request: &Request<Body>) -> Result<Option<String>, A2aError> {
    const TWICE: A2aError =
        A2aError::InvalidRequest("A2A-Version is named more than once; send it once");
    let mut headers = request.headers().get_all("a2a-version").iter();
    if let Some(value) = headers.next() {
        if headers.next().is_some() {
            return Err(TWICE);
        }
        let value = value.to_str().unwrap_or("?").trim();
        return Ok((!value.is_empty()).then(|| value.to_owned()));
    }
    let Some(query) = request.uri().query() else {
        return Ok(None);
    };
    let mut named = query
        .split('&')
        .filter_map(|pair| pair.split_once('='))
        .filter(|(name, _)| name.eq_ignore_ascii_case("a2a-version"))
        .map(|(_, value)| value.trim());
    let first = named.next();
    if named.next().is_some() {
        return Err(TWICE);
    }
    Ok(first.filter(|value| !value.is_empty()).map(str::to_owned))
}

fn requested_extensions(headers: &HeaderMap) -> Vec<&str> {
    headers
        .get_all("a2a-extensions")
        .iter()
        .filter_map(|v| v.to_str().ok())
        .flat_map(|v| v.split(','))
        .map(str::trim)
        .filter(|uri| !uri.is_empty())
        .collect()
}

impl<S> Service<Request<Body>> for Gate<S>
where
    S: Service<Request<Body>, Response = Response> + Clone + Send + 'static,
    S::Future: Send + 'static,
    S::Error: Send + 'static,
{
    type Response = Response;
    type Error = S::Error;
    type Future = GuardFuture<S>;

    fn poll_ready(&mut self, cx: &mut Context<'_>) -> Poll<Result<(), Self::Error>> {
        self.inner.poll_ready(cx)
    }

    fn call(&mut self, request: Request<Body>) -> Self::Future {
        let refusal = match self.shared.check(&request) {
            Ok(activated) => {
                let activated = (!activated.is_empty())
                    .then(|| HeaderValue::from_str(&activated.join(", ")).ok())
                    .flatten()
                    .map(|value| HeaderMap::from_iter([(A2A_EXTENSIONS, value)]));
                return GuardFuture::pass(&mut self.inner, request, activated);
            }
            Err(refusal) => refusal,
        };
        let reason = match refusal {
            A2aError::ExtensionSupportRequired { .. } => RefusalReason::ExtensionRequired,
            _ => RefusalReason::VersionNotSupported,
        };
        if self.shared.http_json {
            let status = axum::http::StatusCode::from_u16(refusal.http_status())
                .unwrap_or(axum::http::StatusCode::BAD_REQUEST);
            let body = refusal.http_body();
            let media_type = HeaderValue::from_static(jsonrpc::HTTP_JSON_MEDIA_TYPE);
            return GuardFuture::answer(
                (
                    status,
                    [(header::CONTENT_TYPE, media_type)],
                    Extension(reason),
                    // The typed error, for a binding that writes it in its own form (gRPC).
                    Extension(refusal.clone()),
                    body.to_string(),
                )
                    .into_response(),
            );
        }
        let limit = self.shared.max_body_bytes;
        GuardFuture::check(
            take_readied(&mut self.inner),
            Box::pin(async move {
                // Read the body only to echo the request's id.
                let id = match axum::body::to_bytes(request.into_body(), limit).await {
                    Ok(body) => jsonrpc::parse_request(&body).map_or_else(|f| f.id, |r| r.id),
                    Err(_) => RpcId::Null,
                };
                let body = jsonrpc::failure(&id, &refusal);
                Err((
                    [(
                        header::CONTENT_TYPE,
                        HeaderValue::from_static("application/json"),
                    )],
                    Extension(reason),
                    body,
                )
                    .into_response())
            }),
        )
    }
}

/// The answer's header naming the activated extensions.
const A2A_EXTENSIONS: HeaderName = HeaderName::from_static("a2a-extensions");

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn recognises_version_one() {
        for ok in ["1", "1.0", "1.1", " 1.0 ", "1.0.3"] {
            assert!(is_v1(ok), "{ok}");
        }
        for bad in ["0.3", "2.0", "1.", "1.x", "10.0", "v1", ""] {
            assert!(!is_v1(bad), "{bad}");
        }
    }
}

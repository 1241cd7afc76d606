//! The A2A protocol gate: reads the version and extensions each A2A request names, for the call
//! pipeline to decide on before any other work (`crate::a2a::pipeline`).
//!
//! * `A2A-Version` (header, or the `A2A-Version` query parameter): `1` or `1.x` passes; any other
//!   explicit version is refused with `-32009`. A request naming none passes as 1.0, unless the
//!   policy asks for strictness (the spec reads a missing version as 0.3, which this door does
//!   not speak).
//! * `A2A-Extensions` (comma-separated URIs, several header lines allowed): every extension the
//!   policy marks `required` must be listed, exactly, else `-32008`. The answer's
//!   `A2A-Extensions` lists the requested extensions this agent supports, the ones activated.
//!
//! The gate answers nothing itself: what it read rides on the request as [`ProtocolAsked`],
//! which the caller carries into the pipeline, and each binding writes a refusal in its own
//! form (JSON-RPC under the request's own id, HTTP+JSON, gRPC). On the way out it only adds
//! the `A2A-Extensions` header.
//!
//! ```
//! use axum::{Extension, Router, routing::post, body::Body, http::Request};
//! use peergate::layers::gate::{GateLayer, ProtocolAsked};
//! use tower::ServiceExt;
//! # tokio::runtime::Runtime::new().unwrap().block_on(async {
//! let app = Router::new()
//!     .route("/", post(|Extension(asked): Extension<ProtocolAsked>| async move {
//!         asked.refused.map_or(0, |error| error.code()).to_string()
//!     }))
//!     .layer(GateLayer::new(false, vec![]));
//! let request = Request::post("/").header("a2a-version", "0.3").body(Body::empty()).unwrap();
//! let response = app.oneshot(request).await.unwrap();
//! let body = axum::body::to_bytes(response.into_body(), 64).await.unwrap();
//! assert_eq!(&body[..], b"-32009");
//! # });
//! ```

use crate::guard::future::GuardFuture;
use crate::protocol::error::A2aError;
use axum::body::Body;
use axum::http::{HeaderMap, HeaderName, HeaderValue, Request};
use axum::response::Response;
use std::sync::Arc;
use std::task::{Context, Poll};
use tower::{Layer, Service};

/// Reads the protocol version and extensions of each request.
#[derive(Debug, Clone)]
pub struct GateLayer {
    shared: Arc<GateSettings>,
}

#[derive(Debug)]
struct GateSettings {
    require_version: bool,
    /// (URI, required) for every extension the card declares.
    extensions: Vec<(String, bool)>,
}

/// What a request asked of the protocol: the extensions it activates, or why it cannot be
/// served (a version this door does not speak, a required extension it did not list).
#[derive(Debug, Clone, Default)]
pub struct ProtocolAsked {
    /// The requested extensions this agent supports.
    pub activated: Vec<String>,
    /// The refusal the pipeline answers with before anything else, if any.
    pub refused: Option<A2aError>,
}

impl GateLayer {
    /// A gate; `extensions` pairs each supported extension URI with whether it is required.
    pub fn new(require_version: bool, extensions: Vec<(String, bool)>) -> Self {
        Self {
            shared: Arc::new(GateSettings {
                require_version,
                extensions,
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
    fn check(&self, request: &Request<Body>) -> Result<Vec<String>, A2aError> {
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
            .filter(|(uri, _)| requested.contains(&uri.as_str()))
            .map(|(uri, _)| uri.clone())
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

    fn call(&mut self, mut request: Request<Body>) -> Self::Future {
        let asked = match self.shared.check(&request) {
            Ok(activated) => ProtocolAsked {
                activated,
                refused: None,
            },
            Err(refused) => ProtocolAsked {
                activated: Vec::new(),
                refused: Some(refused),
            },
        };
        let header = (!asked.activated.is_empty())
            .then(|| HeaderValue::from_str(&asked.activated.join(", ")).ok())
            .flatten()
            .map(|value| HeaderMap::from_iter([(A2A_EXTENSIONS, value)]));
        request.extensions_mut().insert(asked);
        GuardFuture::pass(&mut self.inner, request, header)
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

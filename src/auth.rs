//! Authentication of partner agents: `Authorization: Bearer <peer token>`.
//!
//! [`BearerAuthLayer`] sits in front of the A2A door. Its service decides before the handler
//! runs: a request without a valid, unrevoked peer token is answered 401 with a
//! `WWW-Authenticate: Bearer` challenge and never reaches the handler. A request that passes
//! carries an [`AuthenticatedPeer`], which only this module can construct, so a handler that
//! takes one cannot be reached unauthenticated.
//!
//! Verified credentials are cached for `auth.credential_cache_seconds` (at most 5 s), so the
//! hot path does no store read; a revocation written by the command line reaches a running
//! server within that time.
//!
//! ```
//! use axum::{Router, routing::post, body::Body, http::{Request, StatusCode}};
//! use peergate::auth::{AuthenticatedPeer, BearerAuthLayer, PeerAuthenticator};
//! use tower::ServiceExt;
//! # tokio::runtime::Runtime::new().unwrap().block_on(async {
//! let dir = tempfile::tempdir().unwrap();
//! let store = peergate::store::Store::open(dir.path()).await.unwrap();
//! let clock = std::sync::Arc::new(peergate::clock::SystemClock);
//! let auth = PeerAuthenticator::new(store, clock, std::time::Duration::from_secs(2));
//! let app = Router::new()
//!     .route("/a2a", post(|peer: AuthenticatedPeer| async move { peer.name().to_owned() }))
//!     .layer(BearerAuthLayer::new(auth));
//! let response = app
//!     .oneshot(Request::post("/a2a").body(Body::empty()).unwrap())
//!     .await
//!     .unwrap();
//! assert_eq!(response.status(), StatusCode::UNAUTHORIZED);
//! assert!(response.headers()["www-authenticate"].to_str().unwrap().starts_with("Bearer"));
//! # });
//! ```

use crate::clock::Clock;
use crate::store::{CredentialRecord, Store};
use crate::token;
use axum::body::Body;
use axum::extract::FromRequestParts;
use axum::http::request::Parts;
use axum::http::{HeaderMap, HeaderValue, Request, StatusCode, header};
use axum::response::{IntoResponse, Response};
use moka::future::Cache;
use serde_json::json;
use std::future::Future;
use std::pin::Pin;
use std::sync::Arc;
use std::task::{Context, Poll};
use std::time::Duration;
use tower::{Layer, Service};

/// A peer whose credential was verified for this request. Only this module constructs it.
#[derive(Debug, Clone)]
pub struct AuthenticatedPeer {
    id: Arc<str>,
    name: Arc<str>,
    rate_per_minute: u32,
}

impl AuthenticatedPeer {
    /// The peer's stable id.
    pub fn id(&self) -> &str {
        &self.id
    }
    /// The peer's name.
    pub fn name(&self) -> &str {
        &self.name
    }
    /// The peer's quota in requests per minute.
    pub fn rate_per_minute(&self) -> u32 {
        self.rate_per_minute
    }
}

impl<S: Send + Sync> FromRequestParts<S> for AuthenticatedPeer {
    type Rejection = AuthError;

    async fn from_request_parts(parts: &mut Parts, _state: &S) -> Result<Self, Self::Rejection> {
        // Absent only when a route was mounted without the layer: fail closed.
        parts
            .extensions
            .get::<AuthenticatedPeer>()
            .cloned()
            .ok_or(AuthError::MissingCredentials)
    }
}

/// Why a request was not authenticated.
#[derive(Debug, Clone, Copy, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum AuthError {
    /// No `Authorization` header.
    #[error("no credentials were presented")]
    MissingCredentials,
    /// Not `Bearer <token>`, or more than one `Authorization` header.
    #[error("the Authorization header is not a single `Bearer <token>`")]
    MalformedHeader,
    /// Not a well-formed peer token, or its checksum fails (decided without the store).
    #[error("the token is not a peer token")]
    MalformedToken,
    /// Unknown, wrong or revoked. One case on purpose: the answer must not tell them apart.
    #[error("the token is not valid")]
    InvalidToken,
    /// The store could not be asked.
    #[error("credentials cannot be checked right now")]
    Unavailable,
}

impl AuthError {
    /// The stable code in the JSON body.
    pub fn code(self) -> &'static str {
        match self {
            Self::MissingCredentials => "missing_credentials",
            Self::MalformedHeader => "malformed_authorization",
            Self::MalformedToken | Self::InvalidToken => "invalid_token",
            Self::Unavailable => "auth_unavailable",
        }
    }
}

impl IntoResponse for AuthError {
    fn into_response(self) -> Response {
        let (status, challenge) = match self {
            Self::MissingCredentials => (StatusCode::UNAUTHORIZED, r#"Bearer realm="peergate""#),
            Self::MalformedHeader => (
                StatusCode::UNAUTHORIZED,
                r#"Bearer realm="peergate", error="invalid_request""#,
            ),
            Self::MalformedToken | Self::InvalidToken => (
                StatusCode::UNAUTHORIZED,
                r#"Bearer realm="peergate", error="invalid_token""#,
            ),
            Self::Unavailable => (StatusCode::SERVICE_UNAVAILABLE, ""),
        };
        let body = json!({"error": {"code": self.code(), "message": self.to_string()}});
        let mut response = (status, axum::Json(body)).into_response();
        if !challenge.is_empty() {
            response.headers_mut().insert(
                header::WWW_AUTHENTICATE,
                HeaderValue::from_static(challenge),
            );
        }
        if status == StatusCode::SERVICE_UNAVAILABLE {
            response
                .headers_mut()
                .insert(header::RETRY_AFTER, HeaderValue::from_static("1"));
        }
        response
    }
}

/// Verifies peer tokens against the store, with a short-lived cache.
pub struct PeerAuthenticator {
    store: Store,
    clock: Arc<dyn Clock>,
    verified: Option<Cache<String, Arc<CredentialRecord>>>,
    recently_touched: Cache<Arc<str>, ()>,
}

impl std::fmt::Debug for PeerAuthenticator {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("PeerAuthenticator").finish_non_exhaustive()
    }
}

impl PeerAuthenticator {
    /// An authenticator that trusts a verified credential for `cache_ttl` (zero: never cached).
    pub fn new(store: Store, clock: Arc<dyn Clock>, cache_ttl: Duration) -> Self {
        let verified = (!cache_ttl.is_zero()).then(|| {
            Cache::builder()
                .max_capacity(100_000)
                .time_to_live(cache_ttl)
                .build()
        });
        let recently_touched = Cache::builder()
            .max_capacity(100_000)
            .time_to_live(Duration::from_secs(60))
            .build();
        Self {
            store,
            clock,
            verified,
            recently_touched,
        }
    }

    /// Authenticates the request's headers.
    pub async fn authenticate(&self, headers: &HeaderMap) -> Result<AuthenticatedPeer, AuthError> {
        let mut values = headers.get_all(header::AUTHORIZATION).iter();
        let value = values.next().ok_or(AuthError::MissingCredentials)?;
        if values.next().is_some() {
            return Err(AuthError::MalformedHeader);
        }
        let presented = bearer_token(value).ok_or(AuthError::MalformedHeader)?;
        let parsed = token::parse(presented).map_err(|_| AuthError::MalformedToken)?;
        let record = self.credential(parsed.token_id).await?;
        let record = record.ok_or(AuthError::InvalidToken)?;
        if !parsed.matches(&record.secret_hash) || !record.active {
            return Err(AuthError::InvalidToken);
        }
        let peer = AuthenticatedPeer {
            id: Arc::from(record.peer_id.as_str()),
            name: Arc::from(record.peer_name.as_str()),
            rate_per_minute: record.rate_per_minute,
        };
        self.note_use(&peer).await;
        Ok(peer)
    }

    async fn credential(&self, token_id: &str) -> Result<Option<Arc<CredentialRecord>>, AuthError> {
        if let Some(cache) = &self.verified
            && let Some(hit) = cache.get(token_id).await
        {
            return Ok(Some(hit));
        }
        let record = self.store.find_credential(token_id).await.map_err(|e| {
            tracing::error!(error = %e, "credential look-up failed");
            AuthError::Unavailable
        })?;
        let Some(record) = record else {
            return Ok(None);
        };
        let record = Arc::new(record);
        if let Some(cache) = &self.verified {
            cache.insert(token_id.to_owned(), record.clone()).await;
        }
        Ok(Some(record))
    }

    /// Records "last used" at most once a minute per peer; failure only costs the timestamp.
    async fn note_use(&self, peer: &AuthenticatedPeer) {
        if self.recently_touched.contains_key(&peer.id) {
            return;
        }
        self.recently_touched.insert(peer.id.clone(), ()).await;
        if let Err(e) = self
            .store
            .touch_peer(&peer.id, self.clock.now_millis())
            .await
        {
            tracing::warn!(error = %e, "could not record last use of a peer");
        }
    }
}

/// The token of `Bearer <token>`; the scheme is case-insensitive (RFC 9110 §11.1).
fn bearer_token(value: &HeaderValue) -> Option<&str> {
    let value = value.to_str().ok()?;
    let (scheme, rest) = value.split_once(' ')?;
    if !scheme.eq_ignore_ascii_case("bearer") {
        return None;
    }
    let token = rest.trim_matches(' ');
    (!token.is_empty() && !token.contains(' ')).then_some(token)
}

/// Requires a valid peer token in front of the wrapped service.
#[derive(Clone)]
pub struct BearerAuthLayer {
    authenticator: Arc<PeerAuthenticator>,
}

impl BearerAuthLayer {
    /// A layer that authenticates with `authenticator`.
    pub fn new(authenticator: PeerAuthenticator) -> Self {
        Self {
            authenticator: Arc::new(authenticator),
        }
    }
}

impl<S> Layer<S> for BearerAuthLayer {
    type Service = BearerAuth<S>;

    fn layer(&self, inner: S) -> Self::Service {
        BearerAuth {
            inner,
            authenticator: self.authenticator.clone(),
        }
    }
}

/// The service made by [`BearerAuthLayer`].
#[derive(Clone)]
pub struct BearerAuth<S> {
    inner: S,
    authenticator: Arc<PeerAuthenticator>,
}

impl<S> Service<Request<Body>> for BearerAuth<S>
where
    S: Service<Request<Body>, Response = Response> + Clone + Send + 'static,
    S::Future: Send + 'static,
{
    type Response = Response;
    type Error = S::Error;
    type Future = Pin<Box<dyn Future<Output = Result<Response, S::Error>> + Send>>;

    fn poll_ready(&mut self, cx: &mut Context<'_>) -> Poll<Result<(), Self::Error>> {
        self.inner.poll_ready(cx)
    }

    fn call(&mut self, mut request: Request<Body>) -> Self::Future {
        // The readied service goes into the future; a fresh clone stays for the next call.
        let clone = self.inner.clone();
        let mut inner = std::mem::replace(&mut self.inner, clone);
        let authenticator = self.authenticator.clone();
        Box::pin(async move {
            match authenticator.authenticate(request.headers()).await {
                Ok(peer) => {
                    request.extensions_mut().insert(peer);
                    inner.call(request).await
                }
                Err(rejection) => Ok(rejection.into_response()),
            }
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use axum::Router;
    use axum::routing::post;
    use tower::ServiceExt;

    #[tokio::test]
    async fn a_route_mounted_without_the_layer_refuses() {
        let app = Router::new().route(
            "/a2a",
            post(|peer: AuthenticatedPeer| async move { peer.name().to_owned() }),
        );
        let request = Request::post("/a2a")
            .header("authorization", "Bearer anything")
            .body(Body::empty())
            .unwrap();
        let response = app.oneshot(request).await.unwrap();
        assert_eq!(response.status(), StatusCode::UNAUTHORIZED);
    }

    #[test]
    fn reads_bearer_scheme_case_insensitively() {
        let v = HeaderValue::from_static("bearer abc");
        assert_eq!(bearer_token(&v), Some("abc"));
        let v = HeaderValue::from_static("Basic abc");
        assert_eq!(bearer_token(&v), None);
        let v = HeaderValue::from_static("Bearer");
        assert_eq!(bearer_token(&v), None);
        let v = HeaderValue::from_static("Bearer a b");
        assert_eq!(bearer_token(&v), None);
    }
}

//! Requests per authenticated peer, with the peer's own quota.
//!
//! Sits behind authentication and reads the [`AuthenticatedPeer`] it produced; the quota comes
//! with the peer's credential, so `peergate peer limit` takes effect without a restart (within
//! the credential cache time). Every answer that passes carries the peer's `RateLimit` headers.

use super::{KeyedGcra, Limit, LimitConfigError, Quota, RateLimited, check_config};
use crate::auth::{AuthError, AuthenticatedPeer};
use crate::clock::Clock;
use axum::body::Body;
use axum::http::Request;
use axum::response::{IntoResponse, Response};
use std::future::Future;
use std::pin::Pin;
use std::sync::Arc;
use std::task::{Context, Poll};
use tower::{Layer, Service};

/// Limits requests per peer.
#[derive(Clone)]
pub struct PerPeerLimitLayer {
    // One shared allocation: services are cloned per request, so one reference count to bump.
    shared: Arc<PerPeerShared>,
}

struct PerPeerShared {
    limiter: Arc<KeyedGcra<Arc<str>>>,
    clock: Arc<dyn Clock>,
}

impl PerPeerLimitLayer {
    /// Tracks at most about `capacity` peers.
    pub fn new(capacity: usize, clock: Arc<dyn Clock>) -> Result<Self, LimitConfigError> {
        check_config(Quota::per_minute(1), capacity)?;
        Ok(Self {
            shared: Arc::new(PerPeerShared {
                limiter: Arc::new(KeyedGcra::new(capacity)),
                clock,
            }),
        })
    }

    /// The limiter, for periodic purging.
    pub fn limiter(&self) -> Arc<KeyedGcra<Arc<str>>> {
        self.shared.limiter.clone()
    }
}

impl<S> Layer<S> for PerPeerLimitLayer {
    type Service = PerPeerLimit<S>;

    fn layer(&self, inner: S) -> Self::Service {
        PerPeerLimit {
            inner,
            shared: self.shared.clone(),
        }
    }
}

/// The service made by [`PerPeerLimitLayer`].
#[derive(Clone)]
pub struct PerPeerLimit<S> {
    inner: S,
    shared: Arc<PerPeerShared>,
}

impl<S> Service<Request<Body>> for PerPeerLimit<S>
where
    S: Service<Request<Body>, Response = Response> + Send,
    S::Future: Send + 'static,
{
    type Response = Response;
    type Error = S::Error;
    type Future = Pin<Box<dyn Future<Output = Result<Response, S::Error>> + Send>>;

    fn poll_ready(&mut self, cx: &mut Context<'_>) -> Poll<Result<(), Self::Error>> {
        self.inner.poll_ready(cx)
    }

    fn call(&mut self, request: Request<Body>) -> Self::Future {
        let Some(peer) = request.extensions().get::<AuthenticatedPeer>() else {
            // Mounted without authentication in front: fail closed.
            return Box::pin(async { Ok(AuthError::MissingCredentials.into_response()) });
        };
        let quota = Quota::per_minute(peer.rate_per_minute());
        let decision =
            self.shared
                .limiter
                .check(&peer.id_arc(), quota, self.shared.clock.now_nanos());
        match decision {
            super::Decision::Allowed { remaining, reset } => {
                let future = self.inner.call(request);
                Box::pin(async move {
                    let mut response = future.await?;
                    super::insert_rate_limit_headers(
                        response.headers_mut(),
                        Limit::PerPeer,
                        quota,
                        remaining,
                        reset.as_secs() + u64::from(reset.subsec_nanos() > 0),
                    );
                    Ok(response)
                })
            }
            super::Decision::Denied { retry_after } => {
                let refusal = RateLimited {
                    limit: Limit::PerPeer,
                    retry_after,
                    quota,
                };
                Box::pin(async move { Ok(refusal.into_response()) })
            }
        }
    }
}

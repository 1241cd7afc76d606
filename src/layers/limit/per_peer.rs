//! Requests per authenticated peer, with the peer's own quota.
//!
//! Sits behind authentication and reads the [`AuthenticatedPeer`] it produced; the quota comes
//! with the peer's credential, so `peergate peer limit` takes effect without a restart (within
//! the credential cache time). Every answer that passes carries the peer's `RateLimit` headers.

use super::{Decision, Limit, LimitConfigError, Quota, RateLimited, check_config};
use crate::clock::Clock;
use crate::guard::admission::{Admission, Admitting, LocalKey};
use crate::guard::future::{AdmittedFuture, GuardFuture, take_readied};
use crate::layers::auth::{AuthError, AuthenticatedPeer};
use crate::shared::admission::{LimitAsk, SharedAdmission};
use crate::shared::rate_limit::{LimitCheck, LocalLimiter, RateLimiter};
use crate::store::PeerId;
use axum::body::Body;
use axum::http::{HeaderMap, Request};
use axum::response::{IntoResponse, Response};
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
    limiter: Arc<dyn RateLimiter<PeerId>>,
    /// Across instances: the in-process limiter that answers while Redis does not, and the
    /// engine a request's [`Admission`] asks.
    admitted: Option<Admitting<PeerId>>,
}

impl PerPeerLimitLayer {
    /// Tracks at most about `capacity` peers.
    pub fn new(capacity: usize, clock: Arc<dyn Clock>) -> Result<Self, LimitConfigError> {
        check_config(Quota::per_minute(1), capacity)?;
        Ok(Self::with_limiter(Arc::new(LocalLimiter::new(
            capacity, clock,
        ))))
    }

    /// Counts with `limiter` (an engine shared by several instances).
    pub fn with_limiter(limiter: Arc<dyn RateLimiter<PeerId>>) -> Self {
        Self {
            shared: Arc::new(PerPeerShared {
                limiter,
                admitted: None,
            }),
        }
    }

    /// Across instances: each peer's request is counted in its [`Admission`], asked of
    /// `engine` with the request's other shared checks; while Redis does not answer, in
    /// process, tracking at most about `capacity` peers.
    pub fn admitted(
        capacity: usize,
        clock: Arc<dyn Clock>,
        engine: Arc<dyn SharedAdmission>,
    ) -> Result<Self, LimitConfigError> {
        check_config(Quota::per_minute(1), capacity)?;
        let local = Arc::new(LocalLimiter::new(capacity, clock));
        Ok(Self {
            shared: Arc::new(PerPeerShared {
                limiter: local.clone(),
                admitted: Some(Admitting { local, engine }),
            }),
        })
    }

    /// The limiter, for periodic purging.
    pub fn limiter(&self) -> Arc<dyn RateLimiter<PeerId>> {
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
    S: Service<Request<Body>, Response = Response> + Clone + Send + 'static,
    S::Future: Send + 'static,
{
    type Response = Response;
    type Error = S::Error;
    type Future = AdmittedFuture<S>;

    fn poll_ready(&mut self, cx: &mut Context<'_>) -> Poll<Result<(), Self::Error>> {
        self.inner.poll_ready(cx)
    }

    fn call(&mut self, mut request: Request<Body>) -> Self::Future {
        let Some(peer) = request.extensions().get::<AuthenticatedPeer>() else {
            // Mounted without authentication in front: fail closed.
            let refusal = GuardFuture::answer(AuthError::MissingCredentials.into_response());
            return AdmittedFuture::new(refusal, None, finish);
        };
        let quota = Quota::per_minute(peer.rate_per_minute());
        if let Some(Admitting { local, engine }) = &self.shared.admitted {
            // Not checked here first: the peer's budget is the shared one alone, so a Redis
            // that restarts empty starts it whole again, as it did when each check asked.
            let ask = LimitAsk {
                key: format!("peergate:peer:{}", peer.id()),
                quota,
            };
            let local = LocalKey::new(local.clone(), peer.id().clone(), quota);
            // Counted with whatever settles the request's admission first; opened here when
            // no per-address layer in front opened one.
            let admission = match request.extensions().get::<Admission>() {
                Some(admission) => admission.clone(),
                None => {
                    let admission = Admission::new(engine.clone());
                    request.extensions_mut().insert(admission.clone());
                    admission
                }
            };
            admission.defer(Limit::PerPeer, ask, local, None);
            let passed = GuardFuture::pass(&mut self.inner, request, None);
            return AdmittedFuture::new(passed, Some(admission), finish);
        }
        let guarded = match self.shared.limiter.check(peer.id(), quota) {
            LimitCheck::Ready(decision) => match verdict(decision, quota) {
                Ok(headers) => GuardFuture::pass(&mut self.inner, request, Some(headers)),
                Err(refusal) => GuardFuture::answer(refusal.into_response()),
            },
            LimitCheck::Pending(decision) => GuardFuture::check(
                take_readied(&mut self.inner),
                Box::pin(async move {
                    let headers =
                        verdict(decision.await, quota).map_err(IntoResponse::into_response)?;
                    Ok((request, Some(headers)))
                }),
            ),
        };
        AdmittedFuture::new(guarded, None, finish)
    }
}

/// The peer's `RateLimit` headers, once its limit passed.
fn headers_of(admission: &Admission) -> HeaderMap {
    admission
        .passed(Limit::PerPeer)
        .and_then(|(quota, decision)| verdict(decision, quota).ok())
        .unwrap_or_default()
}

/// What the request left pending is asked before its answer leaves, which it does not change
/// (the pipeline and the settle layer decide); an admitted answer carries the peer's
/// `RateLimit` headers.
fn finish(
    admission: Admission,
    mut response: Response,
) -> std::pin::Pin<Box<dyn std::future::Future<Output = Response> + Send>> {
    Box::pin(async move {
        admission.settle_left().await;
        if admission.refusal().is_none() {
            response.headers_mut().extend(headers_of(&admission));
        }
        response
    })
}

/// The `RateLimit` headers for an admitted request's answer, or the refusal.
fn verdict(decision: Decision, quota: Quota) -> Result<HeaderMap, RateLimited> {
    match decision {
        Decision::Allowed { remaining, reset } => {
            let mut headers = HeaderMap::new();
            super::insert_rate_limit_headers(
                &mut headers,
                Limit::PerPeer,
                quota,
                remaining,
                reset.as_secs() + u64::from(reset.subsec_nanos() > 0),
            );
            Ok(headers)
        }
        Decision::Denied { retry_after } => Err(RateLimited {
            limit: Limit::PerPeer,
            retry_after,
            quota,
        }),
    }
}

//! Requests per client address, before anything else looks at the request.
//!
//! Keys on the [`ClientAddr`] the client-address layer decided (IPv6 grouped by /64), so a
//! spoofed `X-Forwarded-For` from an untrusted peer never changes the key. Only its 429 answers
//! carry `RateLimit` headers: adding them to every card and door answer cost about a tenth of
//! the 429 flood's throughput (BENCHMARKS.md), and the per-peer budget is the one clients pace
//! themselves by.
//!
//! ```
//! use axum::{Router, routing::get, body::Body, http::{Request, StatusCode}, extract::ConnectInfo};
//! use peergate::clock::ManualClock;
//! use peergate::layers::{client_addr::ClientAddrLayer, limit::{PerIpLimitLayer, Quota}};
//! use std::sync::Arc;
//! use tower::ServiceExt;
//! # tokio::runtime::Runtime::new().unwrap().block_on(async {
//! let clock = Arc::new(ManualClock::new(peergate::clock::Timestamp::UNIX_EPOCH));
//! let app = Router::new()
//!     .route("/", get(|| async { "ok" }))
//!     .layer(PerIpLimitLayer::new(Quota::per_minute(1), 1000, clock).unwrap())
//!     .layer(ClientAddrLayer::new(vec![]));
//! let request = || {
//!     let mut r = Request::get("/").body(Body::empty()).unwrap();
//!     r.extensions_mut().insert(ConnectInfo("192.0.2.1:4000".parse::<std::net::SocketAddr>().unwrap()));
//!     r
//! };
//! assert_eq!(app.clone().oneshot(request()).await.unwrap().status(), StatusCode::OK);
//! let refused = app.oneshot(request()).await.unwrap();
//! assert_eq!(refused.status(), StatusCode::TOO_MANY_REQUESTS);
//! assert_eq!(refused.headers()["retry-after"], "60");
//! # });
//! ```

use super::{Decision, Limit, LimitConfigError, Quota, RateLimited, check_config};
use crate::clock::Clock;
use crate::guard::admission::{Admission, Admitting, LocalKey};
use crate::guard::future::{AdmittedFuture, GuardFuture, take_readied};
use crate::layers::client_addr::ClientAddr;
use crate::shared::admission::{LimitAsk, SharedAdmission};
use crate::shared::rate_limit::{LimitCheck, LocalLimiter, RateLimiter};
use axum::body::Body;
use axum::http::Request;
use axum::response::{IntoResponse, Response};
use std::net::{IpAddr, Ipv4Addr};
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::task::{Context, Poll};
use std::time::Duration;
use tower::{Layer, Service};

/// Limits requests per client address.
#[derive(Clone)]
pub struct PerIpLimitLayer {
    // One shared allocation: services are cloned per request, so one reference count to bump.
    shared: Arc<PerIpShared>,
}

struct PerIpShared {
    limiter: Arc<dyn RateLimiter<IpAddr>>,
    quota: LiveQuota,
    /// Across instances: the in-process limiter that checks first, and the engine each
    /// request's [`Admission`] asks.
    admitted: Option<Admitting<IpAddr>>,
}

/// A quota a policy reload may change while requests read it: two plain loads on the
/// request's path, no lock. A request that reads between the two stores of a change is
/// judged by the count of one quota and the period of the other, once.
struct LiveQuota {
    /// The count in the high half, the burst in the low.
    count_and_burst: AtomicU64,
    period_nanos: AtomicU64,
}

impl LiveQuota {
    fn new(quota: Quota) -> Self {
        let live = Self {
            count_and_burst: AtomicU64::new(0),
            period_nanos: AtomicU64::new(0),
        };
        live.set(quota);
        live
    }

    fn get(&self) -> Quota {
        let packed = self.count_and_burst.load(Ordering::Relaxed);
        Quota {
            count: (packed >> 32) as u32,
            burst: packed as u32,
            period: Duration::from_nanos(self.period_nanos.load(Ordering::Relaxed)),
        }
    }

    fn set(&self, quota: Quota) {
        let nanos = u64::try_from(quota.period.as_nanos()).unwrap_or(u64::MAX);
        self.period_nanos.store(nanos, Ordering::Relaxed);
        let packed = (u64::from(quota.count) << 32) | u64::from(quota.burst);
        self.count_and_burst.store(packed, Ordering::Relaxed);
    }
}

/// The shared key of an address's budget.
fn shared_key(key: IpAddr) -> String {
    format!("peergate:ip:{key}")
}

impl PerIpLimitLayer {
    /// `quota` per address, tracking at most about `capacity` addresses.
    pub fn new(
        quota: Quota,
        capacity: usize,
        clock: Arc<dyn Clock>,
    ) -> Result<Self, LimitConfigError> {
        check_config(quota, capacity)?;
        Ok(Self::with_limiter(
            quota,
            Arc::new(LocalLimiter::new(capacity, clock)),
        ))
    }

    /// `quota` per address, counted by `limiter` (an engine shared by several instances).
    pub fn with_limiter(quota: Quota, limiter: Arc<dyn RateLimiter<IpAddr>>) -> Self {
        Self {
            shared: Arc::new(PerIpShared {
                limiter,
                quota: LiveQuota::new(quota),
                admitted: None,
            }),
        }
    }

    /// `quota` per address across instances: checked first in this process with the whole
    /// quota (a flood on this instance is refused without asking anyone), then counted in the
    /// request's [`Admission`], asked of `engine` with the request's other shared checks.
    pub fn admitted(
        quota: Quota,
        capacity: usize,
        clock: Arc<dyn Clock>,
        engine: Arc<dyn SharedAdmission>,
    ) -> Result<Self, LimitConfigError> {
        check_config(quota, capacity)?;
        let local = Arc::new(LocalLimiter::new(capacity, clock));
        Ok(Self {
            shared: Arc::new(PerIpShared {
                limiter: local.clone(),
                quota: LiveQuota::new(quota),
                admitted: Some(Admitting { local, engine }),
            }),
        })
    }

    /// Counts by `quota` from the next request on (a policy reload); what each address spent
    /// is kept.
    pub fn set_quota(&self, quota: Quota) -> Result<(), LimitConfigError> {
        check_config(quota, 1)?;
        self.shared.quota.set(quota);
        Ok(())
    }

    /// The limiter, for periodic purging.
    pub fn limiter(&self) -> Arc<dyn RateLimiter<IpAddr>> {
        self.shared.limiter.clone()
    }
}

impl<S> Layer<S> for PerIpLimitLayer {
    type Service = PerIpLimit<S>;

    fn layer(&self, inner: S) -> Self::Service {
        PerIpLimit {
            inner,
            shared: self.shared.clone(),
        }
    }
}

/// The service made by [`PerIpLimitLayer`].
#[derive(Clone)]
pub struct PerIpLimit<S> {
    inner: S,
    shared: Arc<PerIpShared>,
}

impl<S> Service<Request<Body>> for PerIpLimit<S>
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
        // Without a client address every request shares one key: fail closed, not open.
        let key = request
            .extensions()
            .get::<ClientAddr>()
            .map_or(IpAddr::V4(Ipv4Addr::UNSPECIFIED), ClientAddr::limit_key);
        let quota = self.shared.quota.get();
        let refused = move |retry_after| RateLimited {
            limit: Limit::PerIp,
            retry_after,
            quota,
        };
        let admission = match (
            &self.shared.admitted,
            self.shared.limiter.check(&key, quota),
        ) {
            (_, LimitCheck::Ready(Decision::Denied { retry_after })) => {
                let refusal = GuardFuture::answer(refused(retry_after).into_response());
                return AdmittedFuture::new(refusal, None, finish);
            }
            (Some(Admitting { local, engine }), LimitCheck::Ready(passed)) => {
                let admission = Admission::new(engine.clone());
                let ask = LimitAsk {
                    key: shared_key(key),
                    quota,
                };
                let local = LocalKey::new(local.clone(), key, quota);
                admission.defer(Limit::PerIp, ask, local, Some(passed));
                request.extensions_mut().insert(admission.clone());
                Some(admission)
            }
            (None, LimitCheck::Ready(Decision::Allowed { .. })) => None,
            (_, LimitCheck::Pending(decision)) => {
                return AdmittedFuture::new(
                    GuardFuture::check(
                        take_readied(&mut self.inner),
                        Box::pin(async move {
                            match decision.await {
                                Decision::Allowed { .. } => Ok((request, None)),
                                Decision::Denied { retry_after } => {
                                    Err(refused(retry_after).into_response())
                                }
                            }
                        }),
                    ),
                    None,
                    finish,
                );
            }
        };
        AdmittedFuture::new(
            GuardFuture::pass(&mut self.inner, request, None),
            admission,
            finish,
        )
    }
}

/// Whatever the request left pending is asked before its answer leaves (a request answered
/// before the pipeline or the settle layer decided); the answer is not changed.
fn finish(
    admission: Admission,
    response: Response,
) -> std::pin::Pin<Box<dyn std::future::Future<Output = Response> + Send>> {
    Box::pin(async move {
        admission.settle_left().await;
        response
    })
}

//! The innermost layer of every guarded route that is not an A2A call (the cards, the key set):
//! the request's shared [`Admission`] settled before its handler, and the guard's 429 when a
//! limit refuses.
//!
//! An A2A call's admission is settled by the call pipeline ([`crate::a2a::pipeline`]), where a
//! message asks it with its lock and spend in the same one call; these routes have nothing to
//! add, so they ask here, before their answer is made. With one instance no admission exists
//! (every limit was decided in front) and the layer passes the request on untouched.

use crate::guard::admission::Admission;
use crate::guard::future::{GuardFuture, take_readied};
use axum::body::Body;
use axum::http::Request;
use axum::response::{IntoResponse, Response};
use std::task::{Context, Poll};
use tower::{Layer, Service};

/// Settles a request's admission before its handler.
#[derive(Debug, Clone, Copy, Default)]
pub struct SettleLayer;

impl<S> Layer<S> for SettleLayer {
    type Service = Settle<S>;

    fn layer(&self, inner: S) -> Self::Service {
        Settle { inner }
    }
}

/// The service made by [`SettleLayer`].
#[derive(Debug, Clone)]
pub struct Settle<S> {
    inner: S,
}

impl<S> Service<Request<Body>> for Settle<S>
where
    S: Service<Request<Body>, Response = Response> + Clone + Send + 'static,
    S::Future: Send + 'static,
{
    type Response = Response;
    type Error = S::Error;
    type Future = GuardFuture<S>;

    fn poll_ready(&mut self, cx: &mut Context<'_>) -> Poll<Result<(), Self::Error>> {
        self.inner.poll_ready(cx)
    }

    fn call(&mut self, request: Request<Body>) -> Self::Future {
        let Some(admission) = request
            .extensions()
            .get::<Admission>()
            .filter(|admission| admission.is_pending())
            .cloned()
        else {
            return GuardFuture::pass(&mut self.inner, request, None);
        };
        GuardFuture::check(
            take_readied(&mut self.inner),
            Box::pin(async move {
                match admission.settle(None, None).await {
                    Ok(_) => Ok((request, None)),
                    Err(limited) => Err(limited.into_response()),
                }
            }),
        )
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::guard::admission::LocalCheck;
    use crate::guard::limited::Limit;
    use crate::shared::admission::{AdmissionUnavailable, Answer, Ask, LimitAsk, SharedAdmission};
    use crate::shared::gcra::{Decision, Quota};
    use std::sync::Arc;
    use std::sync::atomic::{AtomicUsize, Ordering};
    use std::time::Duration;
    use tower::ServiceExt;

    /// Redis's side: refuses the first limit when `refuse`.
    #[derive(Debug)]
    struct Engine {
        refuse: bool,
    }

    #[async_trait::async_trait]
    impl SharedAdmission for Engine {
        async fn ask(&self, _: Ask) -> Result<Answer, AdmissionUnavailable> {
            Ok(if self.refuse {
                Answer::Refused {
                    index: 0,
                    retry_after: Duration::from_secs(2),
                }
            } else {
                Answer::Admitted {
                    limits: vec![Decision::Allowed {
                        remaining: 1,
                        reset: Duration::ZERO,
                    }],
                    counters: None,
                    lock: None,
                }
            })
        }
    }

    struct Here;

    impl LocalCheck for Here {
        fn check(&self) -> Decision {
            Decision::Allowed {
                remaining: 1,
                reset: Duration::ZERO,
            }
        }
        fn refund(&self) {}
    }

    /// A route behind the layer, counting the requests its handler saw.
    async fn asked(refuse: bool) -> (u16, usize, bool) {
        let handled = Arc::new(AtomicUsize::new(0));
        let seen = handled.clone();
        let handler = tower::service_fn(move |_: Request<Body>| {
            seen.fetch_add(1, Ordering::SeqCst);
            async { Ok::<_, std::convert::Infallible>(Response::new(Body::from("card"))) }
        });
        let admission = Admission::new(Arc::new(Engine { refuse }));
        let ask = LimitAsk {
            key: "peergate:ip:test".into(),
            quota: Quota::per_minute(1),
        };
        admission.defer(Limit::PerIp, ask, Here, None);
        let mut request = Request::new(Body::empty());
        request.extensions_mut().insert(admission.clone());
        let response = SettleLayer.layer(handler).oneshot(request).await.unwrap();
        let status = response.status().as_u16();
        (
            status,
            handled.load(Ordering::SeqCst),
            admission.is_pending(),
        )
    }

    #[tokio::test]
    async fn a_refusing_admission_answers_429_before_the_handler_and_a_passing_one_reaches_it() {
        assert_eq!(asked(true).await, (429, 0, false));
        assert_eq!(asked(false).await, (200, 1, false));
    }
}

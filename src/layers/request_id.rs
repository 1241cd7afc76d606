//! The request id, outermost on every listener that answers partners: a fresh id per request
//! (a partner's own `X-Request-Id` is kept beside it, never taken as it), in scope while the
//! request is served, on every log line about it (with the trace id once the call's span is
//! built), and sent back as `X-Request-Id` on every answer, refusals included. Layers and log
//! lines read it from the task ([`RequestId::current`], [`crate::telemetry::logs`]), not from
//! the request: a request pays for no log span and no extension entry of its own.

use crate::protocol::request_id::{PartnerRequestId, RequestId, Scope};
use axum::body::Body;
use axum::http::{HeaderName, HeaderValue, Request, Response};
use pin_project_lite::pin_project;
use std::future::Future;
use std::pin::Pin;
use std::sync::Arc;
use std::task::{Context, Poll, ready};
use tower::{Layer, Service};

/// `X-Request-Id`.
pub const X_REQUEST_ID: HeaderName = HeaderName::from_static("x-request-id");

/// Gives each request its id.
#[derive(Debug, Clone, Copy, Default)]
pub struct RequestIdLayer;

impl<S> Layer<S> for RequestIdLayer {
    type Service = RequestIdService<S>;

    fn layer(&self, inner: S) -> Self::Service {
        RequestIdService { inner }
    }
}

/// The service made by [`RequestIdLayer`].
#[derive(Debug, Clone)]
pub struct RequestIdService<S> {
    inner: S,
}

impl<S> Service<Request<Body>> for RequestIdService<S>
where
    S: Service<Request<Body>, Response = Response<Body>>,
{
    type Response = Response<Body>;
    type Error = S::Error;
    type Future = RequestIdFuture<S::Future>;

    fn poll_ready(&mut self, cx: &mut Context<'_>) -> Poll<Result<(), Self::Error>> {
        self.inner.poll_ready(cx)
    }

    fn call(&mut self, mut request: Request<Body>) -> Self::Future {
        let id = RequestId::new();
        let partner = request
            .headers()
            .get(X_REQUEST_ID)
            .and_then(|value| PartnerRequestId::read(value.as_bytes()));
        if let Some(partner) = partner {
            request.extensions_mut().insert(partner);
        }
        RequestIdFuture {
            future: id.clone().scoped(|| self.inner.call(request)),
            id: Some(id),
        }
    }
}

pin_project! {
    /// The response future of [`RequestIdService`].
    pub struct RequestIdFuture<F> {
        #[pin]
        future: tokio::task::futures::TaskLocalFuture<Arc<Scope>, F>,
        id: Option<RequestId>,
    }
}

impl<F, E> Future for RequestIdFuture<F>
where
    F: Future<Output = Result<Response<Body>, E>>,
{
    type Output = Result<Response<Body>, E>;

    fn poll(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Self::Output> {
        let this = self.project();
        let mut response = ready!(this.future.poll(cx))?;
        if let Some(id) = this.id.take()
            && let Ok(value) = HeaderValue::from_str(&id.0)
        {
            response.headers_mut().insert(X_REQUEST_ID, value);
        }
        Poll::Ready(Ok(response))
    }
}

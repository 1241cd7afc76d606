//! The one response future of the guard layers.
//!
//! Every guard layer decides one of three things about a request: refuse it now, pass it on
//! now, or find out (a Redis script, a store look-up, a body to read) and then do one of the
//! other two. A layer that passes may add headers to the answer (the per-peer `RateLimit-*`,
//! the activated `A2A-Extensions`). [`GuardFuture`] is those cases as one named type, so no
//! layer boxes the inner service's future, and a decision made without waiting (a verdict
//! from the cache, a local limiter) costs no allocation at all.

use axum::body::Body;
use axum::http::{HeaderMap, Request};
use axum::response::Response;
use pin_project_lite::pin_project;
use std::future::Future;
use std::pin::Pin;
use std::task::{Context, Poll, ready};
use tower::Service;

/// What a guard found out about a request it had to wait for: the request to pass on (with
/// headers to add to the answer), or the answer that refuses it.
pub type Checked = Result<(Request<Body>, Option<HeaderMap>), Response>;

/// A check a guard waits for before deciding.
pub type PendingCheck = Pin<Box<dyn Future<Output = Checked> + Send>>;

pin_project! {
    /// The response future of every guard layer: see the [module docs](self).
    #[project = StateProj]
    pub struct GuardFuture<S: Service<Request<Body>>> {
        #[pin]
        state: State<S>,
    }
}

pin_project! {
    #[project = InnerProj]
    enum State<S: Service<Request<Body>>> {
        /// Refused (or answered) without calling the inner service.
        Answered { response: Option<Response> },
        /// Waiting for the check; the readied inner service waits with it.
        Checking { check: PendingCheck, inner: Option<S> },
        /// Passed on: the inner service's answer, with the guard's headers added.
        Calling { #[pin] future: S::Future, add: Option<HeaderMap> },
    }
}

impl<S: Service<Request<Body>>> GuardFuture<S> {
    /// Refuses (or answers) at once.
    pub fn answer(response: Response) -> Self {
        Self {
            state: State::Answered {
                response: Some(response),
            },
        }
    }

    /// Passes the request on at once, adding `add` to the answer.
    pub fn pass(inner: &mut S, request: Request<Body>, add: Option<HeaderMap>) -> Self {
        Self {
            state: State::Calling {
                future: inner.call(request),
                add,
            },
        }
    }

    /// Waits for `check`, then passes on or answers. `inner` must be the service that was
    /// polled ready (the caller keeps a fresh clone for its next call).
    pub fn check(inner: S, check: PendingCheck) -> Self {
        Self {
            state: State::Checking {
                check,
                inner: Some(inner),
            },
        }
    }
}

impl<S: Service<Request<Body>, Response = Response>> Future for GuardFuture<S> {
    type Output = Result<Response, S::Error>;

    fn poll(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Self::Output> {
        let mut this = self.project();
        loop {
            match this.state.as_mut().project() {
                InnerProj::Answered { response } => {
                    let response = response
                        .take()
                        .expect("GuardFuture polled after completion");
                    return Poll::Ready(Ok(response));
                }
                InnerProj::Checking { check, inner } => match ready!(check.as_mut().poll(cx)) {
                    Ok((request, add)) => {
                        let mut inner = inner.take().expect("GuardFuture polled after completion");
                        let future = inner.call(request);
                        this.state.set(State::Calling { future, add });
                    }
                    Err(response) => {
                        this.state.set(State::Answered {
                            response: Some(response),
                        });
                    }
                },
                InnerProj::Calling { future, add } => {
                    let mut response = ready!(future.poll(cx))?;
                    if let Some(add) = add.take() {
                        response.headers_mut().extend(add);
                    }
                    return Poll::Ready(Ok(response));
                }
            }
        }
    }
}

/// How a layer finishes an answer with its request's [`Admission`](crate::guard::admission::Admission):
/// what is still pending asked, and its headers added; the answer itself is not changed.
pub type Finish = fn(
    crate::guard::admission::Admission,
    Response,
) -> Pin<Box<dyn Future<Output = Response> + Send>>;

pin_project! {
    /// A [`GuardFuture`] whose answer is finished with the request's admission on its way out
    /// (see [`crate::guard::admission`]): the guard layers in front of an A2A binding when
    /// several instances share limits.
    pub struct AdmittedFuture<S: Service<Request<Body>>> {
        #[pin]
        state: AdmittedState<S>,
    }
}

pin_project! {
    #[project = AdmittedProj]
    enum AdmittedState<S: Service<Request<Body>>> {
        Guarded {
            #[pin]
            future: GuardFuture<S>,
            then: Option<(crate::guard::admission::Admission, Finish)>,
        },
        Finishing { future: Pin<Box<dyn Future<Output = Response> + Send>> },
    }
}

impl<S: Service<Request<Body>>> AdmittedFuture<S> {
    /// `future`'s answer, finished by `finish` with `admission` when there is one.
    pub fn new(
        future: GuardFuture<S>,
        admission: Option<crate::guard::admission::Admission>,
        finish: Finish,
    ) -> Self {
        Self {
            state: AdmittedState::Guarded {
                future,
                then: admission.map(|admission| (admission, finish)),
            },
        }
    }
}

impl<S: Service<Request<Body>, Response = Response>> Future for AdmittedFuture<S> {
    type Output = Result<Response, S::Error>;

    fn poll(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Self::Output> {
        let mut this = self.project();
        loop {
            match this.state.as_mut().project() {
                AdmittedProj::Guarded { future, then } => {
                    let response = ready!(future.poll(cx))?;
                    let Some((admission, finish)) = then.take() else {
                        return Poll::Ready(Ok(response));
                    };
                    this.state.set(AdmittedState::Finishing {
                        future: finish(admission, response),
                    });
                }
                AdmittedProj::Finishing { future } => {
                    return Poll::Ready(Ok(ready!(future.as_mut().poll(cx))));
                }
            }
        }
    }
}

/// Takes the service that was polled ready, leaving a fresh clone for the next call (the
/// pattern tower documents for services that move into their future).
pub fn take_readied<S: Clone>(inner: &mut S) -> S {
    let clone = inner.clone();
    std::mem::replace(inner, clone)
}

#[cfg(test)]
mod tests {
    use super::*;
    use axum::http::{HeaderValue, StatusCode};
    use axum::response::IntoResponse;
    use std::convert::Infallible;
    use tower::service_fn;

    fn ok_service()
    -> impl Service<Request<Body>, Response = Response, Error = Infallible, Future: Send> + Clone
    {
        service_fn(|_: Request<Body>| async { Ok::<_, Infallible>(StatusCode::OK.into_response()) })
    }

    #[tokio::test]
    async fn answers_passes_and_checks() {
        fn answered<S: Service<Request<Body>>>(_: &S) -> GuardFuture<S> {
            GuardFuture::answer(StatusCode::TOO_MANY_REQUESTS.into_response())
        }
        let mut inner = ok_service();
        let refused = answered(&inner);
        assert_eq!(refused.await.unwrap().status(), 429);
        let mut add = HeaderMap::new();
        add.insert("x-added", HeaderValue::from_static("1"));
        let passed = GuardFuture::pass(&mut inner, Request::new(Body::empty()), Some(add));
        let passed = passed.await.unwrap();
        assert_eq!(
            (passed.status(), &passed.headers()["x-added"]),
            (StatusCode::OK, &HeaderValue::from_static("1"))
        );
        let checked = GuardFuture::check(
            take_readied(&mut inner),
            Box::pin(async { Ok((Request::new(Body::empty()), None)) }),
        );
        assert_eq!(checked.await.unwrap().status(), 200);
        let refused_later = GuardFuture::check(
            take_readied(&mut inner),
            Box::pin(async { Err(StatusCode::UNAUTHORIZED.into_response()) }),
        );
        assert_eq!(refused_later.await.unwrap().status(), 401);
    }
}

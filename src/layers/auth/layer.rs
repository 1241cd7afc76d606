//! The one authentication layer, in front of the A2A door and of the admin API: it asks the
//! listener's [`Authenticator`] about the request before anything below runs, puts the verified
//! `Who` (an [`AuthenticatedPeer`](super::AuthenticatedPeer), an administrator) into the
//! request, or answers the refusal.

use super::authenticator::{Authenticator, Principal};
use crate::guard::certificate::ClientCertificate;
use crate::guard::future::{GuardFuture, take_readied};
use crate::layers::client_addr::ClientAddr;
use axum::body::Body;
use axum::extract::ConnectInfo;
use axum::http::Request;
use axum::http::request::Parts;
use axum::response::{IntoResponse, Response};
use std::net::{IpAddr, Ipv4Addr, SocketAddr};
use std::sync::Arc;
use std::task::{Context, Poll};
use tower::{Layer, Service};

/// Whether a request must authenticate.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum AuthMode {
    /// No valid credential, no entry (the A2A door, the admin API).
    Required,
    /// A request without any credential passes as anonymous; one that presents a credential
    /// must present a valid one (the card routes: a valid peer gets the extended card, an
    /// invalid credential is a 401, never a quiet downgrade to the public card).
    Optional,
}

/// Authenticates in front of the wrapped service, in one [`AuthMode`].
pub struct AuthLayer<Who: Principal> {
    authenticator: Arc<Authenticator<Who>>,
    mode: AuthMode,
}

impl<Who: Principal> Clone for AuthLayer<Who> {
    fn clone(&self) -> Self {
        Self {
            authenticator: self.authenticator.clone(),
            mode: self.mode,
        }
    }
}

impl<Who: Principal> AuthLayer<Who> {
    /// A layer that requires a valid credential, checked by `authenticator`.
    pub fn new(authenticator: Authenticator<Who>) -> Self {
        Self::shared(Arc::new(authenticator))
    }

    /// A layer over an authenticator shared with other parts of the gateway.
    pub fn shared(authenticator: Arc<Authenticator<Who>>) -> Self {
        Self {
            authenticator,
            mode: AuthMode::Required,
        }
    }

    /// The same layer in `mode`.
    pub fn mode(mut self, mode: AuthMode) -> Self {
        self.mode = mode;
        self
    }
}

impl<S, Who: Principal> Layer<S> for AuthLayer<Who> {
    type Service = Auth<S, Who>;

    fn layer(&self, inner: S) -> Self::Service {
        Auth {
            inner,
            authenticator: self.authenticator.clone(),
            mode: self.mode,
        }
    }
}

/// The service made by [`AuthLayer`].
pub struct Auth<S, Who: Principal> {
    inner: S,
    authenticator: Arc<Authenticator<Who>>,
    mode: AuthMode,
}

impl<S: Clone, Who: Principal> Clone for Auth<S, Who> {
    fn clone(&self) -> Self {
        Self {
            inner: self.inner.clone(),
            authenticator: self.authenticator.clone(),
            mode: self.mode,
        }
    }
}

impl<S, Who> Service<Request<Body>> for Auth<S, Who>
where
    S: Service<Request<Body>, Response = Response> + Clone + Send + 'static,
    S::Future: Send + 'static,
    Who: Principal,
{
    type Response = Response;
    type Error = S::Error;
    type Future = GuardFuture<S>;

    fn poll_ready(&mut self, cx: &mut Context<'_>) -> Poll<Result<(), Self::Error>> {
        self.inner.poll_ready(cx)
    }

    fn call(&mut self, mut request: Request<Body>) -> Self::Future {
        if self.mode == AuthMode::Optional
            && !self.authenticator.carries_credentials(request.headers())
        {
            return GuardFuture::pass(&mut self.inner, request, None);
        }
        let authenticator = self.authenticator.clone();
        let client = budget_key(&request);
        GuardFuture::check(
            take_readied(&mut self.inner),
            Box::pin(async move {
                // A certificate also binds tokens (RFC 8705), so it goes along whenever the
                // connection has one, whether or not certificates are a scheme here.
                let certificate = request
                    .extensions()
                    .get::<Arc<ClientCertificate>>()
                    .cloned();
                let admission = request
                    .extensions()
                    .get::<crate::guard::admission::Admission>()
                    .cloned();
                let verdict = authenticator
                    .authenticate_admitted(
                        request.headers(),
                        client,
                        certificate.as_deref(),
                        admission.as_ref(),
                    )
                    .await;
                match verdict {
                    Ok(who) => {
                        crate::layers::access_log::note_peer(
                            request.extensions(),
                            who.principal_id(),
                            who.principal_name(),
                        );
                        crate::telemetry::note_principal(
                            request.extensions(),
                            who.principal_id(),
                            who.scheme_name(),
                            who.continues_trace(),
                        );
                        request.extensions_mut().insert(who);
                        Ok((request, None))
                    }
                    Err(refusal) => Err(authenticator.refusal(refusal).into_response()),
                }
            }),
        )
    }
}

/// The address a request's failed attempts count against: the one the client-address layer
/// decided, else the socket's (the admin listener has no proxies in front), grouped the same
/// way: an IPv6 client by its /64, so one subscriber's allocation is one budget and not 2^64 of
/// them. Without either, every request shares one key: fail closed, not open.
pub fn budget_key(request: &Request<Body>) -> IpAddr {
    client_of(request.extensions())
}

/// [`budget_key`] from a request's parts, for extractors.
pub fn budget_key_of(parts: &Parts) -> IpAddr {
    client_of(&parts.extensions)
}

fn client_of(extensions: &axum::http::Extensions) -> IpAddr {
    extensions
        .get::<ClientAddr>()
        .copied()
        .or_else(|| {
            extensions
                .get::<ConnectInfo<SocketAddr>>()
                .map(|c| ClientAddr::of_socket(c.0.ip()))
        })
        .map_or(IpAddr::V4(Ipv4Addr::UNSPECIFIED), |client| {
            client.limit_key()
        })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn an_ipv6_client_spends_one_budget_per_64() {
        let from = |address: &str| {
            let mut request = Request::new(Body::empty());
            request
                .extensions_mut()
                .insert(ConnectInfo(SocketAddr::new(address.parse().unwrap(), 4000)));
            budget_key(&request)
        };
        assert_eq!(from("2001:db8:1:2::1"), from("2001:db8:1:2:ffff::9"));
        assert_ne!(from("2001:db8:1:2::1"), from("2001:db8:1:3::1"));
        assert_eq!(from("192.0.2.7"), "192.0.2.7".parse::<IpAddr>().unwrap());
        assert_eq!(from("::ffff:192.0.2.7"), from("192.0.2.7"));
    }
}

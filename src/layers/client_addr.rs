//! Who is asking: the client address every later layer keys on.
//!
//! [`ClientAddrLayer`] puts a [`ClientAddr`] into each request's extensions. It is the socket's
//! peer address, unless that peer is one of the policy's trusted proxies: then it is the
//! right-most `X-Forwarded-For` hop that is not itself a trusted proxy. A malformed header falls
//! back to the socket address, and with no trusted proxies configured the header is ignored, so
//! a client cannot choose its own limiter key.
//!
//! ```
//! use axum::{Router, routing::get, body::Body, http::{Request, StatusCode}, extract::ConnectInfo};
//! use peergate::layers::client_addr::{ClientAddr, ClientAddrLayer, Cidr};
//! use tower::ServiceExt;
//! # tokio::runtime::Runtime::new().unwrap().block_on(async {
//! let layer = ClientAddrLayer::new(vec!["10.0.0.0/8".parse::<Cidr>().unwrap()]);
//! let app = Router::new()
//!     .route("/", get(|addr: axum::Extension<ClientAddr>| async move { addr.0.ip().to_string() }))
//!     .layer(layer);
//! let mut request = Request::get("/").header("x-forwarded-for", "203.0.113.9, 10.1.2.3").body(Body::empty()).unwrap();
//! request.extensions_mut().insert(ConnectInfo("10.0.0.1:5000".parse::<std::net::SocketAddr>().unwrap()));
//! let response = app.oneshot(request).await.unwrap();
//! assert_eq!(response.status(), StatusCode::OK);
//! let body = axum::body::to_bytes(response.into_body(), 100).await.unwrap();
//! assert_eq!(&body[..], b"203.0.113.9");
//! # });
//! ```

use crate::guard::certificate::ClientCertificate;
pub use crate::guard::cidr::{Cidr, CidrError};
use axum::extract::ConnectInfo;
use axum::http::{HeaderMap, HeaderName, Request};
use std::net::{IpAddr, Ipv4Addr, Ipv6Addr, SocketAddr};
use std::sync::Arc;
use std::task::{Context, Poll};
use tower::{Layer, Service};

/// The address a request is attributed to.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct ClientAddr(IpAddr);

impl ClientAddr {
    /// The peer address of a connection with no proxy in front (the admin listener's).
    pub fn of_socket(ip: IpAddr) -> Self {
        Self(ip)
    }

    /// The client's IP address.
    pub fn ip(&self) -> IpAddr {
        self.0
    }

    /// The key rate limits count against: IPv4 as is, IPv6 by its /64 (one subscriber's
    /// allocation), IPv4-mapped IPv6 as the IPv4 address.
    pub fn limit_key(&self) -> IpAddr {
        match self.0 {
            IpAddr::V4(v4) => IpAddr::V4(v4),
            IpAddr::V6(v6) => match v6.to_ipv4_mapped() {
                Some(v4) => IpAddr::V4(v4),
                None => {
                    let bits = u128::from(v6) & !((1u128 << 64) - 1);
                    IpAddr::V6(Ipv6Addr::from(bits))
                }
            },
        }
    }
}

/// Decides the client address of each request.
#[derive(Debug, Clone)]
pub struct ClientAddrLayer {
    trusted_proxies: Arc<[Cidr]>,
    /// The header a TLS-terminating proxy forwards the client certificate in, when it does.
    certificate_header: Option<HeaderName>,
}

impl ClientAddrLayer {
    /// A layer trusting `X-Forwarded-For` only from `trusted_proxies`.
    pub fn new(trusted_proxies: Vec<Cidr>) -> Self {
        Self {
            trusted_proxies: trusted_proxies.into(),
            certificate_header: None,
        }
    }

    /// Also reads the client certificate a trusted proxy verified and forwarded in `header`
    /// (URL-encoded PEM, as nginx's `$ssl_client_escaped_cert`), on a connection without a
    /// certificate of its own; from any other peer the header is ignored.
    pub fn forwarding_certificates_in(mut self, header: Option<HeaderName>) -> Self {
        self.certificate_header = header;
        self
    }
}

impl<S> Layer<S> for ClientAddrLayer {
    type Service = ClientAddrService<S>;

    fn layer(&self, inner: S) -> Self::Service {
        ClientAddrService {
            inner,
            trusted_proxies: self.trusted_proxies.clone(),
            certificate_header: self.certificate_header.clone(),
        }
    }
}

/// The service made by [`ClientAddrLayer`].
#[derive(Debug, Clone)]
pub struct ClientAddrService<S> {
    inner: S,
    trusted_proxies: Arc<[Cidr]>,
    certificate_header: Option<HeaderName>,
}

impl<S, B> Service<Request<B>> for ClientAddrService<S>
where
    S: Service<Request<B>>,
{
    type Response = S::Response;
    type Error = S::Error;
    type Future = S::Future;

    fn poll_ready(&mut self, cx: &mut Context<'_>) -> Poll<Result<(), Self::Error>> {
        self.inner.poll_ready(cx)
    }

    fn call(&mut self, mut request: Request<B>) -> Self::Future {
        let socket = request
            .extensions()
            .get::<ConnectInfo<SocketAddr>>()
            .map_or(IpAddr::V4(Ipv4Addr::UNSPECIFIED), |c| c.0.ip());
        let ip = resolve(socket, request.headers(), &self.trusted_proxies);
        crate::layers::access_log::note_client(request.extensions(), ip);
        crate::telemetry::note_client(request.extensions(), ip);
        request.extensions_mut().insert(ClientAddr(ip));
        if let Some(header) = &self.certificate_header
            && self
                .trusted_proxies
                .iter()
                .any(|proxy| proxy.contains(socket))
            && request
                .extensions()
                .get::<Arc<ClientCertificate>>()
                .is_none()
            && let Some(certificate) = forwarded_certificate(request.headers(), header)
        {
            request.extensions_mut().insert(Arc::new(certificate));
        }
        self.inner.call(request)
    }
}

/// The certificate in `header`: exactly one value, URL-encoded PEM of one certificate. Anything
/// else is no certificate.
pub(crate) fn forwarded_certificate(
    headers: &HeaderMap,
    header: &HeaderName,
) -> Option<ClientCertificate> {
    use rustls::pki_types::CertificateDer;
    use rustls::pki_types::pem::PemObject;
    let mut values = headers.get_all(header).iter();
    let value = values.next()?;
    if values.next().is_some() {
        return None;
    }
    let bytes = value.as_bytes();
    let mut pem = Vec::with_capacity(bytes.len());
    let mut i = 0;
    while i < bytes.len() {
        if bytes[i] == b'%' {
            let hex = std::str::from_utf8(bytes.get(i + 1..i + 3)?).ok()?;
            pem.push(u8::from_str_radix(hex, 16).ok()?);
            i += 3;
        } else {
            pem.push(bytes[i]);
            i += 1;
        }
    }
    let der = CertificateDer::from_pem_slice(&pem).ok()?;
    Some(ClientCertificate::from_der(der.as_ref()))
}

/// The client address for a request from `socket` carrying `headers`.
///
/// Hops are read from the right (the one our proxy appended) leftwards, and reading stops at
/// the first hop that is not a trusted proxy: what lies further left was written by the client
/// and is never parsed, so junk there cannot move the key. A malformed hop before that point
/// makes the header unusable, and the socket address is used.
pub fn resolve(socket: IpAddr, headers: &HeaderMap, trusted: &[Cidr]) -> IpAddr {
    let is_trusted = |ip: IpAddr| trusted.iter().any(|c| c.contains(ip));
    if trusted.is_empty() || !is_trusted(socket) {
        return socket;
    }
    let mut values = Vec::new();
    for value in headers.get_all("x-forwarded-for") {
        match value.to_str() {
            Ok(value) => values.push(value),
            Err(_) => return socket,
        }
    }
    let mut leftmost = None;
    for hop in values.iter().rev().flat_map(|v| v.rsplit(',')) {
        let Ok(hop) = hop.trim().parse::<IpAddr>() else {
            return socket;
        };
        if !is_trusted(hop) {
            return hop;
        }
        leftmost = Some(hop);
    }
    // Every hop is a proxy of ours: the left-most is the closest to the client.
    leftmost.unwrap_or(socket)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn headers(values: &[&str]) -> HeaderMap {
        let mut map = HeaderMap::new();
        for v in values {
            map.append("x-forwarded-for", v.parse().unwrap());
        }
        map
    }

    fn ip(s: &str) -> IpAddr {
        s.parse().unwrap()
    }

    #[test]
    fn ignores_the_header_without_trusted_proxies_or_from_strangers() {
        let h = headers(&["203.0.113.9"]);
        assert_eq!(resolve(ip("192.0.2.1"), &h, &[]), ip("192.0.2.1"));
        let trusted = ["10.0.0.0/8".parse().unwrap()];
        assert_eq!(resolve(ip("192.0.2.1"), &h, &trusted), ip("192.0.2.1"));
    }

    #[test]
    fn takes_the_right_most_untrusted_hop() {
        let trusted = ["10.0.0.0/8".parse().unwrap(), "127.0.0.1".parse().unwrap()];
        let h = headers(&["198.51.100.1, 203.0.113.9", "10.0.0.5"]);
        assert_eq!(resolve(ip("127.0.0.1"), &h, &trusted), ip("203.0.113.9"));
        let h = headers(&["10.0.0.7, 10.0.0.5"]);
        assert_eq!(resolve(ip("127.0.0.1"), &h, &trusted), ip("10.0.0.7"));
    }

    #[test]
    fn malformed_header_falls_back_to_the_socket() {
        let trusted = ["127.0.0.0/8".parse().unwrap()];
        for bad in [
            "",
            "not-an-ip",
            "203.0.113.9, ",
            "203.0.113.9:80",
            "unknown",
        ] {
            assert_eq!(
                resolve(ip("127.0.0.1"), &headers(&[bad]), &trusted),
                ip("127.0.0.1"),
                "{bad:?}"
            );
        }
    }

    #[test]
    fn groups_ipv6_by_64_and_unmaps_ipv4() {
        let a = ClientAddr(ip("2001:db8:1:2:aaaa::1")).limit_key();
        let b = ClientAddr(ip("2001:db8:1:2:bbbb::2")).limit_key();
        let c = ClientAddr(ip("2001:db8:1:3::1")).limit_key();
        assert_eq!(a, b);
        assert_ne!(a, c);
        assert_eq!(
            ClientAddr(ip("::ffff:192.0.2.7")).limit_key(),
            ip("192.0.2.7")
        );
    }

    #[test]
    fn parses_and_matches_ranges() {
        let net: Cidr = "192.168.0.0/16".parse().unwrap();
        assert!(net.contains(ip("192.168.44.1")));
        assert!(!net.contains(ip("192.169.0.1")));
        assert!(net.contains(ip("::ffff:192.168.1.1")));
        let all: Cidr = "0.0.0.0/0".parse().unwrap();
        assert!(all.contains(ip("8.8.8.8")));
        for bad in ["10.0.0.0/33", "::/129", "nope/8", "10.0.0.0/x"] {
            assert!(bad.parse::<Cidr>().is_err(), "{bad}");
        }
    }
}

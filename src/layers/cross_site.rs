//! Refuses what a web page could make an administrator's browser send to the admin API.
//!
//! The admin API is for programs and people at a terminal, but an administrator's browser runs
//! on the same host, and any page it visits may try to reach `127.0.0.1:8081`. Browsers send
//! "simple" cross-site requests (a form post, `text/plain`, an empty POST) without asking the
//! server first, and attach whatever Basic credentials they cached for it. So, before
//! authentication:
//!
//! * a request naming an `Origin` that is not in `server.admin_allowed_origins` (empty by
//!   default) is refused with 403; a page on another origin always sends one on a POST;
//! * a request without an allowed `Origin` whose `Sec-Fetch-Site` says a browser sent it for
//!   another site (`cross-site`, `same-site`) is refused with 403;
//! * a state-changing request (anything but `GET`, `HEAD` and `OPTIONS`) must be sent as
//!   `application/json`, else 415: a browser sends that type across sites only after a CORS
//!   preflight, which this API never grants;
//! * a request whose `Host` names neither this machine (`localhost`, a loopback address) nor a
//!   name the operator gave (`server.admin_hosts`, the hosts of `admin_allowed_origins`) is
//!   refused with 403: a page whose name was made to resolve to 127.0.0.1 (DNS rebinding) is
//!   same-origin with itself, sends no `Origin` on a GET, and could read `/ready` and
//!   `/openapi.json` otherwise.
//!
//! Programs that send no `Origin` and no `Sec-Fetch-Site` (curl, the SDKs) are unaffected
//! beyond the content type.
//!
//! ```
//! use axum::{Router, routing::post, body::Body, http::{Request, StatusCode}};
//! use peergate::layers::cross_site::CrossSiteLayer;
//! use tower::ServiceExt;
//! # tokio::runtime::Runtime::new().unwrap().block_on(async {
//! let app = Router::new()
//!     .route("/v1/peers", post(|| async { "created" }))
//!     .layer(CrossSiteLayer::new(&[]));
//! let form = Request::post("/v1/peers")
//!     .header("content-type", "application/x-www-form-urlencoded")
//!     .body(Body::from("name=mallory"))
//!     .unwrap();
//! assert_eq!(app.clone().oneshot(form).await.unwrap().status(), StatusCode::UNSUPPORTED_MEDIA_TYPE);
//! let from_a_page = Request::post("/v1/peers")
//!     .header("content-type", "application/json")
//!     .header("origin", "https://evil.example")
//!     .body(Body::from("{}"))
//!     .unwrap();
//! assert_eq!(app.clone().oneshot(from_a_page).await.unwrap().status(), StatusCode::FORBIDDEN);
//! let from_curl = Request::post("/v1/peers")
//!     .header("content-type", "application/json")
//!     .body(Body::from("{}"))
//!     .unwrap();
//! assert_eq!(app.oneshot(from_curl).await.unwrap().status(), StatusCode::OK);
//! # });
//! ```

use crate::guard::refusal::Refusal;
use axum::body::Body;
use axum::http::{HeaderMap, HeaderValue, Method, Request, header};
use axum::response::{IntoResponse, Response};
use futures_util::future::Either;
use std::sync::Arc;
use std::task::{Context, Poll};
use tower::{Layer, Service};

/// Refuses cross-site requests and state changes not sent as JSON.
#[derive(Debug, Clone)]
pub struct CrossSiteLayer {
    allowed_origins: Arc<[HeaderValue]>,
    /// Host names answered besides this machine's, lowercase, without ports.
    hosts: Arc<[String]>,
}

impl CrossSiteLayer {
    /// Lets through requests from `allowed_origins` (exact `scheme://host[:port]`, as browsers
    /// send them) and from programs that name no origin.
    pub fn new(allowed_origins: &[String]) -> Self {
        let hosts = allowed_origins
            .iter()
            .filter_map(|origin| origin.split_once("://").map(|(_, rest)| host_of(rest)))
            .collect();
        Self {
            allowed_origins: allowed_origins
                .iter()
                .filter_map(|origin| HeaderValue::from_str(origin).ok())
                .collect(),
            hosts,
        }
    }

    /// The same layer answering `hosts` too (a name a proxy on this host forwards).
    pub fn answering(mut self, hosts: &[String]) -> Self {
        let mut all: Vec<String> = self.hosts.to_vec();
        // An IPv6 address is compared as a Host header writes it: in brackets.
        all.extend(
            hosts
                .iter()
                .map(|host| match host.parse::<std::net::Ipv6Addr>() {
                    Ok(ip) => format!("[{ip}]"),
                    Err(_) => host_of(host),
                }),
        );
        self.hosts = all.into();
        self
    }

    /// Why the request's `Host` is refused, if it is (none at all: a program, let through).
    fn host_refusal(&self, headers: &HeaderMap) -> Option<Refusal> {
        let mut hosts = headers.get_all(header::HOST).iter();
        let host = hosts.next()?;
        if hosts.next().is_some() {
            return Some(Refusal::CrossSite("the request names more than one Host"));
        }
        let host = host_of(host.to_str().unwrap_or_default());
        let this_machine = host == "localhost"
            || host.ends_with(".localhost")
            || host
                .trim_start_matches('[')
                .trim_end_matches(']')
                .parse::<std::net::IpAddr>()
                .is_ok_and(|ip| ip.is_loopback());
        (!this_machine && !self.hosts.contains(&host)).then_some(Refusal::CrossSite(
            "the Host names neither this machine nor one in server.admin_hosts",
        ))
    }

    /// Why `request` is refused, if it is.
    fn refusal(&self, method: &Method, headers: &HeaderMap) -> Option<Refusal> {
        if let Some(refusal) = self.host_refusal(headers) {
            return Some(refusal);
        }
        let mut origins = headers.get_all(header::ORIGIN).iter();
        let origin = origins.next();
        if origins.next().is_some() {
            return Some(Refusal::CrossSite("the request names more than one Origin"));
        }
        let allowed = match origin {
            Some(origin) if self.allowed_origins.contains(origin) => true,
            Some(_) => {
                return Some(Refusal::CrossSite(
                    "requests from web pages are refused unless their Origin is in server.admin_allowed_origins",
                ));
            }
            None => false,
        };
        let fetched_for_another_site = headers
            .get_all("sec-fetch-site")
            .iter()
            .any(|site| site != "same-origin" && site != "none");
        if !allowed && fetched_for_another_site {
            return Some(Refusal::CrossSite(
                "requests a browser sends on behalf of another site are refused",
            ));
        }
        let changes_state = !matches!(*method, Method::GET | Method::HEAD | Method::OPTIONS);
        if changes_state && !is_json(headers) {
            return Some(Refusal::UnsupportedMediaType(
                "send the request with Content-Type: application/json (a body of {} where nothing else is needed)",
            ));
        }
        None
    }
}

/// A `host[:port]` as compared: lowercase, without its port or a trailing dot.
fn host_of(authority: &str) -> String {
    let authority = authority.trim().to_ascii_lowercase();
    let host = match authority.strip_prefix('[') {
        Some(rest) => format!("[{}]", rest.split(']').next().unwrap_or_default()),
        None => authority
            .rsplit_once(':')
            .filter(|(_, port)| port.bytes().all(|b| b.is_ascii_digit()))
            .map_or(authority.clone(), |(host, _)| host.to_owned()),
    };
    host.trim_end_matches('.').to_owned()
}

/// Whether the one `Content-Type` is `application/json`, parameters aside.
fn is_json(headers: &HeaderMap) -> bool {
    let mut types = headers.get_all(header::CONTENT_TYPE).iter();
    let (Some(value), None) = (types.next(), types.next()) else {
        return false;
    };
    value.to_str().is_ok_and(|value| {
        value
            .split(';')
            .next()
            .is_some_and(|essence| essence.trim().eq_ignore_ascii_case("application/json"))
    })
}

impl<S> Layer<S> for CrossSiteLayer {
    type Service = CrossSite<S>;

    fn layer(&self, inner: S) -> Self::Service {
        CrossSite {
            inner,
            layer: self.clone(),
        }
    }
}

/// The service of [`CrossSiteLayer`].
#[derive(Debug, Clone)]
pub struct CrossSite<S> {
    inner: S,
    layer: CrossSiteLayer,
}

impl<S> Service<Request<Body>> for CrossSite<S>
where
    S: Service<Request<Body>, Response = Response>,
{
    type Response = Response;
    type Error = S::Error;
    type Future = Either<std::future::Ready<Result<Response, S::Error>>, S::Future>;

    fn poll_ready(&mut self, cx: &mut Context<'_>) -> Poll<Result<(), Self::Error>> {
        self.inner.poll_ready(cx)
    }

    fn call(&mut self, request: Request<Body>) -> Self::Future {
        match self.layer.refusal(request.method(), request.headers()) {
            Some(refusal) => Either::Left(std::future::ready(Ok(refusal.into_response()))),
            None => Either::Right(self.inner.call(request)),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn refused(layer: &CrossSiteLayer, method: Method, headers: &[(&str, &str)]) -> Option<u16> {
        let mut map = HeaderMap::new();
        for (name, value) in headers {
            map.append(
                axum::http::HeaderName::from_bytes(name.as_bytes()).unwrap(),
                HeaderValue::from_str(value).unwrap(),
            );
        }
        layer
            .refusal(&method, &map)
            .map(|refusal| refusal.status().as_u16())
    }

    #[test]
    fn a_host_naming_another_machine_is_refused_unless_the_operator_named_it() {
        let layer = CrossSiteLayer::new(&["https://console.example".to_owned()])
            .answering(&["admin.corp.example".to_owned(), "fd00::8081".to_owned()]);
        let with_host = |host: &str| {
            let mut headers = HeaderMap::new();
            headers.insert(header::HOST, HeaderValue::from_str(host).unwrap());
            layer.refusal(&Method::GET, &headers).is_some()
        };
        for answered in [
            "127.0.0.1:8081",
            "localhost:8081",
            "[::1]:8081",
            "ADMIN.corp.example",
            "console.example:443",
            "admin.corp.example.",
            "[fd00::8081]:8081",
        ] {
            assert!(!with_host(answered), "{answered}");
        }
        for refused in [
            "evil.example:8081",
            "127.0.0.1.evil.example",
            "10.0.0.1:8081",
        ] {
            assert!(with_host(refused), "{refused}");
        }
        assert!(
            layer.refusal(&Method::GET, &HeaderMap::new()).is_none(),
            "no Host: a program"
        );
    }

    #[test]
    fn only_json_from_programs_or_allowed_origins_changes_anything() {
        let none = CrossSiteLayer::new(&[]);
        let json = ("content-type", "application/json; charset=utf-8");
        assert_eq!(refused(&none, Method::POST, &[json]), None);
        assert_eq!(refused(&none, Method::PUT, &[json]), None);
        assert_eq!(refused(&none, Method::DELETE, &[json]), None);
        for content_type in [
            "text/plain",
            "application/x-www-form-urlencoded",
            "multipart/form-data; boundary=x",
            "application/jsonx",
        ] {
            let headers = [("content-type", content_type)];
            assert_eq!(
                refused(&none, Method::POST, &headers),
                Some(415),
                "{content_type}"
            );
        }
        assert_eq!(
            refused(&none, Method::POST, &[]),
            Some(415),
            "no type at all"
        );
        let twice = [json, ("content-type", "text/plain")];
        assert_eq!(refused(&none, Method::POST, &twice), Some(415));
        assert_eq!(refused(&none, Method::GET, &[]), None, "reads need no type");

        let page = ("origin", "https://evil.example");
        assert_eq!(refused(&none, Method::POST, &[json, page]), Some(403));
        assert_eq!(refused(&none, Method::GET, &[page]), Some(403));
        assert_eq!(
            refused(&none, Method::POST, &[json, ("origin", "null")]),
            Some(403)
        );
        for site in ["cross-site", "same-site"] {
            let fetched = [json, ("sec-fetch-site", site)];
            assert_eq!(refused(&none, Method::POST, &fetched), Some(403), "{site}");
        }
        for site in ["same-origin", "none"] {
            let fetched = [json, ("sec-fetch-site", site)];
            assert_eq!(refused(&none, Method::POST, &fetched), None, "{site}");
        }

        let console = CrossSiteLayer::new(&["https://console.example".to_owned()]);
        let allowed = [
            json,
            ("origin", "https://console.example"),
            ("sec-fetch-site", "cross-site"),
        ];
        assert_eq!(refused(&console, Method::POST, &allowed), None);
        assert_eq!(
            refused(
                &console,
                Method::POST,
                &[json, ("origin", "https://console.example:8443")]
            ),
            Some(403),
            "the port is part of the origin"
        );
        let two = [
            json,
            ("origin", "https://console.example"),
            ("origin", "https://evil.example"),
        ];
        assert_eq!(refused(&console, Method::POST, &two), Some(403));
    }
}

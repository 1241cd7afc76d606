//! The metrics listener (`server.metrics_listen`): `GET /metrics` for a scraper holding the
//! scrape token, and nothing else, on any address.
//!
//! The admin listener must stay on loopback, so a scraper in another container or on another
//! host cannot reach its `/metrics`. This listener can be anywhere because it opens nothing but
//! the metrics, and only to the scrape token (`server.metrics_token_env`, required with it):
//! an administrator's credentials are not taken here, so none ever crosses a network in clear
//! to it. Everything else is the admin listener's.

use crate::admin::ScrapeToken;
use crate::guard::challenges::Challenges;
use crate::guard::refusal::Refusal;
use crate::guard::unauthenticated::AuthError;
use crate::layers::metrics::Metrics;
use axum::Router;
use axum::extract::State;
use axum::http::{HeaderMap, HeaderValue, header};
use axum::response::{IntoResponse, Response};
use axum::routing::get;
use std::sync::Arc;

#[derive(Clone)]
struct Scraping {
    metrics: Arc<Metrics>,
    token: ScrapeToken,
}

/// The listener's routes: `/metrics`, behind `token`.
///
/// ```
/// # use peergate::admin::ScrapeToken;
/// # use peergate::http::metrics_listener::router;
/// # use peergate::layers::metrics::Metrics;
/// # use tower::ServiceExt as _;
/// # tokio::runtime::Builder::new_current_thread().build().unwrap().block_on(async {
/// let token = ScrapeToken::new("a scrape token of at least 32 bytes....").unwrap();
/// let app = router(std::sync::Arc::new(Metrics::default()), token);
/// let ask = |authorization: &str| {
///     axum::http::Request::get("/metrics")
///         .header("authorization", authorization)
///         .body(axum::body::Body::empty())
///         .unwrap()
/// };
/// let refused = app.clone().oneshot(ask("Bearer wrong")).await.unwrap();
/// assert_eq!(refused.status(), 401);
/// let scraped = app
///     .oneshot(ask("Bearer a scrape token of at least 32 bytes...."))
///     .await
///     .unwrap();
/// assert_eq!(scraped.status(), 200);
/// # });
/// ```
pub fn router(metrics: Arc<Metrics>, token: ScrapeToken) -> Router {
    Router::new()
        .route("/metrics", get(scrape))
        .fallback(|| async { Refusal::NoRoute.into_response() })
        .with_state(Scraping { metrics, token })
}

async fn scrape(State(scraping): State<Scraping>, headers: HeaderMap) -> Response {
    let mut authorizations = headers.get_all(header::AUTHORIZATION).iter();
    let refused = |error: AuthError| {
        Refusal::Unauthenticated {
            error,
            challenges: Challenges::new(["Bearer realm=\"peergate metrics\"".to_owned()]),
        }
        .into_response()
    };
    let presented = match (authorizations.next(), authorizations.next()) {
        (None, _) => return refused(AuthError::MissingCredentials),
        (Some(_), Some(_)) => return refused(AuthError::AmbiguousCredentials),
        (Some(value), None) => value,
    };
    let bearer = presented
        .to_str()
        .ok()
        .and_then(|value| value.split_once(' '))
        .filter(|(scheme, _)| scheme.eq_ignore_ascii_case("bearer"))
        .map(|(_, credentials)| credentials.trim());
    match bearer {
        Some(credentials) if scraping.token.opens(credentials) => (
            [(
                header::CONTENT_TYPE,
                HeaderValue::from_static("text/plain; version=0.0.4; charset=utf-8"),
            )],
            scraping.metrics.render(),
        )
            .into_response(),
        Some(_) => refused(AuthError::InvalidToken),
        None => refused(AuthError::SchemeNotEnabled),
    }
}

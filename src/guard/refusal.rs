//! The one place a refusal becomes an HTTP answer.
//!
//! Layers and handlers say *why* they refuse with a [`Refusal`]; only [`Refusal::into_response`]
//! decides the status, the headers (`Retry-After`, `RateLimit-*`, `WWW-Authenticate`) and the
//! JSON body `{"error": {"code", "message", …}}`. So no two routes answer the same failure
//! differently, no answer carries a path, a secret, an upstream body or a type name (messages
//! are fixed sentences, internal failures a request id), and metrics read the reason from the
//! [`RefusalReason`] the answer carries instead of parsing its headers. A reason is an enum with
//! a fixed label each, so a refusal cannot carry a reason the metrics do not count.
//!
//! ```
//! use axum::http::StatusCode;
//! use axum::response::IntoResponse;
//! use peergate::guard::refusal::{Refusal, RefusalReason};
//!
//! let response = Refusal::BodyTooLarge.into_response();
//! assert_eq!(response.status(), StatusCode::PAYLOAD_TOO_LARGE);
//! assert_eq!(response.extensions().get::<RefusalReason>(), Some(&RefusalReason::BodyTooLarge));
//! ```

pub use super::challenges::Challenges;
use super::limited::{RateLimited, insert_rate_limit_headers};
pub use super::reason::RefusalReason;
use super::scopes::OperationScope;
use super::unauthenticated::AuthError;
use crate::shared::gcra::retry_after_seconds;
use axum::http::{HeaderMap, HeaderValue, StatusCode, header};
use axum::response::{IntoResponse, Response};

/// The id an internal error was logged under and answered with (`requestId`), on its response,
/// so the access log names the same id.
#[derive(Debug, Clone)]
pub struct LoggedRequestId(pub String);

/// Every way the gateway refuses a request over HTTP. JSON-RPC errors inside a 200 answer are
/// the protocol's, not these: see `protocol::error::A2aError`.
#[derive(Debug, Clone, thiserror::Error)]
#[non_exhaustive]
pub enum Refusal {
    /// The credentials were missing or wrong (401), or could not be checked (503), on the
    /// listener whose challenges these are.
    #[error("{error}")]
    Unauthenticated {
        /// What was wrong.
        #[source]
        error: AuthError,
        /// The listener's challenges.
        challenges: Challenges,
    },
    /// A rate limit tripped (429).
    #[error(transparent)]
    RateLimited(RateLimited),
    /// The body is larger than the route accepts (413; the door's limit is
    /// `server.max_body_bytes`).
    #[error("the request body is larger than this route accepts")]
    BodyTooLarge,
    /// The token does not grant the scope the operation needs (403, with a Bearer challenge
    /// naming it, RFC 6750 §3.1).
    #[error("the access token does not grant {}, which this operation needs", .scope.as_str())]
    InsufficientScope {
        /// The scope needed.
        scope: OperationScope,
    },
    /// The peer's administrator did not give it this operation (403); what it may do is the
    /// administrator's to say, so the message names the operation and nothing more.
    #[error(
        "this peer may not call {method}: its administrator limited the operations it may call"
    )]
    OperationNotAllowed {
        /// The operation's 1.0 name.
        method: &'static str,
    },
    /// The authorization policies do not permit this call (403): the message names the
    /// operation, never a policy (their ids go to the log, the metrics and the audit).
    #[error("the authorization policies do not permit this call of {method}")]
    PolicyDenied {
        /// The operation's 1.0 name, or the admin API's operation id.
        method: &'static str,
    },
    /// The peer holds as many open streams as it may (429, with `Retry-After`).
    #[error(
        "this peer already holds {cap} open streams, as many as it may (limits.streams_per_peer, or its own cap): close one, or follow tasks with GetTask"
    )]
    TooManyStreams {
        /// The peer's cap.
        cap: u32,
    },
    /// The HTTP/2 connection already holds as many answers its client has not taken as it
    /// may (429, with `Retry-After`): the client must read them before it asks for more.
    #[error(
        "this connection holds {waiting} answers its client has not taken (a flow-control window it does not open); read them before calling again"
    )]
    NotReading {
        /// The answers waiting.
        waiting: usize,
    },
    /// The request did not finish within `server.request_timeout_seconds` (408).
    #[error(
        "the request was not completed within server.request_timeout_seconds (a body sent too slowly, or a turn that took too long); a turn already asking the model still stores its task"
    )]
    RequestTimeout,
    /// No route has this path (404).
    #[error("no such route")]
    NoRoute,
    /// The route exists but does not take this method (405; the `Allow` header lists those
    /// it takes).
    #[error("this route does not take this method; the Allow header lists those it takes")]
    MethodNotAllowed,
    /// The request's content is wrong (400); `code` is stable, the message one sentence.
    #[error("{message}")]
    Invalid {
        /// A stable code, e.g. `invalid_body`.
        code: &'static str,
        /// What was wrong.
        message: String,
    },
    /// No such thing for this caller (404).
    #[error("{0}")]
    NotFound(String),
    /// The change conflicts with what exists (409).
    #[error("{0}")]
    Conflict(String),
    /// The caller may not do this (403).
    #[error("{0}")]
    Forbidden(String),
    /// A browser sent this for a page of another site (403), see
    /// the cross-site layer.
    #[error("{0}")]
    CrossSite(&'static str),
    /// The request changes something but is not sent as JSON (415).
    #[error("{0}")]
    UnsupportedMediaType(&'static str),
    /// The gateway cannot do this right now, for a reason the caller may be told (503, with
    /// `Retry-After`), such as a full disk under the store.
    #[error("{0}")]
    Unavailable(String),
    /// Something failed inside the gateway (500); the detail is only in the log, under this id.
    #[error("internal error")]
    Internal {
        /// Correlates the answer with the log line.
        request_id: String,
    },
}

impl Refusal {
    /// An internal failure: logs `detail` under a new request id, which the answer names.
    pub fn internal(detail: &dyn std::fmt::Display, context: &'static str) -> Self {
        let request_id = crate::protocol::request_id::RequestId::current_or_new();
        tracing::error!(request_id = %request_id, error = %detail, "{context}");
        Self::Internal { request_id }
    }

    /// The status code.
    pub fn status(&self) -> StatusCode {
        match self {
            Self::Unauthenticated {
                error: AuthError::Unavailable | AuthError::Busy,
                ..
            } => StatusCode::SERVICE_UNAVAILABLE,
            Self::Unauthenticated { .. } => StatusCode::UNAUTHORIZED,
            Self::RateLimited(_) | Self::TooManyStreams { .. } | Self::NotReading { .. } => {
                StatusCode::TOO_MANY_REQUESTS
            }
            Self::BodyTooLarge => StatusCode::PAYLOAD_TOO_LARGE,
            Self::RequestTimeout => StatusCode::REQUEST_TIMEOUT,
            Self::NoRoute | Self::NotFound(_) => StatusCode::NOT_FOUND,
            Self::MethodNotAllowed => StatusCode::METHOD_NOT_ALLOWED,
            Self::Invalid { .. } => StatusCode::BAD_REQUEST,
            Self::Conflict(_) => StatusCode::CONFLICT,
            Self::Forbidden(_)
            | Self::CrossSite(_)
            | Self::InsufficientScope { .. }
            | Self::OperationNotAllowed { .. }
            | Self::PolicyDenied { .. } => StatusCode::FORBIDDEN,
            Self::UnsupportedMediaType(_) => StatusCode::UNSUPPORTED_MEDIA_TYPE,
            Self::Unavailable(_) => StatusCode::SERVICE_UNAVAILABLE,
            Self::Internal { .. } => StatusCode::INTERNAL_SERVER_ERROR,
        }
    }

    /// The stable `code` of the JSON body.
    pub fn code(&self) -> &'static str {
        match self {
            Self::Unauthenticated { error, .. } => error.code(),
            Self::RateLimited(_) => "rate_limited",
            Self::TooManyStreams { .. } => "too_many_streams",
            Self::NotReading { .. } => "not_reading",
            Self::BodyTooLarge => "body_too_large",
            Self::RequestTimeout => "request_timeout",
            Self::NoRoute | Self::NotFound(_) => "not_found",
            Self::MethodNotAllowed => "method_not_allowed",
            Self::Invalid { code, .. } => code,
            Self::Conflict(_) => "conflict",
            Self::Forbidden(_) => "forbidden",
            Self::CrossSite(_) => "cross_site_request",
            Self::InsufficientScope { .. } => "insufficient_scope",
            Self::OperationNotAllowed { .. } => "operation_not_allowed",
            Self::PolicyDenied { .. } => "permission_denied",
            Self::UnsupportedMediaType(_) => "unsupported_media_type",
            Self::Unavailable(_) => "unavailable",
            Self::Internal { .. } => "internal",
        }
    }

    /// The reason `/metrics` counts this refusal under, if it counts it.
    pub fn reason(&self) -> Option<RefusalReason> {
        match self {
            // A store that cannot be asked is no verdict on the credential.
            Self::Unauthenticated {
                error: AuthError::Unavailable,
                ..
            } => None,
            Self::Unauthenticated {
                error: AuthError::Busy,
                ..
            } => Some(RefusalReason::PasswordChecksBusy),
            Self::Unauthenticated { challenges, .. } => Some(challenges.counted_as),
            Self::RateLimited(limited) => Some(limited.limit.reason()),
            Self::BodyTooLarge => Some(RefusalReason::BodyTooLarge),
            Self::CrossSite(_) => Some(RefusalReason::CrossSiteRequest),
            Self::TooManyStreams { .. } => Some(RefusalReason::TooManyStreams),
            Self::NotReading { .. } => Some(RefusalReason::NotReading),
            Self::InsufficientScope { .. } => Some(RefusalReason::InsufficientScope),
            Self::OperationNotAllowed { .. } => Some(RefusalReason::OperationNotAllowed),
            Self::PolicyDenied { .. } => Some(RefusalReason::PolicyDenied),
            _ => None,
        }
    }
}

impl Refusal {
    /// The body's `message`: what every binding says of this refusal.
    pub fn message(&self) -> String {
        match self {
            Self::RateLimited(limited) => rate_limited_message(limited),
            Self::Internal { .. } => "internal error".to_owned(),
            other => other.to_string(),
        }
    }

    /// When the client may try again, in seconds, if the refusal says.
    pub fn retry_after_seconds(&self) -> Option<u64> {
        match self {
            Self::RateLimited(limited) => Some(retry_after_seconds(limited.retry_after)),
            // Streams end on their own, and a client reads what it holds in moments; a few
            // seconds is a fair first guess.
            Self::TooManyStreams { .. } | Self::NotReading { .. } => Some(5),
            _ if self.status() == StatusCode::SERVICE_UNAVAILABLE => Some(1),
            _ => None,
        }
    }

    /// The JSON body `{"error": {"code", "message", …}}`.
    pub fn body(&self) -> String {
        match self {
            Self::RateLimited(limited) => rate_limited_body(limited),
            Self::Internal { request_id } => error_body(ErrorDetail {
                code: self.code(),
                message: "internal error",
                request_id: Some(request_id),
                accepted_schemes: None,
            }),
            Self::Unauthenticated { challenges, .. } => error_body(ErrorDetail {
                code: self.code(),
                message: &self.to_string(),
                request_id: None,
                accepted_schemes: Some(&*challenges.accepted).filter(|names| !names.is_empty()),
            }),
            other => error_body(ErrorDetail {
                code: other.code(),
                message: &other.to_string(),
                request_id: None,
                accepted_schemes: None,
            }),
        }
    }

    /// The headers a client acts on: `Retry-After` and `RateLimit-*`, `WWW-Authenticate`.
    pub fn headers(&self) -> HeaderMap {
        let mut headers = HeaderMap::new();
        if let Some(seconds) = self.retry_after_seconds() {
            headers.insert(header::RETRY_AFTER, HeaderValue::from(seconds));
        }
        match self {
            Self::RateLimited(limited) => {
                let seconds = retry_after_seconds(limited.retry_after);
                insert_rate_limit_headers(&mut headers, limited.limit, limited.quota, 0, seconds);
            }
            Self::InsufficientScope { scope } => {
                let challenge = format!(
                    r#"Bearer realm="peergate", error="insufficient_scope", scope="{}""#,
                    scope.as_str()
                );
                if let Ok(value) = HeaderValue::try_from(challenge) {
                    headers.insert(header::WWW_AUTHENTICATE, value);
                }
            }
            Self::Unauthenticated { error, challenges }
                if self.status() == StatusCode::UNAUTHORIZED =>
            {
                let refused_token =
                    matches!(error, AuthError::InvalidToken | AuthError::MalformedToken);
                let list = if refused_token {
                    &challenges.invalid_token
                } else {
                    &challenges.plain
                };
                append_challenges(&mut headers, list);
            }
            _ => {}
        }
        headers
    }
}

impl IntoResponse for Refusal {
    fn into_response(self) -> Response {
        let json = HeaderValue::from_static("application/json");
        let mut response =
            (self.status(), [(header::CONTENT_TYPE, json)], self.body()).into_response();
        for (name, value) in &self.headers() {
            response.headers_mut().append(name, value.clone());
        }
        if let Some(reason) = self.reason() {
            response.extensions_mut().insert(reason);
        }
        if let Self::Internal { request_id } = &self {
            response
                .extensions_mut()
                .insert(LoggedRequestId(request_id.clone()));
        }
        // The refusal itself, for a binding that writes it in its own form (gRPC).
        response.extensions_mut().insert(self);
        response
    }
}

fn append_challenges(headers: &mut HeaderMap, challenges: &[HeaderValue]) {
    for challenge in challenges {
        headers.append(header::WWW_AUTHENTICATE, challenge.clone());
    }
}

/// A refusal's `error` member.
#[derive(serde::Serialize)]
struct ErrorDetail<'a> {
    code: &'a str,
    message: &'a str,
    #[serde(rename = "requestId", skip_serializing_if = "Option::is_none")]
    request_id: Option<&'a str>,
    #[serde(rename = "acceptedSchemes", skip_serializing_if = "Option::is_none")]
    accepted_schemes: Option<&'a [&'static str]>,
}

/// `{"error":{"code":…,"message":…, …}}`, written from a struct: a refusal builds no map
/// (floods of refusals are an abusive client's hot path, and serde_json's maps hash their keys
/// since Cedar came).
fn error_body(detail: ErrorDetail<'_>) -> String {
    #[derive(serde::Serialize)]
    struct Body<'a> {
        error: ErrorDetail<'a>,
    }
    serde_json::to_string(&Body { error: detail }).unwrap_or_default()
}

/// The 429's message, as its body says it.
fn rate_limited_message(limited: &RateLimited) -> String {
    let seconds = retry_after_seconds(limited.retry_after);
    format!(
        "too many requests ({name} limit of {count} per {window} s); retry after {seconds} s",
        name = limited.limit.name(),
        count = limited.quota.count,
        window = limited.quota.period.as_secs().max(1),
    )
}

/// The 429 body, assembled by hand: floods of 429 are the hot path of an abusive client.
fn rate_limited_body(limited: &RateLimited) -> String {
    let seconds = retry_after_seconds(limited.retry_after).to_string();
    let name = limited.limit.name();
    let count = limited.quota.count.to_string();
    let window = limited.quota.period.as_secs().max(1).to_string();
    let mut body = String::with_capacity(192);
    for piece in [
        "{\"error\":{\"code\":\"rate_limited\",\"limit\":\"",
        name,
        "\",\"message\":\"too many requests (",
        name,
        " limit of ",
        &count,
        " per ",
        &window,
        " s); retry after ",
        &seconds,
        " s\",\"retryAfterSeconds\":",
        &seconds,
        "}}",
    ] {
        body.push_str(piece);
    }
    body
}

impl IntoResponse for RateLimited {
    fn into_response(self) -> Response {
        Refusal::RateLimited(self).into_response()
    }
}

impl AuthError {
    /// The refusal that answers this failure with the listener's `challenges`.
    pub fn refusal(self, challenges: &Challenges) -> Refusal {
        Refusal::Unauthenticated {
            error: self,
            challenges: challenges.clone(),
        }
    }
}

impl IntoResponse for AuthError {
    /// Only where a handler asks for a peer without the layer in front: Bearer alone.
    fn into_response(self) -> Response {
        self.refusal(&Challenges::new([BEARER_CHALLENGE.to_owned()]))
            .into_response()
    }
}

/// The door's one challenge where a handler asks for a peer without the layer in front.
const BEARER_CHALLENGE: &str = r#"Bearer realm="peergate""#;

/// Turns a 408 or 413 that a tower-http layer produced (with its own plain body) into the
/// refusal's answer, so those statuses look like every other refusal.
pub async fn explain_layer_refusals(response: Response) -> Response {
    match response.status() {
        StatusCode::REQUEST_TIMEOUT => Refusal::RequestTimeout.into_response(),
        StatusCode::PAYLOAD_TOO_LARGE if response.extensions().get::<RefusalReason>().is_none() => {
            Refusal::BodyTooLarge.into_response()
        }
        _ => response,
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::guard::limited::Limit;
    use crate::shared::gcra::Quota;
    use std::time::Duration;

    fn challenges() -> Challenges {
        Challenges::new([
            r#"Bearer realm="peergate""#.to_owned(),
            r#"Basic realm="peergate", charset="UTF-8""#.to_owned(),
        ])
    }

    fn www_authenticate(response: &Response) -> Vec<&str> {
        response
            .headers()
            .get_all(header::WWW_AUTHENTICATE)
            .iter()
            .map(|v| v.to_str().unwrap())
            .collect()
    }

    #[test]
    fn a_refused_bearer_token_is_told_invalid_token_per_rfc_6750() {
        let refused = Refusal::Unauthenticated {
            error: AuthError::InvalidToken,
            challenges: challenges(),
        }
        .into_response();
        assert_eq!(refused.status(), StatusCode::UNAUTHORIZED);
        assert_eq!(
            www_authenticate(&refused),
            [
                r#"Bearer realm="peergate", error="invalid_token""#,
                r#"Basic realm="peergate", charset="UTF-8""#
            ]
        );
        let missing = Refusal::Unauthenticated {
            error: AuthError::MissingCredentials,
            challenges: challenges(),
        }
        .into_response();
        assert_eq!(
            www_authenticate(&missing)[0],
            r#"Bearer realm="peergate""#,
            "no error attribute when nothing was presented (RFC 6750 §3.1)"
        );
    }

    #[test]
    fn a_store_that_cannot_be_asked_is_503_with_retry_after_and_no_challenge() {
        let response = Refusal::Unauthenticated {
            error: AuthError::Unavailable,
            challenges: challenges(),
        }
        .into_response();
        assert_eq!(response.status(), StatusCode::SERVICE_UNAVAILABLE);
        assert_eq!(response.headers()[header::RETRY_AFTER], "1");
        assert!(www_authenticate(&response).is_empty());
    }

    #[test]
    fn a_429_names_its_limit_in_body_headers_and_reason() {
        let response = Refusal::RateLimited(RateLimited {
            limit: Limit::PerPeer,
            retry_after: Duration::from_millis(1_500),
            quota: Quota::per_minute(30),
        })
        .into_response();
        assert_eq!(response.status(), StatusCode::TOO_MANY_REQUESTS);
        assert_eq!(response.headers()[header::RETRY_AFTER], "2");
        assert_eq!(
            response.headers()["ratelimit-policy"],
            r#""per_peer";q=30;w=60"#
        );
        assert_eq!(
            response.extensions().get::<RefusalReason>(),
            Some(&RefusalReason::PerPeer)
        );
    }

    #[tokio::test]
    async fn layer_refusals_get_the_json_body() {
        let plain = (StatusCode::PAYLOAD_TOO_LARGE, "length limit exceeded").into_response();
        let explained = explain_layer_refusals(plain).await;
        assert_eq!(explained.status(), StatusCode::PAYLOAD_TOO_LARGE);
        let body = axum::body::to_bytes(explained.into_body(), 1024)
            .await
            .unwrap();
        let body: serde_json::Value = serde_json::from_slice(&body).unwrap();
        assert_eq!(body["error"]["code"], "body_too_large");
    }
}

//! What the bindings read a request body as, decided from its `Content-Type` alone.

use axum::http::{HeaderMap, header};

/// Whether the request says its body is JSON: `application/json` or `application/a2a+json`,
/// with or without parameters (a charset). A body sent as anything else, or as nothing, is
/// refused (-32005) before it is read as JSON, so a form post or a text upload never reaches
/// the agent by accident.
pub fn is_json(headers: &HeaderMap) -> bool {
    let Some(value) = headers
        .get(header::CONTENT_TYPE)
        .and_then(|v| v.to_str().ok())
    else {
        return false;
    };
    let essence = value.split(';').next().unwrap_or("").trim();
    essence.eq_ignore_ascii_case("application/json")
        || essence.eq_ignore_ascii_case("application/a2a+json")
}

//! What an administrator's role lets them do on the admin API: an auditor reads peers, usage,
//! audit and conversations of the peers they may see, and changes nothing. Decided once, after
//! authentication and before any handler, by the request's method: every route that changes
//! something takes another method than `GET`, so no new route can slip past it.

use super::AdminPrincipal;
use crate::guard::refusal::Refusal;
use axum::extract::Request;
use axum::http::Method;
use axum::middleware::Next;
use axum::response::{IntoResponse, Response};

/// Refuses an auditor's request that is not a read (403), before its handler runs.
pub async fn auditors_only_read(request: Request, next: Next) -> Response {
    let auditor = matches!(
        request.extensions().get::<AdminPrincipal>(),
        Some(AdminPrincipal::Administrator { auditor: true, .. })
    );
    if auditor && !matches!(*request.method(), Method::GET | Method::HEAD) {
        return Refusal::Forbidden(
            "an auditor reads peers, usage, audit and conversations, and changes nothing"
                .to_owned(),
        )
        .into_response();
    }
    next.run(request).await
}

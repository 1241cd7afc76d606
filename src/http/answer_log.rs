//! The answer log's read API under `/a2a-receipts/` (C2SP `tlog-tiles`, and `tlog-proof`
//! documents by receipt id). Public like the card: what it shows is counts, times and hashes of
//! signatures, never a peer or content; a proof is found only by a receipt's own `jti`.

use super::door::DoorState;
use crate::a2a::answer_log::{AnswerLog, LogError, PREFIX};
use crate::guard::refusal::Refusal;
use axum::Router;
use axum::extract::{Path, State};
use axum::http::header::{CACHE_CONTROL, CONTENT_TYPE};
use axum::response::{IntoResponse, Response};
use axum::routing::get;

/// The log's routes (answering 404 while receipts are off).
pub(crate) fn routes() -> Router<DoorState> {
    Router::new()
        .route(&format!("{PREFIX}/checkpoint"), get(checkpoint))
        .route(&format!("{PREFIX}/tile/{{*path}}"), get(tile))
        .route(&format!("{PREFIX}/proof/{{jti}}"), get(proof))
}

const TEXT: &str = "text/plain; charset=utf-8";

async fn checkpoint(State(state): State<DoorState>) -> Response {
    answer(
        &state,
        async |log| log.checkpoint().await.map(String::into_bytes),
        TEXT,
        "no-store",
    )
    .await
}

async fn tile(State(state): State<DoorState>, Path(path): Path<String>) -> Response {
    // A full tile never changes; a partial one is replaced by a wider one as the log grows.
    let cache = if path.contains(".p/") {
        "public, max-age=10"
    } else {
        "public, max-age=31536000, immutable"
    };
    answer(
        &state,
        async |log| log.tile(&path).await,
        "application/octet-stream",
        cache,
    )
    .await
}

async fn proof(State(state): State<DoorState>, Path(jti): Path<String>) -> Response {
    answer(
        &state,
        async |log| log.proof(&jti).await.map(String::into_bytes),
        TEXT,
        "no-store",
    )
    .await
}

/// The log's answer, or the refusal that says why not.
async fn answer(
    state: &DoorState,
    read: impl AsyncFnOnce(&AnswerLog) -> Result<Vec<u8>, LogError>,
    content_type: &'static str,
    cache: &'static str,
) -> Response {
    let Some(log) = &state.log else {
        return Refusal::NotFound("this gateway keeps no answer log (receipts are off)".into())
            .into_response();
    };
    match read(log).await {
        Ok(body) => ([(CONTENT_TYPE, content_type), (CACHE_CONTROL, cache)], body).into_response(),
        Err(LogError::NotFound) => {
            Refusal::NotFound("no such entry, tile or checkpoint in the answer log".into())
                .into_response()
        }
        Err(e @ LogError::Pending) => Refusal::NotFound(e.to_string()).into_response(),
        Err(e) => Refusal::internal(&e, "the answer log could not be read").into_response(),
    }
}

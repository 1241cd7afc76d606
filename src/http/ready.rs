//! `/ready`: whether this instance can serve now, for a load balancer's health check.
//!
//! `/health` stays a liveness answer that touches nothing. `/ready` answers 503 (with
//! `Retry-After`) while the store does not answer, while the SQLite store's disk is too full for
//! what SendMessage writes (see the store's reserve), or while Redis, when configured, does not
//! answer a PING. On the door's listener, which anyone reaches, the body says only `ready` or
//! `not_ready`; on the admin listener it names each part's state and the backend's kind,
//! never an address or an error text (the backend is checked when the gateway starts, which it
//! does not without one, so it is only named). However often it is asked, the parts are asked
//! at most once a second: `/ready` is not behind the per-IP limit, and a flood of it must not
//! become a flood of store queries.

use crate::shared::redis::Redis;
use crate::store::{Store, StoreError};
use axum::Json;
use axum::http::{HeaderValue, StatusCode, header};
use axum::response::{IntoResponse, Response};
use serde_json::{Value, json};
use std::time::{Duration, Instant};

/// How long an answer is reused.
const FRESH_FOR: Duration = Duration::from_secs(1);
/// How long each part gets to answer.
const PART_TIMEOUT: Duration = Duration::from_secs(2);

/// The parts `/ready` asks, and its last answer.
pub struct Readiness {
    store: Store,
    redis: Option<Redis>,
    backend: &'static str,
    last: tokio::sync::Mutex<Option<(Instant, bool, Value)>>,
}

impl Readiness {
    /// Readiness of `store`, `redis` when configured, and the backend named `backend`.
    pub(crate) fn new(store: Store, redis: Option<Redis>, backend: &'static str) -> Self {
        Self {
            store,
            redis,
            backend,
            last: tokio::sync::Mutex::new(None),
        }
    }

    /// The answer: 200 when every part can serve, else 503; with `detail`, naming each part's
    /// state.
    pub async fn answer(&self, detail: bool) -> Response {
        let (ready, mut body) = self.check().await;
        if !detail {
            body = json!({"status": body["status"]});
        }
        let status = if ready {
            StatusCode::OK
        } else {
            StatusCode::SERVICE_UNAVAILABLE
        };
        let mut response = (status, Json(body)).into_response();
        if !ready {
            response
                .headers_mut()
                .insert(header::RETRY_AFTER, HeaderValue::from_static("1"));
        }
        response
    }

    /// Whether this instance can serve, as `/ready` answers (the gRPC health check asks).
    pub async fn is_ready(&self) -> bool {
        self.check().await.0
    }

    async fn check(&self) -> (bool, Value) {
        // Held while the parts are asked: concurrent callers wait for one answer.
        let mut last = self.last.lock().await;
        if let Some((at, ready, body)) = &*last
            && at.elapsed() < FRESH_FOR
        {
            return (*ready, body.clone());
        }
        let store = match tokio::time::timeout(PART_TIMEOUT, self.store.check_ready()).await {
            Ok(Ok(())) => "ok",
            Ok(Err(StoreError::DiskFull)) => "disk_full",
            Ok(Err(_)) | Err(_) => "unreachable",
        };
        let redis = match &self.redis {
            None => "not_configured",
            Some(redis) if redis.answers(PART_TIMEOUT).await => "ok",
            Some(_) => "unreachable",
        };
        let ready = store == "ok" && redis != "unreachable";
        let body = json!({
            "status": if ready { "ready" } else { "not_ready" },
            "store": store,
            "redis": redis,
            "backend": self.backend,
        });
        *last = Some((Instant::now(), ready, body.clone()));
        (ready, body)
    }
}

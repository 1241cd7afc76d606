//! `/ready`: whether this instance can serve now, for a load balancer's health check.
//!
//! `/health` stays a liveness answer that touches nothing. `/ready` answers 503 (with
//! `Retry-After`) only when this instance cannot serve valid peers at all: the store does not
//! answer, or the SQLite store's disk is too full for what SendMessage writes (see the
//! store's reserve). A part the door can do without is reported, not fatal: with Redis away
//! the limits are kept locally (the door keeps answering), and an agent behind
//! `backend = "a2a"` that does not answer fails only the turns that need it. Either makes the
//! answer 200 with the status `degraded`, so a load balancer checking every instance's
//! `/ready` does not take them all out at once for a part they share. (A draining instance
//! has closed its listeners: the check's connection is refused, which takes it out.)
//!
//! Redis and the agent are probed in the background, every [`PROBE_EVERY`], whether or not
//! anyone asks, and each part's state is the gauge `peergate_part_up`; the store is asked
//! when `/ready` is (at most once a second: `/ready` is not behind the per-IP limit, and a
//! flood of it must not become a flood of store queries). On the door's listener, which
//! anyone reaches, the body says only `ready`, `degraded` or `not_ready`; on the admin
//! listener it names each part's state and the backend's kind, never an address or an error
//! text.

use crate::backend::ModelBackend;
use crate::layers::metrics::{Metrics, Part};
use crate::shared::redis::Redis;
use crate::store::{Store, StoreError};
use axum::Json;
use axum::http::{HeaderValue, StatusCode, header};
use axum::response::{IntoResponse, Response};
use serde_json::{Value, json};
use std::sync::atomic::{AtomicU8, Ordering};
use std::sync::{Arc, Weak};
use std::time::{Duration, Instant};

/// How long an answer is reused.
const FRESH_FOR: Duration = Duration::from_secs(1);
/// How long each part gets to answer.
const PART_TIMEOUT: Duration = Duration::from_secs(2);
/// How often Redis and the agent are probed.
pub const PROBE_EVERY: Duration = Duration::from_secs(3);

/// A probed part's last state.
const NOT_PROBED: u8 = 0;
const ANSWERS: u8 = 1;
const UNREACHABLE: u8 = 2;

/// The parts `/ready` asks, and its last answer.
pub struct Readiness {
    store: Store,
    redis: Option<Redis>,
    backend_kind: &'static str,
    backend: Arc<dyn ModelBackend>,
    metrics: Arc<Metrics>,
    /// Redis's and the agent's states, as the last probe found them.
    redis_state: AtomicU8,
    agent_state: AtomicU8,
    last: tokio::sync::Mutex<Option<(Instant, Verdict, Value)>>,
}

/// What `/ready` says.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Verdict {
    Ready,
    /// Serving, without a part it can do without.
    Degraded,
    NotReady,
}

impl Verdict {
    fn word(self) -> &'static str {
        match self {
            Self::Ready => "ready",
            Self::Degraded => "degraded",
            Self::NotReady => "not_ready",
        }
    }
}

impl Readiness {
    /// Readiness of `store`, `redis` when configured, and `backend` (of the kind named
    /// `backend_kind`), counted in `metrics`. Start [`Readiness::probe_in_background`] for
    /// Redis and the agent to be probed.
    pub(crate) fn new(
        store: Store,
        redis: Option<Redis>,
        (backend_kind, backend): (&'static str, Arc<dyn ModelBackend>),
        metrics: Arc<Metrics>,
    ) -> Self {
        Self {
            store,
            redis,
            backend_kind,
            backend,
            metrics,
            redis_state: AtomicU8::new(NOT_PROBED),
            agent_state: AtomicU8::new(NOT_PROBED),
            last: tokio::sync::Mutex::new(None),
        }
    }

    /// Probes Redis and the agent now, then every [`PROBE_EVERY`] until `self` is dropped.
    pub(crate) fn probe_in_background(self: &Arc<Self>) {
        let readiness = Arc::downgrade(self);
        tokio::spawn(async move {
            let mut every = tokio::time::interval(PROBE_EVERY);
            every.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
            loop {
                every.tick().await;
                let Some(readiness) = Weak::upgrade(&readiness) else {
                    return;
                };
                readiness.probe().await;
            }
        });
    }

    /// One probe of Redis and the agent, at once (each within [`PART_TIMEOUT`]).
    async fn probe(&self) {
        let redis = async {
            match &self.redis {
                None => None,
                // An open breaker means requests do not ask Redis: degraded, whatever one
                // PING says.
                Some(redis) => {
                    Some(!redis.breaker().is_open() && redis.answers(PART_TIMEOUT).await)
                }
            }
        };
        let (redis, agent) = tokio::join!(redis, self.backend.reachable(PART_TIMEOUT));
        for (part, state, answered) in [
            (Part::Redis, &self.redis_state, redis),
            (Part::Agent, &self.agent_state, agent),
        ] {
            let Some(answered) = answered else { continue };
            let now = if answered { ANSWERS } else { UNREACHABLE };
            let before = state.swap(now, Ordering::Relaxed);
            self.metrics.part_up(part, answered);
            if before != now && before != NOT_PROBED {
                if answered {
                    tracing::info!(part = part.label(), "answers again");
                } else {
                    tracing::warn!(part = part.label(), "does not answer; serving degraded");
                }
            }
        }
    }

    /// The answer: 200 when this instance can serve (`ready`, or `degraded` without a part it
    /// can do without), else 503; with `detail`, naming each part's state.
    pub async fn answer(&self, detail: bool) -> Response {
        let (verdict, mut body) = self.check().await;
        if !detail {
            body = json!({"status": body["status"]});
        }
        let serving = verdict != Verdict::NotReady;
        let status = if serving {
            StatusCode::OK
        } else {
            StatusCode::SERVICE_UNAVAILABLE
        };
        let mut response = (status, Json(body)).into_response();
        if !serving {
            response
                .headers_mut()
                .insert(header::RETRY_AFTER, HeaderValue::from_static("1"));
        }
        response
    }

    /// Whether this instance can serve, as `/ready` answers 200 (the gRPC health check asks).
    pub async fn is_ready(&self) -> bool {
        self.check().await.0 != Verdict::NotReady
    }

    async fn check(&self) -> (Verdict, Value) {
        // Held while the store is asked: concurrent callers wait for one answer.
        let mut last = self.last.lock().await;
        if let Some((at, verdict, body)) = &*last
            && at.elapsed() < FRESH_FOR
        {
            return (*verdict, body.clone());
        }
        let store = match tokio::time::timeout(PART_TIMEOUT, self.store.check_ready()).await {
            Ok(Ok(())) => "ok",
            Ok(Err(StoreError::DiskFull)) => "disk_full",
            Ok(Err(_)) | Err(_) => "unreachable",
        };
        self.metrics.part_up(Part::Store, store == "ok");
        let redis = match (&self.redis, self.redis_state.load(Ordering::Relaxed)) {
            (None, _) => "not_configured",
            (Some(_), UNREACHABLE) => "unreachable",
            // Not probed yet: the connection made at start-up answered.
            (Some(_), _) => "ok",
        };
        let agent = match self.agent_state.load(Ordering::Relaxed) {
            NOT_PROBED => None,
            ANSWERS => Some("ok"),
            _ => Some("unreachable"),
        };
        let verdict = if store != "ok" {
            Verdict::NotReady
        } else if redis == "unreachable" || agent == Some("unreachable") {
            Verdict::Degraded
        } else {
            Verdict::Ready
        };
        let mut body = json!({
            "status": verdict.word(),
            "store": store,
            "redis": redis,
            "backend": self.backend_kind,
        });
        if let Some(agent) = agent {
            body["agent"] = json!(agent);
        }
        *last = Some((Instant::now(), verdict, body.clone()));
        (verdict, body)
    }
}

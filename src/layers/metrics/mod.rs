//! Counters for `/metrics` on the admin listener, in the Prometheus text format.
//!
//! Every label comes from a fixed list (routes, status codes, refusal reasons, task states), so
//! no request can add a label value: no peer name, secret or message text ever reaches a label,
//! and the series count is bounded. Counting is a few relaxed atomic additions per request.
//!
//! [`MetricsLayer`], outermost, counts each request by route and status, and each refusal by
//! the [`RefusalReason`] its answer carries: the refusal map puts it there (a 401 is
//! `unauthenticated`, a 413 `body_too_large`, a 429 the limit that tripped), and so does the
//! protocol gate for its JSON-RPC errors. No header text is parsed.
//!
//! ```
//! use axum::{Router, routing::get, body::Body, http::{Request, StatusCode}};
//! use peergate::layers::metrics::{Metrics, MetricsLayer};
//! use std::sync::Arc;
//! use tower::ServiceExt;
//! # tokio::runtime::Runtime::new().unwrap().block_on(async {
//! let metrics = Arc::new(Metrics::default());
//! let app = Router::new()
//!     .route("/health", get(|| async { "ok" }))
//!     .layer(MetricsLayer::new(metrics.clone(), "/a2a/v1"));
//! let response = app.oneshot(Request::get("/health").body(Body::empty()).unwrap()).await.unwrap();
//! assert_eq!(response.status(), StatusCode::OK);
//! assert!(metrics.render().contains(r#"peergate_requests_total{route="health",status="200"} 1"#));
//! # });
//! ```

mod calls;
pub mod decisions;
mod histogram;
mod peers;
pub mod verdicts;

pub use calls::{CallMetrics, GenAiOperation};

use crate::guard::refusal::RefusalReason;
use crate::protocol::call::{A2aCall, Binding, CallRecord};
use crate::protocol::jsonrpc::Method;
use axum::body::Body;
use axum::http::{Request, StatusCode};
use axum::response::Response;
use std::fmt::Write as _;
use std::future::Future;
use std::pin::Pin;
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::task::{Context, Poll};
use std::time::Duration;
use tower::{Layer, Service};

/// The routes requests are counted under.
const ROUTES: [&str; 6] = ["door", "card", "jwks", "health", "admin", "other"];
/// The index of `admin` in [`ROUTES`].
const ADMIN_ROUTE: usize = 4;
/// The statuses counted by name; anything else is `other`.
const STATUSES: [u16; 17] = [
    200, 201, 204, 304, 400, 401, 403, 404, 405, 408, 409, 413, 415, 429, 500, 503, 504,
];
/// Why requests were refused before reaching the agent: every reason the refusal map knows.
const REASONS: [RefusalReason; RefusalReason::ALL.len()] = RefusalReason::ALL;
/// Final task states.
const STATES: [&str; 4] = ["completed", "failed", "rejected", "canceled"];
/// What became of push-notification attempts.
const PUSH_OUTCOMES: [&str; 3] = ["delivered", "retried", "given_up"];
/// Backend latency buckets, in seconds.
const BUCKETS: [f64; 13] = [
    0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0, 30.0, 60.0,
];

/// A final task state, for [`Metrics::task_finished`].
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[non_exhaustive]
pub enum FinalState {
    /// `TASK_STATE_COMPLETED`
    Completed,
    /// `TASK_STATE_FAILED`
    Failed,
    /// `TASK_STATE_REJECTED`
    Rejected,
    /// `TASK_STATE_CANCELED`
    Canceled,
}

/// A part the gateway depends on, for [`Metrics::part_up`].
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[non_exhaustive]
pub enum Part {
    /// The store of record.
    Store,
    /// Redis, shared by several instances.
    Redis,
    /// The agent behind `backend = "a2a"`.
    Agent,
}

impl Part {
    const ALL: [Self; 3] = [Self::Store, Self::Redis, Self::Agent];

    /// The label value.
    pub fn label(self) -> &'static str {
        match self {
            Self::Store => "store",
            Self::Redis => "redis",
            Self::Agent => "agent",
        }
    }
}

/// A part's gauge before anything was seen of it: not written.
const PART_UNSEEN: u8 = u8::MAX;

/// The gateway's counters.
#[derive(Debug)]
pub struct Metrics {
    /// Each part's last state (1 answers, 0 not), as `/ready` and its probes saw it.
    parts: [std::sync::atomic::AtomicU8; Part::ALL.len()],
    requests: [[AtomicU64; STATUSES.len() + 1]; ROUTES.len()],
    rejections: [AtomicU64; REASONS.len()],
    tasks: [AtomicU64; STATES.len()],
    push: [AtomicU64; PUSH_OUTCOMES.len()],
    /// A2A operations answered, by binding and method.
    a2a_calls: [[AtomicU64; Method::ALL.len()]; Binding::ALL.len()],
    latency_buckets: [AtomicU64; BUCKETS.len()],
    latency_count: AtomicU64,
    latency_sum_micros: AtomicU64,
    connections_refused: AtomicU64,
    /// What became of the spans, when traces are exported.
    spans: std::sync::OnceLock<Arc<crate::telemetry::export::SpanLosses>>,
    /// The series the semantic conventions name.
    calls: CallMetrics,
    /// The authorization policies' decisions.
    decisions: decisions::Decisions,
    /// The content guard's verdicts.
    verdicts: verdicts::Verdicts,
}

impl Default for Metrics {
    fn default() -> Self {
        Self {
            requests: std::array::from_fn(|_| std::array::from_fn(|_| AtomicU64::new(0))),
            rejections: std::array::from_fn(|_| AtomicU64::new(0)),
            tasks: std::array::from_fn(|_| AtomicU64::new(0)),
            push: std::array::from_fn(|_| AtomicU64::new(0)),
            a2a_calls: std::array::from_fn(|_| std::array::from_fn(|_| AtomicU64::new(0))),
            latency_buckets: std::array::from_fn(|_| AtomicU64::new(0)),
            latency_count: AtomicU64::new(0),
            latency_sum_micros: AtomicU64::new(0),
            connections_refused: AtomicU64::new(0),
            spans: std::sync::OnceLock::new(),
            calls: CallMetrics::default(),
            decisions: decisions::Decisions::default(),
            verdicts: verdicts::Verdicts::default(),
            parts: std::array::from_fn(|_| std::sync::atomic::AtomicU8::new(PART_UNSEEN)),
        }
    }
}

impl Metrics {
    fn count_request(&self, route: usize, status: StatusCode) {
        let status = STATUSES
            .iter()
            .position(|s| *s == status.as_u16())
            .unwrap_or(STATUSES.len());
        self.requests[route][status].fetch_add(1, Ordering::Relaxed);
    }

    /// Records whether `part` answers.
    pub fn part_up(&self, part: Part, up: bool) {
        self.parts[part as usize].store(u8::from(up), Ordering::Relaxed);
    }

    /// Counts an A2A operation answered (whatever the answer).
    pub fn a2a_call(&self, call: A2aCall) {
        self.a2a_calls[call.binding as usize][call.method as usize].fetch_add(1, Ordering::Relaxed);
    }

    /// Counts a refusal.
    pub fn rejected(&self, reason: RefusalReason) {
        self.rejections[reason as usize].fetch_add(1, Ordering::Relaxed);
    }

    /// Counts a connection closed unread because the connection cap was reached.
    pub fn connection_refused(&self) {
        self.connections_refused.fetch_add(1, Ordering::Relaxed);
    }

    /// Counts a task that reached its final state.
    pub fn task_finished(&self, state: FinalState) {
        let i = match state {
            FinalState::Completed => 0,
            FinalState::Failed => 1,
            FinalState::Rejected => 2,
            FinalState::Canceled => 3,
        };
        self.tasks[i].fetch_add(1, Ordering::Relaxed);
    }

    /// Counts a push-notification attempt by what became of it.
    pub fn push_attempted(&self, outcome: crate::store::DeliveryOutcome) {
        let i = match outcome {
            crate::store::DeliveryOutcome::Delivered => 0,
            crate::store::DeliveryOutcome::RetryAt(_) => 1,
            crate::store::DeliveryOutcome::GiveUp => 2,
            // Not an attempt.
            crate::store::DeliveryOutcome::Deferred(_) => return,
        };
        self.push[i].fetch_add(1, Ordering::Relaxed);
    }

    /// Records how long one backend call took (answered or not).
    pub fn backend_latency(&self, took: Duration) {
        let seconds = took.as_secs_f64();
        for (bucket, bound) in self.latency_buckets.iter().zip(BUCKETS) {
            if seconds <= bound {
                bucket.fetch_add(1, Ordering::Relaxed);
            }
        }
        self.latency_count.fetch_add(1, Ordering::Relaxed);
        self.latency_sum_micros.fetch_add(
            u64::try_from(took.as_micros()).unwrap_or(u64::MAX),
            Ordering::Relaxed,
        );
    }

    /// The Prometheus text exposition (format 0.0.4).
    pub fn render(&self) -> String {
        let mut out = String::with_capacity(4096);
        let load = |a: &AtomicU64| a.load(Ordering::Relaxed);
        self.write_requests(&mut out);
        out.push_str("# HELP peergate_rejections_total Requests refused before the agent, by reason.\n# TYPE peergate_rejections_total counter\n");
        for (reason, count) in REASONS.iter().zip(&self.rejections) {
            let _ = writeln!(
                out,
                "peergate_rejections_total{{reason=\"{}\"}} {}",
                reason.label(),
                load(count)
            );
        }
        out.push_str("# HELP peergate_tasks_total Tasks by final state.\n# TYPE peergate_tasks_total counter\n");
        for (state, count) in STATES.iter().zip(&self.tasks) {
            let _ = writeln!(
                out,
                "peergate_tasks_total{{state=\"{state}\"}} {}",
                load(count)
            );
        }
        out.push_str("# HELP peergate_push_deliveries_total Push-notification attempts, by what became of them.\n# TYPE peergate_push_deliveries_total counter\n");
        for (outcome, count) in PUSH_OUTCOMES.iter().zip(&self.push) {
            let _ = writeln!(
                out,
                "peergate_push_deliveries_total{{outcome=\"{outcome}\"}} {}",
                load(count)
            );
        }
        out.push_str("# HELP peergate_a2a_calls_total A2A operations answered, by binding and method (errors included).\n# TYPE peergate_a2a_calls_total counter\n");
        for (binding, row) in Binding::ALL.iter().zip(&self.a2a_calls) {
            for (method, count) in Method::ALL.iter().zip(row) {
                let _ = writeln!(
                    out,
                    "peergate_a2a_calls_total{{binding=\"{}\",method=\"{}\"}} {}",
                    binding.label(),
                    method.name(),
                    load(count)
                );
            }
        }
        self.write_backend_latency(&mut out);
        out.push_str("# HELP peergate_part_up Whether a part the gateway depends on answers (1) or not (0), as /ready and its probes last saw it.\n# TYPE peergate_part_up gauge\n");
        for (part, state) in Part::ALL.iter().zip(&self.parts) {
            let state = state.load(Ordering::Relaxed);
            if state != PART_UNSEEN {
                let _ = writeln!(out, "peergate_part_up{{part=\"{}\"}} {state}", part.label());
            }
        }
        out.push_str("# HELP peergate_connections_refused_total Connections closed unread at the connection cap.\n# TYPE peergate_connections_refused_total counter\n");
        let _ = writeln!(
            out,
            "peergate_connections_refused_total {}",
            load(&self.connections_refused)
        );
        self.write_spans(&mut out);
        self.calls.write(&mut out);
        self.decisions.write(&mut out);
        self.verdicts.write(&mut out);
        out
    }

    /// The authorization policies' decisions.
    pub fn decisions(&self) -> &decisions::Decisions {
        &self.decisions
    }

    /// The content guard's verdicts.
    pub fn verdicts(&self) -> &verdicts::Verdicts {
        &self.verdicts
    }

    /// The series the semantic conventions name.
    pub fn calls(&self) -> &CallMetrics {
        &self.calls
    }

    /// Counts what becomes of the spans `losses` tracks (once, when traces are exported).
    pub fn watch_spans(&self, losses: Arc<crate::telemetry::export::SpanLosses>) {
        let _ = self.spans.set(losses);
    }

    /// `peergate_spans_total`, when traces are exported.
    fn write_spans(&self, out: &mut String) {
        let Some(spans) = self.spans.get() else {
            return;
        };
        out.push_str("# HELP peergate_spans_total Finished spans, by what became of them.\n# TYPE peergate_spans_total counter\n");
        for (outcome, count) in [
            ("exported", &spans.exported),
            ("queue_full", &spans.queue_full),
            ("export_failed", &spans.export_failed),
        ] {
            let count = count.load(Ordering::Relaxed);
            let _ = writeln!(out, "peergate_spans_total{{outcome=\"{outcome}\"}} {count}");
        }
    }

    /// `peergate_requests_total`, the rows that counted anything.
    fn write_requests(&self, out: &mut String) {
        let load = |a: &AtomicU64| a.load(Ordering::Relaxed);
        out.push_str("# HELP peergate_requests_total HTTP requests answered, by route and status.\n# TYPE peergate_requests_total counter\n");
        for (route, row) in ROUTES.iter().zip(&self.requests) {
            for (i, count) in row.iter().enumerate() {
                let n = load(count);
                if n == 0 {
                    continue;
                }
                let status = STATUSES.get(i).map_or("other".to_owned(), u16::to_string);
                let _ = writeln!(
                    out,
                    "peergate_requests_total{{route=\"{route}\",status=\"{status}\"}} {n}"
                );
            }
        }
    }

    /// `peergate_backend_latency_seconds`, the histogram.
    fn write_backend_latency(&self, out: &mut String) {
        let load = |a: &AtomicU64| a.load(Ordering::Relaxed);
        out.push_str("# HELP peergate_backend_latency_seconds Time the model took per call.\n# TYPE peergate_backend_latency_seconds histogram\n");
        for (bound, count) in BUCKETS.iter().zip(&self.latency_buckets) {
            let _ = writeln!(
                out,
                "peergate_backend_latency_seconds_bucket{{le=\"{bound}\"}} {}",
                load(count)
            );
        }
        let count = load(&self.latency_count);
        let _ = writeln!(
            out,
            "peergate_backend_latency_seconds_bucket{{le=\"+Inf\"}} {count}"
        );
        let _ = writeln!(
            out,
            "peergate_backend_latency_seconds_sum {}",
            load(&self.latency_sum_micros) as f64 / 1e6
        );
        let _ = writeln!(out, "peergate_backend_latency_seconds_count {count}");
    }
}

/// Counts every request by route and status, and refusals by reason.
#[derive(Debug, Clone)]
pub struct MetricsLayer {
    metrics: Arc<Metrics>,
    /// The door's path on the gateway's listener; `None` on the admin listener.
    door_path: Option<Arc<str>>,
}

impl MetricsLayer {
    /// Counts into `metrics`; `door_path` is the A2A door's path.
    pub fn new(metrics: Arc<Metrics>, door_path: &str) -> Self {
        Self {
            metrics,
            door_path: Some(Arc::from(door_path.trim_end_matches('/'))),
        }
    }

    /// Counts every request as the admin API's.
    pub fn admin(metrics: Arc<Metrics>) -> Self {
        Self {
            metrics,
            door_path: None,
        }
    }

    fn route(&self, path: &str) -> usize {
        match &self.door_path {
            Some(door_path) => door_route(door_path, path),
            None => ADMIN_ROUTE,
        }
    }
}

/// The index in [`ROUTES`] of `path` on the door's listener.
fn door_route(door_path: &str, path: &str) -> usize {
    match path {
        "/.well-known/agent-card.json" | "/.well-known/agent.json" => 1,
        "/.well-known/jwks.json" => 2,
        // The gRPC listener's health check and methods count as the door's.
        "/health" | "/ready" | "/grpc.health.v1.Health/Check" => 3,
        p if p.trim_end_matches('/') == door_path => 0,
        p if p.starts_with("/lf.a2a.v1.A2AService/") => 0,
        _ => 5,
    }
}

/// The fixed label of `path` on the door's listener (`door`, `card`, `jwks`, `health`,
/// `other`): what the metrics and the access log name instead of the path itself.
pub fn route_label(door_path: &str, path: &str) -> &'static str {
    ROUTES[door_route(door_path, path)]
}

impl<S> Layer<S> for MetricsLayer {
    type Service = MetricsService<S>;

    fn layer(&self, inner: S) -> Self::Service {
        MetricsService {
            inner,
            layer: self.clone(),
        }
    }
}

/// The service made by [`MetricsLayer`].
#[derive(Debug, Clone)]
pub struct MetricsService<S> {
    inner: S,
    layer: MetricsLayer,
}

impl<S> Service<Request<Body>> for MetricsService<S>
where
    S: Service<Request<Body>, Response = Response>,
{
    type Response = Response;
    type Error = S::Error;
    type Future = MetricsFuture<S::Future>;

    fn poll_ready(&mut self, cx: &mut Context<'_>) -> Poll<Result<(), Self::Error>> {
        self.inner.poll_ready(cx)
    }

    fn call(&mut self, request: Request<Body>) -> Self::Future {
        MetricsFuture {
            route: self.layer.route(request.uri().path()),
            metrics: self.layer.metrics.clone(),
            started: std::time::Instant::now(),
            inner: self.inner.call(request),
        }
    }
}

pin_project_lite::pin_project! {
    /// The response future of [`MetricsService`]: counts the response when it is ready. Not
    /// boxed, because it wraps every request, the cheapest refusals included.
    pub struct MetricsFuture<F> {
        #[pin]
        inner: F,
        metrics: Arc<Metrics>,
        route: usize,
        started: std::time::Instant,
    }
}

impl<F, E> Future for MetricsFuture<F>
where
    F: Future<Output = Result<Response, E>>,
{
    type Output = Result<Response, E>;

    fn poll(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Self::Output> {
        let this = self.project();
        let response = std::task::ready!(this.inner.poll(cx))?;
        let status = response.status();
        this.metrics.count_request(*this.route, status);
        // The refusal map typed the reason; reading it costs one extension look-up.
        let reason = response.extensions().get::<RefusalReason>().copied();
        if let Some(reason) = reason {
            this.metrics.rejected(reason);
        }
        // The binding's handler named the operation; the path cannot. A call refused for its
        // protocol version or extensions is counted by that reason alone: the operation was
        // never asked.
        let protocol_refused = matches!(
            reason,
            Some(RefusalReason::VersionNotSupported | RefusalReason::ExtensionRequired)
        );
        if let Some(record) = response.extensions().get::<CallRecord>() {
            this.metrics.calls.call(record, this.started.elapsed());
            if !protocol_refused {
                this.metrics.a2a_call(record.call);
            }
        }
        Poll::Ready(Ok(response))
    }
}

//! Spans leave off the request path. A finished span is handed to a bounded queue ([`Spans`],
//! the tracer provider's one processor): `on_end` never waits, and a full queue drops the span
//! and counts it. One task on the runtime takes spans off the queue in batches and sends each
//! batch over OTLP/HTTP with the project's own HTTP client, within the export timeout. An
//! endpoint that is down or hangs costs that task its time and nothing else: the log says so
//! once, when exports start failing, and once when they work again.
//!
//! The SDK's own batch processor runs its exports on a thread of its own with a blocking
//! executor, where an async HTTP client has no reactor; and it logs every failed export. Both
//! are why the queue is this small file instead.

use opentelemetry::Context;
use opentelemetry_otlp::{Protocol, WithExportConfig, WithHttpConfig};
use opentelemetry_sdk::error::{OTelSdkError, OTelSdkResult};
use opentelemetry_sdk::trace::{Span, SpanData, SpanExporter, SpanProcessor};
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Duration;
use tokio::sync::mpsc;

/// Spans sent in one export, at most.
const BATCH: usize = 512;

/// How long a batch waits for more spans before it is sent anyway.
const LINGER: Duration = Duration::from_secs(1);

/// How many waiting spans make a batch worth sending before the linger ends: a full batch, or
/// the whole queue when it is smaller.
fn batch_size(queue: usize) -> usize {
    BATCH.min(queue)
}

/// What became of spans that were not exported, for `/metrics`.
#[derive(Debug, Default)]
pub struct SpanLosses {
    /// Dropped because the queue was full.
    pub queue_full: AtomicU64,
    /// Lost in an export that failed or timed out.
    pub export_failed: AtomicU64,
    /// Exported.
    pub exported: AtomicU64,
}

/// The tracer provider's processor: finished, sampled spans onto the queue.
#[derive(Debug)]
pub struct Spans {
    queue: mpsc::Sender<SpanData>,
    /// Rung when a batch's worth waits, so the export task wakes once a batch, not per span.
    full: Arc<tokio::sync::Notify>,
    losses: Arc<SpanLosses>,
    /// Tells the export task to send what is queued and stop.
    closing: Arc<tokio::sync::Notify>,
}

impl SpanProcessor for Spans {
    fn on_start(&self, _span: &mut Span, _cx: &Context) {}

    fn on_end(&self, span: SpanData) {
        if !span.span_context.is_sampled() {
            return;
        }
        if self.queue.try_send(span).is_err() {
            self.losses.queue_full.fetch_add(1, Ordering::Relaxed);
            return;
        }
        let waiting = self.queue.max_capacity() - self.queue.capacity();
        if waiting >= batch_size(self.queue.max_capacity()) {
            self.full.notify_one();
        }
    }

    fn force_flush(&self) -> OTelSdkResult {
        Ok(())
    }

    /// The export task sends what is queued and stops; whoever holds its handle waits for it.
    fn shutdown_with_timeout(&self, _timeout: Duration) -> OTelSdkResult {
        self.closing.notify_one();
        Ok(())
    }
}

/// Where spans go, and how.
pub struct Destination {
    /// The traces endpoint.
    pub url: reqwest::Url,
    /// Headers for every export.
    pub headers: Vec<(String, String)>,
    /// How long one export may take, retries included.
    pub timeout: Duration,
    /// Spans waiting, at most.
    pub queue: usize,
}

/// The processor, and the task that exports what it queues (it ends once every sender is
/// gone and the queue is empty).
pub fn spans(
    destination: Destination,
    client: reqwest::Client,
    (resource, losses): (&opentelemetry_sdk::Resource, Arc<SpanLosses>),
) -> Result<(Spans, tokio::task::JoinHandle<()>), String> {
    let mut exporter = opentelemetry_otlp::SpanExporter::builder()
        .with_http()
        .with_http_client(client)
        .with_protocol(Protocol::HttpBinary)
        .with_endpoint(destination.url.as_str())
        .with_headers(destination.headers.into_iter().collect())
        .with_timeout(destination.timeout)
        .build()
        .map_err(|e| e.to_string())?;
    // The provider tells its processors the resource; this one's exporter is told here, once.
    exporter.set_resource(resource);
    let (queue, waiting) = mpsc::channel(destination.queue);
    let closing = Arc::new(tokio::sync::Notify::new());
    let full = Arc::new(tokio::sync::Notify::new());
    let sending = Sending {
        waiting,
        full: full.clone(),
        exporter,
        timeout: destination.timeout,
        losses: losses.clone(),
    };
    let task = tokio::spawn(sending.run(closing.clone()));
    Ok((
        Spans {
            queue,
            full,
            losses,
            closing,
        },
        task,
    ))
}

/// The export task's state.
struct Sending {
    waiting: mpsc::Receiver<SpanData>,
    full: Arc<tokio::sync::Notify>,
    exporter: opentelemetry_otlp::SpanExporter,
    timeout: Duration,
    losses: Arc<SpanLosses>,
}

impl Sending {
    /// Sends what the queue holds, a batch at a time, until told to close (then what is still
    /// queued goes in one last batch).
    async fn run(mut self, closing: Arc<tokio::sync::Notify>) {
        let health = Outage::new(
            "spans cannot be exported to the OTLP endpoint; they are dropped (and counted in /metrics) until it answers again",
            "spans are exported to the OTLP endpoint again",
        );
        loop {
            let first = tokio::select! {
                span = self.waiting.recv() => span,
                () = closing.notified() => None,
            };
            let Some(first) = first else { break };
            let batch = self.batch(first).await;
            self.export(batch, &health).await;
        }
        let mut rest = Vec::new();
        while let Ok(span) = self.waiting.try_recv() {
            rest.push(span);
        }
        if !rest.is_empty() {
            self.export(rest, &health).await;
        }
    }

    /// `first` and what follows it within [`LINGER`], up to [`BATCH`]: the task sleeps through
    /// the linger (or until the processor rings that a batch waits) and then takes what is
    /// queued, instead of waking for every span.
    async fn batch(&mut self, first: SpanData) -> Vec<SpanData> {
        let size = batch_size(self.waiting.max_capacity());
        if self.waiting.len() + 1 < size {
            tokio::select! {
                () = tokio::time::sleep(LINGER) => {}
                () = self.full.notified() => {}
            }
        }
        let mut batch = Vec::with_capacity(size.min(self.waiting.len() + 1));
        batch.push(first);
        while batch.len() < BATCH {
            match self.waiting.try_recv() {
                Ok(span) => batch.push(span),
                Err(_) => break,
            }
        }
        batch
    }

    async fn export(&self, batch: Vec<SpanData>, health: &Outage) {
        let count = batch.len() as u64;
        let sent = tokio::time::timeout(self.timeout, self.exporter.export(batch)).await;
        let counter = match health.note(&sent) {
            true => &self.losses.exported,
            false => &self.losses.export_failed,
        };
        counter.fetch_add(count, Ordering::Relaxed);
    }
}

/// Whether a signal's exports fail, so the log says so once per outage (and once when they
/// work again), whatever the signal; the collector's own answer is never logged: it may echo
/// what it was sent.
#[derive(Debug)]
pub(super) struct Outage {
    failing: std::sync::atomic::AtomicBool,
    /// What the log says when exports start failing.
    failing_says: &'static str,
    /// What it says when they work again.
    again_says: &'static str,
}

impl Outage {
    pub(super) const fn new(failing_says: &'static str, again_says: &'static str) -> Self {
        Self {
            failing: std::sync::atomic::AtomicBool::new(false),
            failing_says,
            again_says,
        }
    }

    /// Notes how an export bounded by a timeout went; whether it was sent.
    pub(super) fn note<E>(&self, sent: &Result<OTelSdkResult, E>) -> bool {
        let failure = match sent {
            Ok(Ok(())) => None,
            Ok(Err(OTelSdkError::Timeout(_))) | Err(_) => Some("it did not answer in time"),
            Ok(Err(_)) => Some("it refused the export or could not be reached"),
        };
        let was_failing = self.failing.swap(failure.is_some(), Ordering::Relaxed);
        match (failure, was_failing) {
            (Some(why), false) => tracing::warn!(why, "{}", self.failing_says),
            (None, true) => tracing::info!("{}", self.again_says),
            _ => {}
        }
        failure.is_none()
    }
}

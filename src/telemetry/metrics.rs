//! The semantic conventions' metrics over OTLP, beside their Prometheus exposition: the same
//! observations (a call's duration, a model's call and its tokens, a stream's first event)
//! recorded once more into OpenTelemetry instruments when metrics are exported, and sent by
//! the SDK's periodic reader.
//!
//! The reader runs on a thread of its own and waits on each export there; the exporter's
//! HTTP client is the project's own, which runs on the Tokio runtime. [`OnRuntime`] enters the
//! runtime for every poll of an export, so the request runs on the runtime's I/O driver, and
//! bounds it by the export timeout; a collector that is down is said once in the log, not at
//! every interval.

use super::conventions as names;
use crate::protocol::call::{A2aCall, Binding, CallOutcome};
use crate::protocol::jsonrpc::Method;
use opentelemetry::KeyValue;
use opentelemetry::metrics::{Histogram, MeterProvider as _};
use opentelemetry_otlp::{Protocol, WithExportConfig as _, WithHttpConfig as _};
use opentelemetry_sdk::Resource;
use opentelemetry_sdk::error::{OTelSdkError, OTelSdkResult};
use opentelemetry_sdk::metrics::data::ResourceMetrics;
use opentelemetry_sdk::metrics::exporter::PushMetricExporter;
use opentelemetry_sdk::metrics::{PeriodicReader, SdkMeterProvider, Temporality};
use pin_project_lite::pin_project;
use std::future::Future;
use std::pin::Pin;
use std::task::{Context, Poll};
use std::time::Duration;

/// Where metrics go, and how often.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct MetricsExport {
    /// The metrics endpoint (`…/v1/metrics`).
    pub url: reqwest::Url,
    /// How often they are sent (`OTEL_METRIC_EXPORT_INTERVAL`).
    pub interval: Duration,
}

/// The instruments the observations are recorded into.
#[derive(Debug)]
pub struct Instruments {
    calls: Histogram<f64>,
    /// Every call's attributes, made once: by binding, operation and outcome.
    call_attributes: Vec<[KeyValue; 4]>,
    operations: Histogram<f64>,
    tokens: Histogram<u64>,
    first_event: Histogram<f64>,
}

impl Instruments {
    /// A call answered after `took`.
    pub fn call(&self, call: A2aCall, outcome: CallOutcome, took: Duration) {
        if let Some(attributes) = self.call_attributes.get(call_index(call, outcome)) {
            self.calls.record(took.as_secs_f64(), attributes);
        }
    }

    /// A backend's call of `operation` that took `took`, and its tokens (`(input, output)`).
    pub fn operation(&self, operation: &'static str, took: Duration, tokens: Option<(u64, u64)>) {
        let name = KeyValue::new(names::GEN_AI_OPERATION, operation);
        self.operations
            .record(took.as_secs_f64(), std::slice::from_ref(&name));
        if let Some((input, output)) = tokens {
            for (kind, count) in [("input", input), ("output", output)] {
                let kind = KeyValue::new(names::GEN_AI_TOKEN_TYPE, kind);
                self.tokens.record(count, &[name.clone(), kind]);
            }
        }
    }

    /// A stream's first event, `took` after its request arrived.
    pub fn first_event(&self, took: Duration) {
        self.first_event.record(took.as_secs_f64(), &[]);
    }
}

/// The meter provider (kept for its shutdown) and the instruments.
pub(super) fn start(
    export: &MetricsExport,
    (headers, timeout): (&[(String, String)], Duration),
    client: reqwest::Client,
    resource: Resource,
) -> Result<(SdkMeterProvider, std::sync::Arc<Instruments>), String> {
    let exporter = opentelemetry_otlp::MetricExporter::builder()
        .with_http()
        .with_http_client(client)
        .with_protocol(Protocol::HttpBinary)
        .with_endpoint(export.url.as_str())
        .with_headers(headers.iter().cloned().collect())
        .with_timeout(timeout)
        .build()
        .map_err(|e| e.to_string())?;
    let exporter = OnRuntime {
        inner: exporter,
        runtime: tokio::runtime::Handle::current(),
        timeout,
        outage: super::export::Outage::new(
            "metrics cannot be exported to the OTLP endpoint; /metrics still serves them",
            "metrics are exported to the OTLP endpoint again",
        ),
    };
    let reader = PeriodicReader::builder(exporter)
        .with_interval(export.interval)
        .build();
    let provider = SdkMeterProvider::builder()
        .with_reader(reader)
        .with_resource(resource)
        .build();
    let meter = provider.meter_with_scope(super::scope());
    let seconds = |name: &'static str, description: &'static str| {
        meter
            .f64_histogram(name)
            .with_unit("s")
            .with_description(description)
            .with_boundaries(names::SECONDS_BOUNDARIES.to_vec())
            .build()
    };
    let instruments = Instruments {
        call_attributes: call_attributes(),
        calls: seconds(
            names::METRIC_CALL_DURATION,
            "A2A calls' duration to their answer.",
        ),
        operations: seconds(
            names::METRIC_GEN_AI_DURATION,
            "The model's or the agent's time per call.",
        ),
        tokens: meter
            .u64_histogram(names::METRIC_GEN_AI_TOKENS)
            .with_unit("{token}")
            .with_description("Tokens per call, by type.")
            .with_boundaries(names::TOKEN_BOUNDARIES.to_vec())
            .build(),
        first_event: seconds(
            names::METRIC_FIRST_EVENT,
            "Time from a stream's request to its first event.",
        ),
    };
    Ok((provider, std::sync::Arc::new(instruments)))
}

fn call_index(call: A2aCall, outcome: CallOutcome) -> usize {
    ((call.binding as usize * Method::ALL.len()) + call.method as usize) * CallOutcome::ALL.len()
        + outcome as usize
}

/// The attributes of every kind of call, in [`call_index`]'s order.
fn call_attributes() -> Vec<[KeyValue; 4]> {
    let mut table = Vec::new();
    for binding in Binding::ALL {
        // The RPC system is the binding's where it is one (HTTP+JSON is not an RPC system).
        let system = match binding {
            Binding::JsonRpc => "jsonrpc",
            Binding::Grpc => "grpc",
            _ => "http",
        };
        for method in Method::ALL {
            for outcome in CallOutcome::ALL {
                table.push([
                    KeyValue::new(names::RPC_SYSTEM, system),
                    KeyValue::new(names::A2A_BINDING, binding.label()),
                    KeyValue::new(
                        names::RPC_METHOD,
                        format!("lf.a2a.v1.A2AService/{}", method.name()),
                    ),
                    KeyValue::new(names::CALL_OUTCOME, outcome.label()),
                ]);
            }
        }
    }
    table
}

/// The OTLP exporter, each export run on the Tokio runtime and bounded by `timeout`.
#[derive(Debug)]
struct OnRuntime<E> {
    inner: E,
    runtime: tokio::runtime::Handle,
    timeout: Duration,
    /// Whether exports fail, so an outage is logged once.
    outage: super::export::Outage,
}

impl<E: PushMetricExporter> PushMetricExporter for OnRuntime<E> {
    async fn export(&self, metrics: &ResourceMetrics) -> OTelSdkResult {
        let sending = {
            let _entered = self.runtime.enter();
            tokio::time::timeout(self.timeout, self.inner.export(metrics))
        };
        let sent = Entered {
            runtime: self.runtime.clone(),
            future: sending,
        }
        .await;
        self.outage.note(&sent);
        sent.unwrap_or(Err(OTelSdkError::Timeout(self.timeout)))
    }

    fn force_flush(&self) -> OTelSdkResult {
        self.inner.force_flush()
    }

    fn shutdown_with_timeout(&self, timeout: Duration) -> OTelSdkResult {
        self.inner.shutdown_with_timeout(timeout)
    }

    fn temporality(&self) -> Temporality {
        self.inner.temporality()
    }
}

pin_project! {
    /// `future`, polled with `runtime` entered.
    struct Entered<F> {
        runtime: tokio::runtime::Handle,
        #[pin]
        future: F,
    }
}

impl<F: Future> Future for Entered<F> {
    type Output = F::Output;

    fn poll(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Self::Output> {
        let this = self.project();
        let _entered = this.runtime.enter();
        this.future.poll(cx)
    }
}

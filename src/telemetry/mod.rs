//! OpenTelemetry traces of every A2A call: one server span per request (refusals included),
//! children for what a call waited on (the backend, the store, the shared state), and the
//! trust policy for partners' trace context at the edge ([`edge`]). Exported over OTLP/HTTP
//! off the request path ([`export`]) when the standard `OTEL_*` variables name an endpoint
//! ([`settings`]); otherwise nothing is built and a request pays nothing.
//!
//! The names written are in [`conventions`], with the drafts they follow.

pub mod call_span;
pub mod conventions;
pub mod edge;
pub mod export;
pub mod level;
pub mod logs;
pub mod metrics;
pub mod settings;

pub use call_span::CallSpan;
pub use settings::{PartnerContext, TelemetrySettings};

use axum::http::HeaderMap;
use export::{Destination, SpanLosses};
use opentelemetry::InstrumentationScope;
use opentelemetry::trace::{TraceContextExt as _, TracerProvider as _};
use opentelemetry_sdk::Resource;
use opentelemetry_sdk::trace::{Sampler, SdkTracer, SdkTracerProvider};
use settings::{Export, ParentlessSampling, Sampling};
use std::sync::Arc;
use std::time::{Duration, SystemTime};

/// What a request's span needs: the tracer and the edge's policy.
#[derive(Debug)]
pub struct Tracing {
    tracer: SdkTracer,
    partner_context: PartnerContext,
    /// The agent's name, as the card names it.
    pub agent_name: String,
    /// The client's address goes on spans.
    pub client_address: bool,
    /// The prompt's and answer's text go on the model call's span, cut to this many bytes.
    pub content_bytes: Option<usize>,
}

impl Tracing {
    /// A push delivery's span, linked to the call whose task it tells of (`call`, its
    /// `traceparent`, when that call was traced).
    pub fn delivery_span(
        &self,
        call: Option<&str>,
        attributes: Vec<opentelemetry::KeyValue>,
    ) -> call_span::ChildSpan {
        call_span::delivery_span(&self.tracer, call, attributes)
    }

    /// The span of a request that arrived at `started` with `headers`.
    pub fn call_span(&self, started: SystemTime, headers: &HeaderMap) -> CallSpan {
        let partner = match self.partner_context {
            PartnerContext::Drop => None,
            PartnerContext::Link => headers
                .get("traceparent")
                .and_then(|value| edge::partner_context(value.as_bytes())),
        };
        let span = CallSpan::new(self.tracer.clone(), started, partner, self.partner_context);
        if span.records() {
            span.note(request_attributes(headers, &self.agent_name));
        }
        if self.client_address {
            span.wants_client_address();
        }
        if let Some(bytes) = self.content_bytes {
            span.wants_content(bytes);
        }
        span
    }
}

/// The running telemetry: the tracer provider and its export task, for a clean shutdown.
pub struct Telemetry {
    /// What the layers and the call use; `None` when nothing is exported.
    pub tracing: Option<Arc<Tracing>>,
    /// Spans not exported, for `/metrics`.
    pub losses: Arc<SpanLosses>,
    /// The metrics' instruments, when metrics are exported over OTLP.
    pub instruments: Option<Arc<metrics::Instruments>>,
    provider: Option<SdkTracerProvider>,
    meters: Option<opentelemetry_sdk::metrics::SdkMeterProvider>,
    task: Option<tokio::task::JoinHandle<()>>,
}

impl Telemetry {
    /// Nothing exported.
    pub fn off() -> Self {
        Self {
            tracing: None,
            losses: Arc::default(),
            instruments: None,
            provider: None,
            meters: None,
            task: None,
        }
    }

    /// Starts exporting as `settings` say, with `client` (the project's own HTTP client: its
    /// TLS provider and roots); `agent_name` names the agent on every span.
    pub fn start(
        settings: &TelemetrySettings,
        client: reqwest::Client,
        agent_name: &str,
    ) -> Result<Self, String> {
        let Some(export) = &settings.export else {
            return Ok(Self::off());
        };
        let losses = Arc::new(SpanLosses::default());
        let destination = Destination {
            url: export.traces_url.clone(),
            headers: export.headers.clone(),
            timeout: export.timeout,
            queue: settings.queue,
        };
        let resource = resource(export);
        let meters = match &export.metrics {
            Some(destination) => Some(metrics::start(
                destination,
                (&export.headers, export.timeout),
                client.clone(),
                resource.clone(),
            )?),
            None => None,
        };
        let (spans, task) = export::spans(destination, client, (&resource, losses.clone()))?;
        let provider = SdkTracerProvider::builder()
            .with_span_processor(spans)
            .with_sampler(sampler(export.sampling))
            .with_resource(resource)
            .build();
        let tracing = Tracing {
            tracer: provider.tracer_with_scope(scope()),
            partner_context: settings.partner_context,
            agent_name: agent_name.to_owned(),
            client_address: settings.client_address,
            content_bytes: settings.content_bytes,
        };
        Ok(Self {
            tracing: Some(Arc::new(tracing)),
            losses,
            instruments: meters.as_ref().map(|(_, instruments)| instruments.clone()),
            provider: Some(provider),
            meters: meters.map(|(provider, _)| provider),
            task: Some(task),
        })
    }

    /// Sends what is queued, waiting at most `within`.
    pub async fn shutdown(mut self, within: Duration) {
        if let Some(provider) = self.provider.take() {
            let _ = provider.shutdown();
        }
        if let Some(meters) = self.meters.take() {
            // The reader's last export waits on its own thread for the runtime's I/O: not on
            // a thread of the runtime.
            let last = tokio::task::spawn_blocking(move || meters.shutdown());
            if tokio::time::timeout(within, last).await.is_err() {
                tracing::warn!("the last metrics were not exported at shutdown");
            }
        }
        if let Some(task) = self.task.take()
            && tokio::time::timeout(within, task).await.is_err()
        {
            tracing::warn!("spans still queued at shutdown were not exported");
        }
    }
}

/// peergate's instrumentation scope, with its version.
fn scope() -> InstrumentationScope {
    InstrumentationScope::builder(conventions::SCOPE)
        .with_version(env!("CARGO_PKG_VERSION"))
        .build()
}

fn sampler(sampling: Sampling) -> Sampler {
    let parentless = |choice| match choice {
        ParentlessSampling::AlwaysOn => Sampler::AlwaysOn,
        ParentlessSampling::AlwaysOff => Sampler::AlwaysOff,
        ParentlessSampling::Ratio(ratio) => Sampler::TraceIdRatioBased(ratio),
    };
    match sampling {
        Sampling::AlwaysOn => Sampler::AlwaysOn,
        Sampling::AlwaysOff => Sampler::AlwaysOff,
        Sampling::Ratio(ratio) => Sampler::TraceIdRatioBased(ratio),
        Sampling::ParentBased(choice) => Sampler::ParentBased(Box::new(parentless(choice))),
    }
}

fn resource(export: &Export) -> Resource {
    Resource::builder_empty()
        .with_service_name(export.service_name.clone())
        .with_attributes(
            export
                .resource
                .iter()
                .map(|(key, value)| opentelemetry::KeyValue::new(key.clone(), value.clone())),
        )
        .with_attribute(opentelemetry::KeyValue::new(
            "service.version",
            env!("CARGO_PKG_VERSION"),
        ))
        .build()
}

/// Notes who the authentication layer let in on the request's span, when it has one, and
/// builds the span for them: continuing their own trace when `continues_trace` (a peer marked
/// as trusted), otherwise a trace of peergate's own linked to theirs.
pub fn note_principal(
    extensions: &axum::http::Extensions,
    id: &str,
    scheme: &'static str,
    continues_trace: bool,
) {
    if let Some(span) = extensions.get::<Arc<CallSpan>>() {
        let built = span.begin(continues_trace);
        // Every log line about the call names its trace.
        let trace_id = built.span().span_context().trace_id();
        crate::protocol::request_id::RequestId::note_trace_id(u128::from_be_bytes(
            trace_id.to_bytes(),
        ));
        if span.records() {
            span.note([
                opentelemetry::KeyValue::new(conventions::PEER_ID, id.to_owned()),
                opentelemetry::KeyValue::new(conventions::AUTH_SCHEME, scheme),
            ]);
        }
    }
}

/// Notes the client's address the client-address layer decided on the request's span, when the
/// operator opted in to it.
pub fn note_client(extensions: &axum::http::Extensions, client: std::net::IpAddr) {
    if let Some(span) = extensions.get::<Arc<CallSpan>>()
        && span.takes_client_address()
    {
        span.note([opentelemetry::KeyValue::new(
            conventions::CLIENT_ADDRESS,
            client.to_string(),
        )]);
    }
}

/// The most of a partner's header text a span keeps.
const HEADER_TEXT: usize = 256;

/// What the request's headers say of the protocol: the version and the extensions it asked
/// for (a partner's text: cut, and only printable ASCII kept), and the agent's name.
fn request_attributes(headers: &HeaderMap, agent_name: &str) -> Vec<opentelemetry::KeyValue> {
    let text = |name: &str| {
        headers
            .get(name)
            .and_then(|value| value.to_str().ok())
            .map(|value| {
                value
                    .chars()
                    .filter(|c| c.is_ascii_graphic() || *c == ' ' || *c == ',')
            })
            .map(|chars| chars.take(HEADER_TEXT).collect::<String>())
    };
    let mut attributes = vec![opentelemetry::KeyValue::new(
        conventions::GEN_AI_AGENT_NAME,
        agent_name.to_owned(),
    )];
    if let Some(version) = text("a2a-version") {
        attributes.push(opentelemetry::KeyValue::new(
            conventions::A2A_PROTOCOL_VERSION,
            version,
        ));
    }
    if let Some(extensions) = text("a2a-extensions") {
        let listed: Vec<opentelemetry::StringValue> = extensions
            .split(',')
            .map(str::trim)
            .filter(|uri| !uri.is_empty())
            .take(16)
            .map(|uri| uri.to_owned().into())
            .collect();
        attributes.push(opentelemetry::KeyValue::new(
            conventions::A2A_REQUESTED_EXTENSIONS,
            opentelemetry::Value::Array(listed.into()),
        ));
    }
    attributes
}

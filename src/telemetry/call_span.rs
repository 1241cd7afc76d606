//! One request's server span, as a note the layers and the call fill in (as the access log's
//! note is): started when the request arrives, built once the caller is known (a trusted peer
//! continues its own trace, any other request starts one of peergate's, linked to the
//! partner's), given the call's attributes as they are learned, and ended by the telemetry
//! layer when the answer's last byte is sent.

use super::settings::PartnerContext;
use crate::locks::Locked;
use opentelemetry::trace::{
    Link, SpanBuilder, SpanContext, SpanKind, Status, TraceContextExt, Tracer,
};
use opentelemetry::{Context, KeyValue};
use opentelemetry_sdk::trace::SdkTracer;
use std::sync::{Mutex, OnceLock};
use std::time::SystemTime;

/// One request's server span: see the [module docs](self).
#[derive(Debug)]
pub struct CallSpan {
    tracer: SdkTracer,
    started: SystemTime,
    /// The partner's `traceparent`, when it sent a well-formed one and the policy reads it.
    partner: Option<SpanContext>,
    /// The span, once built.
    built: OnceLock<Context>,
    /// Attributes noted before the span was built.
    early: Mutex<Vec<KeyValue>>,
    /// The operator opted in to the client's address on spans.
    client_address: std::sync::atomic::AtomicBool,
    /// The operator opted in to the prompt's and answer's text, cut to this many bytes.
    content_bytes: OnceLock<usize>,
    /// A stream's events, as its binding read them to send.
    events: std::sync::atomic::AtomicU64,
}

impl CallSpan {
    /// A request that arrived at `started`, with the partner's context as `policy` reads it.
    pub fn new(
        tracer: SdkTracer,
        started: SystemTime,
        partner: Option<SpanContext>,
        policy: PartnerContext,
    ) -> Self {
        let span = Self {
            tracer,
            started,
            partner: partner.filter(|_| policy == PartnerContext::Link),
            built: OnceLock::new(),
            early: Mutex::new(Vec::new()),
            client_address: std::sync::atomic::AtomicBool::new(false),
            content_bytes: OnceLock::new(),
            events: std::sync::atomic::AtomicU64::new(0),
        };
        // Without a partner's context nobody's trust changes how the span is built: built now,
        // so a call the sampler leaves out knows it at once and builds no attribute at all.
        if span.partner.is_none() {
            span.begin(false);
        }
        span
    }

    /// Whether attributes noted now would be kept: the span is not built yet, or it records.
    pub fn records(&self) -> bool {
        self.built
            .get()
            .is_none_or(|context| context.span().is_recording())
    }

    /// One more event of the call's stream; the first is marked on the span.
    pub fn stream_event(&self) {
        let seen = self
            .events
            .fetch_add(1, std::sync::atomic::Ordering::Relaxed);
        if seen == 0 {
            self.event(super::conventions::FIRST_EVENT);
        }
    }

    /// The events the call's stream carried so far.
    pub fn stream_events(&self) -> u64 {
        self.events.load(std::sync::atomic::Ordering::Relaxed)
    }

    /// The prompt's and answer's text go on the backend's span, cut to `bytes`.
    pub fn wants_content(&self, bytes: usize) {
        let _ = self.content_bytes.set(bytes);
    }

    /// `text` cut to what the operator allows on a span, when they allow any.
    pub fn content(&self, text: &str) -> Option<String> {
        let bytes = *self.content_bytes.get()?;
        let mut end = bytes.min(text.len());
        while !text.is_char_boundary(end) {
            end -= 1;
        }
        Some(text[..end].to_owned())
    }

    /// The client's address goes on this span (the operator opted in).
    pub fn wants_client_address(&self) {
        self.client_address
            .store(true, std::sync::atomic::Ordering::Relaxed);
    }

    /// Whether the client's address goes on this span.
    pub fn takes_client_address(&self) -> bool {
        self.client_address
            .load(std::sync::atomic::Ordering::Relaxed)
    }

    /// Builds the span (once; later calls return it as built): continuing the partner's trace
    /// when its peer is `trusted`, otherwise a trace of its own linked to the partner's.
    pub fn begin(&self, trusted: bool) -> &Context {
        self.built.get_or_init(|| {
            let (parent, links) = match (&self.partner, trusted) {
                (Some(partner), true) => (
                    Context::new().with_remote_span_context(partner.clone()),
                    Vec::new(),
                ),
                (Some(partner), false) => {
                    (Context::new(), vec![Link::with_context(partner.clone())])
                }
                (None, _) => (Context::new(), Vec::new()),
            };
            let early = std::mem::take(&mut *self.early.locked());
            let builder = SpanBuilder::from_name("A2A")
                .with_kind(SpanKind::Server)
                .with_start_time(self.started)
                .with_links(links)
                .with_attributes(early);
            Context::new().with_span(self.tracer.build_with_context(builder, &parent))
        })
    }

    /// The span's context, for a child or a request behind the door (built as untrusted if
    /// nobody built it yet).
    pub fn context(&self) -> &Context {
        self.begin(false)
    }

    /// The span's context as a W3C `traceparent`, when it is sampled (what a push delivery of
    /// the call's task links to).
    pub fn traceparent(&self) -> Option<String> {
        let context = self.context().span().span_context().clone();
        context
            .is_sampled()
            .then(|| super::edge::traceparent(&context))
    }

    /// Whether the span is sampled: only then are children and attributes worth making.
    pub fn is_sampled(&self) -> bool {
        self.context().span().span_context().is_sampled()
    }

    /// Adds `attributes` to the span.
    pub fn note(&self, attributes: impl IntoIterator<Item = KeyValue>) {
        match self.built.get() {
            Some(context) => context.span().set_attributes(attributes),
            None => self.early.locked().extend(attributes),
        }
    }

    /// Marks the moment `name` happened (a stream's first event).
    pub fn event(&self, name: &'static str) {
        self.context().span().add_event(name, Vec::new());
    }

    /// A child span of this call's, started now (the backend asked, the store written).
    /// Not sampled, the call's children are not built either: the child then only carries the
    /// call's context on (a request behind the door continues the decision).
    pub fn child(&self, name: String, kind: SpanKind, attributes: Vec<KeyValue>) -> ChildSpan {
        let parent = self.context();
        if !parent.span().span_context().is_sampled() {
            return ChildSpan::carrying(parent.span().span_context().clone());
        }
        let builder = SpanBuilder::from_name(name)
            .with_kind(kind)
            .with_attributes(attributes);
        ChildSpan::of(self.tracer.build_with_context(builder, parent))
    }

    /// Ends the span now, named `name`, with the answer's `attributes` and `status`.
    pub fn finish(&self, name: String, attributes: Vec<KeyValue>, status: Status) {
        let context = self.context();
        let span = context.span();
        span.update_name(name);
        span.set_attributes(attributes);
        span.set_status(status);
        span.end();
    }
}

/// A push delivery's span: a trace of its own, linked to the call whose task it tells of
/// (`call`, a `traceparent`, when that call was traced) — it runs after the call has been
/// answered, maybe more than once, maybe on another instance.
pub fn delivery_span(
    tracer: &opentelemetry_sdk::trace::SdkTracer,
    call: Option<&str>,
    attributes: Vec<KeyValue>,
) -> ChildSpan {
    let links = call
        .and_then(|call| super::edge::partner_context(call.as_bytes()))
        .map(Link::with_context)
        .into_iter()
        .collect();
    let builder = SpanBuilder::from_name(super::conventions::PUSH_DELIVER)
        .with_kind(SpanKind::Client)
        .with_links(links)
        .with_attributes(attributes);
    ChildSpan::of(tracer.build_with_context(builder, &Context::new()))
}

/// A span of something a call waited on, ended by [`ChildSpan::finish`] (or when dropped).
#[derive(Debug)]
pub struct ChildSpan {
    /// `None` when the call is not sampled.
    span: Option<Mutex<opentelemetry_sdk::trace::Span>>,
    context: SpanContext,
    /// Written only when a request carries it on.
    traceparent: OnceLock<String>,
}

impl ChildSpan {
    fn of(span: opentelemetry_sdk::trace::Span) -> Self {
        let context = opentelemetry::trace::Span::span_context(&span).clone();
        Self {
            span: Some(Mutex::new(span)),
            context,
            traceparent: OnceLock::new(),
        }
    }

    /// No span: the unsampled call's `context`, carried on.
    fn carrying(context: SpanContext) -> Self {
        Self {
            span: None,
            context,
            traceparent: OnceLock::new(),
        }
    }

    /// Its context as a W3C `traceparent`, for a request that continues the trace.
    pub fn traceparent(&self) -> &str {
        self.traceparent
            .get_or_init(|| super::edge::traceparent(&self.context))
    }

    /// Adds `attributes`.
    pub fn note(&self, attributes: Vec<KeyValue>) {
        use opentelemetry::trace::Span as _;
        if let Some(span) = &self.span {
            span.locked().set_attributes(attributes);
        }
    }

    /// Ends it, with `failure` as its `error.type` (and an error status) when it failed.
    pub fn finish(&self, failure: Option<&'static str>) {
        use opentelemetry::trace::Span as _;
        let Some(span) = &self.span else { return };
        let mut span = span.locked();
        if let Some(failure) = failure {
            span.set_attribute(KeyValue::new(super::conventions::ERROR_TYPE, failure));
            span.set_status(Status::error(""));
        }
        span.end();
    }
}

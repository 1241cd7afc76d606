//! The telemetry layer: one server span per request on the door's and the gRPC listener's
//! routes (the probes excepted), refusals included. It starts the request's
//! [`CallSpan`](crate::telemetry::CallSpan) when the request arrives and puts it in the
//! request's extensions, where the authentication layer builds it for the caller and the call
//! adds children; when the answer is ready it writes what the answer says (the call's record,
//! the status, the refusal's reason) and ends the span, or, for a stream, ends it with the
//! body's last frame and counts the events.
//!
//! Absent when nothing is exported: a request then pays nothing for it.

use crate::guard::refusal::RefusalReason;
use crate::protocol::call::{Binding, CallOutcome, CallRecord, JsonRpcErrorCode};
use crate::protocol::request_id::{PartnerRequestId, RequestId};
use crate::protocol::types::TaskState;
use crate::telemetry::conventions as names;
use crate::telemetry::{CallSpan, Tracing};
use axum::body::Body;
use axum::http::{Request, Response};
use opentelemetry::KeyValue;
use opentelemetry::trace::Status;
use pin_project_lite::pin_project;
use std::future::Future;
use std::pin::Pin;
use std::sync::Arc;
use std::task::{Context, Poll, ready};
use std::time::SystemTime;
use tower::{Layer, Service};

/// Starts and ends each request's server span.
#[derive(Debug, Clone)]
pub struct TraceLayer {
    tracing: Arc<Tracing>,
    door_path: Arc<str>,
}

impl TraceLayer {
    /// Spans for a listener whose JSON-RPC door is at `door_path`.
    pub fn new(tracing: Arc<Tracing>, door_path: &str) -> Self {
        Self {
            tracing,
            door_path: door_path.into(),
        }
    }
}

impl<S> Layer<S> for TraceLayer {
    type Service = Trace<S>;

    fn layer(&self, inner: S) -> Self::Service {
        Trace {
            inner,
            layer: self.clone(),
        }
    }
}

/// The service made by [`TraceLayer`].
#[derive(Debug, Clone)]
pub struct Trace<S> {
    inner: S,
    layer: TraceLayer,
}

impl<S> Service<Request<Body>> for Trace<S>
where
    S: Service<Request<Body>, Response = Response<Body>>,
{
    type Response = Response<Body>;
    type Error = S::Error;
    type Future = TraceFuture<S::Future>;

    fn poll_ready(&mut self, cx: &mut Context<'_>) -> Poll<Result<(), Self::Error>> {
        self.inner.poll_ready(cx)
    }

    fn call(&mut self, mut request: Request<Body>) -> Self::Future {
        let route =
            crate::layers::metrics::route_label(&self.layer.door_path, request.uri().path());
        if route == "health" {
            // Probes every few seconds would drown the traces that matter.
            return TraceFuture {
                future: self.inner.call(request),
                seen: None,
            };
        }
        let span = Arc::new(
            self.layer
                .tracing
                .call_span(SystemTime::now(), request.headers()),
        );
        // A call the sampler left out builds no attribute (the span knows at once unless a
        // partner's context waits for the caller's trust).
        let name = match span.records() {
            true => notes(&span, &request, route),
            false => String::new(),
        };
        request.extensions_mut().insert(span.clone());
        TraceFuture {
            future: self.inner.call(request),
            seen: Some(Seen { span, name }),
        }
    }
}

/// Notes what the request says on its span; the span's name unless the answer names an A2A
/// operation.
fn notes(span: &CallSpan, request: &Request<Body>, route: &'static str) -> String {
    span.note([
        KeyValue::new(names::HTTP_METHOD, request.method().as_str().to_owned()),
        KeyValue::new(names::HTTP_ROUTE, route),
    ]);
    if let Some(id) = RequestId::current() {
        span.note([KeyValue::new(names::REQUEST_ID, id.0.to_string())]);
    }
    if let Some(partner) = request.extensions().get::<PartnerRequestId>() {
        span.note([KeyValue::new(
            names::PARTNER_REQUEST_ID,
            partner.0.to_string(),
        )]);
    }
    format!("{} {route}", request.method())
}

/// What the layer keeps of a request until its answer.
struct Seen {
    span: Arc<CallSpan>,
    /// The span's name unless the answer names an A2A operation: the HTTP method and route.
    name: String,
}

pin_project! {
    /// The response future of [`Trace`].
    pub struct TraceFuture<F> {
        #[pin]
        future: F,
        seen: Option<Seen>,
    }
}

impl<F, E> Future for TraceFuture<F>
where
    F: Future<Output = Result<Response<Body>, E>>,
{
    type Output = Result<Response<Body>, E>;

    fn poll(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Self::Output> {
        let this = self.project();
        let response = ready!(this.future.poll(cx))?;
        let Some(seen) = this.seen.take() else {
            return Poll::Ready(Ok(response));
        };
        if !seen.span.records() {
            // Not sampled: nothing to write, nothing to export; a stream is not followed.
            return Poll::Ready(Ok(response));
        }
        let ending = Ending::of(&seen, &response);
        let streaming = response
            .extensions()
            .get::<CallRecord>()
            .is_some_and(|record| record.outcome == CallOutcome::Streaming);
        if !streaming {
            ending.end(&seen.span, false);
            return Poll::Ready(Ok(response));
        }
        let (parts, body) = response.into_parts();
        let body = Body::new(TracedBody {
            inner: body,
            span: Some(seen.span),
            ending: Some(ending),
        });
        Poll::Ready(Ok(Response::from_parts(parts, body)))
    }
}

/// What the answer says, for the span's end.
struct Ending {
    name: String,
    attributes: Vec<KeyValue>,
    status: Status,
}

impl Ending {
    fn of(seen: &Seen, response: &Response<Body>) -> Self {
        let extensions = response.extensions();
        let http = response.status().as_u16();
        let mut attributes = vec![KeyValue::new(names::HTTP_STATUS, i64::from(http))];
        let record = extensions.get::<CallRecord>();
        let name = match record {
            Some(record) => {
                call_attributes(record, &mut attributes);
                record.call.method.name().to_owned()
            }
            None => seen.name.clone(),
        };
        let reason = extensions.get::<RefusalReason>().copied();
        let rpc_code = extensions.get::<JsonRpcErrorCode>().map(|code| code.0);
        let grpc_code = response
            .headers()
            .get("grpc-status")
            .and_then(|value| value.to_str().ok())
            .and_then(|value| value.parse::<i64>().ok())
            .filter(|code| *code != 0);
        if let Some(code) = rpc_code.or(grpc_code) {
            attributes.push(KeyValue::new(names::RPC_STATUS_CODE, code.to_string()));
        }
        if let Some(reason) = reason {
            attributes.push(KeyValue::new(names::REFUSAL_REASON, reason.label()));
        }
        // A turn whose task came back failed (the backend gave no answer): the server's fault.
        let task_failed = record.is_some_and(|record| {
            let state = record.seen.as_ref().and_then(|seen| seen.state);
            record.outcome == CallOutcome::Failed && state == Some(TaskState::Failed)
        });
        let error_type = error_type(reason, rpc_code, grpc_code, http)
            .or_else(|| task_failed.then(|| "task_failed".to_owned()));
        let fault = http >= 500
            || task_failed
            || rpc_code == Some(-32603)
            || grpc_code.is_some_and(|code| matches!(code, 2 | 4 | 13 | 14 | 15));
        if let Some(error_type) = error_type {
            attributes.push(KeyValue::new(names::ERROR_TYPE, error_type));
        }
        // A caller's mistake is not the server's fault: the status stays unset, with
        // `error.type` saying what it was (the HTTP conventions' rule for server spans).
        let status = match fault {
            true => Status::error(""),
            false => Status::Unset,
        };
        Self {
            name,
            attributes,
            status,
        }
    }

    /// Ends `span`; a stream's with the count of its events.
    fn end(self, span: &CallSpan, streamed: bool) {
        let mut attributes = self.attributes;
        if streamed {
            let events = span.stream_events() as i64;
            attributes.push(KeyValue::new(names::STREAM_EVENTS, events));
        }
        span.finish(self.name, attributes, self.status);
    }
}

/// The call's own attributes, from the pipeline's record.
fn call_attributes(record: &CallRecord, attributes: &mut Vec<KeyValue>) {
    let method = record.call.method.name();
    attributes.push(KeyValue::new(names::A2A_METHOD, method));
    attributes.push(KeyValue::new(
        names::A2A_BINDING,
        record.call.binding.label(),
    ));
    attributes.push(KeyValue::new(
        names::RPC_METHOD,
        format!("lf.a2a.v1.A2AService/{method}"),
    ));
    match record.call.binding {
        Binding::JsonRpc => attributes.push(KeyValue::new(names::RPC_SYSTEM, "jsonrpc")),
        Binding::Grpc => attributes.push(KeyValue::new(names::RPC_SYSTEM, "grpc")),
        _ => {}
    }
    if let Some(task) = &record.task {
        attributes.push(KeyValue::new(names::A2A_TASK_ID, task.to_string()));
    }
    let Some(seen) = &record.seen else { return };
    if let Some(context) = &seen.context {
        attributes.push(KeyValue::new(
            names::GEN_AI_CONVERSATION_ID,
            context.to_string(),
        ));
    }
    if let Some(message) = &seen.message {
        attributes.push(KeyValue::new(names::A2A_MESSAGE_ID, message.to_string()));
    }
    if let Some(state) = seen.state {
        attributes.push(KeyValue::new(names::A2A_TASK_STATE, state.as_str()));
    }
}

/// What went wrong, in the fewest words a dashboard groups by: the refusal's reason, the
/// JSON-RPC or gRPC code, or the HTTP status.
fn error_type(
    reason: Option<RefusalReason>,
    rpc_code: Option<i64>,
    grpc_code: Option<i64>,
    http: u16,
) -> Option<String> {
    if let Some(reason) = reason {
        return Some(reason.label().to_owned());
    }
    if let Some(code) = rpc_code.or(grpc_code) {
        return Some(code.to_string());
    }
    (http >= 400).then(|| http.to_string())
}

pin_project! {
    /// A stream's body: the span ends with its last frame (or when it is dropped, a client that
    /// left). The events are counted by the call as its binding reads them
    /// ([`CallSpan::stream_event`]): a frame may carry several.
    struct TracedBody {
        #[pin]
        inner: Body,
        span: Option<Arc<CallSpan>>,
        ending: Option<Ending>,
    }

    impl PinnedDrop for TracedBody {
        fn drop(this: Pin<&mut Self>) {
            let this = this.project();
            if let (Some(span), Some(ending)) = (this.span.take(), this.ending.take()) {
                ending.end(&span, true);
            }
        }
    }
}

impl http_body::Body for TracedBody {
    type Data = axum::body::Bytes;
    type Error = axum::Error;

    fn poll_frame(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
    ) -> Poll<Option<Result<http_body::Frame<Self::Data>, Self::Error>>> {
        let this = self.project();
        let frame = ready!(this.inner.poll_frame(cx));
        // The end, or an error: the stream is over.
        if matches!(frame, None | Some(Err(_)))
            && let (Some(span), Some(ending)) = (this.span.take(), this.ending.take())
        {
            ending.end(&span, true);
        }
        Poll::Ready(frame)
    }

    fn is_end_stream(&self) -> bool {
        self.inner.is_end_stream()
    }

    fn size_hint(&self) -> http_body::SizeHint {
        self.inner.size_hint()
    }
}

//! The gRPC binding (`[grpc]`): A2A 1.0's `lf.a2a.v1.A2AService` over HTTP/2 on a listener of
//! its own, and `grpc.health.v1.Health`.
//!
//! Decode, call, encode, as the other bindings: tonic frames the messages, the codec reads each
//! request into its protobuf message by reflection ([`crate::protocol::grpc`]), whose ProtoJSON
//! the operation's typed request reads; the typed answer's ProtoJSON is written back as the
//! response message. An [`A2aError`] becomes a status with the code of the one error table and
//! the same `google.rpc.ErrorInfo` in `grpc-status-details-bin`.
//!
//! The guard in front is the door's, layer for layer (per-address limit, authentication with
//! the credential in the `authorization` metadata, per-peer limit, body limit, timeout, the
//! protocol gate reading `a2a-version` and `a2a-extensions`); its refusals are HTTP responses,
//! and [`as_grpc_status`] turns each into a status in the one place: 401 `UNAUTHENTICATED`,
//! 403 `PERMISSION_DENIED`, 429 `RESOURCE_EXHAUSTED` with a `RetryInfo` delay.

use crate::a2a::events::EventStream;
use crate::a2a::operation::{A2aRequest, A2aResponse, CallRefused};
use crate::a2a::pipeline::{Asked as PipelineAsked, Pipeline};
use crate::a2a::service::Caller;
use crate::guard::admission::Admission;
use crate::guard::refusal::{Refusal, RefusalReason};
use crate::http::door::{self, DoorGuards};
use crate::http::h2_watch::StreamWatch;
use crate::http::ready::Readiness;
use crate::layers::auth::AuthenticatedPeer;
use crate::layers::client_addr::ClientAddr;
use crate::protocol::call::{A2aCall, Binding, CallOutcome, CallRecord};
use crate::protocol::error::{A2aError, GrpcCode};
use crate::protocol::grpc::{self as messages, A2A_SERVICE, HEALTH_SERVICE};
use crate::protocol::grpc_generated as generated;
use crate::protocol::jsonrpc::Method;
use axum::Router;
use axum::body::Body;
use axum::extract::{Path, Request, State};
use axum::http::{HeaderName, StatusCode, header};
use axum::response::{IntoResponse, Response};
use axum::routing::post;
use futures_util::future::BoxFuture;
use futures_util::stream::BoxStream;
use http_body_util::BodyExt;
use prost_reflect::{DynamicMessage, MessageDescriptor};
use serde_json::Value;
use std::sync::Arc;
use std::time::Duration;
use tonic::codec::{BufferSettings, Codec, DecodeBuf, Decoder, EncodeBuf, Encoder};
use tonic::server::{Grpc, ServerStreamingService, UnaryService};

/// What the binding's handlers share.
#[derive(Clone)]
pub(crate) struct GrpcState {
    /// The call pipeline every binding asks.
    pub(crate) pipeline: Pipeline,
    /// The longest a stream stays open.
    pub(crate) longest_stream: Duration,
    /// The largest request message, as the door's body limit.
    pub(crate) max_message_bytes: usize,
}

/// Each operation's method name (the path's last segment), the operation, and the full names
/// of its request and response messages.
const OPERATIONS: [(&str, Method, &str, &str); 11] = [
    (
        "SendMessage",
        Method::SendMessage,
        "lf.a2a.v1.SendMessageRequest",
        "lf.a2a.v1.SendMessageResponse",
    ),
    (
        "SendStreamingMessage",
        Method::SendStreamingMessage,
        "lf.a2a.v1.SendMessageRequest",
        "lf.a2a.v1.StreamResponse",
    ),
    (
        "GetTask",
        Method::GetTask,
        "lf.a2a.v1.GetTaskRequest",
        "lf.a2a.v1.Task",
    ),
    (
        "ListTasks",
        Method::ListTasks,
        "lf.a2a.v1.ListTasksRequest",
        "lf.a2a.v1.ListTasksResponse",
    ),
    (
        "CancelTask",
        Method::CancelTask,
        "lf.a2a.v1.CancelTaskRequest",
        "lf.a2a.v1.Task",
    ),
    (
        "SubscribeToTask",
        Method::SubscribeToTask,
        "lf.a2a.v1.SubscribeToTaskRequest",
        "lf.a2a.v1.StreamResponse",
    ),
    (
        "CreateTaskPushNotificationConfig",
        Method::CreatePushConfig,
        "lf.a2a.v1.TaskPushNotificationConfig",
        "lf.a2a.v1.TaskPushNotificationConfig",
    ),
    (
        "GetTaskPushNotificationConfig",
        Method::GetPushConfig,
        "lf.a2a.v1.GetTaskPushNotificationConfigRequest",
        "lf.a2a.v1.TaskPushNotificationConfig",
    ),
    (
        "ListTaskPushNotificationConfigs",
        Method::ListPushConfigs,
        "lf.a2a.v1.ListTaskPushNotificationConfigsRequest",
        "lf.a2a.v1.ListTaskPushNotificationConfigsResponse",
    ),
    (
        "DeleteTaskPushNotificationConfig",
        Method::DeletePushConfig,
        "lf.a2a.v1.DeleteTaskPushNotificationConfigRequest",
        "google.protobuf.Empty",
    ),
    (
        "GetExtendedAgentCard",
        Method::GetExtendedAgentCard,
        "lf.a2a.v1.GetExtendedAgentCardRequest",
        "lf.a2a.v1.AgentCard",
    ),
];

/// The gRPC listener's routes: the A2A service behind the door's guard (with the gate in the
/// shape [`as_grpc_status`] reads), the health check in front of it as `/ready` is, and
/// `UNIMPLEMENTED` for anything else.
pub(crate) fn grpc_router(
    settings: &door::DoorSettings,
    (state, readiness): (GrpcState, Arc<Readiness>),
    guards: &DoorGuards,
    observers: door::Observers,
) -> Router {
    let a2a = a2a_routes().layer(door::gate(settings));
    let guarded = door::behind_address_guard(
        door::behind_peer_guard(a2a, settings, guards),
        settings,
        guards,
    );
    let health = post(health_check).with_state(readiness);
    let routes = Router::new()
        .route(&format!("/{HEALTH_SERVICE}/Check"), health)
        .merge(guarded)
        .fallback(|| async { unimplemented() })
        .with_state(state)
        .layer(axum::middleware::from_fn(taking_answers))
        .layer(axum::middleware::map_response(as_grpc_status));
    door::observed(routes, settings, observers, &format!("/{A2A_SERVICE}"))
}

/// The A2A service's methods, the binding alone (decode, call the pipeline, encode).
pub(crate) fn a2a_routes() -> Router<GrpcState> {
    Router::new().route(&format!("/{A2A_SERVICE}/{{method}}"), post(a2a_method))
}

/// Refuses a call on a connection that holds as many answers its client has not taken as it
/// may ([`crate::http::h2_watch`]), before anything else is asked of it.
async fn taking_answers(request: Request, next: axum::middleware::Next) -> Response {
    if let Some(watch) = request.extensions().get::<Arc<StreamWatch>>()
        && watch.holds_too_many()
    {
        return Refusal::NotReading {
            waiting: watch.waiting(),
        }
        .into_response();
    }
    next.run(request).await
}

/// One A2A method called over gRPC.
async fn a2a_method(
    State(state): State<GrpcState>,
    Path(name): Path<String>,
    request: Request,
) -> Response {
    let Some(peer) = request.extensions().get::<AuthenticatedPeer>().cloned() else {
        // Only the authentication layer makes a peer: a route without it refuses.
        return Refusal::internal(&"no peer", "a gRPC route is missing its guard").into_response();
    };
    let caller = Caller::new(
        peer,
        request.extensions().get::<ClientAddr>().map(ClientAddr::ip),
        request.extensions(),
    );
    let known = OPERATIONS.iter().find(|(known, ..)| *known == name);
    let Some((method, request_type, response_type)) = known.and_then(|(_, method, req, res)| {
        Some((
            *method,
            messages::descriptor(req)?,
            messages::descriptor(res)?,
        ))
    }) else {
        return unread(&state, &caller, unimplemented()).await;
    };
    // Kept to settle the admission of a call tonic answers before the pipeline reads it.
    let unread_caller = caller.admission.is_some().then(|| caller.clone());
    // Over HTTP/2 a message has no length to refuse up front: the body limit meets it while
    // tonic reads, and says so in gRPC's words rather than as an unknown error.
    let request = request.map(|body| Body::new(body.map_err(body_too_large)));
    let mut grpc = Grpc::new(RequestCodec::for_method(method, request_type))
        .max_decoding_message_size(state.max_message_bytes);
    let recorded = Arc::new(std::sync::OnceLock::new());
    let call = Call {
        state: state.clone(),
        caller,
        method,
        response_type,
        recorded: recorded.clone(),
    };
    let response = if matches!(
        method,
        Method::SendStreamingMessage | Method::SubscribeToTask
    ) {
        grpc.server_streaming(call, request).await
    } else {
        grpc.unary(call, request).await
    };
    let mut response = refused_in_the_call(past_the_limit_as_too_large(response.map(Body::new)));
    if let Some(caller) = unread_caller
        && caller.admission.as_ref().is_some_and(Admission::is_pending)
    {
        // A message that did not decode, or was past the limit: tonic's status, unless the
        // caller's admission refuses.
        response = unread(&state, &caller, response).await;
    }
    // A call tonic answered before the pipeline read it is recorded as refused.
    let record = recorded.get().cloned().unwrap_or(CallRecord {
        call: A2aCall {
            binding: Binding::Grpc,
            method,
        },
        task: None,
        outcome: CallOutcome::Refused,
        peer: None,
        seen: None,
    });
    response.extensions_mut().insert(record);
    response
}

/// A call the pipeline never read (a method this service does not have, a message that does
/// not decode): `answer`, once the caller's admission lets it be (the guard's refusal as a
/// status when a limit refuses).
async fn unread(state: &GrpcState, caller: &Caller, answer: Response) -> Response {
    match state.pipeline.unread(caller).await {
        Some(refusal) => refused_in_the_call(refusal_status(refusal).into_http()),
        None => answer,
    }
}

/// A status the call answered with that the guard's refusal made: the refusal's reason and
/// request id on the response too, where the metrics and the access log read them as they
/// read every other refusal's.
fn refused_in_the_call(mut response: Response) -> Response {
    let source = response
        .extensions()
        .get::<tonic::Status>()
        .and_then(std::error::Error::source);
    if let Some(CountedAs(reason)) = source.and_then(|source| source.downcast_ref()) {
        let reason = *reason;
        response.extensions_mut().insert(reason);
        return response;
    }
    let refusal: Option<Refusal> = source.and_then(|source| source.downcast_ref()).cloned();
    if let Some(refusal) = refusal {
        if let Some(reason) = refusal.reason() {
            response.extensions_mut().insert(reason);
        }
        if let Refusal::Internal { request_id } = refusal {
            response
                .extensions_mut()
                .insert(crate::guard::refusal::LoggedRequestId(request_id));
        }
    }
    response
}

/// A method this service does not have.
fn unimplemented() -> Response {
    tonic::Status::unimplemented("no such method on this service").into_http()
}

/// One call of an A2A method: the service asked with the decoded request.
#[derive(Clone)]
struct Call {
    state: GrpcState,
    caller: Caller,
    method: Method,
    response_type: MessageDescriptor,
    /// The pipeline's record of the call, for the response tonic makes.
    recorded: Arc<std::sync::OnceLock<CallRecord>>,
}

impl Call {
    /// Asks the pipeline with the decoded request.
    async fn ask(self, decoded: Decoded) -> Result<A2aResponse, tonic::Status> {
        let asked = PipelineAsked {
            binding: Binding::Grpc,
            method: self.method,
            request: decoded.request(self.method),
        };
        let pipeline = self.state.pipeline.clone();
        let called = pipeline.call(self.caller, asked).await;
        let _ = self.recorded.set(called.record);
        called.answer.map_err(refused)
    }
}

impl UnaryService<Decoded> for Call {
    type Response = Encoded;
    type Future = BoxFuture<'static, Result<tonic::Response<Encoded>, tonic::Status>>;

    fn call(&mut self, request: tonic::Request<Decoded>) -> Self::Future {
        let call = self.clone();
        Box::pin(async move {
            let response_type = call.response_type.clone();
            let answer = call.ask(request.into_inner()).await?;
            encode(&answer, &response_type)
                .map(|bytes| tonic::Response::new(Encoded(bytes)))
                .map_err(|e| status(&e))
        })
    }
}

/// An answer as its response message. The answers on the turn's path are written straight
/// from their typed responses ([`generated`]), the others through their ProtoJSON.
fn encode(answer: &A2aResponse, response_type: &MessageDescriptor) -> Result<Vec<u8>, A2aError> {
    match answer {
        A2aResponse::Sent(sent) => generated::send_message_response(sent),
        A2aResponse::Task(task) => generated::encoded_task(&task.task),
        A2aResponse::Page(page) => generated::list_tasks_response(page),
        // `google.protobuf.Empty`.
        A2aResponse::Empty => Ok(Vec::new()),
        other => {
            let json = other.json()?;
            messages::write(response_type, json.get())
                .map(|message| prost::Message::encode_to_vec(&message))
        }
    }
}

/// Why a call has no answer, as a status: the one error table's for the protocol's errors,
/// the guard's refusal's own for the guard's.
fn refused(refused: CallRefused) -> tonic::Status {
    let reason = refused.reason();
    match refused {
        CallRefused::Guard(refusal) => refusal_status(refusal),
        CallRefused::Protocol(error) => {
            let mut status = status(&error);
            if let Some(reason) = reason {
                status.set_source(Arc::new(CountedAs(reason)));
            }
            status
        }
    }
}

/// A protocol error's reason for `/metrics` (a version or extension refused), riding on its
/// status as the guard's refusal does.
#[derive(Debug)]
struct CountedAs(RefusalReason);

impl std::fmt::Display for CountedAs {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.0.label())
    }
}

impl std::error::Error for CountedAs {}

/// A request as its codec decoded it: the turn's message as its generated type, any other by
/// reflection. A request that is not the operation's message is answered by tonic with the
/// decoder's status before the pipeline is asked (then [`unread`] settles its admission).
enum Decoded {
    SendMessage(Box<generated::proto::SendMessageRequest>),
    Reflected(DynamicMessage),
}

impl Decoded {
    /// `method`'s typed request: the turn's read from its generated message, any other from
    /// its ProtoJSON as the JSON-RPC binding reads its `params` (the same words for what is
    /// wrong).
    fn request(self, method: Method) -> Result<A2aRequest, A2aError> {
        match self {
            Self::SendMessage(request) => {
                let request = Box::new(generated::send_message_request(*request)?);
                Ok(match method {
                    Method::SendStreamingMessage => A2aRequest::SendStreamingMessage(request),
                    _ => A2aRequest::SendMessage(request),
                })
            }
            Self::Reflected(message) => A2aRequest::read(method, Some(&messages::read(&message)?)),
        }
    }
}

impl ServerStreamingService<Decoded> for Call {
    type Response = Encoded;
    type ResponseStream = BoxStream<'static, Result<Encoded, tonic::Status>>;
    type Future = BoxFuture<'static, Result<tonic::Response<Self::ResponseStream>, tonic::Status>>;

    fn call(&mut self, request: tonic::Request<Decoded>) -> Self::Future {
        let call = self.clone();
        Box::pin(async move {
            let (response_type, longest) = (call.response_type.clone(), call.state.longest_stream);
            match call.ask(request.into_inner()).await? {
                A2aResponse::Events(events) => Ok(tonic::Response::new(messages_of(
                    events,
                    response_type,
                    longest,
                ))),
                _ => Err(status(&internal(
                    &"one answer",
                    "a stream call answered once",
                ))),
            }
        })
    }
}

/// A stream's events as `StreamResponse` messages, ending at its error, its end, or the
/// longest a stream may last.
fn messages_of(
    events: EventStream,
    response_type: MessageDescriptor,
    longest: Duration,
) -> BoxStream<'static, Result<Encoded, tonic::Status>> {
    let ends_at = tokio::time::Instant::now() + longest;
    let state = (events, response_type, false);
    Box::pin(futures_util::stream::unfold(
        state,
        move |(mut events, response_type, ended)| async move {
            if ended {
                return None;
            }
            let event = tokio::select! {
                event = events.next() => event?,
                () = tokio::time::sleep_until(ends_at) => return None,
            };
            let item = match event.into_response() {
                Ok(json) => messages::write(&response_type, json.get())
                    .map(|message| Encoded(prost::Message::encode_to_vec(&message)))
                    .map_err(|e| status(&e)),
                Err(error) => Err(status(&error)),
            };
            let ended = item.is_err();
            Some((item, (events, response_type, ended)))
        },
    ))
}

/// An [`A2aError`] as a gRPC status: the table's code, the same message and `ErrorInfo`.
fn status(error: &A2aError) -> tonic::Status {
    let code = error.grpc_code();
    let details = messages::status_details(code, &error.message(), &error.details());
    tonic::Status::with_details(grpc_code(code), error.message(), details.into())
}

fn grpc_code(code: GrpcCode) -> tonic::Code {
    tonic::Code::from_i32(i32::from(code.number()))
}

fn internal(error: &dyn std::fmt::Display, what: &'static str) -> A2aError {
    A2aError::internal(error, what)
}

/// The headers of a refusal a gRPC client acts on, kept as metadata beside the status.
const KEPT_HEADERS: [HeaderName; 5] = [
    header::RETRY_AFTER,
    header::WWW_AUTHENTICATE,
    HeaderName::from_static("ratelimit-limit"),
    HeaderName::from_static("ratelimit-remaining"),
    HeaderName::from_static("ratelimit-reset"),
];

/// Any answer that is not already gRPC (a refusal of the guard in front, a timeout) as a gRPC
/// status, keeping the headers a client acts on and the extensions the metrics and the access
/// log read.
async fn as_grpc_status(response: Response) -> Response {
    let is_grpc = response
        .headers()
        .get(header::CONTENT_TYPE)
        .and_then(|value| value.to_str().ok())
        .is_some_and(|value| value.starts_with("application/grpc"));
    if is_grpc {
        return response;
    }
    let extensions = response.extensions();
    let status = if let Some(refusal) = extensions.get::<Refusal>() {
        refusal_status(refusal.clone())
    } else if let Some(error) = extensions.get::<A2aError>() {
        status(error)
    } else {
        // An answer of the router itself (a method it does not route): its status alone.
        let code = GrpcCode::for_http_refusal(response.status().as_u16());
        let message = default_message(response.status());
        let details = Value::Array(vec![peergate_error_info("refused")]);
        let details = messages::status_details(code, &message, &details);
        tonic::Status::with_details(grpc_code(code), message, details.into())
    };
    let headers = response.headers().clone();
    let extensions = response.extensions().clone();
    let mut answer = status.into_http::<Body>();
    for name in KEPT_HEADERS {
        if let Some(value) = headers.get(&name) {
            answer.headers_mut().insert(name, value.clone());
        }
    }
    let kept = std::mem::replace(answer.extensions_mut(), extensions);
    answer.extensions_mut().extend(kept);
    answer
}

/// The guard's refusal in gRPC's words, from its type: the code its HTTP status maps to, its
/// message, its `ErrorInfo`, a `RetryInfo` when it says when to come back, and the headers a
/// client acts on as metadata. The refusal rides along as the status's source, so the
/// response can carry its reason.
fn refusal_status(refusal: Refusal) -> tonic::Status {
    let code = GrpcCode::for_http_refusal(refusal.status().as_u16());
    let message = refusal.message();
    let mut details = vec![peergate_error_info(refusal.code())];
    if let Some(seconds) = refusal.retry_after_seconds() {
        details.push(messages::retry_info(seconds));
    }
    let details = messages::status_details(code, &message, &Value::Array(details));
    let mut status = tonic::Status::with_details(grpc_code(code), message, details.into());
    let headers = refusal.headers();
    for name in KEPT_HEADERS {
        if let Some(value) = headers.get(&name)
            && let Ok(key) = tonic::metadata::AsciiMetadataKey::from_bytes(name.as_str().as_bytes())
            && let Ok(value) = tonic::metadata::MetadataValue::try_from(value.as_bytes())
        {
            status.metadata_mut().insert(key, value);
        }
    }
    status.set_source(Arc::new(refusal));
    status
}

/// The guard's refusal `code` as a `google.rpc.ErrorInfo` in peergate's domain.
fn peergate_error_info(code: &str) -> Value {
    serde_json::json!({
        "@type": "type.googleapis.com/google.rpc.ErrorInfo",
        "reason": code.to_ascii_uppercase(),
        "domain": "peergate",
    })
}

/// A request body's read error, with the body limit's in the words [`refusal_status`] gives
/// the 413 answered when the length is known (tonic answers a `Status` found in an error's
/// sources as it is, anything else as `UNKNOWN`).
fn body_too_large(error: axum::Error) -> axum::BoxError {
    let mut source: Option<&(dyn std::error::Error + 'static)> = Some(&error);
    while let Some(cause) = source {
        if cause.is::<http_body_util::LengthLimitError>() {
            return too_large().into();
        }
        source = cause.source();
    }
    error.into()
}

/// A request message past the body limit, as the door's 413 reads in gRPC's words.
fn too_large() -> tonic::Status {
    refusal_status(Refusal::BodyTooLarge)
}

/// tonic refuses a message whose length prefix is past the decoder's limit with `OUT_OF_RANGE`
/// before any of it is read; gRPC's code for a message too large is `RESOURCE_EXHAUSTED`, and
/// the door's words are the body limit's. No A2A error is `OUT_OF_RANGE`.
fn past_the_limit_as_too_large(response: Response) -> Response {
    match tonic::Status::from_header_map(response.headers()) {
        Some(status) if status.code() == tonic::Code::OutOfRange => too_large().into_http(),
        _ => response,
    }
}

fn default_message(status: StatusCode) -> String {
    status
        .canonical_reason()
        .unwrap_or("refused")
        .to_ascii_lowercase()
}

/// `grpc.health.v1.Health/Check`: `SERVING` when `/ready` would answer 200, for the server
/// (`""`) and the A2A service; any other service is `NOT_FOUND`.
async fn health_check(State(readiness): State<Arc<Readiness>>, request: Request) -> Response {
    let (Some(request_type), Some(response_type)) = (
        messages::descriptor("grpc.health.v1.HealthCheckRequest"),
        messages::descriptor("grpc.health.v1.HealthCheckResponse"),
    ) else {
        return unimplemented();
    };
    let check = HealthCheck {
        readiness,
        response_type,
    };
    Grpc::new(RequestCodec::reflected(request_type))
        .max_decoding_message_size(4096)
        .unary(check, request)
        .await
        .map(Body::new)
}

#[derive(Clone)]
struct HealthCheck {
    readiness: Arc<Readiness>,
    response_type: MessageDescriptor,
}

impl UnaryService<Decoded> for HealthCheck {
    type Response = Encoded;
    type Future = BoxFuture<'static, Result<tonic::Response<Encoded>, tonic::Status>>;

    fn call(&mut self, request: tonic::Request<Decoded>) -> Self::Future {
        let check = self.clone();
        Box::pin(async move {
            let Decoded::Reflected(message) = request.into_inner() else {
                return Err(tonic::Status::invalid_argument(
                    "not a health check request",
                ));
            };
            let asked = messages::read(&message).map_err(|e| status(&e))?;
            let asked: Value = serde_json::from_str(asked.get()).unwrap_or(Value::Null);
            let service = asked["service"].as_str().unwrap_or("");
            if !service.is_empty() && service != A2A_SERVICE {
                return Err(tonic::Status::not_found("no such service here"));
            }
            let serving = if check.readiness.is_ready().await {
                "SERVING"
            } else {
                "NOT_SERVING"
            };
            let answer = serde_json::json!({ "status": serving }).to_string();
            messages::write(&check.response_type, &answer)
                .map(|message| {
                    tonic::Response::new(Encoded(prost::Message::encode_to_vec(&message)))
                })
                .map_err(|e| status(&e))
        })
    }
}

/// Reads each request into its protobuf message (SendMessage's as its generated type, any other
/// by reflection); writes each answer as the bytes it was encoded to.
struct RequestCodec {
    request_type: MessageDescriptor,
    generated: bool,
}

impl RequestCodec {
    /// The codec for `method`'s request, of type `request_type`.
    fn for_method(method: Method, request_type: MessageDescriptor) -> Self {
        Self {
            request_type,
            generated: matches!(method, Method::SendMessage | Method::SendStreamingMessage),
        }
    }

    /// A codec reading every request by reflection.
    fn reflected(request_type: MessageDescriptor) -> Self {
        Self {
            request_type,
            generated: false,
        }
    }
}

/// An answer already encoded as its protobuf message.
struct Encoded(Vec<u8>);

impl Codec for RequestCodec {
    type Encode = Encoded;
    type Decode = Decoded;
    type Encoder = MessageEncoder;
    type Decoder = MessageDecoder;

    fn encoder(&mut self) -> Self::Encoder {
        MessageEncoder
    }

    fn decoder(&mut self) -> Self::Decoder {
        MessageDecoder {
            request_type: self.request_type.clone(),
            generated: self.generated,
        }
    }
}

struct MessageEncoder;

/// The buffer each answer starts encoding into. tonic's default (8 KiB) stays allocated for as
/// long as a stream is open, which made it the largest single cost of an idle stream (more than
/// the HTTP/2 stream itself); a stream's events are a few hundred bytes, and a larger answer
/// grows the buffer as it is written.
const ENCODE_BUFFER_BYTES: usize = 512;

/// Encoded answers gathered before they are handed to HTTP/2 (tonic's default).
const ENCODE_YIELD_BYTES: usize = 32 * 1024;

impl Encoder for MessageEncoder {
    type Item = Encoded;
    type Error = tonic::Status;

    fn encode(&mut self, item: Encoded, dst: &mut EncodeBuf<'_>) -> Result<(), Self::Error> {
        prost::bytes::BufMut::put_slice(dst, &item.0);
        Ok(())
    }

    fn buffer_settings(&self) -> BufferSettings {
        BufferSettings::new(ENCODE_BUFFER_BYTES, ENCODE_YIELD_BYTES)
    }
}

struct MessageDecoder {
    request_type: MessageDescriptor,
    generated: bool,
}

impl Decoder for MessageDecoder {
    type Item = Decoded;
    type Error = tonic::Status;

    fn decode(&mut self, src: &mut DecodeBuf<'_>) -> Result<Option<Decoded>, Self::Error> {
        decode(&self.request_type, self.generated, src).map(Some)
    }
}

/// One request message of `request_type`: the turn's as its generated type when `generated`,
/// any other by reflection.
fn decode(
    request_type: &MessageDescriptor,
    generated: bool,
    src: impl prost::bytes::Buf,
) -> Result<Decoded, tonic::Status> {
    let decoded = if generated {
        <generated::proto::SendMessageRequest as prost::Message>::decode(src)
            .map(|request| Decoded::SendMessage(Box::new(request)))
            .ok()
    } else {
        DynamicMessage::decode(request_type.clone(), src)
            .map(Decoded::Reflected)
            .ok()
    };
    decoded.ok_or_else(|| {
        tonic::Status::invalid_argument(format!(
            "the request is not a {} message",
            request_type.full_name()
        ))
    })
}

/// Reads `bytes` as `method`'s request message into its typed request, as the binding does
/// (the fuzzer's way in: no connection, no service). `Err` is what the binding would answer;
/// for the turn's request, also whether reading it by reflection agrees.
#[cfg(any(test, feature = "fuzzing"))]
pub(crate) fn read_request(method: Method, bytes: &[u8]) -> Result<(), A2aError> {
    let &(_, _, request_name, _) = OPERATIONS
        .iter()
        .find(|(_, known, ..)| *known == method)
        .ok_or(A2aError::MethodNotFound)?;
    let request_type = messages::descriptor(request_name).ok_or(A2aError::MethodNotFound)?;
    let codec = RequestCodec::for_method(method, request_type);
    let decoded = decode(&codec.request_type, codec.generated, bytes).map_err(undecodable)?;
    decoded.request(method).map(drop)
}

/// The turn's request read by reflection and its ProtoJSON, as every other request is: what
/// the generated path must agree with.
#[cfg(any(test, feature = "fuzzing"))]
pub(crate) fn read_send_message_reflected(bytes: &[u8]) -> Result<(), A2aError> {
    let request_type =
        messages::descriptor("lf.a2a.v1.SendMessageRequest").ok_or(A2aError::MethodNotFound)?;
    let decoded = decode(&request_type, false, bytes).map_err(undecodable)?;
    decoded.request(Method::SendMessage).map(drop)
}

/// A request that is not its message, as the fuzzer compares it.
#[cfg(any(test, feature = "fuzzing"))]
fn undecodable(status: tonic::Status) -> A2aError {
    A2aError::InvalidParams {
        field: "request".to_owned(),
        description: status.message().to_owned(),
    }
}

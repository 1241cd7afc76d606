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

use crate::a2a::agent::Agent;
use crate::a2a::events::{EventStream, StreamEvent, StreamRefused};
use crate::a2a::service::{A2aService, Caller};
use crate::config::Policy;
use crate::guard::refusal::Refusal;
use crate::http::door::{self, DoorGuards};
use crate::http::h2_watch::StreamWatch;
use crate::http::ready::Readiness;
use crate::layers::auth::AuthenticatedPeer;
use crate::layers::client_addr::ClientAddr;
use crate::layers::metrics::Metrics;
use crate::protocol::call::{A2aCall, Binding};
use crate::protocol::error::{A2aError, GrpcCode};
use crate::protocol::grpc::{self as messages, A2A_SERVICE, HEALTH_SERVICE};
use crate::protocol::grpc_generated as generated;
use crate::protocol::jsonrpc::{self, Method};
use axum::Router;
use axum::body::Body;
use axum::extract::{Path, Request, State};
use axum::http::{HeaderMap, HeaderName, StatusCode, header};
use axum::response::{IntoResponse, Response};
use axum::routing::post;
use futures_util::future::BoxFuture;
use futures_util::stream::BoxStream;
use http_body_util::BodyExt;
use prost_reflect::{DynamicMessage, MessageDescriptor};
use serde::Serialize;
use serde_json::Value;
use serde_json::value::RawValue;
use std::sync::Arc;
use std::time::Duration;
use tonic::codec::{BufferSettings, Codec, DecodeBuf, Decoder, EncodeBuf, Encoder};
use tonic::server::{Grpc, ServerStreamingService, UnaryService};

/// What the binding's handlers share.
#[derive(Clone)]
pub(crate) struct GrpcState {
    pub(crate) agent: Arc<Agent>,
    pub(crate) readiness: Arc<Readiness>,
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
    policy: &Policy,
    state: GrpcState,
    guards: &DoorGuards,
    metrics: Arc<Metrics>,
) -> Router {
    let a2a = Router::new()
        .route(&format!("/{A2A_SERVICE}/{{method}}"), post(a2a_method))
        .layer(door::gate(policy).for_http_json());
    let guarded =
        door::behind_address_guard(door::behind_peer_guard(a2a, policy, guards), policy, guards);
    let routes = Router::new()
        .route(&format!("/{HEALTH_SERVICE}/Check"), post(health_check))
        .merge(guarded)
        .fallback(|| async { unimplemented() })
        .with_state(state)
        .layer(axum::middleware::from_fn(taking_answers))
        .layer(axum::middleware::map_response(as_grpc_status));
    door::observed(routes, policy, metrics, &format!("/{A2A_SERVICE}"))
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
    let Some(&(_, method, request_name, response_name)) =
        OPERATIONS.iter().find(|(known, ..)| *known == name)
    else {
        return unimplemented();
    };
    let Some(peer) = request.extensions().get::<AuthenticatedPeer>().cloned() else {
        // Only the authentication layer makes a peer: a route without it refuses.
        return Refusal::internal(&"no peer", "a gRPC route is missing its guard").into_response();
    };
    let caller = Caller::new(
        peer,
        request.extensions().get::<ClientAddr>().map(ClientAddr::ip),
        request.extensions(),
    );
    if let Some(scope) = method.scope()
        && !caller.peer.may(scope)
    {
        return called(Refusal::InsufficientScope { scope }.into_response(), method);
    }
    let (Some(request_type), Some(response_type)) = (
        messages::descriptor(request_name),
        messages::descriptor(response_name),
    ) else {
        return unimplemented();
    };
    // Over HTTP/2 a message has no length to refuse up front: the body limit meets it while
    // tonic reads, and says so in gRPC's words rather than as an unknown error.
    let request = request.map(|body| Body::new(body.map_err(body_too_large)));
    let mut grpc = Grpc::new(RequestCodec::for_method(method, request_type))
        .max_decoding_message_size(state.max_message_bytes);
    let call = Call {
        state: state.clone(),
        caller,
        method,
        response_type,
    };
    let response = if matches!(
        method,
        Method::SendStreamingMessage | Method::SubscribeToTask
    ) {
        grpc.server_streaming(call, request).await
    } else {
        grpc.unary(call, request).await
    };
    called(past_the_limit_as_too_large(response.map(Body::new)), method)
}

/// The response, marked with the call it answered for the metrics and the access log.
fn called(mut response: Response, method: Method) -> Response {
    response.extensions_mut().insert(A2aCall {
        binding: Binding::Grpc,
        method,
    });
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
}

impl UnaryService<Decoded> for Call {
    type Response = Encoded;
    type Future = BoxFuture<'static, Result<tonic::Response<Encoded>, tonic::Status>>;

    fn call(&mut self, request: tonic::Request<Decoded>) -> Self::Future {
        let call = self.clone();
        Box::pin(async move {
            let request = Asked::read(request.into_inner()).map_err(|e| status(&e))?;
            // As on the other bindings: the turn runs in a task of its own, so a client that
            // hangs up cannot cut it between storing the task and storing its answer.
            let (agent, caller, method) = (call.state.agent.clone(), call.caller, call.method);
            let response_type = call.response_type;
            let answer = tokio::spawn(async move {
                unary(&agent, &caller, method, request, &response_type).await
            })
            .await
            .unwrap_or_else(|_| Err(panicked()));
            answer
                .map(|bytes| tonic::Response::new(Encoded(bytes)))
                .map_err(|e| status(&e))
        })
    }
}

/// Asks the service's unary `method` with `request`; the answer encoded as
/// `response_type`. The answers on the turn's path are written straight from their typed
/// responses ([`generated`]), the others through their ProtoJSON.
async fn unary(
    service: &dyn A2aService,
    caller: &Caller,
    method: Method,
    request: Asked,
    response_type: &MessageDescriptor,
) -> Result<Vec<u8>, A2aError> {
    service.offered(method)?;
    let json = match method {
        Method::SendMessage => {
            let answer = service
                .send_message(caller, request.send_message()?)
                .await?;
            return generated::send_message_response(&answer);
        }
        Method::GetTask => {
            let answer = service.get_task(caller, request.typed()?).await?;
            return generated::encoded_task(&answer.task);
        }
        Method::ListTasks => {
            let answer = service.list_tasks(caller, request.typed()?).await?;
            return generated::list_tasks_response(&answer);
        }
        Method::CancelTask => {
            let answer = service.cancel_task(caller, request.typed()?).await?;
            return generated::encoded_task(&answer.task);
        }
        Method::CreatePushConfig => {
            json(service.create_push_config(caller, request.typed()?).await)
        }
        Method::GetPushConfig => json(service.get_push_config(caller, request.typed()?).await),
        Method::ListPushConfigs => json(service.list_push_configs(caller, request.typed()?).await),
        Method::DeletePushConfig => {
            // `google.protobuf.Empty`.
            service.delete_push_config(caller, request.typed()?).await?;
            Ok("{}".to_owned())
        }
        Method::GetExtendedAgentCard => json(service.get_extended_agent_card(caller).await),
        // The streams are served by the streaming handler.
        _ => Err(A2aError::MethodNotFound),
    }?;
    messages::write(response_type, &json).map(|message| prost::Message::encode_to_vec(&message))
}

/// A request as its codec decoded it: the turn's message as its generated type, any other by
/// reflection.
enum Decoded {
    SendMessage(Box<generated::proto::SendMessageRequest>),
    Reflected(DynamicMessage),
}

/// A request ready for the operation's typed reader.
enum Asked {
    SendMessage(Box<generated::proto::SendMessageRequest>),
    ProtoJson(Box<RawValue>),
}

impl Asked {
    fn read(decoded: Decoded) -> Result<Self, A2aError> {
        match decoded {
            Decoded::SendMessage(request) => Ok(Self::SendMessage(request)),
            Decoded::Reflected(message) => messages::read(&message).map(Self::ProtoJson),
        }
    }

    /// The turn's request, typed: read from the generated message, or from its ProtoJSON.
    fn send_message(self) -> Result<crate::protocol::types::SendMessageRequest, A2aError> {
        match self {
            Self::SendMessage(request) => generated::send_message_request(*request),
            Self::ProtoJson(json) => jsonrpc::parse_params(Some(&json)),
        }
    }

    /// The operation's typed request, read from its ProtoJSON as the JSON-RPC binding reads
    /// its `params` (the same words for what is wrong).
    fn typed<T: serde::de::DeserializeOwned>(self) -> Result<T, A2aError> {
        match self {
            Self::ProtoJson(json) => jsonrpc::parse_params(Some(&json)),
            // Only SendMessage and SendStreamingMessage are decoded so, and they read it above.
            Self::SendMessage(_) => Err(internal(
                &"a SendMessageRequest asked for another request type",
                "a gRPC request was decoded as the wrong message",
            )),
        }
    }
}

/// A typed answer as ProtoJSON text.
fn json<R: Serialize>(answer: Result<R, A2aError>) -> Result<String, A2aError> {
    answer.and_then(|answer| {
        serde_json::to_string(&answer).map_err(|e| internal(&e, "an answer could not be encoded"))
    })
}

impl ServerStreamingService<Decoded> for Call {
    type Response = Encoded;
    type ResponseStream = BoxStream<'static, Result<Encoded, tonic::Status>>;
    type Future = BoxFuture<'static, Result<tonic::Response<Self::ResponseStream>, tonic::Status>>;

    fn call(&mut self, request: tonic::Request<Decoded>) -> Self::Future {
        let call = self.clone();
        Box::pin(async move {
            let request = Asked::read(request.into_inner()).map_err(|e| status(&e))?;
            let (agent, caller, method) = (call.state.agent.clone(), call.caller, call.method);
            let opened = tokio::spawn(async move { open(&agent, &caller, method, request).await })
                .await
                .unwrap_or_else(|_| Err(StreamRefused::Rpc(panicked())));
            match opened {
                Ok(events) => Ok(tonic::Response::new(messages_of(
                    events,
                    call.response_type,
                    call.state.longest_stream,
                ))),
                Err(StreamRefused::Rpc(error)) => Err(status(&error)),
                Err(StreamRefused::AtCap(cap)) => {
                    Err(refusal_status(Refusal::TooManyStreams { cap }.into_response()).await)
                }
            }
        })
    }
}

/// Opens the service's stream `method` with `request`.
async fn open(
    service: &dyn A2aService,
    caller: &Caller,
    method: Method,
    request: Asked,
) -> Result<EventStream, StreamRefused> {
    service.offered(method)?;
    match method {
        Method::SendStreamingMessage => {
            service
                .send_streaming_message(caller, request.send_message()?)
                .await
        }
        _ => service.subscribe_to_task(caller, request.typed()?).await,
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
            let item = match event {
                StreamEvent::Response(json) => messages::write(&response_type, json.get())
                    .map(|message| Encoded(prost::Message::encode_to_vec(&message)))
                    .map_err(|e| status(&e)),
                StreamEvent::Error(error) => Err(status(&error)),
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

fn panicked() -> A2aError {
    internal(&"the turn panicked", "a gRPC call panicked")
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
    let headers = response.headers().clone();
    let extensions = response.extensions().clone();
    let mut answer = refusal_status(response).await.into_http::<Body>();
    for name in KEPT_HEADERS {
        if let Some(value) = headers.get(&name) {
            answer.headers_mut().insert(name, value.clone());
        }
    }
    let kept = std::mem::replace(answer.extensions_mut(), extensions);
    answer.extensions_mut().extend(kept);
    answer
}

/// A refusal's HTTP response in gRPC's words: the code its status (or, from the protocol
/// gate, its `google.rpc.Status` name) says, its message, its `ErrorInfo`, and a `RetryInfo`
/// when it says when to come back.
async fn refusal_status(response: Response) -> tonic::Status {
    let (parts, body) = response.into_parts();
    // Refusals are small and already in memory.
    let body = axum::body::to_bytes(body, 64 * 1024)
        .await
        .unwrap_or_default();
    let error = serde_json::from_slice::<Value>(&body)
        .ok()
        .and_then(|body| body.get("error").cloned())
        .unwrap_or(Value::Null);
    let code = error["status"]
        .as_str()
        .and_then(GrpcCode::from_name)
        .unwrap_or_else(|| GrpcCode::for_http_refusal(parts.status.as_u16()));
    let message = error["message"]
        .as_str()
        .map_or_else(|| default_message(parts.status), str::to_owned);
    let mut details = match error.get("details") {
        Some(Value::Array(details)) => details.clone(),
        _ => vec![peergate_error_info(
            error["code"].as_str().unwrap_or("refused"),
        )],
    };
    if let Some(seconds) = retry_after(&parts.headers) {
        details.push(messages::retry_info(seconds));
    }
    let details = messages::status_details(code, &message, &Value::Array(details));
    tonic::Status::with_details(grpc_code(code), message, details.into())
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
    let refusal = Refusal::BodyTooLarge;
    let code = GrpcCode::for_http_refusal(refusal.status().as_u16());
    let message = refusal.to_string();
    let details = Value::Array(vec![peergate_error_info(refusal.code())]);
    let details = messages::status_details(code, &message, &details);
    tonic::Status::with_details(grpc_code(code), message, details.into())
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

fn retry_after(headers: &HeaderMap) -> Option<u64> {
    headers
        .get(header::RETRY_AFTER)?
        .to_str()
        .ok()?
        .trim()
        .parse()
        .ok()
}

fn default_message(status: StatusCode) -> String {
    status
        .canonical_reason()
        .unwrap_or("refused")
        .to_ascii_lowercase()
}

/// `grpc.health.v1.Health/Check`: `SERVING` when `/ready` would answer 200, for the server
/// (`""`) and the A2A service; any other service is `NOT_FOUND`.
async fn health_check(State(state): State<GrpcState>, request: Request) -> Response {
    let (Some(request_type), Some(response_type)) = (
        messages::descriptor("grpc.health.v1.HealthCheckRequest"),
        messages::descriptor("grpc.health.v1.HealthCheckResponse"),
    ) else {
        return unimplemented();
    };
    let check = HealthCheck {
        readiness: state.readiness.clone(),
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
            let Asked::ProtoJson(asked) =
                Asked::read(request.into_inner()).map_err(|e| status(&e))?
            else {
                return Err(tonic::Status::invalid_argument(
                    "not a health check request",
                ));
            };
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
    use crate::protocol::types as a2a;
    let &(_, _, request_name, _) = OPERATIONS
        .iter()
        .find(|(_, known, ..)| *known == method)
        .ok_or(A2aError::MethodNotFound)?;
    let request_type = messages::descriptor(request_name).ok_or(A2aError::MethodNotFound)?;
    let codec = RequestCodec::for_method(method, request_type);
    let decoded = decode(&codec.request_type, codec.generated, bytes).map_err(undecodable)?;
    let asked = Asked::read(decoded)?;
    match method {
        Method::SendMessage | Method::SendStreamingMessage => asked.send_message().map(drop),
        Method::GetTask => asked.typed::<a2a::GetTaskRequest>().map(drop),
        Method::ListTasks => asked.typed::<a2a::ListTasksRequest>().map(drop),
        Method::CancelTask => asked.typed::<a2a::CancelTaskRequest>().map(drop),
        Method::SubscribeToTask => asked.typed::<a2a::SubscribeToTaskRequest>().map(drop),
        Method::CreatePushConfig => asked.typed::<a2a::PushConfigParams>().map(drop),
        _ => asked.typed::<a2a::PushConfigRef>().map(drop),
    }
}

/// The turn's request read by reflection and its ProtoJSON, as every other request is: what
/// the generated path must agree with.
#[cfg(any(test, feature = "fuzzing"))]
pub(crate) fn read_send_message_reflected(bytes: &[u8]) -> Result<(), A2aError> {
    let request_type =
        messages::descriptor("lf.a2a.v1.SendMessageRequest").ok_or(A2aError::MethodNotFound)?;
    let decoded = decode(&request_type, false, bytes).map_err(undecodable)?;
    Asked::read(decoded)?.send_message().map(drop)
}

/// A request that is not its message, as the fuzzer compares it.
#[cfg(any(test, feature = "fuzzing"))]
fn undecodable(status: tonic::Status) -> A2aError {
    A2aError::InvalidParams {
        field: "request".to_owned(),
        description: status.message().to_owned(),
    }
}

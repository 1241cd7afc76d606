//! The HTTP+JSON binding (`capabilities.http_json`), at `<a2a_path>/rest`: the same methods
//! with the same semantics as the JSON-RPC door, under REST routes.
//!
//! Each route reads its request into the JSON-RPC method's params and asks the same agent, so
//! the two bindings cannot drift apart: a result is the response body as it is, an error
//! becomes a `google.rpc.Status` body with the binding's HTTP status, and a stream carries the
//! bare `StreamResponse` objects. The routes sit behind the same layers as the JSON-RPC door
//! (per-IP limit, authentication, per-peer limit, body limit, protocol gate).
//!
//! | route | method |
//! |---|---|
//! | `POST /message:send`, `POST /message:stream` | `SendMessage`, `SendStreamingMessage` |
//! | `GET /tasks/{id}`, `GET /tasks` | `GetTask`, `ListTasks` |
//! | `POST /tasks/{id}:cancel`, `GET`/`POST /tasks/{id}:subscribe` | `CancelTask`, `SubscribeToTask` |
//! | `/tasks/{id}/pushNotificationConfigs[/{config}]` | the push-notification methods |
//! | `GET /extendedAgentCard` | `GetExtendedAgentCard` |
//!
//! Each route is served under a tenant too (`/{tenant}/tasks`); the tenant names nothing here.

use crate::a2a::events::StreamEvent;
use crate::a2a::operation::{A2aRequest, A2aResponse, CallRefused};
use crate::a2a::pipeline::{Asked, Pipeline};
use crate::a2a::service::Caller as ServiceCaller;
use crate::guard::refusal::LoggedRequestId;
use crate::http::sse::StreamBounds;
use crate::http::stalled_writes::ConnectionDeadline;
use crate::layers::auth::AuthenticatedPeer;
use crate::layers::client_addr::ClientAddr;
use crate::protocol::call::Binding;
use crate::protocol::error::A2aError;
use crate::protocol::jsonrpc::{self, Method as A2aMethod};
use crate::protocol::types::{CancelTaskRequest, SubscribeToTaskRequest};
use axum::Router;
use axum::body::Bytes;
use axum::extract::{FromRequestParts, Path, Query, State};
use axum::http::request::Parts;
use axum::http::{HeaderMap, HeaderValue, Method, StatusCode, header};
use axum::response::{IntoResponse, Response};
use axum::routing::{any, get, post};
use serde_json::{Value, json};
use std::collections::HashMap;
use std::sync::Arc;

/// What the binding's routes need.
#[derive(Clone)]
pub struct RestState {
    /// The call pipeline every binding asks.
    pub pipeline: Pipeline,
    /// How long a stream, and its connection, may last.
    pub bounds: StreamBounds,
}

/// The binding's routes, relative to its base path.
pub fn routes<S>(base: &str) -> Router<S>
where
    S: Clone + Send + Sync + 'static,
    RestState: axum::extract::FromRef<S>,
{
    // Every route also under a tenant (`/{tenant}/message:send`), as the specification has
    // it. peergate serves one tenant: the segment is accepted and names nothing, and a peer
    // reaches only its own tasks either way.
    let mut router = Router::new();
    for base in [base.to_owned(), format!("{base}/{{tenant}}")] {
        router = router
            .route(&format!("{base}/message:send"), post(send))
            .route(&format!("{base}/message:stream"), post(stream))
            .route(&format!("{base}/tasks"), get(list))
            .route(&format!("{base}/tasks/{{task}}"), any(task))
            .route(
                &format!("{base}/tasks/{{task}}/pushNotificationConfigs"),
                any(push_configs),
            )
            .route(
                &format!("{base}/tasks/{{task}}/pushNotificationConfigs/{{config}}"),
                any(push_configs),
            )
            .route(&format!("{base}/extendedAgentCard"), get(extended_card));
    }
    router
}

/// Request context every route passes on to the service: the peer (only the authentication
/// layer makes one, so a route without it refuses), its address, and the connection's deadline
/// a stream bounds. The JSON-RPC door takes it too.
pub(crate) struct Caller {
    pub(crate) caller: ServiceCaller,
    pub(crate) deadline: Option<Arc<ConnectionDeadline>>,
}

impl<S: Send + Sync> FromRequestParts<S> for Caller {
    type Rejection = Response;

    async fn from_request_parts(parts: &mut Parts, state: &S) -> Result<Self, Self::Rejection> {
        let peer = AuthenticatedPeer::from_request_parts(parts, state)
            .await
            .map_err(IntoResponse::into_response)?;
        Ok(Self {
            caller: ServiceCaller::new(
                peer,
                parts.extensions.get::<ClientAddr>().map(ClientAddr::ip),
                &parts.extensions,
            ),
            deadline: parts.extensions.get::<Arc<ConnectionDeadline>>().cloned(),
        })
    }
}

/// Asks the pipeline `method` with `request` and answers in this binding's shape: the result
/// as it is (`{}` for none), an error as a `google.rpc.Status` body with its HTTP status, a
/// stream as Server-Sent Events of bare `StreamResponse` objects.
async fn call(
    state: &RestState,
    caller: Caller,
    method: A2aMethod,
    request: Result<A2aRequest, A2aError>,
) -> Response {
    let asked = Asked {
        binding: Binding::HttpJson,
        method,
        request,
    };
    let called = state.pipeline.call(caller.caller, asked).await;
    let mut response = match called.answer {
        Ok(A2aResponse::Events(events)) => {
            let deadline = caller.deadline.as_ref();
            crate::http::sse::respond(events, bare_event, &state.bounds, deadline)
        }
        Ok(answer) => success(&answer),
        Err(refused) => refusal_response(refused),
    };
    response.extensions_mut().insert(called.record);
    response
}

/// A request this binding could not read as far as an operation: `answer`, once the caller's
/// admission lets it be (the guard's 429 when a limit refuses).
async fn unread(state: &RestState, caller: &Caller, answer: Response) -> Response {
    match state.pipeline.unread(&caller.caller).await {
        Some(refusal) => refusal.into_response(),
        None => answer,
    }
}

/// Why a call has no answer, in this binding's form, with the reason `/metrics` counts.
fn refusal_response(refused: CallRefused) -> Response {
    let reason = refused.reason();
    let mut response = match refused {
        CallRefused::Guard(refusal) => refusal.into_response(),
        CallRefused::Protocol(error) => error_response(&error),
    };
    if let Some(reason) = reason {
        response.extensions_mut().insert(reason);
    }
    response
}

/// A result as this binding's body: `()` (a deleted config) is `{}`.
fn success(result: &A2aResponse) -> Response {
    match serde_json::to_value(result) {
        Ok(Value::Null) => a2a_json(StatusCode::OK, &json!({})),
        Ok(body) => a2a_json(StatusCode::OK, &body),
        Err(e) => error_response(&A2aError::internal(&e, "an answer could not be encoded")),
    }
}

/// A body of this binding: JSON as `application/a2a+json`.
fn a2a_json(status: StatusCode, body: &Value) -> Response {
    (
        status,
        [(
            header::CONTENT_TYPE,
            HeaderValue::from_static(jsonrpc::HTTP_JSON_MEDIA_TYPE),
        )],
        body.to_string(),
    )
        .into_response()
}

/// A stream event as this binding's: the bare `StreamResponse`, or the error's
/// `google.rpc.Status` body.
fn bare_event(event: StreamEvent) -> String {
    match event.into_response() {
        Ok(json) => json.get().to_owned(),
        Err(error) => error.http_body().to_string(),
    }
}

/// An error as this binding's response; an internal one names the id its log line has.
fn error_response(error: &A2aError) -> Response {
    let status =
        StatusCode::from_u16(error.http_status()).unwrap_or(StatusCode::INTERNAL_SERVER_ERROR);
    let mut response = a2a_json(status, &error.http_body());
    if let A2aError::Internal { request_id } | A2aError::StoreUnavailable { request_id } = error {
        response
            .extensions_mut()
            .insert(LoggedRequestId(request_id.clone()));
    }
    response
}

/// The request body as parameters: a JSON object sent as JSON.
pub(crate) fn body_params(headers: &HeaderMap, body: &[u8]) -> Result<Value, A2aError> {
    use crate::protocol::json::{Integers, StrictError, parse_object};
    if !crate::http::content_type::is_json(headers) {
        return Err(A2aError::ContentTypeNotSupported(
            "send the request body with Content-Type: application/json".into(),
        ));
    }
    // As strict as the JSON-RPC door: a repeated member name is refused, not resolved, and
    // nesting stops at the same depth.
    match parse_object(body, Integers::Any) {
        Ok(_)
            if jsonrpc::nesting_depth(&String::from_utf8_lossy(body))
                > jsonrpc::MAX_PARAMS_DEPTH =>
        {
            Err(A2aError::InvalidRequest(jsonrpc::TOO_DEEP))
        }
        Ok(object) => Ok(Value::Object(object)),
        Err(StrictError::Value(_)) => Err(A2aError::InvalidParams {
            field: "body".to_owned(),
            description: "must be a JSON object".to_owned(),
        }),
        Err(StrictError::Repeated(_)) => Err(A2aError::InvalidRequest(
            "a member name is repeated in an object",
        )),
        Err(_) => Err(A2aError::Parse),
    }
}

/// `method`'s request from parameters gathered from the route, the query and the body, read as
/// every binding reads its request.
pub(crate) fn request(method: A2aMethod, params: Value) -> Result<A2aRequest, A2aError> {
    let raw = serde_json::value::to_raw_value(&params).map_err(|_| A2aError::Parse)?;
    A2aRequest::read(method, Some(&raw))
}

async fn send(
    State(state): State<RestState>,
    caller: Caller,
    headers: HeaderMap,
    body: Bytes,
) -> Response {
    let method = A2aMethod::SendMessage;
    let request = body_params(&headers, &body).and_then(|params| request(method, params));
    call(&state, caller, method, request).await
}

async fn stream(
    State(state): State<RestState>,
    caller: Caller,
    headers: HeaderMap,
    body: Bytes,
) -> Response {
    let method = A2aMethod::SendStreamingMessage;
    let request = body_params(&headers, &body).and_then(|params| request(method, params));
    call(&state, caller, method, request).await
}

/// Query parameters as params: numbers and booleans where the method expects them. A parameter
/// named twice is refused rather than resolved: a proxy in front may have read the other one.
pub(crate) fn query_params(query: &[(String, String)]) -> Result<Value, A2aError> {
    let mut params = serde_json::Map::new();
    for (name, value) in query {
        if params.contains_key(name) {
            return Err(A2aError::InvalidRequest(
                "a query parameter is named more than once; name each at most once",
            ));
        }
        let typed = match name.as_str() {
            "pageSize" | "historyLength" => match value.parse::<i64>() {
                Ok(n) => json!(n),
                Err(_) => {
                    return Err(A2aError::InvalidParams {
                        field: name.clone(),
                        description: "must be an integer".to_owned(),
                    });
                }
            },
            // An enum's number, as ProtoJSON allows; a name stays text.
            "status" => value
                .parse::<u64>()
                .map_or_else(|_| json!(value), |n| json!(n)),
            "includeArtifacts" => match value.as_str() {
                "true" => json!(true),
                "false" => json!(false),
                _ => {
                    return Err(A2aError::InvalidParams {
                        field: name.clone(),
                        description: "must be true or false".to_owned(),
                    });
                }
            },
            _ => json!(value),
        };
        params.insert(name.clone(), typed);
    }
    Ok(Value::Object(params))
}

async fn list(
    State(state): State<RestState>,
    caller: Caller,
    Query(query): Query<Vec<(String, String)>>,
) -> Response {
    let method = A2aMethod::ListTasks;
    let request = query_params(&query).and_then(|params| request(method, params));
    call(&state, caller, method, request).await
}

/// `/tasks/{id}`, `/tasks/{id}:cancel` and `/tasks/{id}:subscribe`: one path segment, told
/// apart by its suffix.
async fn task(
    State(state): State<RestState>,
    caller: Caller,
    method: Method,
    Path(path): Path<HashMap<String, String>>,
    Query(query): Query<Vec<(String, String)>>,
) -> Response {
    let segment = path.get("task").cloned().unwrap_or_default();
    // Checked on every route of the path, not only where the parameters are read.
    let mut params = match query_params(&query) {
        Ok(params) => params,
        Err(refused) => return unread(&state, &caller, error_response(&refused)).await,
    };
    if let Some(id) = segment.strip_suffix(":cancel") {
        if method != Method::POST {
            return unread(
                &state,
                &caller,
                StatusCode::METHOD_NOT_ALLOWED.into_response(),
            )
            .await;
        }
        let request = Ok(A2aRequest::CancelTask(CancelTaskRequest { id: id.into() }));
        return call(&state, caller, A2aMethod::CancelTask, request).await;
    }
    if let Some(id) = segment.strip_suffix(":subscribe") {
        // The specification's text says POST, its proto GET: both are served.
        if method != Method::POST && method != Method::GET {
            return unread(
                &state,
                &caller,
                StatusCode::METHOD_NOT_ALLOWED.into_response(),
            )
            .await;
        }
        let request = Ok(A2aRequest::SubscribeToTask(SubscribeToTaskRequest {
            id: id.into(),
        }));
        return call(&state, caller, A2aMethod::SubscribeToTask, request).await;
    }
    if method != Method::GET {
        return unread(
            &state,
            &caller,
            StatusCode::METHOD_NOT_ALLOWED.into_response(),
        )
        .await;
    }
    params["id"] = json!(segment);
    let operation = A2aMethod::GetTask;
    call(&state, caller, operation, request(operation, params)).await
}

/// `/tasks/{task}/pushNotificationConfigs[/{config}]`: create (POST) and list (GET) on the
/// collection, get (GET) and delete (DELETE) on one config.
#[allow(clippy::too_many_arguments)] // one per extractor axum hands a handler
async fn push_configs(
    State(state): State<RestState>,
    caller: Caller,
    method: Method,
    headers: HeaderMap,
    Path(path): Path<HashMap<String, String>>,
    Query(query): Query<Vec<(String, String)>>,
    body: Bytes,
) -> Response {
    let mut params = match query_params(&query) {
        Ok(params) => params,
        Err(refused) => return unread(&state, &caller, error_response(&refused)).await,
    };
    let task = path.get("task").cloned().unwrap_or_default();
    let config = path.get("config").cloned();
    let operation = match (&config, &method) {
        (None, &Method::POST) => A2aMethod::CreatePushConfig,
        (None, &Method::GET) => A2aMethod::ListPushConfigs,
        (Some(_), &Method::GET) => A2aMethod::GetPushConfig,
        (Some(_), &Method::DELETE) => A2aMethod::DeletePushConfig,
        _ => {
            let refused = StatusCode::METHOD_NOT_ALLOWED.into_response();
            return unread(&state, &caller, refused).await;
        }
    };
    if operation == A2aMethod::CreatePushConfig {
        let asked = body_params(&headers, &body).and_then(|mut params| {
            params["taskId"] = json!(task);
            request(operation, params)
        });
        return call(&state, caller, operation, asked).await;
    }
    if let Some(config) = config {
        params = json!({"id": config});
    }
    params["taskId"] = json!(task);
    call(&state, caller, operation, request(operation, params)).await
}

async fn extended_card(State(state): State<RestState>, caller: Caller) -> Response {
    let request = Ok(A2aRequest::GetExtendedAgentCard);
    call(&state, caller, A2aMethod::GetExtendedAgentCard, request).await
}

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

use crate::a2a::agent::{Agent, Answer};
use crate::http::sse::StreamBounds;
use crate::http::stalled_writes::ConnectionDeadline;
use crate::layers::auth::AuthenticatedPeer;
use crate::layers::client_addr::ClientAddr;
use crate::protocol::call::{A2aCall, Binding};
use crate::protocol::jsonrpc;
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
    /// The agent both bindings ask.
    pub agent: Arc<Agent>,
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

/// Request context every route passes on to the agent: the peer (only the authentication
/// layer makes one, so a route without it refuses), its address, and the connection's deadline
/// a stream bounds.
struct Caller {
    peer: AuthenticatedPeer,
    client: Option<std::net::IpAddr>,
    deadline: Option<Arc<ConnectionDeadline>>,
}

impl<S: Send + Sync> FromRequestParts<S> for Caller {
    type Rejection = Response;

    async fn from_request_parts(parts: &mut Parts, state: &S) -> Result<Self, Self::Rejection> {
        let peer = AuthenticatedPeer::from_request_parts(parts, state)
            .await
            .map_err(IntoResponse::into_response)?;
        Ok(Self {
            peer,
            client: parts.extensions.get::<ClientAddr>().map(ClientAddr::ip),
            deadline: parts.extensions.get::<Arc<ConnectionDeadline>>().cloned(),
        })
    }
}

/// Asks the agent `method` with `params` and answers in this binding's shape.
async fn ask(state: &RestState, caller: Caller, method: &str, params: Value) -> Response {
    let request = json!({"jsonrpc": "2.0", "id": 1, "method": method, "params": params});
    let body = request.to_string().into_bytes();
    // As on the JSON-RPC door: the turn runs in a task of its own, so a client that hangs up
    // cannot cut it between storing the task and storing its answer.
    let agent = state.agent.clone();
    let (peer, client) = (caller.peer, caller.client);
    let answer = tokio::spawn(async move { agent.handle(&peer, client, &body).await }).await;
    let mut response = match answer {
        Ok((_, answer)) => respond(state, answer, caller.deadline.as_ref()),
        Err(_) => {
            let request_id = uuid::Uuid::new_v4().to_string();
            tracing::error!(request_id = %request_id, "the turn panicked");
            let mut response = error_response(&jsonrpc::RpcError::Internal {
                request_id: request_id.clone(),
            });
            response
                .extensions_mut()
                .insert(crate::guard::refusal::LoggedRequestId(request_id));
            response
        }
    };
    if let Some(method) = jsonrpc::Method::from_name(method) {
        response.extensions_mut().insert(A2aCall {
            binding: Binding::HttpJson,
            method,
        });
    }
    response
}

/// The agent's answer in this binding's shape.
fn respond(
    state: &RestState,
    answer: Answer,
    deadline: Option<&Arc<ConnectionDeadline>>,
) -> Response {
    match answer {
        Answer::Body(body) => unwrap(&body),
        Answer::Internal { body, request_id } => {
            let mut response = unwrap(&body);
            response
                .extensions_mut()
                .insert(crate::guard::refusal::LoggedRequestId(request_id));
            response
        }
        Answer::Events(events) => {
            crate::http::sse::respond(events.reshaped(bare_result), &state.bounds, deadline)
        }
        Answer::Refused(refusal) => refusal.into_response(),
    }
}

/// A JSON-RPC response body as this binding's response.
fn unwrap(body: &str) -> Response {
    let response: Value = serde_json::from_str(body).unwrap_or(Value::Null);
    if let Some(error) = response.get("error") {
        let (status, body) = jsonrpc::http_error(error);
        let status = StatusCode::from_u16(status).unwrap_or(StatusCode::INTERNAL_SERVER_ERROR);
        return a2a_json(status, &body);
    }
    // `DeleteTaskPushNotificationConfig` answers `null`: an empty object here.
    match response.get("result") {
        Some(Value::Null) | None => a2a_json(StatusCode::OK, &json!({})),
        Some(result) => a2a_json(StatusCode::OK, result),
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

/// An event of a JSON-RPC stream as this binding's: the bare result, or the error's
/// `google.rpc.Status` body.
fn bare_result(event: String) -> String {
    let response: Value = serde_json::from_str(&event).unwrap_or(Value::Null);
    let data = match response.get("error") {
        Some(error) => jsonrpc::http_error(error).1,
        None => response["result"].clone(),
    };
    data.to_string()
}

fn error_response(error: &jsonrpc::RpcError) -> Response {
    let (status, body) = jsonrpc::http_error(&error.to_json());
    let status = StatusCode::from_u16(status).unwrap_or(StatusCode::INTERNAL_SERVER_ERROR);
    a2a_json(status, &body)
}

/// The request body as the method's params: a JSON object sent as JSON.
fn body_params(headers: &HeaderMap, body: &[u8]) -> Result<Value, jsonrpc::RpcError> {
    use crate::protocol::json::{Integers, StrictError, parse_object};
    if !crate::http::content_type::is_json(headers) {
        return Err(jsonrpc::RpcError::ContentTypeNotSupported(
            "send the request body with Content-Type: application/json",
        ));
    }
    // As strict as the JSON-RPC door: a repeated member name is refused, not resolved.
    match parse_object(body, Integers::Any) {
        Ok(object) => Ok(Value::Object(object)),
        Err(StrictError::Value(_)) => Err(jsonrpc::RpcError::InvalidParams {
            field: "body".to_owned(),
            description: "must be a JSON object".to_owned(),
        }),
        Err(StrictError::Repeated(_)) => Err(jsonrpc::RpcError::InvalidRequest(
            "a member name is repeated in an object",
        )),
        Err(_) => Err(jsonrpc::RpcError::Parse),
    }
}

async fn send(
    state: State<RestState>,
    caller: Caller,
    headers: HeaderMap,
    body: Bytes,
) -> Response {
    send_as("SendMessage", state, caller, headers, body).await
}

async fn stream(
    state: State<RestState>,
    caller: Caller,
    headers: HeaderMap,
    body: Bytes,
) -> Response {
    send_as("SendStreamingMessage", state, caller, headers, body).await
}

/// A message sent with `method`: the body is its params.
async fn send_as(
    method: &str,
    State(state): State<RestState>,
    caller: Caller,
    headers: HeaderMap,
    body: Bytes,
) -> Response {
    match body_params(&headers, &body) {
        Ok(params) => ask(&state, caller, method, params).await,
        Err(refused) => error_response(&refused),
    }
}

/// Query parameters as params: numbers and booleans where the method expects them. A parameter
/// named twice is refused rather than resolved: a proxy in front may have read the other one.
fn query_params(query: &[(String, String)]) -> Result<Value, jsonrpc::RpcError> {
    let mut params = serde_json::Map::new();
    for (name, value) in query {
        if params.contains_key(name) {
            return Err(jsonrpc::RpcError::InvalidRequest(
                "a query parameter is named more than once; name each at most once",
            ));
        }
        let typed = match name.as_str() {
            "pageSize" | "historyLength" => match value.parse::<i64>() {
                Ok(n) => json!(n),
                Err(_) => {
                    return Err(jsonrpc::RpcError::InvalidParams {
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
                    return Err(jsonrpc::RpcError::InvalidParams {
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
    match query_params(&query) {
        Ok(params) => ask(&state, caller, "ListTasks", params).await,
        Err(refused) => error_response(&refused),
    }
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
    if let Err(refused) = query_params(&query) {
        return error_response(&refused);
    }
    if let Some(id) = segment.strip_suffix(":cancel") {
        if method != Method::POST {
            return StatusCode::METHOD_NOT_ALLOWED.into_response();
        }
        return ask(&state, caller, "CancelTask", json!({"id": id})).await;
    }
    if let Some(id) = segment.strip_suffix(":subscribe") {
        // The specification's text says POST, its proto GET: both are served.
        if method != Method::POST && method != Method::GET {
            return StatusCode::METHOD_NOT_ALLOWED.into_response();
        }
        return ask(&state, caller, "SubscribeToTask", json!({"id": id})).await;
    }
    if method != Method::GET {
        return StatusCode::METHOD_NOT_ALLOWED.into_response();
    }
    let mut params = match query_params(&query) {
        Ok(params) => params,
        Err(refused) => return error_response(&refused),
    };
    params["id"] = json!(segment);
    ask(&state, caller, "GetTask", params).await
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
    if let Err(refused) = query_params(&query) {
        return error_response(&refused);
    }
    let task = path.get("task").cloned().unwrap_or_default();
    let (name, mut params) = match (path.get("config"), method) {
        (None, Method::POST) => match body_params(&headers, &body) {
            Ok(params) => ("CreateTaskPushNotificationConfig", params),
            Err(refused) => return error_response(&refused),
        },
        (None, Method::GET) => match query_params(&query) {
            Ok(params) => ("ListTaskPushNotificationConfigs", params),
            Err(refused) => return error_response(&refused),
        },
        (Some(config), Method::GET) => ("GetTaskPushNotificationConfig", json!({"id": config})),
        (Some(config), Method::DELETE) => {
            ("DeleteTaskPushNotificationConfig", json!({"id": config}))
        }
        _ => return StatusCode::METHOD_NOT_ALLOWED.into_response(),
    };
    params["taskId"] = json!(task);
    ask(&state, caller, name, params).await
}

async fn extended_card(State(state): State<RestState>, caller: Caller) -> Response {
    ask(&state, caller, "GetExtendedAgentCard", json!({})).await
}

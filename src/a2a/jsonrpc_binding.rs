//! The JSON-RPC binding over the typed service: one request body in, one response object (or a
//! stream of them) out. Decode, call, encode; every decision is the service's.

use crate::a2a::events::{EventStream, StreamEvent, StreamRefused};
use crate::a2a::service::{A2aService, Caller};
use crate::guard::refusal::Refusal;
use crate::protocol::error::A2aError;
use crate::protocol::jsonrpc::{self, Method, RpcId, RpcRequest};
use serde::Serialize;
use serde_json::value::to_raw_value;

/// How the binding answers one request.
#[derive(Debug)]
pub enum Answer {
    /// One JSON-RPC response object.
    Body(String),
    /// One JSON-RPC response object holding an error.
    Failure {
        /// The response object.
        body: String,
        /// The error's JSON-RPC code (the access log names it: the HTTP status is 200).
        code: i64,
        /// For an internal error (`-32603`), the id of the log line with the detail, which
        /// the answer names (the access log names it too).
        request_id: Option<String>,
    },
    /// JSON-RPC response objects under request `id`, one per event ([`event`] frames each),
    /// until the stream ends (Server-Sent Events).
    Events {
        /// The request's id, which every event echoes.
        id: RpcId,
        /// The events.
        events: EventStream,
    },
    /// Refused at the HTTP level: a stream past the peer's cap, an operation its token's
    /// scopes do not open.
    Refused(Refusal),
}

impl Answer {
    /// The body of a one-response answer (`None` for a stream).
    pub fn body(self) -> Option<String> {
        match self {
            Self::Body(body) | Self::Failure { body, .. } => Some(body),
            Self::Events { .. } | Self::Refused(_) => None,
        }
    }

    /// The answer to request `id` that failed with `error`.
    fn failure(id: &RpcId, error: &A2aError) -> Self {
        let request_id = match error {
            A2aError::Internal { request_id } | A2aError::StoreUnavailable { request_id } => {
                Some(request_id.clone())
            }
            _ => None,
        };
        Self::Failure {
            body: jsonrpc::failure(id, error),
            code: error.code(),
            request_id,
        }
    }

    /// The answer to request `id` with `result`.
    fn result<R: Serialize>(id: &RpcId, result: Result<R, A2aError>) -> Self {
        let encoded = result.and_then(|result| to_raw_value(&result).map_err(encoding_failed));
        match encoded {
            Ok(json) => Self::Body(jsonrpc::success(id, &json)),
            Err(error) => Self::failure(id, &error),
        }
    }

    /// The answer to request `id` that opens a stream, or why it did not.
    fn stream(id: RpcId, opened: Result<EventStream, StreamRefused>) -> Self {
        match opened {
            Ok(events) => Self::Events { id, events },
            Err(StreamRefused::Rpc(error)) => Self::failure(&id, &error),
            Err(StreamRefused::AtCap(cap)) => Self::Refused(Refusal::TooManyStreams { cap }),
        }
    }
}

/// One stream event as a JSON-RPC response object under request `id`.
pub fn event(id: &RpcId, event: StreamEvent) -> String {
    match event {
        StreamEvent::Response(json) => jsonrpc::success(id, &json),
        StreamEvent::Error(error) => jsonrpc::failure(id, &error),
    }
}

/// Answers one JSON-RPC request body from `caller`, with the method asked when the body named
/// one.
pub async fn handle(
    service: &dyn A2aService,
    caller: &Caller,
    body: &[u8],
) -> (Option<Method>, Answer) {
    match jsonrpc::parse_request(body) {
        Ok(request) => (Some(request.method), answer(service, caller, request).await),
        Err(failure) => (None, Answer::failure(&failure.id, &failure.error)),
    }
}

/// Answers one well-formed request: its params decoded into the method's request, the service
/// asked, its answer encoded.
async fn answer(service: &dyn A2aService, caller: &Caller, request: RpcRequest) -> Answer {
    if let Some(scope) = request.method.scope()
        && !caller.peer.may(scope)
    {
        return Answer::Refused(Refusal::InsufficientScope { scope });
    }
    if let Err(error) = service.offered(request.method) {
        return Answer::failure(&request.id, &error);
    }
    let (id, params) = (&request.id, request.params.as_deref());
    match request.method {
        Method::SendMessage => match jsonrpc::parse_params(params) {
            Ok(request) => Answer::result(id, service.send_message(caller, request).await),
            Err(error) => Answer::failure(id, &error),
        },
        Method::SendStreamingMessage => match jsonrpc::parse_params(params) {
            Ok(request) => {
                let opened = service.send_streaming_message(caller, request).await;
                Answer::stream(id.clone(), opened)
            }
            Err(error) => Answer::failure(id, &error),
        },
        Method::GetTask => match jsonrpc::parse_params(params) {
            Ok(request) => Answer::result(id, service.get_task(caller, request).await),
            Err(error) => Answer::failure(id, &error),
        },
        // Every field of its request is optional, `params` too.
        Method::ListTasks => match params.map_or(Ok(Default::default()), |params| {
            jsonrpc::parse_params(Some(params))
        }) {
            Ok(request) => Answer::result(id, service.list_tasks(caller, request).await),
            Err(error) => Answer::failure(id, &error),
        },
        Method::CancelTask => match jsonrpc::parse_params(params) {
            Ok(request) => Answer::result(id, service.cancel_task(caller, request).await),
            Err(error) => Answer::failure(id, &error),
        },
        Method::SubscribeToTask => match jsonrpc::parse_params(params) {
            Ok(request) => {
                let opened = service.subscribe_to_task(caller, request).await;
                Answer::stream(id.clone(), opened)
            }
            Err(error) => Answer::failure(id, &error),
        },
        Method::CreatePushConfig => match jsonrpc::parse_params(params) {
            Ok(request) => Answer::result(id, service.create_push_config(caller, request).await),
            Err(error) => Answer::failure(id, &error),
        },
        Method::GetPushConfig => match jsonrpc::parse_params(params) {
            Ok(request) => Answer::result(id, service.get_push_config(caller, request).await),
            Err(error) => Answer::failure(id, &error),
        },
        Method::ListPushConfigs => match jsonrpc::parse_params(params) {
            Ok(request) => Answer::result(id, service.list_push_configs(caller, request).await),
            Err(error) => Answer::failure(id, &error),
        },
        // Deleting answers `null`.
        Method::DeletePushConfig => match jsonrpc::parse_params(params) {
            Ok(request) => Answer::result(id, service.delete_push_config(caller, request).await),
            Err(error) => Answer::failure(id, &error),
        },
        Method::GetExtendedAgentCard => match service.get_extended_agent_card(caller).await {
            Ok(card) => Answer::Body(jsonrpc::success(id, &card.0)),
            Err(error) => Answer::failure(id, &error),
        },
    }
}

/// A typed answer that would not encode: logged, answered as an internal error.
fn encoding_failed(error: serde_json::Error) -> A2aError {
    A2aError::internal(&error, "an answer could not be encoded")
}

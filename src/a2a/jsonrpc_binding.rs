//! The JSON-RPC binding over the call pipeline: one request body in, one response object (or a
//! stream of them) out. Decode, call, encode; every decision is the pipeline's.

use crate::a2a::events::{EventStream, StreamEvent};
use crate::a2a::operation::{A2aRequest, A2aResponse, CallRefused};
use crate::a2a::pipeline::{Asked, Pipeline};
use crate::a2a::service::Caller;
use crate::guard::refusal::{Refusal, RefusalReason};
use crate::protocol::call::{Binding, CallRecord};
use crate::protocol::error::A2aError;
use crate::protocol::jsonrpc::{self, RpcId, RpcRequest};

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
        /// The reason `/metrics` counts it under (a version or extension refused).
        reason: Option<RefusalReason>,
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
            reason: None,
        }
    }

    /// The same answer, counted by `/metrics` under `reason`.
    fn counted_as(self, reason: Option<RefusalReason>) -> Self {
        match self {
            Self::Failure {
                body,
                code,
                request_id,
                ..
            } => Self::Failure {
                body,
                code,
                request_id,
                reason,
            },
            other => other,
        }
    }

    /// The answer to request `id`: the operation's answer or a stream, or why there is none.
    fn of(id: RpcId, answered: Result<A2aResponse, CallRefused>) -> Self {
        match answered {
            Ok(A2aResponse::Events(events)) => Self::Events { id, events },
            Ok(answer) => match answer.json() {
                Ok(json) => Self::Body(jsonrpc::success(&id, &json)),
                Err(error) => Self::failure(&id, &error),
            },
            Err(refused) => {
                let reason = refused.reason();
                match refused {
                    CallRefused::Guard(refusal) => Self::Refused(refusal),
                    CallRefused::Protocol(error) => Self::failure(&id, &error).counted_as(reason),
                }
            }
        }
    }
}

/// One stream event as a JSON-RPC response object under request `id`.
pub fn event(id: &RpcId, event: StreamEvent) -> String {
    match event.into_response() {
        Ok(json) => jsonrpc::success(id, &json),
        Err(error) => jsonrpc::failure(id, &error),
    }
}

/// A request body, and whether it was sent as JSON.
#[derive(Debug, Clone, Copy)]
pub struct Body<'a> {
    /// The bytes.
    pub bytes: &'a [u8],
    /// Its `Content-Type` is `application/json`.
    pub json: bool,
}

/// Answers one JSON-RPC request body from `caller`, with the pipeline's record of the call when
/// the body named an operation. A body not sent as JSON is refused with `-32005` under the id it holds, once the
/// caller may ask its method at all.
pub async fn handle(
    pipeline: &Pipeline,
    caller: Caller,
    body: Body<'_>,
) -> (Option<CallRecord>, Answer) {
    const NOT_JSON: &str = "send the JSON-RPC request with Content-Type: application/json";
    let request = match jsonrpc::parse_request(body.bytes) {
        Ok(request) => request,
        // Not a request: answered once the caller's admission lets it be.
        Err(failure) => {
            if let Some(refusal) = pipeline.unread(&caller).await {
                return (None, Answer::Refused(refusal));
            }
            let error = match body.json {
                true => failure.error,
                false => A2aError::ContentTypeNotSupported(NOT_JSON.into()),
            };
            return (None, Answer::failure(&failure.id, &error));
        }
    };
    let RpcRequest { id, method, params } = request;
    let read = match body.json {
        true => A2aRequest::read(method, params.as_deref()),
        false => Err(A2aError::ContentTypeNotSupported(NOT_JSON.into())),
    };
    let asked = Asked {
        binding: Binding::JsonRpc,
        method,
        request: read,
    };
    let called = pipeline.call(caller, asked).await;
    (Some(called.record), Answer::of(id, called.answer))
}

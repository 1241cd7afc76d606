//! One A2A call as types: the request a binding decoded ([`A2aRequest`], a variant per
//! operation), the answer it encodes ([`A2aResponse`]), and why there is none
//! ([`CallRefused`]). [`A2aRequest::run`] is the one place an operation is matched to the
//! service's method: no binding holds a dispatch table of its own.

use crate::a2a::events::{EventStream, StreamRefused};
use crate::a2a::service::{A2aService, Caller, SignedCard};
use crate::guard::refusal::{Refusal, RefusalReason};
use crate::protocol::error::A2aError;
use crate::protocol::jsonrpc::{Method, parse_params};
use crate::protocol::types::{
    CancelTaskRequest, GetTaskRequest, ListTaskPushNotificationConfigsResponse, ListTasksRequest,
    ListTasksResponse, PushConfigParams, PushConfigRef, SendMessageRequest, SendMessageResponse,
    StoredTask, SubscribeToTaskRequest, TaskPushNotificationConfig, TaskState,
};
use serde_json::value::RawValue;

/// An A2A operation's typed request.
#[derive(Debug)]
#[non_exhaustive]
pub enum A2aRequest {
    /// `SendMessage`.
    SendMessage(Box<SendMessageRequest>),
    /// `SendStreamingMessage`.
    SendStreamingMessage(Box<SendMessageRequest>),
    /// `GetTask`.
    GetTask(GetTaskRequest),
    /// `ListTasks`.
    ListTasks(ListTasksRequest),
    /// `CancelTask`.
    CancelTask(CancelTaskRequest),
    /// `SubscribeToTask`.
    SubscribeToTask(SubscribeToTaskRequest),
    /// `CreateTaskPushNotificationConfig`.
    CreatePushConfig(PushConfigParams),
    /// `GetTaskPushNotificationConfig`.
    GetPushConfig(PushConfigRef),
    /// `ListTaskPushNotificationConfigs`.
    ListPushConfigs(PushConfigRef),
    /// `DeleteTaskPushNotificationConfig`.
    DeletePushConfig(PushConfigRef),
    /// `GetExtendedAgentCard`.
    GetExtendedAgentCard,
}

/// An A2A operation's answer.
#[derive(Debug)]
#[non_exhaustive]
pub enum A2aResponse {
    /// `SendMessage`'s: a task, or the agent's direct message.
    Sent(SendMessageResponse),
    /// A task (`GetTask`, `CancelTask`).
    Task(StoredTask),
    /// A page of tasks (`ListTasks`).
    Page(ListTasksResponse),
    /// A push config (create, get).
    PushConfig(TaskPushNotificationConfig),
    /// A task's push configs (list).
    PushConfigs(ListTaskPushNotificationConfigsResponse),
    /// The extended card, as signed.
    Card(SignedCard),
    /// Nothing (a deleted push config).
    Empty,
    /// Events, until the stream ends (`SendStreamingMessage`, `SubscribeToTask`).
    Events(EventStream),
}

/// Why a call has no answer from its operation: the guard's refusal (an HTTP status in every
/// binding's form) or the protocol's error.
#[derive(Debug)]
#[non_exhaustive]
pub enum CallRefused {
    /// The guard's: a scope the token lacks, a stream past the peer's cap.
    Guard(Refusal),
    /// The protocol's: an operation that is off, a request that could not be read, what the
    /// operation itself refused.
    Protocol(A2aError),
}

impl CallRefused {
    /// The reason `/metrics` counts it under, if it counts it.
    pub fn reason(&self) -> Option<RefusalReason> {
        match self {
            Self::Guard(refusal) => refusal.reason(),
            Self::Protocol(A2aError::VersionNotSupported { .. }) => {
                Some(RefusalReason::VersionNotSupported)
            }
            Self::Protocol(A2aError::ExtensionSupportRequired { .. }) => {
                Some(RefusalReason::ExtensionRequired)
            }
            Self::Protocol(A2aError::ContentDenied { .. }) => Some(RefusalReason::ContentDenied),
            Self::Protocol(A2aError::ContentUninspected) => Some(RefusalReason::ContentUninspected),
            Self::Protocol(_) => None,
        }
    }
}

impl From<A2aError> for CallRefused {
    fn from(error: A2aError) -> Self {
        Self::Protocol(error)
    }
}

impl From<StreamRefused> for CallRefused {
    fn from(refused: StreamRefused) -> Self {
        match refused {
            StreamRefused::Rpc(error) => Self::Protocol(error),
            StreamRefused::AtCap(cap) => Self::Guard(Refusal::TooManyStreams { cap }),
        }
    }
}

impl A2aRequest {
    /// The operation it asks.
    pub fn method(&self) -> Method {
        match self {
            Self::SendMessage(_) => Method::SendMessage,
            Self::SendStreamingMessage(_) => Method::SendStreamingMessage,
            Self::GetTask(_) => Method::GetTask,
            Self::ListTasks(_) => Method::ListTasks,
            Self::CancelTask(_) => Method::CancelTask,
            Self::SubscribeToTask(_) => Method::SubscribeToTask,
            Self::CreatePushConfig(_) => Method::CreatePushConfig,
            Self::GetPushConfig(_) => Method::GetPushConfig,
            Self::ListPushConfigs(_) => Method::ListPushConfigs,
            Self::DeletePushConfig(_) => Method::DeletePushConfig,
            Self::GetExtendedAgentCard => Method::GetExtendedAgentCard,
        }
    }

    /// `method`'s request read from its JSON `params` (JSON-RPC's `params`, a gRPC request's
    /// ProtoJSON, the HTTP+JSON binding's body and route gathered), with the same words for
    /// what is wrong whichever binding it came over.
    pub fn read(method: Method, params: Option<&RawValue>) -> Result<Self, A2aError> {
        let message = |params| parse_params(params).map(Box::new);
        Ok(match method {
            Method::SendMessage => Self::SendMessage(message(params)?),
            Method::SendStreamingMessage => Self::SendStreamingMessage(message(params)?),
            Method::GetTask => Self::GetTask(parse_params(params)?),
            // Every field of its request is optional, `params` too.
            Method::ListTasks => match params {
                Some(params) => Self::ListTasks(parse_params(Some(params))?),
                None => Self::ListTasks(ListTasksRequest::default()),
            },
            Method::CancelTask => Self::CancelTask(parse_params(params)?),
            Method::SubscribeToTask => Self::SubscribeToTask(parse_params(params)?),
            Method::CreatePushConfig => Self::CreatePushConfig(parse_params(params)?),
            Method::GetPushConfig => Self::GetPushConfig(parse_params(params)?),
            Method::ListPushConfigs => Self::ListPushConfigs(parse_params(params)?),
            Method::DeletePushConfig => Self::DeletePushConfig(parse_params(params)?),
            Method::GetExtendedAgentCard => Self::GetExtendedAgentCard,
        })
    }

    /// The message it carries in (`SendMessage`, `SendStreamingMessage`).
    pub fn message(&self) -> Option<&SendMessageRequest> {
        match self {
            Self::SendMessage(request) | Self::SendStreamingMessage(request) => Some(request),
            _ => None,
        }
    }

    /// The task it names, when it names one (a message continuing a task names it too).
    pub fn task_id(&self) -> Option<&str> {
        match self {
            Self::SendMessage(request) | Self::SendStreamingMessage(request) => {
                request.message.task_id.as_ref().map(|id| id.as_str())
            }
            Self::GetTask(request) => Some(request.id.as_str()),
            Self::CancelTask(request) => Some(request.id.as_str()),
            Self::SubscribeToTask(request) => Some(request.id.as_str()),
            Self::CreatePushConfig(request) => request.task_id.as_deref(),
            Self::GetPushConfig(request)
            | Self::ListPushConfigs(request)
            | Self::DeletePushConfig(request) => request.task_id.as_deref(),
            Self::ListTasks(_) | Self::GetExtendedAgentCard => None,
        }
    }

    /// The message it sends: its id and the context it names, if any.
    pub fn message_ids(&self) -> Option<(&str, Option<&str>)> {
        self.message().map(|request| {
            let message = &request.message;
            (
                message.message_id.as_str(),
                message.context_id.as_ref().map(|id| id.as_str()),
            )
        })
    }

    /// The conversation it names, when it names one: a message's `contextId`, or the one
    /// ListTasks filters on.
    pub fn context_id(&self) -> Option<&str> {
        match self {
            Self::SendMessage(request) | Self::SendStreamingMessage(request) => {
                request.message.context_id.as_ref().map(|id| id.as_str())
            }
            Self::ListTasks(request) => request.context_id.as_ref().map(|id| id.as_str()),
            _ => None,
        }
    }

    /// Asks `service` the operation, for `caller`.
    pub async fn run(
        self,
        service: &dyn A2aService,
        caller: &Caller,
    ) -> Result<A2aResponse, CallRefused> {
        Ok(match self {
            Self::SendMessage(request) => {
                A2aResponse::Sent(service.send_message(caller, *request).await?)
            }
            Self::SendStreamingMessage(request) => {
                A2aResponse::Events(service.send_streaming_message(caller, *request).await?)
            }
            Self::GetTask(request) => A2aResponse::Task(service.get_task(caller, request).await?),
            Self::ListTasks(request) => {
                A2aResponse::Page(service.list_tasks(caller, request).await?)
            }
            Self::CancelTask(request) => {
                A2aResponse::Task(service.cancel_task(caller, request).await?)
            }
            Self::SubscribeToTask(request) => {
                A2aResponse::Events(service.subscribe_to_task(caller, request).await?)
            }
            Self::CreatePushConfig(request) => {
                A2aResponse::PushConfig(service.create_push_config(caller, request).await?)
            }
            Self::GetPushConfig(request) => {
                A2aResponse::PushConfig(service.get_push_config(caller, request).await?)
            }
            Self::ListPushConfigs(request) => {
                A2aResponse::PushConfigs(service.list_push_configs(caller, request).await?)
            }
            Self::DeletePushConfig(request) => {
                service.delete_push_config(caller, request).await?;
                A2aResponse::Empty
            }
            Self::GetExtendedAgentCard => {
                A2aResponse::Card(service.get_extended_agent_card(caller).await?)
            }
        })
    }
}

impl A2aResponse {
    /// The answer as its JSON (`null` for none), for the bindings that write JSON. A stream
    /// has none: each binding frames its events itself.
    pub fn json(&self) -> Result<Box<RawValue>, A2aError> {
        serde_json::value::to_raw_value(self)
            .map_err(|e| A2aError::internal(&e, "an answer could not be encoded"))
    }

    /// The task it answers with, when it is one (a sent message's, a read's, a cancel's).
    pub fn task_id(&self) -> Option<&str> {
        match self {
            Self::Sent(SendMessageResponse::Task(task)) | Self::Task(task) => {
                Some(task.task.id.as_str())
            }
            _ => None,
        }
    }

    /// The task it answers with: its context and state.
    pub fn task_seen(&self) -> Option<(&str, TaskState)> {
        match self {
            Self::Sent(SendMessageResponse::Task(task)) | Self::Task(task) => {
                Some((task.task.context_id.as_str(), task.task.status.state))
            }
            _ => None,
        }
    }

    /// The task `method`'s answer brings to a final state (a blocking send's, a cancel's):
    /// what the *seal* stage sees. A read of a finished task finishes nothing.
    pub fn final_task(&self, method: Method) -> Option<&StoredTask> {
        let task = match (method, self) {
            (Method::SendMessage, Self::Sent(SendMessageResponse::Task(task)))
            | (Method::CancelTask, Self::Task(task)) => task,
            _ => return None,
        };
        task.task.status.state.is_final().then_some(task)
    }
}

/// The answer's JSON as the protocol writes it (`null` for none); a stream has none.
impl serde::Serialize for A2aResponse {
    fn serialize<S: serde::Serializer>(&self, serializer: S) -> Result<S::Ok, S::Error> {
        match self {
            Self::Sent(sent) => sent.serialize(serializer),
            Self::Task(task) => task.serialize(serializer),
            Self::Page(page) => page.serialize(serializer),
            Self::PushConfig(config) => config.serialize(serializer),
            Self::PushConfigs(configs) => configs.serialize(serializer),
            Self::Card(card) => card.serialize(serializer),
            Self::Empty => serializer.serialize_unit(),
            Self::Events(_) => Err(serde::ser::Error::custom("a stream is not one answer")),
        }
    }
}

//! The A2A operations as one typed service: every binding (JSON-RPC, HTTP+JSON, gRPC) decodes
//! its request into the operation's typed request, calls the service, and encodes the typed
//! answer or the [`A2aError`] in its own form (the forms are one table,
//! [`crate::protocol::error`]). No binding decides anything about tasks; the service does not
//! know which binding asked.
//!
//! The caller is always an authenticated peer: the guard in front of every binding made it.

use crate::a2a::events::{EventStream, StreamRefused};
use crate::guard::admission::{Admission, Settled};
use crate::layers::access_log::AccessNote;
use crate::layers::auth::AuthenticatedPeer;
use crate::layers::gate::ProtocolAsked;
use crate::protocol::error::A2aError;
use crate::protocol::jsonrpc::Method;
use crate::protocol::types::{
    CancelTaskRequest, GetTaskRequest, ListTaskPushNotificationConfigsResponse, ListTasksRequest,
    ListTasksResponse, PushConfigParams, PushConfigRef, SendMessageRequest, SendMessageResponse,
    StoredTask, SubscribeToTaskRequest, TaskPushNotificationConfig,
};
use crate::shared::admission::{LockAsk, SpendAsk};
use crate::telemetry::conventions;
use serde_json::value::RawValue;
use std::net::IpAddr;

/// Who asks: the peer the guard authenticated, and the address it came from.
#[derive(Debug, Clone)]
pub struct Caller {
    /// The authenticated peer.
    pub peer: AuthenticatedPeer,
    /// Its address, when the listener knows it.
    pub client: Option<IpAddr>,
    /// The request's shared checks, still to be asked (across instances; `None` in one
    /// process, where every limit was decided in front).
    pub admission: Option<Admission>,
    /// What the access log writes of the request, when it is on.
    pub note: Option<std::sync::Arc<AccessNote>>,
    /// The protocol version and extensions the request named, as the gate read them (the
    /// extensions it activates ride here, as in a2a-python's call context).
    pub protocol: ProtocolAsked,
    /// The request's span, when traces are exported: what the call waits on are its children.
    pub trace: Option<std::sync::Arc<crate::telemetry::CallSpan>>,
    /// The binding and operation, once the pipeline has read them (a receipt names both).
    pub call: Option<crate::protocol::call::A2aCall>,
}

impl Caller {
    /// The caller's `peer` from `client`, with the request's `admission` (from its extensions).
    pub fn new(
        peer: AuthenticatedPeer,
        client: Option<IpAddr>,
        extensions: &axum::http::Extensions,
    ) -> Self {
        Self {
            peer,
            client,
            admission: extensions.get::<Admission>().cloned(),
            note: extensions.get::<std::sync::Arc<AccessNote>>().cloned(),
            protocol: extensions
                .get::<ProtocolAsked>()
                .cloned()
                .unwrap_or_default(),
            trace: extensions
                .get::<std::sync::Arc<crate::telemetry::CallSpan>>()
                .cloned(),
            call: None,
        }
    }

    /// Asks the request's shared checks, with a turn's budget read and lock when given, in
    /// one call: what was read and taken, or the protocol's form of a limit's refusal (the
    /// pipeline answers it with the guard's 429, which the admission keeps).
    pub async fn admit(
        &self,
        spend: Option<SpendAsk>,
        lock: Option<LockAsk>,
    ) -> Result<Settled, A2aError> {
        let Some(admission) = &self.admission else {
            return Ok(Settled::default());
        };
        // A span only for a call that goes to Redis.
        let asks = admission.is_pending() || spend.is_some() || lock.is_some();
        let traced = self.trace.as_ref().filter(|_| asks);
        let span = traced.map(|trace| {
            let kind = opentelemetry::trace::SpanKind::Client;
            trace.child(conventions::SHARED_ASK.to_owned(), kind, Vec::new())
        });
        let settled = admission.settle(spend, lock).await;
        if let Some(span) = span {
            span.finish(settled.is_err().then_some("rate_limited"));
        }
        settled.map_err(|refused| A2aError::RateLimited {
            retry_after_seconds: crate::shared::gcra::retry_after_seconds(refused.retry_after),
        })
    }
}

/// A signed Agent Card, served as signed: re-encoding it would be a different document.
#[derive(Debug, Clone, serde::Serialize)]
#[serde(transparent)]
pub struct SignedCard(pub Box<RawValue>);

/// One method per A2A 1.0 operation.
#[async_trait::async_trait]
pub trait A2aService: Send + Sync {
    /// Whether the operation is served here at all (the policy's capabilities). Every binding
    /// asks before it reads the request, so an operation that is off is refused alike
    /// whatever the request holds.
    fn offered(&self, method: Method) -> Result<(), A2aError>;

    /// `SendMessage`: the task (or the agent's direct message) once the turn is stored.
    async fn send_message(
        &self,
        caller: &Caller,
        request: SendMessageRequest,
    ) -> Result<SendMessageResponse, A2aError>;

    /// `SendStreamingMessage`: the turn's events as they happen.
    async fn send_streaming_message(
        &self,
        caller: &Caller,
        request: SendMessageRequest,
    ) -> Result<EventStream, StreamRefused>;

    /// `GetTask`: the caller's own task.
    async fn get_task(
        &self,
        caller: &Caller,
        request: GetTaskRequest,
    ) -> Result<StoredTask, A2aError>;

    /// `ListTasks`: a page of the caller's tasks.
    async fn list_tasks(
        &self,
        caller: &Caller,
        request: ListTasksRequest,
    ) -> Result<ListTasksResponse, A2aError>;

    /// `CancelTask`: the task as canceled.
    async fn cancel_task(
        &self,
        caller: &Caller,
        request: CancelTaskRequest,
    ) -> Result<StoredTask, A2aError>;

    /// `SubscribeToTask`: the task, then its stored states until the final one.
    async fn subscribe_to_task(
        &self,
        caller: &Caller,
        request: SubscribeToTaskRequest,
    ) -> Result<EventStream, StreamRefused>;

    /// `CreateTaskPushNotificationConfig`.
    async fn create_push_config(
        &self,
        caller: &Caller,
        request: PushConfigParams,
    ) -> Result<TaskPushNotificationConfig, A2aError>;

    /// `GetTaskPushNotificationConfig`.
    async fn get_push_config(
        &self,
        caller: &Caller,
        request: PushConfigRef,
    ) -> Result<TaskPushNotificationConfig, A2aError>;

    /// `ListTaskPushNotificationConfigs`.
    async fn list_push_configs(
        &self,
        caller: &Caller,
        request: PushConfigRef,
    ) -> Result<ListTaskPushNotificationConfigsResponse, A2aError>;

    /// `DeleteTaskPushNotificationConfig`: idempotent.
    async fn delete_push_config(
        &self,
        caller: &Caller,
        request: PushConfigRef,
    ) -> Result<(), A2aError>;

    /// `GetExtendedAgentCard`: the card this caller gets.
    async fn get_extended_agent_card(&self, caller: &Caller) -> Result<SignedCard, A2aError>;
}

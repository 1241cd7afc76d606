//! The agent behind the door: one JSON-RPC request in, one answer out.
//!
//! `SendMessage` joins the message's text, loads the last messages of its context, asks the
//! backend once and stores the finished task together with both sides of the exchange.
//! `GetTask` and `CancelTask` only ever see the calling peer's own tasks: another peer's task
//! is answered exactly like one that does not exist.
//!
//! Contexts are namespaced by peer: the same `contextId` sent by two peers names two separate
//! conversations, so one peer can neither read nor continue another's. Two messages racing in
//! one context are answered one after the other; the second waits for the first (at most one
//! and a half times the backend timeout, then `-32000`).
//!
//! This file holds the agent and dispatches each method; the rest is by concern: the turn
//! (`turn`, `turn_task`, `message`), reading and listing tasks (`reads`), cancellation
//! (`cancel`), push configs (`push`), streams (`stream`), and turns that did not end well
//! (`recovery`).

mod cancel;
mod message;
mod push;
mod reads;
mod recovery;
mod stream;
mod turn;
mod turn_task;

use cancel::*;
use message::*;
use recovery::*;
use turn_task::*;

use stream::StreamRefused;
pub use stream::{BUFFERED_BYTES, EventStream};

use crate::admin::budget::Budgets;
use crate::backend::{BackendError, ModelBackend, Prompt};
use crate::clock::{Clock, rfc3339_millis};
use crate::layers::auth::AuthenticatedPeer;
use crate::layers::metrics::{FinalState, Metrics};
use crate::protocol::jsonrpc::{self, Method, RpcError};
use crate::protocol::types::{
    self as a2a, Artifact, CancelTaskParams, Message, Role, SendMessageParams, Task, TaskState,
    TaskStatus,
};
use crate::shared::events::{LocalTaskEvents, TaskEvent, TaskEvents};
use crate::shared::ownership::{SingleInstance, TaskOwnership};
use crate::shared::turns::{LocalTurnLocks, TurnLocks};
use crate::store::{
    AuditEntry, ConversationMessage, ConversationRole, Exchange, TaskStore, WorkingTask,
};
use serde_json::json;
use serde_json::value::RawValue;
use std::net::IpAddr;
use std::sync::Arc;
use std::time::Duration;

/// What the agent needs from the policy.
#[derive(Debug, Clone)]
pub struct AgentSettings {
    /// The operator's base instructions.
    pub instructions: String,
    /// How long tasks stay readable.
    pub task_retention: Duration,
    /// Earlier messages of a context sent to the model.
    pub context_messages: u32,
    /// Longest text passed on.
    pub max_text_bytes: usize,
    /// How long one backend call may take.
    pub backend_timeout: Duration,
    /// `returnImmediately` is honoured (`capabilities.non_blocking`).
    pub non_blocking: bool,
    /// `CancelTask` stops a turn being answered (`capabilities.cancel_running`).
    pub cancel_running: bool,
    /// `SendStreamingMessage` is served (`capabilities.streaming`).
    pub streaming: bool,
    /// `SubscribeToTask` is served (`capabilities.subscriptions`).
    pub subscriptions: bool,
    /// The longest a stream or a subscription stays open.
    pub longest_stream: Duration,
    /// Streams a peer may hold open at once, unless its record says otherwise
    /// (`limits.streams_per_peer`).
    pub streams_per_peer: u32,
}

/// How the agent answers one request.
#[derive(Debug)]
pub enum Answer {
    /// One JSON-RPC response object.
    Body(String),
    /// One JSON-RPC response object: an internal error (`-32603`), whose detail was logged under
    /// `request_id`, the id the answer names (the access log names it too).
    Internal {
        /// The response object.
        body: String,
        /// The id of the log line with the detail.
        request_id: String,
    },
    /// JSON-RPC response objects, one per event, until the sender closes (Server-Sent Events).
    Events(EventStream),
    /// Refused at the HTTP level: a stream past the peer's cap, an operation its token's
    /// scopes do not open.
    Refused(crate::guard::refusal::Refusal),
}

impl Answer {
    /// The body of a one-response answer (`None` for a stream).
    pub fn body(self) -> Option<String> {
        match self {
            Self::Body(body) | Self::Internal { body, .. } => Some(body),
            Self::Events(_) | Self::Refused(_) => None,
        }
    }

    /// The answer to request `id` that opens a stream, or why it did not.
    fn stream(id: &jsonrpc::RpcId, opened: Result<EventStream, StreamRefused>) -> Self {
        match opened {
            Ok(events) => Self::Events(events),
            Err(StreamRefused::Rpc(error)) => Self::failure(id, &error),
            Err(StreamRefused::AtCap(cap)) => {
                Self::Refused(crate::guard::refusal::Refusal::TooManyStreams { cap })
            }
        }
    }

    /// The answer to request `id` that failed with `error`.
    fn failure(id: &jsonrpc::RpcId, error: &RpcError) -> Self {
        let body = jsonrpc::failure(id, error);
        match error {
            RpcError::Internal { request_id } | RpcError::StoreUnavailable { request_id } => {
                Self::Internal {
                    body,
                    request_id: request_id.clone(),
                }
            }
            _ => Self::Body(body),
        }
    }
}

/// The A2A agent.
pub struct Agent {
    store: Arc<dyn TaskStore>,
    backend: Arc<dyn ModelBackend>,
    budgets: Arc<Budgets>,
    metrics: Arc<Metrics>,
    clock: Arc<dyn Clock>,
    settings: AgentSettings,
    shared: SharedState,
    extended_card: Box<RawValue>,
    /// The extended card of a peer signed in with a token of an identity provider the public
    /// card does not list, by the provider's name.
    issuer_extended_cards: std::collections::HashMap<String, Box<RawValue>>,
    /// The turns this instance is answering that a peer may cancel, by task id.
    running: Arc<std::sync::Mutex<std::collections::HashMap<String, RunningTurn>>>,
    /// Turns running without a request waiting on them (non-blocking sends, streams), so a
    /// shutdown can let them store their answers before the store closes.
    background: Arc<(std::sync::atomic::AtomicUsize, tokio::sync::Notify)>,
    /// Push notifications, when `capabilities.push_notifications` is on.
    push: Option<Arc<crate::push::Push>>,
}

/// The agent's seams to state that several instances would share.
#[derive(Debug, Clone)]
pub struct SharedState {
    /// One turn at a time per context.
    pub turns: Arc<dyn TurnLocks>,
    /// Where a task's changes are heard.
    pub events: Arc<dyn TaskEvents>,
    /// Which instance answers which working task.
    pub ownership: Arc<dyn TaskOwnership>,
    /// `CancelTask` for turns other instances answer.
    pub cancels: Arc<dyn crate::shared::cancels::CancelRequests>,
    /// Each peer's open streams, against its cap.
    pub streams: Arc<dyn crate::shared::streams::OpenStreams>,
}

impl Default for SharedState {
    /// The in-process engines: one instance.
    fn default() -> Self {
        Self {
            turns: Arc::new(LocalTurnLocks::default()),
            events: Arc::new(LocalTaskEvents::default()),
            ownership: Arc::new(SingleInstance::default()),
            cancels: Arc::new(crate::shared::cancels::NoOtherInstances),
            streams: Arc::new(crate::shared::streams::LocalOpenStreams::default()),
        }
    }
}

impl std::fmt::Debug for Agent {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Agent")
            .field("settings", &self.settings)
            .finish_non_exhaustive()
    }
}

impl Agent {
    /// An agent over `store` answering with `backend`, within the owners' `budgets`.
    pub fn new(
        store: Arc<dyn TaskStore>,
        backend: Arc<dyn ModelBackend>,
        budgets: Arc<Budgets>,
        metrics: Arc<Metrics>,
        clock: Arc<dyn Clock>,
        settings: AgentSettings,
    ) -> Self {
        Self {
            store,
            backend,
            budgets,
            metrics,
            clock,
            settings,
            shared: SharedState::default(),
            extended_card: RawValue::from_string("{}".to_owned()).unwrap_or_default(),
            issuer_extended_cards: std::collections::HashMap::new(),
            running: Arc::default(),
            background: Arc::default(),
            push: None,
        }
    }

    /// Serves the push-notification methods through `push` and queues every stored state for
    /// the task's configs.
    pub fn with_push(mut self, push: Arc<crate::push::Push>) -> Self {
        self.push = Some(push);
        self
    }

    /// Shares turns, task events and ownership through `shared` instead of the in-process
    /// engines.
    pub fn with_shared_state(mut self, shared: SharedState) -> Self {
        self.shared = shared;
        self
    }

    /// Where this agent's task events are heard.
    pub fn task_events(&self) -> Arc<dyn TaskEvents> {
        self.shared.events.clone()
    }

    /// The extended Agent Card `GetExtendedAgentCard` answers with (signed, as served).
    pub fn with_extended_card(mut self, card: Box<RawValue>) -> Self {
        self.extended_card = card;
        self
    }

    /// The extended card for peers signed in with identity provider `issuer`'s tokens.
    pub fn with_issuer_extended_card(mut self, issuer: &str, card: Box<RawValue>) -> Self {
        self.issuer_extended_cards.insert(issuer.to_owned(), card);
        self
    }

    /// The extended card `peer` gets.
    fn extended_card_for(&self, peer: &AuthenticatedPeer) -> Box<RawValue> {
        peer.issuer()
            .and_then(|issuer| self.issuer_extended_cards.get(issuer))
            .unwrap_or(&self.extended_card)
            .clone()
    }

    /// Answers one JSON-RPC request body from `client`: one JSON-RPC response object, or, for
    /// the streaming methods, a stream of them; with the method asked, when the body named one.
    pub async fn handle(
        self: &Arc<Self>,
        peer: &AuthenticatedPeer,
        client: Option<IpAddr>,
        body: &[u8],
    ) -> (Option<Method>, Answer) {
        match jsonrpc::parse_request(body) {
            Ok(request) => (
                Some(request.method),
                self.answer(peer, client, request).await,
            ),
            Err(failure) => (
                None,
                Answer::Body(jsonrpc::failure(&failure.id, &failure.error)),
            ),
        }
    }

    /// Answers one well-formed request.
    async fn answer(
        self: &Arc<Self>,
        peer: &AuthenticatedPeer,
        client: Option<IpAddr>,
        request: jsonrpc::RpcRequest,
    ) -> Answer {
        if let Some(scope) = request.method.scope()
            && !peer.may(scope)
        {
            return Answer::Refused(crate::guard::refusal::Refusal::InsufficientScope { scope });
        }
        let params = request.params.as_deref();
        let outcome = match request.method {
            Method::SendMessage => self.send_message(peer, client, params).await,
            Method::GetTask => self.get_task(peer, params).await,
            Method::ListTasks => self.list_tasks(peer, params).await,
            Method::CancelTask => self.cancel_task(peer, params).await,
            Method::GetExtendedAgentCard => Ok(self.extended_card_for(peer)),
            // Each answers -32003 while push notifications are off.
            Method::CreatePushConfig => self.create_push_config(peer, params).await,
            Method::GetPushConfig => self.get_push_config(peer, params).await,
            Method::ListPushConfigs => self.list_push_configs(peer, params).await,
            Method::DeletePushConfig => self.delete_push_config(peer, params).await,
            Method::SendStreamingMessage => {
                let opened = self.send_streaming(peer, client, &request.id, params).await;
                return Answer::stream(&request.id, opened);
            }
            Method::SubscribeToTask => {
                let opened = self.subscribe_to_task(peer, &request.id, params).await;
                return Answer::stream(&request.id, opened);
            }
        };
        match outcome {
            Ok(result) => Answer::Body(jsonrpc::success(&request.id, &result)),
            Err(error) => Answer::failure(&request.id, &error),
        }
    }
}

/// A fresh id for a task or a context: a UUIDv7, random but ordered by time, so the store's
/// indexes grow at their ends instead of touching a random page per insert.
fn new_id() -> String {
    uuid::Uuid::now_v7().to_string()
}

fn invalid(field: &str, description: &str) -> RpcError {
    RpcError::InvalidParams {
        field: field.to_owned(),
        description: description.to_owned(),
    }
}

fn checked_history_length(n: i64, field: &str) -> Result<usize, RpcError> {
    usize::try_from(n).map_err(|_| invalid(field, "must not be negative"))
}

/// The store could not take the task before the model call: logged under a request id.
fn store_unavailable(error: impl std::fmt::Display) -> RpcError {
    let request_id = uuid::Uuid::new_v4().to_string();
    tracing::error!(request_id = %request_id, error = %error, "cannot record a task; the model was not asked");
    RpcError::StoreUnavailable { request_id }
}

/// Logs the detail under a fresh request id and answers with that id only.
fn internal(error: impl std::fmt::Display) -> RpcError {
    let request_id = uuid::Uuid::new_v4().to_string();
    tracing::error!(request_id = %request_id, error = %error, "internal error");
    RpcError::Internal { request_id }
}

#[cfg(test)]
mod tests;

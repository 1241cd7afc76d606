//! The agent behind the door: the typed A2A service ([`crate::a2a::service::A2aService`]) every
//! binding calls.
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
//! The agent is made of parts, each holding only what its job uses, and answers each operation
//! through one of them ([`AgentBuilder::build`] makes them):
//! - `Turns` (`turn`, `turn_task`, `turn_run`, and `stream` for streamed turns): the messages'
//!   turns, over the store, the backend, the budgets, the metrics, the clock, the turn locks
//!   and the ownership, with the reads, the push configs (one sent along), the news, the
//!   running turns, the background count and the stream places;
//! - `TaskReads` (`reads`): `GetTask` and `ListTasks`, over the store and the clock;
//! - `Cancels` (`cancel`): `CancelTask` and other instances' cancel requests, over the reads,
//!   the store, the backend, the running turns, the news, the turn locks and the cancel seam;
//! - `Subscriptions` (`subscriptions`): `SubscribeToTask`, over the task events, the reads, the
//!   stream places and the background count;
//! - `PushConfigs` (`push`): the push-notification config methods, over the push engine;
//! - `ExtendedCards` (here): `GetExtendedAgentCard`'s signed cards;
//! - `Recovery` (`recovery`): tasks left working failed as interrupted, over the store, the
//!   clock, the task events and the ownership;
//! - shared by several: `TaskNews` (`news`: a stored state's events and push wake-ups),
//!   `RunningTurns` (`cancel`: the turns a peer may cancel), `Background` (`recovery`: the
//!   turns a shutdown waits for), `StreamPlaces` (`stream`: each peer's open streams).
//!
//! `message` reads a peer's message as the backend reads it; `build` puts the parts together.

mod build;
mod cancel;
mod kept;
mod message;
mod news;
mod push;
mod reads;
mod recovery;
mod stream;
mod subscriptions;
mod turn;
mod turn_run;
mod turn_task;

pub use build::AgentBuilder;

pub use crate::a2a::events::{BUFFERED_BYTES, EventStream, StreamEvent, StreamRefused};

use crate::a2a::service::{A2aService, Caller, SignedCard};
use crate::admin::budget::Budgets;
use crate::backend::ModelBackend;
use crate::clock::{Clock, Timestamp};
use crate::layers::auth::AuthenticatedPeer;
use crate::layers::metrics::Metrics;
use crate::locks::ReadWriteLocked;
use crate::protocol::error::A2aError;
use crate::protocol::jsonrpc::Method;
use crate::protocol::types::{self as a2a, CancelTaskRequest};
use crate::shared::events::{LocalTaskEvents, TaskEvents};
use crate::shared::ownership::{SingleInstance, TaskOwnership};
use crate::shared::turns::{LocalTurnLocks, TurnLocks};
use crate::store::TaskStore;
use serde_json::value::RawValue;
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
    /// A model backend refuses a message with parts it does not read (`tasks.unread_parts =
    /// "refuse"`), instead of answering what it read and saying which it did not.
    pub refuse_unread_parts: bool,
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

/// The A2A agent: its parts, and what it answers for itself (which operations are offered,
/// the backend, where task events are heard).
pub struct Agent {
    /// What `offered` reads, and what the agent shows of itself.
    settings: AgentSettings,
    backend: Arc<dyn ModelBackend>,
    /// Told of every stored state; whether push notifications are on.
    news: news::TaskNews,
    turns: Arc<turn::Turns>,
    /// Reading the caller's tasks.
    reads: reads::TaskReads,
    cancels: cancel::Cancels,
    subscriptions: Arc<subscriptions::Subscriptions>,
    /// The push-notification config methods.
    push_configs: push::PushConfigs,
    /// The extended cards a caller may be given; replaced whole by a policy reload.
    cards: std::sync::RwLock<Arc<ExtendedCards>>,
    recovery: recovery::Recovery,
    /// Turns running without a request waiting on them, so a shutdown can let them store
    /// their answers before the store closes.
    background: recovery::Background,
}

/// The agent's part that answers `GetExtendedAgentCard`: the signed extended card, and the one
/// for a peer signed in with a token of an identity provider the public card does not list, by
/// the provider's name.
pub struct ExtendedCards {
    /// The extended card, signed, as served.
    pub extended: Box<RawValue>,
    /// By identity provider name.
    pub by_issuer: std::collections::HashMap<String, Box<RawValue>>,
    /// Narrowed to a limited peer's operations, made when asked.
    pub peer_cards: Arc<crate::a2a::peer_card::PeerCards>,
}

impl Default for ExtendedCards {
    fn default() -> Self {
        Self {
            extended: RawValue::from_string("{}".to_owned()).unwrap_or_default(),
            by_issuer: std::collections::HashMap::new(),
            peer_cards: Arc::new(crate::a2a::peer_card::PeerCards::new(
                serde_json::json!({}),
                std::collections::HashMap::new(),
                Vec::new(),
                None,
            )),
        }
    }
}

impl ExtendedCards {
    /// The card `peer` gets: narrowed to its operations when its administrator limited them.
    fn for_peer(&self, peer: &AuthenticatedPeer) -> Box<RawValue> {
        if let Some(operations) = peer.operations()
            && let Some(narrowed) = self.peer_cards.for_peer(peer.issuer(), operations)
            && let Ok(raw) = RawValue::from_string(narrowed.to_string())
        {
            return raw;
        }
        peer.issuer()
            .and_then(|issuer| self.by_issuer.get(issuer))
            .unwrap_or(&self.extended)
            .clone()
    }
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
    /// An agent over `store` answering with `backend`, within the owners' `budgets`: built
    /// ([`AgentBuilder::build`]) once what it shares is given.
    pub fn builder(
        store: Arc<dyn TaskStore>,
        backend: Arc<dyn ModelBackend>,
        budgets: Arc<Budgets>,
        metrics: Arc<Metrics>,
        clock: Arc<dyn Clock>,
        settings: AgentSettings,
    ) -> AgentBuilder {
        AgentBuilder::new(store, backend, budgets, metrics, clock, settings)
    }

    /// Answers `GetExtendedAgentCard` with `cards` from the next call on (a policy reload).
    pub fn replace_extended_cards(&self, cards: ExtendedCards) {
        *self.cards.write_locked() = Arc::new(cards);
    }

    /// The backend it asks (readiness probes it).
    pub fn backend(&self) -> Arc<dyn ModelBackend> {
        self.backend.clone()
    }

    /// Where this agent's task events are heard.
    pub fn task_events(&self) -> Arc<dyn TaskEvents> {
        self.news.events().clone()
    }

    /// Listens for other instances' cancel requests, stopping the turns this instance answers.
    pub fn hear_cancels(&self) {
        self.cancels.hear_cancels();
    }

    /// Waits at most `within` for the turns running in the background to store their answers
    /// (a shutdown calls this before closing the store).
    pub async fn settle(&self, within: Duration) {
        self.background.settle(within).await;
    }

    /// Marks tasks left working as failed (interrupted): all of them at start-up (`None`,
    /// before serving), or those created before `created_before` while serving, unless a live
    /// instance answers them. Returns how many there were.
    pub async fn fail_interrupted_tasks(
        &self,
        created_before: Option<Timestamp>,
    ) -> Result<usize, crate::store::StoreError> {
        self.recovery.fail_interrupted_tasks(created_before).await
    }

    /// Fails (interrupted) the working tasks of instances whose lease lapsed, whatever their
    /// age. Returns how many there were.
    pub async fn fail_tasks_of_gone_instances(&self) -> Result<usize, crate::store::StoreError> {
        self.recovery.fail_tasks_of_gone_instances().await
    }

    /// Whether `method` is served here at all, asked before its request is read: an operation
    /// the policy leaves off is refused the same way whatever the request says.
    pub fn offered(&self, method: Method) -> Result<(), A2aError> {
        match method {
            Method::SendStreamingMessage if !self.settings.streaming => {
                Err(A2aError::UnsupportedOperation(
                    "streaming is off (capabilities.streaming is false): send the message with SendMessage",
                ))
            }
            Method::SubscribeToTask
                if !(self.settings.streaming && self.settings.subscriptions) =>
            {
                Err(A2aError::UnsupportedOperation(
                    "task subscriptions are off (capabilities.subscriptions is false): follow the task with GetTask",
                ))
            }
            // Each answers -32003 while push notifications are off.
            Method::CreatePushConfig
            | Method::GetPushConfig
            | Method::ListPushConfigs
            | Method::DeletePushConfig
                if !self.news.notifies() =>
            {
                Err(A2aError::PushNotificationNotSupported)
            }
            _ => Ok(()),
        }
    }
}

#[async_trait::async_trait]
impl A2aService for Arc<Agent> {
    fn offered(&self, method: Method) -> Result<(), A2aError> {
        Agent::offered(self, method)
    }

    async fn send_message(
        &self,
        caller: &Caller,
        request: a2a::SendMessageRequest,
    ) -> Result<a2a::SendMessageResponse, A2aError> {
        self.turns.send_message(caller, request).await
    }

    async fn send_streaming_message(
        &self,
        caller: &Caller,
        request: a2a::SendMessageRequest,
    ) -> Result<EventStream, StreamRefused> {
        self.turns.send_streaming(caller, request).await
    }

    async fn get_task(
        &self,
        caller: &Caller,
        request: a2a::GetTaskRequest,
    ) -> Result<a2a::StoredTask, A2aError> {
        self.reads.get_task(&caller.peer, request).await
    }

    async fn list_tasks(
        &self,
        caller: &Caller,
        request: a2a::ListTasksRequest,
    ) -> Result<a2a::ListTasksResponse, A2aError> {
        self.reads.list_tasks(&caller.peer, request).await
    }

    async fn cancel_task(
        &self,
        caller: &Caller,
        request: CancelTaskRequest,
    ) -> Result<a2a::StoredTask, A2aError> {
        self.cancels.cancel_task(caller, request).await
    }

    async fn subscribe_to_task(
        &self,
        caller: &Caller,
        request: a2a::SubscribeToTaskRequest,
    ) -> Result<EventStream, StreamRefused> {
        self.subscriptions
            .subscribe_to_task(&caller.peer, request)
            .await
    }

    async fn create_push_config(
        &self,
        caller: &Caller,
        request: a2a::PushConfigParams,
    ) -> Result<a2a::TaskPushNotificationConfig, A2aError> {
        self.push_configs
            .create_push_config(&caller.peer, request)
            .await
    }

    async fn get_push_config(
        &self,
        caller: &Caller,
        request: a2a::PushConfigRef,
    ) -> Result<a2a::TaskPushNotificationConfig, A2aError> {
        self.push_configs
            .get_push_config(&caller.peer, request)
            .await
    }

    async fn list_push_configs(
        &self,
        caller: &Caller,
        request: a2a::PushConfigRef,
    ) -> Result<a2a::ListTaskPushNotificationConfigsResponse, A2aError> {
        self.push_configs
            .list_push_configs(&caller.peer, request)
            .await
    }

    async fn delete_push_config(
        &self,
        caller: &Caller,
        request: a2a::PushConfigRef,
    ) -> Result<(), A2aError> {
        self.push_configs
            .delete_push_config(&caller.peer, request)
            .await
    }

    async fn get_extended_agent_card(&self, caller: &Caller) -> Result<SignedCard, A2aError> {
        let cards = self.cards.read_locked().clone();
        Ok(SignedCard(cards.for_peer(&caller.peer)))
    }
}

/// A fresh id for a task or a context: a UUIDv7, random but ordered by time, so the store's
/// indexes grow at their ends instead of touching a random page per insert.
fn new_id() -> String {
    uuid::Uuid::now_v7().to_string()
}

fn invalid(field: &str, description: &str) -> A2aError {
    A2aError::InvalidParams {
        field: field.to_owned(),
        description: description.to_owned(),
    }
}

fn checked_history_length(n: i64, field: &str) -> Result<usize, A2aError> {
    usize::try_from(n).map_err(|_| invalid(field, "must not be negative"))
}

/// The store could not take the task before the model call: logged under a request id.
fn store_unavailable(error: impl std::fmt::Display) -> A2aError {
    let request_id = crate::protocol::request_id::RequestId::current_or_new();
    tracing::error!(request_id = %request_id, error = %error, "cannot record a task; the model was not asked");
    A2aError::StoreUnavailable { request_id }
}

/// Logs the detail under a fresh request id and answers with that id only.
fn internal(error: impl std::fmt::Display) -> A2aError {
    A2aError::internal(&error, "internal error")
}

#[cfg(test)]
mod tests;

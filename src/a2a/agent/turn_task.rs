//! The task a turn writes: the turn's plan, each state built from it, a waiting task
//! continued (each stored state is told through [`super::news`]).

use super::message::UnreadPart;
use super::turn::Turns;
use super::{internal, invalid};
use crate::admin::budget::SharedReading;
use crate::clock::{Timestamp, later, rfc3339_millis};
use crate::layers::auth::AuthenticatedPeer;
use crate::protocol::error::A2aError;
use crate::protocol::ids::{ContextId, MessageId, TaskId};
use crate::protocol::types::{
    self as a2a, Artifact, Message, Role, SendMessageResponse, Task, TaskState, TaskStatus,
};
use crate::shared::turns::{LockSaid, PreparedTurn, SpendingAfter};
use crate::store::{AuditEntry, ConversationMessage, Exchange};
use std::sync::Arc;

impl Turns {
    /// A message naming a `taskId`: only a task waiting for the peer (an agent behind the door
    /// asked for input) goes on; any other is refused, in a way that does not reveal other
    /// peers' tasks.
    pub(super) async fn continued_task(
        &self,
        peer: &AuthenticatedPeer,
        task_id: &TaskId,
        context_id: Option<&ContextId>,
    ) -> Result<ContinuedTask, A2aError> {
        let task = self.reads.load_task(peer, task_id).await?;
        if context_id.is_some_and(|c| task.context_id != *c) {
            return Err(invalid(
                "message.contextId",
                "does not match the task's contextId",
            ));
        }
        if task.status.state == TaskState::Working {
            return Err(A2aError::UnsupportedOperation(
                "the task is still being answered; wait for its answer, then send a new message without taskId (and with the same contextId)",
            ));
        }
        if !task.status.state.is_interrupted() {
            return Err(A2aError::UnsupportedOperation(
                "the task is already in a terminal state; send a new message without taskId (and with the same contextId) to continue the conversation",
            ));
        }
        let upstream_task_id = self
            .store
            .upstream_task(peer.id(), task_id)
            .await
            .map_err(internal)?;
        Ok(ContinuedTask {
            context_id: task.context_id,
            continuation: Continuation {
                upstream_task_id,
                earlier: task.history,
            },
        })
    }

    /// A turn continuing a task, once it holds the context: the task must still be waiting
    /// (another message may have answered it meanwhile), and its history and the agent's task
    /// are read again, as they are now.
    pub(super) async fn still_waiting(&self, turn: &mut TurnPlan) -> Result<(), A2aError> {
        if turn.continues.is_none() {
            return Ok(());
        }
        let continued = self
            .continued_task(&turn.peer, &turn.task_id, Some(&turn.context_id))
            .await
            .map_err(|_| {
                A2aError::UnsupportedOperation(
                    "another message answered the task first; read it with GetTask",
                )
            })?;
        turn.continues = Some(continued.continuation);
        Ok(())
    }

    /// A message refused by its owner's budget: a rejected task. A message continuing a task
    /// rejects that task, under the context's turn, and the agent's task is canceled (nobody
    /// will answer it now).
    pub(super) async fn refuse(
        &self,
        turn: &mut TurnPlan,
        refusal: Outcome,
        admitted: AdmittedTurn,
    ) -> Result<a2a::StoredTask, A2aError> {
        if turn.continues.is_none() {
            return self.finish(turn, refusal, None).await;
        }
        let _held = self.begin_admitted_turn(turn, admitted).await?;
        self.still_waiting(turn).await?;
        let agent_task = turn
            .continues
            .as_ref()
            .and_then(|c| c.upstream_task_id.clone());
        self.cancel_agent_task(turn, agent_task.as_deref()).await;
        self.finish(turn, refusal, None).await
    }
}

/// The task for one message: the peer's message as `asked` and the agent's reply in its
/// history, and the reply as an artifact when the model answered.
#[allow(clippy::too_many_arguments)]
pub(super) fn new_task(
    task_id: &TaskId,
    context_id: &ContextId,
    message_id: &MessageId,
    asked: Vec<a2a::Part>,
    state: TaskState,
    reply: Vec<a2a::Part>,
    now: Timestamp,
) -> Task {
    let message_for = |role: Role, message_id: MessageId, parts: Vec<a2a::Part>| Message {
        message_id,
        context_id: context_id.clone(),
        task_id: task_id.clone(),
        role,
        parts,
    };
    let user_message = message_for(Role::User, message_id.clone(), asked);
    let agent_message = message_for(Role::Agent, MessageId::new_random(), reply);
    let artifacts = match state {
        TaskState::Completed => vec![Artifact {
            artifact_id: uuid::Uuid::new_v4().to_string(),
            name: Some("answer".to_owned()),
            description: None,
            parts: agent_message.parts.clone(),
            metadata: None,
        }],
        _ => Vec::new(),
    };
    Task {
        id: task_id.clone(),
        context_id: context_id.clone(),
        status: TaskStatus {
            state,
            message: agent_message.clone(),
            timestamp: rfc3339_millis(now),
        },
        artifacts,
        history: vec![user_message, agent_message],
        metadata: None,
    }
}

/// `{"task": …}` with at most `history_length` history messages.
pub(super) fn task_answer(
    stored: a2a::StoredTask,
    history_length: Option<usize>,
) -> Result<SendMessageResponse, A2aError> {
    let stored = stored.with_history(history_length).map_err(internal)?;
    Ok(SendMessageResponse::Task(stored))
}

/// One message's turn: what every stored copy of its task shares.
pub(super) struct TurnPlan {
    pub(super) peer: AuthenticatedPeer,
    pub(super) task_id: TaskId,
    /// A push-notification config sent with the message, stored with the task's first state.
    pub(super) push_config: Option<crate::store::PushConfigRecord>,
    pub(super) context_id: ContextId,
    pub(super) message_id: MessageId,
    /// The peer's readable text, as a model gets it.
    pub(super) text: String,
    /// The peer's message as the backend gets it (every part for an agent, the text for a
    /// model), and as the task's history shows it.
    pub(super) parts: Vec<a2a::Part>,
    /// Every part of the message as the conversation keeps it ([`super::kept`]).
    pub(super) kept: String,
    /// What came with the message besides its parts, and what of it the backend does not read.
    pub(super) sent: SentAlong,
    /// The task waiting for the peer that this message answers.
    pub(super) continues: Option<Continuation>,
    pub(super) instance: Arc<str>,
    /// Where the turn's spending goes to reach the shared counters with its release (`None`:
    /// added on its own).
    pub(super) spending: Option<SpendingAfter>,
    /// The call's span, when traces are exported: the store's writes and the backend's call
    /// are its children.
    pub(super) trace: Option<Arc<crate::telemetry::CallSpan>>,
    /// What the access log writes of the request, when it is on.
    pub(super) note: Option<Arc<crate::layers::access_log::AccessNote>>,
    /// How the task is sealed once finished, when it gets a receipt.
    pub(super) sealing: Option<crate::a2a::receipts::Sealing>,
    /// The caller's address, when the listener knows it (the audit log names it).
    pub(super) client: Option<std::net::IpAddr>,
}

/// What came with a peer's message besides its parts: relayed to an agent as sent; for a
/// model, the parts it does not read, named in the task's metadata.
#[derive(Debug, Default)]
pub(super) struct SentAlong {
    /// The request's `metadata`.
    pub(super) request_metadata: Option<serde_json::Value>,
    /// The message's `metadata`.
    pub(super) message_metadata: Option<serde_json::Value>,
    /// The message's `extensions`.
    pub(super) extensions: Vec<String>,
    /// The parts the backend does not read.
    pub(super) unread: Vec<UnreadPart>,
    /// The content guard's rules that masked some of the message before the backend read it.
    pub(super) masked_by: Vec<String>,
}

impl SentAlong {
    /// `{"peergate": {"unreadParts": [{"index", "content"}…], "maskedBy": [rule…]}}`, each
    /// when there is one: a part not read (`content` the part's content member: `raw`, `url`,
    /// or `file` for 0.3's), and the content guard's rules that masked some of the message
    /// (so nothing a partner sent is changed without a word).
    fn task_metadata(&self) -> Option<serde_json::Value> {
        let mut said = serde_json::Map::new();
        if !self.unread.is_empty() {
            let unread: Vec<serde_json::Value> = (self.unread.iter())
                .map(|part| serde_json::json!({"index": part.index, "content": part.kind}))
                .collect();
            said.insert("unreadParts".into(), unread.into());
        }
        if !self.masked_by.is_empty() {
            said.insert("maskedBy".into(), self.masked_by.clone().into());
        }
        (!said.is_empty()).then(|| serde_json::json!({"peergate": said}))
    }
}

/// What a message's admission asked and holds (see [`Turns::admit_turn`]); dropped unused, it
/// lets go of the turn it prepared.
#[derive(Debug)]
pub(super) struct AdmittedTurn {
    /// The context named for a message that names none.
    pub(super) fresh_context: Option<ContextId>,
    /// The context whose turn was prepared and its lock asked.
    pub(super) context: Option<ContextId>,
    pub(super) prepared: PreparedTurn,
    pub(super) said: LockSaid,
    pub(super) reading: SharedReading,
}

impl Default for AdmittedTurn {
    /// Nothing asked: each check asks on its own.
    fn default() -> Self {
        Self {
            fresh_context: None,
            context: None,
            prepared: PreparedTurn::default(),
            said: LockSaid::NotAsked,
            reading: SharedReading::NotRead,
        }
    }
}

/// A task waiting for the peer's input, which a message naming it continues.
pub(super) struct Continuation {
    /// The agent's own id of the task.
    pub(super) upstream_task_id: Option<String>,
    /// The task's history so far.
    pub(super) earlier: Vec<Message>,
}

/// What a message naming a task waiting for input continues.
pub(super) struct ContinuedTask {
    pub(super) context_id: ContextId,
    pub(super) continuation: Continuation,
}

impl TurnPlan {
    /// The agent's own id of this turn's task, for the access log and the call's span.
    pub(super) fn note_agent_task(&self, agent_task: &str) {
        if let Some(note) = &self.note {
            note.agent_task(agent_task);
        }
        if let Some(trace) = &self.trace {
            let id = agent_task.to_owned();
            trace.note([opentelemetry::KeyValue::new(
                crate::telemetry::conventions::UPSTREAM_TASK_ID,
                id,
            )]);
        }
    }

    /// A child span of the call's, when traces are exported.
    pub(super) fn child_span(
        &self,
        name: &'static str,
        kind: opentelemetry::trace::SpanKind,
        attributes: Vec<opentelemetry::KeyValue>,
    ) -> Option<crate::telemetry::call_span::ChildSpan> {
        let trace = self.trace.as_ref()?;
        Some(trace.child(name.to_owned(), kind, attributes))
    }

    /// The task in `state` with the agent's `reply`, its status as of `now`.
    pub(super) fn task(&self, state: TaskState, reply: &str, now: Timestamp) -> Task {
        self.task_with(state, vec![a2a::Part::text(reply)], None, now)
    }

    /// The task in `state` with the agent's message `parts` and, when given, `artifacts` (else
    /// the message as the answer's artifact once completed).
    pub(super) fn task_with(
        &self,
        state: TaskState,
        parts: Vec<a2a::Part>,
        artifacts: Option<Vec<Artifact>>,
        now: Timestamp,
    ) -> Task {
        let mut task = new_task(
            &self.task_id,
            &self.context_id,
            &self.message_id,
            self.parts.clone(),
            state,
            parts,
            now,
        );
        if let Some(artifacts) = artifacts {
            task.artifacts = artifacts;
        }
        task.metadata = self.sent.task_metadata();
        if let Some(continuation) = &self.continues {
            let mut history = continuation.earlier.clone();
            history.append(&mut task.history);
            task.history = history;
        }
        task
    }

    /// The task as the store keeps it, as of `now` (the same instant as its status, so
    /// ListTasks orders by the time clients see); what the turn adds is filled in by the caller.
    pub(super) fn exchange(
        &self,
        turns: &Turns,
        state: TaskState,
        task_json: String,
        now: Timestamp,
    ) -> Exchange {
        Exchange {
            task_id: self.task_id.clone(),
            peer_id: self.peer.id().clone(),
            context_id: self.context_id.clone(),
            state,
            task_json,
            now,
            expires_at: later(now, turns.settings.task_retention),
            messages: Vec::new(),
            usage: None,
            audit: None,
            instance: Some(self.instance.clone()),
            notify: turns.news.notifies(),
            push_config: None,
            upstream_task_id: None,
            receipt: None,
            call_trace: self.trace.as_ref().and_then(|trace| trace.traceparent()),
            sealing: None,
        }
    }
}

/// A message read into its turn.
pub(super) struct PlannedTurn {
    pub(super) turn: TurnPlan,
    pub(super) fresh_context: bool,
    pub(super) history_length: Option<usize>,
    pub(super) return_immediately: bool,
}

/// What a turn ended with.
pub(super) struct Outcome {
    pub(super) state: TaskState,
    pub(super) reply: String,
    /// The conversation messages it adds (none unless the model answered).
    pub(super) messages: Vec<ConversationMessage>,
    pub(super) usage: Option<crate::store::ExchangeUsage>,
    pub(super) audit: Option<AuditEntry>,
    /// An agent's answer as it gave it.
    pub(super) agent_reply: Option<crate::backend::AgentReply>,
    /// Whether the content guard withheld the answer: nothing of it may leave, not even a
    /// streamed piece still held back.
    pub(super) withheld: bool,
}

//! `SendMessage`'s turn, its first half: the plan from the message and the refusals before the
//! model (the second half, asking the backend and storing the answer, is `turn_run`). The
//! turn's part, [`Turns`], is here; `turn_task`, `turn_run` and `stream` add to it, so the
//! fields they read are open to the agent's files.

use super::build::Ingredients;
use super::cancel::{Cancelable, RunningTurns};
use super::message::{PartsRead, ReadMessage, check_metadata, incoming};
use super::news::TaskNews;
use super::push::PushConfigs;
use super::reads::TaskReads;
use super::recovery::Background;
use super::stream::StreamPlaces;
use super::turn_task::{AdmittedTurn, Outcome, PlannedTurn, SentAlong, TurnPlan, task_answer};
use super::{checked_history_length, internal, invalid, new_id};
use crate::a2a::service::Caller;
use crate::admin::budget::{Budgets, SharedReading};
use crate::backend::ModelBackend;
use crate::clock::Clock;
use crate::guard::admission::Asked;
use crate::layers::auth::AuthenticatedPeer;
use crate::layers::metrics::Metrics;
use crate::protocol::error::A2aError;
use crate::protocol::ids::{ContextId, TaskId};
use crate::protocol::types::{self as a2a, SendMessageRequest, SendMessageResponse, TaskState};
use crate::shared::admission::LockAnswer;
use crate::shared::ownership::TaskOwnership;
use crate::shared::turns::{LockSaid, PreparedTurn, TurnLocks};
use crate::store::{AuditEntry, TaskStore};
use std::net::IpAddr;
use std::sync::Arc;
use std::time::Duration;

/// What a turn needs from the policy (each as in [`super::AgentSettings`]).
#[derive(Debug, Clone)]
pub(super) struct TurnSettings {
    pub(super) instructions: String,
    pub(super) task_retention: Duration,
    pub(super) context_messages: u32,
    pub(super) max_text_bytes: usize,
    pub(super) refuse_unread_parts: bool,
    pub(super) backend_timeout: Duration,
    pub(super) non_blocking: bool,
    pub(super) cancel_running: bool,
}

/// The agent's part that answers messages (`SendMessage`, `SendStreamingMessage`): the store,
/// the backend, the owners' budgets, the metrics and the clock; the contexts' turn locks and
/// which instance this is; the task reads and the push configs sent along; what is told of
/// each stored state; the turns a peer may cancel, the background count and the stream places.
pub(super) struct Turns {
    pub(super) store: Arc<dyn TaskStore>,
    pub(super) backend: Arc<dyn ModelBackend>,
    pub(super) budgets: Arc<Budgets>,
    pub(super) metrics: Arc<Metrics>,
    pub(super) clock: Arc<dyn Clock>,
    pub(super) settings: TurnSettings,
    locks: Arc<dyn TurnLocks>,
    ownership: Arc<dyn TaskOwnership>,
    pub(super) reads: TaskReads,
    push_configs: PushConfigs,
    pub(super) news: TaskNews,
    running: RunningTurns,
    pub(super) background: Background,
    pub(super) places: StreamPlaces,
    /// Seals finished tasks, when receipts are on.
    pub(super) receipts: Option<Arc<crate::a2a::receipts::Receipts>>,
    /// Inspects answers, when the content guard has outbound rules.
    pub(super) content: Option<Arc<crate::a2a::inspect::ContentGuard>>,
}

impl Turns {
    pub(super) fn new(from: &Ingredients) -> Self {
        let settings = &from.settings;
        Self {
            store: from.store.clone(),
            backend: from.backend.clone(),
            budgets: from.budgets.clone(),
            metrics: from.metrics.clone(),
            clock: from.clock.clone(),
            settings: TurnSettings {
                instructions: settings.instructions.clone(),
                task_retention: settings.task_retention,
                context_messages: settings.context_messages,
                max_text_bytes: settings.max_text_bytes,
                refuse_unread_parts: settings.refuse_unread_parts,
                backend_timeout: settings.backend_timeout,
                non_blocking: settings.non_blocking,
                cancel_running: settings.cancel_running,
            },
            locks: from.shared.turns.clone(),
            ownership: from.shared.ownership.clone(),
            reads: from.reads.clone(),
            push_configs: from.push_configs.clone(),
            news: from.news.clone(),
            running: from.running.clone(),
            background: from.background.clone(),
            places: from.places.clone(),
            receipts: from.receipts.clone(),
            content: (from.content.clone())
                .filter(|c| c.inspects(crate::content::Direction::Outbound)),
        }
    }

    pub(super) async fn send_message(
        self: &Arc<Self>,
        caller: &Caller,
        params: SendMessageRequest,
    ) -> Result<SendMessageResponse, A2aError> {
        let (peer, client) = (&caller.peer, caller.client);
        let mut admitted = self.admit_turn(caller, &params.message, true).await?;
        let planned = self
            .plan(caller, params, admitted.fresh_context.clone())
            .await?;
        let (mut turn, history_length) = (planned.turn, planned.history_length);
        let return_immediately = planned.return_immediately;
        if return_immediately && !self.settings.non_blocking {
            return Err(A2aError::UnsupportedOperation(
                "non-blocking sends are off (capabilities.non_blocking is false): send without configuration.returnImmediately",
            ));
        }
        let reading = std::mem::replace(&mut admitted.reading, SharedReading::NotRead);
        if let Some(refusal) = self.refusal(peer, client, reading).await? {
            let task = self.refuse(&mut turn, refusal, admitted).await?;
            return task_answer(task, history_length);
        }
        let held = self.begin_admitted_turn(&mut turn, admitted).await?;
        self.still_waiting(&mut turn).await?;
        let (prompt, unfinished, working_json) =
            self.store_working(&turn, planned.fresh_context).await?;
        let (cancel, cancelable) = self.running_turn(&turn);
        if !return_immediately {
            let outcome = self.run_model(&turn, &prompt, cancel, None).await;
            // A receipt rides on a task: a sealed turn answers the task even when the agent
            // answered with a message.
            let as_message = turn.sealing.is_none()
                && (outcome.agent_reply.as_ref()).is_some_and(|reply| reply.as_message);
            let answer = self.finish(&turn, outcome, Some(unfinished)).await;
            drop(cancelable);
            drop(held);
            return match (answer, as_message) {
                (Ok(stored), true) => Ok(SendMessageResponse::Message(stored.task.status.message)),
                (Ok(stored), false) => task_answer(stored, history_length),
                (Err(error), _) => Err(error),
            };
        }
        // The working task is the answer; the turn goes on without the request, holding the
        // context's turn until its final state is stored.
        let turns = self.clone();
        let counted = self.background.turn();
        crate::protocol::request_id::RequestId::spawn(async move {
            let outcome = turns.run_model(&turn, &prompt, cancel, None).await;
            if let Err(e) = turns.finish(&turn, outcome, Some(unfinished)).await {
                tracing::warn!(task_id = %turn.task_id, error = ?e, "a non-blocking turn could not store its answer");
            }
            drop(cancelable);
            drop(held);
            drop(counted);
        });
        let working = a2a::StoredTask::read(&working_json).map_err(internal)?;
        task_answer(working, history_length)
    }

    /// A message's admission, before anything else is done for it: the request's shared checks
    /// (its limits), its owner's and its own budget counters and its context's turn lock, in
    /// one call (see [`crate::guard::admission`]). A message that names no context gets its
    /// new one here, so that its lock can be asked too; one that names only its task learns
    /// its context from the store, and its lock is asked on its own once it does.
    pub(super) async fn admit_turn(
        &self,
        caller: &Caller,
        message: &a2a::IncomingMessage,
        with_lock: bool,
    ) -> Result<AdmittedTurn, A2aError> {
        let peer = &caller.peer;
        let Some(admission) = &caller.admission else {
            return Ok(AdmittedTurn::default());
        };
        let fresh_context = (message.context_id.is_none() && message.task_id.is_none())
            .then(|| ContextId::from(new_id()));
        let context = match &message.context_id {
            Some(named) if a2a::is_valid_context_id(named) => Some(named.clone()),
            Some(_) => None,
            None => fresh_context.clone(),
        };
        let prepared = match &context {
            Some(context) if with_lock => self.locks.prepare_turn(peer.id(), context),
            _ => PreparedTurn::default(),
        };
        let spend = self
            .budgets
            .ask(peer.owner_id(), peer.id())
            .await
            .map_err(internal)?;
        let read_day = spend.as_ref().map(|spend| spend.day);
        let lock_asked = prepared.ask.is_some();
        let settled = match caller.admit(spend, prepared.ask.clone()).await {
            Ok(settled) => settled,
            Err(refused) => {
                // Refused before anything else was done: the lock is released only if a call
                // that went unanswered may have taken it.
                if admission.last_asked() != Asked::Unanswered {
                    prepared.not_taken();
                }
                return Err(refused);
            }
        };
        let said = match (lock_asked, settled.asked, settled.lock) {
            (false, ..) => LockSaid::NotAsked,
            (true, Asked::Answered, Some(answer)) => LockSaid::Answered(answer),
            (true, Asked::Unanswered, _) => LockSaid::Unanswered { sent: true },
            (true, ..) => LockSaid::Unanswered { sent: false },
        };
        if matches!(
            said,
            LockSaid::Answered(LockAnswer::Held | LockAnswer::NotTried)
        ) {
            prepared.not_taken();
        }
        let reading = match (read_day, settled.asked, settled.counters) {
            (None, ..) => SharedReading::NotRead,
            (Some(day), Asked::Answered, Some(counters)) => SharedReading::Read { counters, day },
            (Some(_), ..) => SharedReading::Unavailable,
        };
        Ok(AdmittedTurn {
            fresh_context,
            context: context.filter(|_| lock_asked),
            prepared,
            said,
            reading,
        })
    }

    /// The turn an admission prepared, once this process's turn and the shared lock are held
    /// (asked on their own when the admission could not ask for them).
    pub(super) async fn begin_admitted_turn(
        &self,
        turn: &mut TurnPlan,
        admitted: AdmittedTurn,
    ) -> Result<crate::shared::turns::Turn, A2aError> {
        let wait = self.turn_wait();
        let held = if admitted.context.as_ref() == Some(&turn.context_id) {
            self.locks
                .begin_prepared_turn(
                    admitted.prepared,
                    admitted.said,
                    turn.peer.id(),
                    &turn.context_id,
                    wait,
                )
                .await
        } else {
            drop(admitted);
            self.locks
                .begin_turn(turn.peer.id(), &turn.context_id, wait)
                .await
        };
        let held = held.ok_or(A2aError::ContextBusy)?;
        turn.spending = held.spending().cloned();
        Ok(held)
    }

    /// Reads a message into the turn it asks for: checked, and not yet stored. A message that
    /// names no context gets `fresh_context` when given (named at its admission).
    pub(super) async fn plan(
        &self,
        caller: &Caller,
        params: SendMessageRequest,
        fresh_context: Option<ContextId>,
    ) -> Result<PlannedTurn, A2aError> {
        let peer = &caller.peer;
        if let Some(id) = params.misplaced_id() {
            return Err(invalid(
                id,
                &format!("belongs inside the message: send it as params.message.{id}"),
            ));
        }
        let (message, as_received) = (params.message, params.as_received);
        let configuration = params.configuration.unwrap_or_default();
        let history_length = configuration
            .history_length
            .map(|n| checked_history_length(n, "configuration.historyLength"))
            .transpose()?;
        let (read, sent) = self.read(caller, &message, (params.metadata, params.masked_by))?;
        let (text, parts, context_id, kept) = (read.text, read.parts, read.context_id, read.kept);
        let sealing = self.sealing(caller, (&message, as_received.as_ref()))?;
        if let Some(task_id) = &message.task_id {
            let continued = self
                .continued_task(peer, task_id, message.context_id.as_ref())
                .await?;
            return Ok(PlannedTurn {
                fresh_context: false,
                turn: TurnPlan {
                    peer: peer.clone(),
                    task_id: task_id.clone(),
                    push_config: None,
                    context_id: continued.context_id,
                    message_id: message.message_id,
                    text,
                    parts,
                    kept,
                    sent,
                    continues: Some(continued.continuation),
                    instance: self.ownership.instance().into(),
                    spending: None,
                    trace: caller.trace.clone(),
                    note: caller.note.clone(),
                    client: caller.client,
                    sealing,
                },
                history_length,
                return_immediately: configuration.return_immediately.unwrap_or(false),
            });
        }
        let task_id = new_id();
        let push_config = match configuration.push_config {
            Some(config) => Some(
                self.push_configs
                    .inline_push_config(peer, &task_id, config)
                    .await?,
            ),
            None => None,
        };
        Ok(PlannedTurn {
            fresh_context: message.context_id.is_none(),
            turn: TurnPlan {
                peer: peer.clone(),
                task_id: TaskId::from(task_id),
                push_config,
                context_id: context_id
                    .or(fresh_context)
                    .unwrap_or_else(|| ContextId::from(new_id())),
                message_id: message.message_id,
                text,
                parts,
                kept,
                sent,
                continues: None,
                instance: self.ownership.instance().into(),
                spending: None,
                trace: caller.trace.clone(),
                note: caller.note.clone(),
                client: caller.client,
                sealing,
            },
            history_length,
            return_immediately: configuration.return_immediately.unwrap_or(false),
        })
    }

    /// How this call's task is sealed once finished, when it gets a receipt.
    fn sealing(
        &self,
        caller: &Caller,
        message: (&a2a::IncomingMessage, Option<&serde_json::Value>),
    ) -> Result<Option<crate::a2a::receipts::Sealing>, A2aError> {
        let Some(receipts) = &self.receipts else {
            return Ok(None);
        };
        // A receipt states the binding and method as facts: never a guess.
        let Some(call) = caller.call else {
            return Err(internal("a call reached its turn without its binding"));
        };
        receipts.for_call(
            (call.binding, call.method.name()),
            &caller.protocol.activated,
            message,
            self.clock.now(),
        )
    }

    /// Reads `message` as the backend reads it (the caller's note names the parts it does not)
    /// and keeps what goes along with it: the request's metadata, the message's own and its
    /// extensions, and the content rules that masked some of it.
    fn read(
        &self,
        caller: &Caller,
        message: &a2a::IncomingMessage,
        (request_metadata, masked_by): (Option<serde_json::Value>, Vec<String>),
    ) -> Result<(ReadMessage, SentAlong), A2aError> {
        let reading = if self.backend.reads_every_part() {
            PartsRead::Every
        } else {
            PartsRead::Readable {
                refuse_unread: self.settings.refuse_unread_parts,
            }
        };
        check_metadata("metadata", request_metadata.as_ref())?;
        let mut read = incoming(message, reading, self.settings.max_text_bytes)?;
        if let Some(note) = &caller.note {
            note.unread_parts(read.unread.iter().map(|part| (part.kind, part.index)));
        }
        let sent = SentAlong {
            request_metadata,
            message_metadata: message.metadata.clone(),
            extensions: message.extensions.clone(),
            unread: std::mem::take(&mut read.unread),
            masked_by,
        };
        Ok((read, sent))
    }

    /// The turn runs as the peer's owner: their switch and budget decide before the model is
    /// asked. `Some` is the rejected outcome.
    pub(super) async fn refusal(
        &self,
        peer: &AuthenticatedPeer,
        client: Option<IpAddr>,
        reading: SharedReading,
    ) -> Result<Option<Outcome>, A2aError> {
        let refusal = self
            .budgets
            .check_read(peer.owner_id(), peer.id(), reading)
            .await
            .map_err(internal)?
            .err();
        Ok(refusal.map(|refusal| self.refused_by_quota(peer, client, &refusal)))
    }

    /// How long a message waits for its context's turn: long enough for one message ahead to
    /// finish (it is bounded by the backend timeout), short enough that a queue does not pile
    /// up behind a stuck model.
    pub(super) fn turn_wait(&self) -> Duration {
        self.settings.backend_timeout.mul_f32(1.5)
    }

    /// Registers a turn a peer may cancel (no receiver when cancelling running turns is off);
    /// it stays cancelable until the returned guard drops.
    pub(super) fn running_turn(
        &self,
        turn: &TurnPlan,
    ) -> (Option<tokio::sync::oneshot::Receiver<()>>, Cancelable) {
        if !self.settings.cancel_running {
            return (None, Cancelable::default());
        }
        let (canceled, cancelable) = self.running.register(turn.peer.id(), &turn.task_id);
        (Some(canceled), cancelable)
    }

    /// A message refused by its owner's budget: a rejected task and an audit record.
    pub(super) fn refused_by_quota(
        &self,
        peer: &AuthenticatedPeer,
        client: Option<IpAddr>,
        refusal: &crate::admin::budget::BudgetRefusal,
    ) -> Outcome {
        Outcome {
            state: TaskState::Rejected,
            reply: refusal.to_string(),
            messages: Vec::new(),
            usage: None,
            audit: Some(AuditEntry {
                at: self.clock.now(),
                actor: crate::store::AuditActor::Peer(peer.name().to_owned()),
                action: crate::store::AuditAction::PeerRefusedByQuota,
                target: crate::store::AuditTarget::Peer(peer.name().to_owned()),
                outcome: crate::store::AuditOutcome::Refused(refusal.reason().to_string()),
                client: client.map_or_else(|| "unknown".to_owned(), |c| c.to_string()),
                detail: refusal.to_string(),
                owner_id: Some(peer.owner_id().to_owned()),
            }),
            agent_reply: None,
            withheld: false,
        }
    }
}

//! `CancelTask`: a turn answered here is stopped, a waiting task canceled in the store, and a
//! turn another instance answers is asked to stop through the shared seam.

use super::build::Ingredients;
use super::internal;
use super::news::TaskNews;
use super::reads::TaskReads;
use crate::a2a::receipts::Sealing;
use crate::a2a::service::Caller;
use crate::backend::ModelBackend;
use crate::clock::{Clock, later, rfc3339_millis};
use crate::layers::auth::AuthenticatedPeer;
use crate::layers::metrics::{FinalState, Metrics};
use crate::locks::Locked;
use crate::protocol::error::A2aError;
use crate::protocol::ids::{MessageId, TaskId};
use crate::protocol::types::{
    self as a2a, CancelTaskRequest, Message, Role, TaskState, TaskStatus,
};
use crate::shared::cancels::CancelRequests;
use crate::shared::ownership::TaskOwnership;
use crate::shared::turns::TurnLocks;
use crate::store::{Exchange, TaskStore};
use std::sync::Arc;
use std::time::Duration;

/// What cancelling needs from the policy.
#[derive(Debug, Clone)]
struct CancelSettings {
    /// `capabilities.cancel_running`.
    cancel_running: bool,
    /// How long a cancel waits for a turn's final state.
    backend_timeout: Duration,
    /// How long a canceled task stays readable.
    task_retention: Duration,
}

/// The agent's part that cancels: the task reads and the store, the backend (an agent's own
/// task is canceled too), the clock and the metrics, the turns this instance answers, what is
/// told of a stored state, the contexts' turn locks, which instance this is, and the seam that
/// reaches the other instances' turns.
pub(super) struct Cancels {
    reads: TaskReads,
    store: Arc<dyn TaskStore>,
    backend: Arc<dyn ModelBackend>,
    clock: Arc<dyn Clock>,
    metrics: Arc<Metrics>,
    running: RunningTurns,
    news: TaskNews,
    locks: Arc<dyn TurnLocks>,
    ownership: Arc<dyn TaskOwnership>,
    requests: Arc<dyn CancelRequests>,
    settings: CancelSettings,
    /// Seals a waiting task the cancel ends, when receipts are on.
    receipts: Option<Arc<crate::a2a::receipts::Receipts>>,
}

impl Cancels {
    pub(super) fn new(from: &Ingredients) -> Self {
        Self {
            reads: from.reads.clone(),
            store: from.store.clone(),
            backend: from.backend.clone(),
            clock: from.clock.clone(),
            metrics: from.metrics.clone(),
            running: from.running.clone(),
            news: from.news.clone(),
            locks: from.shared.turns.clone(),
            ownership: from.shared.ownership.clone(),
            requests: from.shared.cancels.clone(),
            settings: CancelSettings {
                cancel_running: from.settings.cancel_running,
                backend_timeout: from.settings.backend_timeout,
                task_retention: from.settings.task_retention,
            },
            receipts: from.receipts.clone(),
        }
    }

    /// `CancelTask`: a finished task stays as it is (-32002); a task this instance is still
    /// answering is stopped, stored CANCELED, and answered as stored.
    pub(super) async fn cancel_task(
        &self,
        caller: &Caller,
        params: CancelTaskRequest,
    ) -> Result<a2a::StoredTask, A2aError> {
        let peer = &caller.peer;
        let task = self.reads.load_task(peer, &params.id).await?;
        if task.status.state.is_interrupted() {
            let sealing = self.sealing(caller, &params.id)?;
            return self.cancel_waiting(peer, &params.id, sealing).await;
        }
        if task.status.state != TaskState::Working {
            return Err(A2aError::TaskNotCancelable(
                "it is already in a final state",
            ));
        }
        if !self.settings.cancel_running {
            return Err(A2aError::TaskNotCancelable(
                "cancelling a task being answered is off (capabilities.cancel_running is false); it ends on its own",
            ));
        }
        let cancel = self.running.take_cancel(peer.id(), &params.id);
        let Some(cancel) = cancel else {
            return self.cancel_elsewhere(peer, &params.id).await;
        };
        // Heard before the turn is told, so its final state cannot slip past.
        let mut events = self.news.events().subscribe(peer.id(), &params.id);
        let finished_first = A2aError::TaskNotCancelable(
            "it reached a final state before it could be canceled; read it with GetTask",
        );
        if cancel.send(()).is_err() {
            // The turn ended between the read and the cancel.
            return Err(finished_first);
        }
        let wait = self.settings.backend_timeout;
        let stored = loop {
            match tokio::time::timeout(wait, events.next()).await {
                Ok(Some(event)) if event.state != TaskState::Working => {
                    break event.task_json.to_string();
                }
                Ok(Some(_)) => {}
                // The store has the final state if the turn stored one.
                Ok(None) | Err(_) => break self.reads.load_task_json(peer, &params.id).await?,
            }
        };
        let canceled = a2a::StoredTask::read(&stored).map_err(internal)?;
        if canceled.task.status.state != TaskState::Canceled {
            return Err(finished_first);
        }
        Ok(canceled)
    }

    /// How the cancel of a waiting task is sealed, when receipts are on.
    fn sealing(&self, caller: &Caller, task_id: &TaskId) -> Result<Option<Sealing>, A2aError> {
        let (Some(receipts), Some(call)) = (&self.receipts, caller.call) else {
            return Ok(None);
        };
        receipts.for_cancel(
            (call.binding, &caller.protocol.activated),
            task_id.as_str(),
            self.clock.now(),
        )
    }

    /// A task waiting for the peer (an agent behind the door asked for input): the agent's task
    /// is canceled too, and the task stored CANCELED (with its receipt, when `sealing` says).
    async fn cancel_waiting(
        &self,
        peer: &AuthenticatedPeer,
        task_id: &TaskId,
        sealing: Option<Sealing>,
    ) -> Result<a2a::StoredTask, A2aError> {
        if !self.settings.cancel_running {
            return Err(A2aError::TaskNotCancelable(
                "cancelling is off (capabilities.cancel_running is false); the task waits for its answer until it expires",
            ));
        }
        // Read again holding the context's turn: a message answering the task cannot slip in.
        let context_id = self.reads.load_task(peer, task_id).await?.context_id;
        let wait = self.settings.backend_timeout.mul_f32(1.5);
        let _held = self
            .locks
            .begin_turn(peer.id(), &context_id, wait)
            .await
            .ok_or(A2aError::ContextBusy)?;
        let mut task = self.reads.load_task(peer, task_id).await?;
        if !task.status.state.is_interrupted() {
            return Err(A2aError::TaskNotCancelable(
                "a message answered it first; read it with GetTask",
            ));
        }
        self.cancel_agents_task(peer, task_id).await?;
        let now = self.clock.now();
        task.status = TaskStatus {
            state: TaskState::Canceled,
            message: Message {
                message_id: MessageId::new_random(),
                context_id: task.context_id.clone(),
                task_id: task.id.clone(),
                role: Role::Agent,
                parts: vec![a2a::Part::text(CANCELED_WAITING_TEXT)],
            },
            timestamp: rfc3339_millis(now),
        };
        task.history.push(task.status.message.clone());
        let receipt = match (&self.receipts, &sealing) {
            // Sealed before it is written: the receipt is stored with the state it proves.
            (Some(receipts), Some(sealing)) => {
                receipts.seal(sealing, (peer, None), &mut task, now)?
            }
            _ => None,
        };
        let task_json = serde_json::to_string(&task).map_err(internal)?;
        let heard = self
            .news
            .event(peer, task_id, TaskState::Canceled, &task_json);
        self.store
            .save_exchange(Exchange {
                task_id: task.id.clone(),
                peer_id: peer.id().clone(),
                context_id: task.context_id.clone(),
                state: TaskState::Canceled,
                task_json: task_json.clone(),
                now,
                expires_at: later(now, self.settings.task_retention),
                messages: Vec::new(),
                usage: None,
                audit: None,
                instance: Some(self.ownership.instance().into()),
                notify: self.news.notifies(),
                push_config: None,
                upstream_task_id: None,
                receipt,
                call_trace: None,
                sealing: None,
            })
            .await
            .map_err(internal)?;
        self.news.announce(heard);
        self.metrics.task_finished(FinalState::Canceled);
        a2a::StoredTask::new(task, task_json).map_err(internal)
    }

    /// Cancels the agent's own task behind `task_id`, if an agent behind the door has one
    /// (waiting up to 5 s for it to confirm; logged when it does not).
    async fn cancel_agents_task(
        &self,
        peer: &AuthenticatedPeer,
        task_id: &TaskId,
    ) -> Result<(), A2aError> {
        let agent_task = self
            .store
            .upstream_task(peer.id(), task_id)
            .await
            .map_err(internal)?;
        if let Some(agent_task) = agent_task {
            let caller = self
                .backend
                .asserts_callers()
                .then(|| super::turn_run::caller_of(peer));
            let cancel = self.backend.cancel(&agent_task, caller.as_ref());
            let canceled = tokio::time::timeout(Duration::from_secs(5), cancel).await;
            if !matches!(canceled, Ok(Ok(()))) {
                tracing::warn!(task_id = %task_id, "the agent behind the door did not confirm the cancel");
            }
        }
        Ok(())
    }

    /// A working task this instance is not answering: asks the other instances, then follows
    /// the store (every 200 ms, within the backend timeout) until the task is final.
    async fn cancel_elsewhere(
        &self,
        peer: &AuthenticatedPeer,
        task_id: &TaskId,
    ) -> Result<a2a::StoredTask, A2aError> {
        self.requests.request(peer.id(), task_id);
        let deadline = tokio::time::Instant::now() + self.settings.backend_timeout;
        while tokio::time::Instant::now() < deadline {
            tokio::time::sleep(Duration::from_millis(200)).await;
            let stored = self.reads.load_stored_task(peer, task_id).await?;
            match stored.task.status.state {
                TaskState::Working => {}
                TaskState::Canceled => return Ok(stored),
                _ => break,
            }
        }
        Err(A2aError::TaskNotCancelable(
            "it reached a final state before it could be canceled, or no instance is answering it; read it with GetTask",
        ))
    }

    /// Listens for other instances' cancel requests, stopping the turns this instance answers.
    /// The listener holds the registry weakly: it lives as long as the agent or a turn it
    /// runs, the only ones that can have a turn in it.
    pub(super) fn hear_cancels(&self) {
        let running = Arc::downgrade(&self.running.turns);
        self.requests.subscribe(Arc::new(
            move |peer_id: &crate::store::PeerId, task_id: &str| {
                let Some(turns) = running.upgrade() else {
                    return;
                };
                if let Some(cancel) = (RunningTurns { turns }).take_cancel(peer_id, task_id) {
                    let _ = cancel.send(());
                }
            },
        ));
    }
}

/// The agent's message of a task the peer canceled while the backend (`what`: "model" or
/// "agent") was being asked.
pub(super) fn canceled_text(what: &str) -> String {
    format!("Canceled by the peer before the {what} answered.")
}

/// The agent's message of a task waiting for input that the peer canceled.
const CANCELED_WAITING_TEXT: &str = "Canceled by the peer while the task waited for its input.";

/// The agent's part that knows the turns this instance is answering that a peer may cancel, by
/// task id.
#[derive(Clone, Default)]
pub(super) struct RunningTurns {
    turns: Arc<std::sync::Mutex<std::collections::HashMap<String, RunningTurn>>>,
}

impl RunningTurns {
    /// The way to stop `task_id`, if this instance answers it for `peer_id` (taken once).
    pub(super) fn take_cancel(
        &self,
        peer_id: &crate::store::PeerId,
        task_id: &str,
    ) -> Option<tokio::sync::oneshot::Sender<()>> {
        let mut running = self.turns.locked();
        running
            .get_mut(task_id)
            .filter(|turn| turn.peer_id == *peer_id)
            .and_then(|turn| turn.cancel.take())
    }

    /// Registers `peer_id`'s turn answering `task_id` as cancelable, until the returned guard
    /// drops; the receiver hears the cancel.
    pub(super) fn register(
        &self,
        peer_id: &crate::store::PeerId,
        task_id: &TaskId,
    ) -> (tokio::sync::oneshot::Receiver<()>, Cancelable) {
        let (cancel, canceled) = tokio::sync::oneshot::channel();
        self.turns.locked().insert(
            task_id.to_string(),
            RunningTurn {
                peer_id: peer_id.clone(),
                cancel: Some(cancel),
            },
        );
        let cancelable = Cancelable {
            registered: Some((self.clone(), task_id.to_string())),
        };
        (canceled, cancelable)
    }
}

/// A turn registered as cancelable (or, by default, a turn nobody may cancel); it leaves the
/// registry when this drops, however the turn ends (an error and a panic included).
#[derive(Default)]
pub(super) struct Cancelable {
    registered: Option<(RunningTurns, String)>,
}

impl Drop for Cancelable {
    fn drop(&mut self) {
        if let Some((running, task_id)) = self.registered.take() {
            running.turns.locked().remove(&task_id);
        }
    }
}

/// A turn being answered here, and how to stop it.
struct RunningTurn {
    peer_id: crate::store::PeerId,
    cancel: Option<tokio::sync::oneshot::Sender<()>>,
}

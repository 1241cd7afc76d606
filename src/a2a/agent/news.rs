//! What is told of a task's stored states: its events to subscribers (here and on other
//! instances), and its push deliveries.

use super::turn_task::TurnPlan;
use crate::layers::auth::AuthenticatedPeer;
use crate::protocol::types::TaskState;
use crate::shared::events::{TaskEvent, TaskEvents};
use std::sync::Arc;

/// The agent's part that tells of stored states: where a task's events are heard, and push
/// notifications (`None` when `capabilities.push_notifications` is off).
#[derive(Clone)]
pub(super) struct TaskNews {
    events: Arc<dyn TaskEvents>,
    push: Option<Arc<crate::push::Push>>,
}

impl TaskNews {
    pub(super) fn new(events: Arc<dyn TaskEvents>, push: Option<Arc<crate::push::Push>>) -> Self {
        Self { events, push }
    }

    /// Where a task's events are heard (a cancel and a subscription listen there).
    pub(super) fn events(&self) -> &Arc<dyn TaskEvents> {
        &self.events
    }

    /// Whether stored states are queued for push delivery (an exchange's `notify`).
    pub(super) fn notifies(&self) -> bool {
        self.push.is_some()
    }

    /// The event for a state of a task about to be stored, if anyone may be listening. A final
    /// state's is built whatever: a subscriber may start listening between now and the store's
    /// commit, and only this event ends its stream ([`TaskNews::announce`] decides then).
    pub(super) fn event(
        &self,
        peer: &AuthenticatedPeer,
        task_id: &str,
        state: TaskState,
        task_json: &str,
    ) -> Option<TaskEvent> {
        (state.is_final() || self.events.listening()).then(|| TaskEvent {
            peer_id: peer.id().clone(),
            task_id: task_id.into(),
            state,
            task_json: task_json.into(),
        })
    }

    /// Publishes an event once its state is durable, if anyone listens now.
    pub(super) fn announce(&self, event: Option<TaskEvent>) {
        if let Some(event) = event
            && self.events.listening()
        {
            self.events.publish(event);
        }
    }

    /// Tells the push deliveries that a state of a task with a config sent along with its
    /// message was just queued. Other states reach them at their next look at the queue (within
    /// a second): waking them for every state would cost a query each on the hot path.
    pub(super) fn wake_deliveries(&self, turn: &TurnPlan) {
        if let Some(push) = &self.push
            && turn.push_config.is_some()
        {
            push.wake();
        }
    }
}

//! Task events: a task changed, and whoever waits on it hears it.
//!
//! The agent's turn publishes each state it stores (working, then final) after it is durable,
//! so a subscriber that hears an event can read the task. The sweeps that fail interrupted
//! tasks do not publish yet: nothing subscribes before streaming and subscriptions exist, and
//! they will add it with their first subscriber. The in-process engine is one
//! broadcast channel; an engine for several instances fans events out through Redis, so a
//! subscriber on one instance hears a task answered on another. Streaming, subscriptions and
//! push notifications stand on this seam.

use crate::store::PeerId;
use std::sync::Arc;
use tokio::sync::broadcast;

/// One stored state of a task.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct TaskEvent {
    /// The peer that owns the task (events never cross peers).
    pub peer_id: PeerId,
    /// The task.
    pub task_id: Arc<str>,
    /// Its state.
    pub state: crate::protocol::types::TaskState,
    /// The task as stored, JSON.
    pub task_json: Arc<str>,
}

/// Carries task events to whoever waits on them.
pub trait TaskEvents: Send + Sync + std::fmt::Debug {
    /// Whether anyone may be listening; publishers skip building events when nobody is.
    fn listening(&self) -> bool;
    /// Tells the task's subscribers.
    fn publish(&self, event: TaskEvent);
    /// Events of one task of one peer, from now on.
    fn subscribe(&self, peer_id: &PeerId, task_id: &str) -> TaskSubscription;
    /// Whether every event published anywhere reaches every subscriber here, but for one that
    /// fell behind (which [`TaskSubscription::heard`] reports). True in one process; not across
    /// instances, where a publication can be lost while the bus is away.
    fn lossless(&self) -> bool {
        false
    }
}

/// What a subscription heard.
#[derive(Debug)]
pub enum Heard {
    /// An event of its task.
    Event(TaskEvent),
    /// It fell behind and skipped events, some of which may have been its task's.
    Missed,
    /// No more events can come.
    Closed,
}

/// The events of one task, as they come.
#[derive(Debug)]
pub struct TaskSubscription {
    events: broadcast::Receiver<TaskEvent>,
    peer_id: PeerId,
    task_id: Arc<str>,
}

impl TaskSubscription {
    /// Reads `events`, keeping only those of `task_id` of `peer_id`.
    pub fn new(events: broadcast::Receiver<TaskEvent>, peer_id: &PeerId, task_id: &str) -> Self {
        Self {
            events,
            peer_id: peer_id.clone(),
            task_id: task_id.into(),
        }
    }

    /// The next event of the task; `None` once no more can come. A subscriber that fell
    /// behind skips what it missed (the task itself is in the store).
    pub async fn next(&mut self) -> Option<TaskEvent> {
        loop {
            match self.heard().await {
                Heard::Event(event) => return Some(event),
                Heard::Missed => {}
                Heard::Closed => return None,
            }
        }
    }

    /// The next event of the task, or that events were missed, or that none can come.
    pub async fn heard(&mut self) -> Heard {
        loop {
            match self.events.recv().await {
                Ok(event) if event.task_id == self.task_id && event.peer_id == self.peer_id => {
                    return Heard::Event(event);
                }
                Ok(_) => {}
                Err(broadcast::error::RecvError::Lagged(_)) => return Heard::Missed,
                Err(broadcast::error::RecvError::Closed) => return Heard::Closed,
            }
        }
    }
}

/// The in-process engine: one broadcast channel for every task.
#[derive(Debug)]
pub struct LocalTaskEvents {
    sender: broadcast::Sender<TaskEvent>,
}

impl Default for LocalTaskEvents {
    fn default() -> Self {
        Self {
            sender: broadcast::channel(1024).0,
        }
    }
}

impl TaskEvents for LocalTaskEvents {
    fn listening(&self) -> bool {
        self.sender.receiver_count() > 0
    }

    fn publish(&self, event: TaskEvent) {
        // No receiver is no error: nobody waits on this task.
        let _ = self.sender.send(event);
    }

    fn subscribe(&self, peer_id: &PeerId, task_id: &str) -> TaskSubscription {
        TaskSubscription::new(self.sender.subscribe(), peer_id, task_id)
    }

    fn lossless(&self) -> bool {
        true
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn event(peer: &str, task: &str, state: &'static str) -> TaskEvent {
        TaskEvent {
            peer_id: peer.into(),
            task_id: task.into(),
            state: crate::protocol::types::TaskState::from_name(state).unwrap(),
            task_json: "{}".into(),
        }
    }

    #[tokio::test]
    async fn a_subscriber_hears_its_task_of_its_peer_only() {
        let events = LocalTaskEvents::default();
        assert!(!events.listening(), "nobody subscribed yet");
        let mut subscription = events.subscribe(&"alice".into(), "t1");
        assert!(events.listening());
        events.publish(event("alice", "t2", "TASK_STATE_WORKING"));
        events.publish(event("bob", "t1", "TASK_STATE_WORKING"));
        events.publish(event("alice", "t1", "TASK_STATE_WORKING"));
        events.publish(event("alice", "t1", "TASK_STATE_COMPLETED"));
        assert_eq!(
            subscription.next().await.unwrap().state.as_str(),
            "TASK_STATE_WORKING"
        );
        let last = subscription.next().await.unwrap();
        assert_eq!((&*last.peer_id, &*last.task_id), ("alice", "t1"));
        assert_eq!(last.state.as_str(), "TASK_STATE_COMPLETED");
    }

    #[tokio::test]
    async fn a_subscriber_that_fell_behind_is_told_so_and_then_hears_on() {
        let events = LocalTaskEvents::default();
        let mut subscription = events.subscribe(&"alice".into(), "t1");
        // More than the channel holds, then its own final state, which stays in the channel.
        for n in 0..1100 {
            events.publish(event("bob", &format!("t{n}"), "TASK_STATE_WORKING"));
        }
        events.publish(event("alice", "t1", "TASK_STATE_COMPLETED"));
        assert!(matches!(subscription.heard().await, Heard::Missed));
        match subscription.heard().await {
            Heard::Event(event) => assert_eq!(event.state.as_str(), "TASK_STATE_COMPLETED"),
            other => panic!("{other:?}"),
        }
        assert!(
            events.lossless(),
            "one process: only falling behind loses an event"
        );
    }
}

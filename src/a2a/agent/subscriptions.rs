//! `SubscribeToTask`: a task's stored states as they happen.
//!
//! A subscription opens with the task as stored and carries its stored states from then on
//! (heard through [`crate::shared::events`], so across instances too), closing at the final
//! one. A finished task cannot be subscribed to.

use super::build::Ingredients;
use super::internal;
use super::reads::TaskReads;
use super::recovery::Background;
use super::stream::StreamPlaces;
use crate::a2a::events::{EventStream, StreamRefused, stream_pair};
use crate::layers::auth::AuthenticatedPeer;
use crate::protocol::error::A2aError;
use crate::protocol::types::{
    StreamResponse, SubscribeToTaskRequest, Task, TaskState, TaskStatusUpdateEvent,
};
use crate::shared::events::{Heard, TaskEvents};
use std::sync::Arc;
use std::time::Duration;

/// How often a subscription looks at the store where events can be lost (across instances, a
/// publication made while the bus was away), in case its task's final state was stored
/// without reaching it. In one process every final state is announced (the sweep's too), so a
/// subscription reads the store only when it fell behind the events.
const SUBSCRIPTION_RECHECK: Duration = Duration::from_secs(5);

/// The agent's part that serves subscriptions: where a task's states are heard, the task reads,
/// the peers' stream places, the longest a stream stays open, and the background count (a
/// shutdown waits for a subscription as for a turn).
pub(super) struct Subscriptions {
    events: Arc<dyn TaskEvents>,
    reads: TaskReads,
    places: StreamPlaces,
    longest_stream: Duration,
    background: Background,
}

impl Subscriptions {
    pub(super) fn new(from: &Ingredients) -> Self {
        Self {
            events: from.shared.events.clone(),
            reads: from.reads.clone(),
            places: from.places.clone(),
            longest_stream: from.settings.longest_stream,
            background: from.background.clone(),
        }
    }

    /// `SubscribeToTask`: the task as stored, then its stored states until the final one.
    pub(super) async fn subscribe_to_task(
        self: &Arc<Self>,
        peer: &AuthenticatedPeer,
        params: SubscribeToTaskRequest,
    ) -> Result<EventStream, StreamRefused> {
        // Listening before the task is read, so a final state stored in between is heard.
        let mut heard = self.events.subscribe(peer.id(), &params.id);
        let task = self.reads.load_task(peer, &params.id).await?;
        if task.status.state.is_final() {
            return Err(StreamRefused::Rpc(A2aError::UnsupportedOperation(
                "the task is already in a final state: read it with GetTask",
            )));
        }
        let place = self.places.open(peer).await?;
        let (mut stream, receiver) = stream_pair(place);
        let closed = stream
            .sender()
            .ok_or_else(|| internal("a new stream has no sender"))?;
        let (subscriptions, peer, task_id) = (self.clone(), peer.clone(), params.id.clone());
        let counted = self.background.turn();
        crate::protocol::request_id::RequestId::spawn(async move {
            stream.send(&StreamResponse::Task(task));
            let ends_at = tokio::time::Instant::now() + subscriptions.longest_stream;
            let mut recheck = (!subscriptions.events.lossless())
                .then(|| tokio::time::interval(SUBSCRIPTION_RECHECK));
            if let Some(recheck) = &mut recheck {
                recheck.tick().await;
            }
            let load_final = async |reads: &TaskReads| match reads.load_task(&peer, &task_id).await
            {
                Ok(stored) if stored.status.state.is_final() => Some(stored),
                _ => None,
            };
            // Ends at the task's final state, when the client leaves, or at the longest a
            // stream may last, whichever comes first.
            let final_task = loop {
                tokio::select! {
                    heard = heard.heard() => match heard {
                        Heard::Event(event) if event.state == TaskState::Working => {}
                        // A task waiting for the peer again: its status, and the stream goes on.
                        Heard::Event(event) if !event.state.is_final() => {
                            if let Ok(stored) = serde_json::from_str::<Task>(&event.task_json) {
                                stream.send(&StreamResponse::StatusUpdate(TaskStatusUpdateEvent {
                                    task_id: stored.id,
                                    context_id: stored.context_id,
                                    status: stored.status,
                                    metadata: None,
                                }));
                            }
                        }
                        Heard::Event(event) => break serde_json::from_str::<Task>(&event.task_json).ok(),
                        // Fell behind: what was skipped may have been the final state.
                        Heard::Missed => {
                            if let Some(stored) = load_final(&subscriptions.reads).await {
                                break Some(stored);
                            }
                        }
                        Heard::Closed => break None,
                    },
                    () = tick(&mut recheck) => {
                        if let Some(stored) = load_final(&subscriptions.reads).await {
                            break Some(stored);
                        }
                    }
                    () = closed.closed() => break None,
                    () = tokio::time::sleep_until(ends_at) => break None,
                }
            };
            if let Some(stored) = final_task {
                // The same events a streamed turn ends with: the answer, then the status.
                stream.send_final(stored);
            }
            drop(counted);
        });
        Ok(receiver)
    }
}

/// The next tick of `recheck`, or never without one.
async fn tick(recheck: &mut Option<tokio::time::Interval>) {
    match recheck {
        Some(recheck) => {
            recheck.tick().await;
        }
        None => std::future::pending().await,
    }
}

//! `SendStreamingMessage` and `SubscribeToTask`: a task's events as they happen.
//!
//! A streamed turn is the same turn as a synchronous one: checked, budgeted, stored working
//! before the model is asked and stored final before its last event. It runs in a task of its
//! own, so a client that disconnects loses only the events, never the answer. The stream opens
//! with the task, carries the model's text as status updates while it arrives, then the answer
//! as an artifact and the final status, and closes.
//!
//! A subscription opens with the task as stored and carries its stored states from then on
//! (heard through [`crate::shared::events`], so across instances too), closing at the final
//! one. A finished task cannot be subscribed to.

use super::{AdmittedTurn, Agent, TurnPlan, internal};
use crate::a2a::events::{EventStream, Stream, StreamRefused, stream_pair};
use crate::a2a::service::Caller;
use crate::admin::budget::SharedReading;
use crate::clock::{Timestamp, rfc3339_millis};
use crate::layers::auth::AuthenticatedPeer;
use crate::protocol::error::A2aError;
use crate::protocol::jsonrpc::Method;
use crate::protocol::types::{
    Message, Part, Role, SendMessageRequest, StreamResponse, SubscribeToTaskRequest, Task,
    TaskState, TaskStatus, TaskStatusUpdateEvent,
};
use crate::shared::events::Heard;
use crate::shared::streams::StreamPermit;
use std::net::IpAddr;
use std::sync::Arc;
use tokio::sync::mpsc;

/// How often a subscription looks at the store where events can be lost (across instances, a
/// publication made while the bus was away), in case its task's final state was stored
/// without reaching it. In one process every final state is announced (the sweep's too), so a
/// subscription reads the store only when it fell behind the events.
const SUBSCRIPTION_RECHECK: std::time::Duration = std::time::Duration::from_secs(5);

impl Agent {
    /// A place among the peer's open streams: its own cap, else the policy's.
    async fn stream_place(&self, peer: &AuthenticatedPeer) -> Result<StreamPermit, StreamRefused> {
        let cap = peer.max_streams().unwrap_or(self.settings.streams_per_peer);
        self.shared
            .streams
            .open(peer.id(), cap)
            .await
            .ok_or(StreamRefused::AtCap(cap))
    }

    /// `SendStreamingMessage`: checks the message, then streams its turn.
    pub(super) async fn send_streaming(
        self: &Arc<Self>,
        caller: &Caller,
        params: SendMessageRequest,
    ) -> Result<EventStream, StreamRefused> {
        let (peer, client) = (&caller.peer, caller.client);
        self.offered(Method::SendStreamingMessage)?;
        // The limits and the budget read are asked first, as for any message (a stream then
        // refused at the peer's cap has spent a request against its quota, as before); the
        // turn's lock is asked on its own once the stream has its place, so a refused stream
        // takes and releases no lock.
        let admitted = self.admit_turn(caller, &params.message, false).await?;
        let planned = self
            .plan(caller, params, admitted.fresh_context.clone())
            .await?;
        let place = self.stream_place(peer).await?;
        let (stream, receiver) = stream_pair(place);
        let agent = self.clone();
        let counted = self.background_turn();
        tokio::spawn(async move {
            agent
                .stream_turn(
                    planned.turn,
                    planned.fresh_context,
                    client,
                    stream,
                    admitted,
                )
                .await;
            drop(counted);
        });
        Ok(receiver)
    }

    async fn stream_turn(
        self: Arc<Self>,
        mut turn: TurnPlan,
        fresh_context: bool,
        client: Option<IpAddr>,
        mut stream: Stream,
        mut admitted: AdmittedTurn,
    ) {
        let reading = std::mem::replace(&mut admitted.reading, SharedReading::NotRead);
        let refusal = match self.refusal(&turn.peer, client, reading).await {
            Ok(refusal) => refusal,
            Err(error) => return stream.fail(error),
        };
        if let Some(refusal) = refusal {
            match self.refuse(&mut turn, refusal, admitted).await {
                Ok(stored) => stream.send(&StreamResponse::Task(stored.task)),
                Err(error) => stream.fail(error),
            }
            return;
        }
        let held = match self.begin_admitted_turn(&mut turn, admitted).await {
            Ok(held) => held,
            Err(error) => return stream.fail(error),
        };
        if let Err(error) = self.still_waiting(&mut turn).await {
            return stream.fail(error);
        }
        let (prompt, unfinished, working_json) =
            match self.store_working(&turn, fresh_context).await {
                Ok(stored) => stored,
                Err(error) => return stream.fail(error),
            };
        let Ok(working) = serde_json::from_str::<Task>(&working_json) else {
            return stream.fail(internal("a stored task could not be read"));
        };
        stream.send(&StreamResponse::Task(working.clone()));
        let (cancel, cancelable) = self.running_turn(&turn);
        // Unbounded, but filled only while the model call is polled: bounded by the backend's
        // response limit.
        let (pieces, mut arriving) = mpsc::unbounded_channel::<String>();
        let mut streamed = 0usize;
        let mut outcome = {
            let asked = self.run_model(&turn, &prompt, cancel, Some(&pieces));
            tokio::pin!(asked);
            loop {
                tokio::select! {
                    outcome = &mut asked => break outcome,
                    Some(piece) = arriving.recv() => {
                        streamed += piece.len();
                        stream.send(&piece_update(&working, &piece, self.clock.now()));
                    }
                }
            }
        };
        drop(pieces);
        while let Ok(piece) = arriving.try_recv() {
            streamed += piece.len();
            stream.send(&piece_update(&working, &piece, self.clock.now()));
        }
        // The peer read text whose cost the model did not report (a turn canceled or cut short,
        // or a server that ignores `include_usage`): it counts, at about four bytes a token.
        if streamed > 0 && outcome.usage.as_ref().is_none_or(|usage| usage.tokens == 0) {
            let estimate = u64::try_from(streamed).unwrap_or(u64::MAX).div_ceil(4);
            outcome.usage = Some(self.budgets.record(
                turn.peer.owner_id(),
                turn.peer.id(),
                estimate,
                turn.spending.as_ref(),
            ));
        }
        let answer = self.finish(&turn, outcome, Some(unfinished)).await;
        drop(cancelable);
        drop(held);
        match answer {
            Ok(stored) => stream.send_final(stored.task),
            Err(error) => stream.fail(error),
        }
    }

    /// `SubscribeToTask`: the task as stored, then its stored states until the final one.
    pub(super) async fn subscribe_to_task(
        self: &Arc<Self>,
        peer: &AuthenticatedPeer,
        params: SubscribeToTaskRequest,
    ) -> Result<EventStream, StreamRefused> {
        self.offered(Method::SubscribeToTask)?;
        // Listening before the task is read, so a final state stored in between is heard.
        let mut heard = self.shared.events.subscribe(peer.id(), &params.id);
        let task = self.reads.load_task(peer, &params.id).await?;
        if task.status.state.is_final() {
            return Err(StreamRefused::Rpc(A2aError::UnsupportedOperation(
                "the task is already in a final state: read it with GetTask",
            )));
        }
        let place = self.stream_place(peer).await?;
        let (mut stream, receiver) = stream_pair(place);
        let closed = stream
            .sender()
            .ok_or_else(|| internal("a new stream has no sender"))?;
        let (agent, peer, task_id) = (self.clone(), peer.clone(), params.id.clone());
        let counted = self.background_turn();
        tokio::spawn(async move {
            stream.send(&StreamResponse::Task(task));
            let ends_at = tokio::time::Instant::now() + agent.settings.longest_stream;
            let mut recheck = (!agent.shared.events.lossless())
                .then(|| tokio::time::interval(SUBSCRIPTION_RECHECK));
            if let Some(recheck) = &mut recheck {
                recheck.tick().await;
            }
            let load_final =
                async |agent: &Agent| match agent.reads.load_task(&peer, &task_id).await {
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
                                }));
                            }
                        }
                        Heard::Event(event) => break serde_json::from_str::<Task>(&event.task_json).ok(),
                        // Fell behind: what was skipped may have been the final state.
                        Heard::Missed => {
                            if let Some(stored) = load_final(&agent).await {
                                break Some(stored);
                            }
                        }
                        Heard::Closed => break None,
                    },
                    () = tick(&mut recheck) => {
                        if let Some(stored) = load_final(&agent).await {
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

/// A status update carrying a piece of the model's text as it arrives, at `now`.
fn piece_update(working: &Task, piece: &str, now: Timestamp) -> StreamResponse {
    StreamResponse::StatusUpdate(TaskStatusUpdateEvent {
        task_id: working.id.clone(),
        context_id: working.context_id.clone(),
        status: TaskStatus {
            state: TaskState::Working,
            message: Message {
                message_id: crate::protocol::ids::MessageId::new_random(),
                context_id: working.context_id.clone(),
                task_id: working.id.clone(),
                role: Role::Agent,
                parts: vec![Part::text(piece)],
            },
            timestamp: rfc3339_millis(now),
        },
    })
}

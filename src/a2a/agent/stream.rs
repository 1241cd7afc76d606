//! `SendStreamingMessage`: a turn's events as they happen, and the peers' places for open
//! streams (a subscription takes one too).
//!
//! A streamed turn is the same turn as a synchronous one: checked, budgeted, stored working
//! before the model is asked and stored final before its last event. It runs in a task of its
//! own, so a client that disconnects loses only the events, never the answer. The stream opens
//! with the task, carries the model's text as status updates while it arrives, then the answer
//! as an artifact and the final status, and closes.

use super::internal;
use super::turn::Turns;
use super::turn_task::{AdmittedTurn, TurnPlan};
use crate::a2a::events::{EventStream, Stream, StreamRefused, stream_pair};
use crate::a2a::service::Caller;
use crate::admin::budget::SharedReading;
use crate::clock::{Timestamp, rfc3339_millis};
use crate::content::stream::StreamedText;
use crate::layers::auth::AuthenticatedPeer;
use crate::protocol::types::{
    Message, Part, Role, SendMessageRequest, StreamResponse, Task, TaskState, TaskStatus,
    TaskStatusUpdateEvent,
};
use crate::shared::streams::{OpenStreams, StreamPermit};
use std::net::IpAddr;
use std::sync::Arc;
use tokio::sync::mpsc;

/// The agent's part that gives out places among a peer's open streams: the streams open now
/// (shared across instances), and the policy's cap for a peer whose record sets none.
#[derive(Clone)]
pub(super) struct StreamPlaces {
    streams: Arc<dyn OpenStreams>,
    per_peer: u32,
}

impl StreamPlaces {
    pub(super) fn new(streams: Arc<dyn OpenStreams>, per_peer: u32) -> Self {
        Self { streams, per_peer }
    }

    /// A place among the peer's open streams: its own cap, else the policy's.
    pub(super) async fn open(
        &self,
        peer: &AuthenticatedPeer,
    ) -> Result<StreamPermit, StreamRefused> {
        let cap = peer.max_streams().unwrap_or(self.per_peer);
        self.streams
            .open(peer.id(), cap)
            .await
            .ok_or(StreamRefused::AtCap(cap))
    }
}

impl Turns {
    /// `SendStreamingMessage`: checks the message, then streams its turn.
    pub(super) async fn send_streaming(
        self: &Arc<Self>,
        caller: &Caller,
        params: SendMessageRequest,
    ) -> Result<EventStream, StreamRefused> {
        let (peer, client) = (&caller.peer, caller.client);
        // The limits and the budget read are asked first, as for any message (a stream then
        // refused at the peer's cap has spent a request against its quota, as before); the
        // turn's lock is asked on its own once the stream has its place, so a refused stream
        // takes and releases no lock.
        let admitted = self.admit_turn(caller, &params.message, false).await?;
        let planned = self
            .plan(caller, params, admitted.fresh_context.clone())
            .await?;
        let place = self.places.open(peer).await?;
        let (stream, receiver) = stream_pair(place);
        let turns = self.clone();
        let counted = self.background.turn();
        crate::protocol::request_id::RequestId::spawn(async move {
            turns
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
        // Every event from here on is covered by the task's receipt.
        if let Some(sealing) = &mut turn.sealing {
            sealing.chain_events(&mut stream);
        }
        stream.send(&StreamResponse::Task(working.clone()));
        let (cancel, cancelable) = self.running_turn(&turn);
        // Unbounded, but filled only while the model call is polled: bounded by the backend's
        // response limit.
        let (pieces, mut arriving) = mpsc::unbounded_channel::<String>();
        let mut streamed = 0usize;
        // With outbound content rules, a piece is sent once the rules read it with what
        // follows (the whole answer is inspected again before it is stored).
        let mut guarded =
            (self.content.as_ref()).map(|guard| guard.streamed_text(turn.peer.name()));
        let mut outcome = {
            let asked = self.run_model(&turn, &prompt, cancel, Some(&pieces));
            tokio::pin!(asked);
            loop {
                tokio::select! {
                    outcome = &mut asked => break outcome,
                    Some(piece) = arriving.recv() => {
                        streamed += piece.len();
                        let now = self.clock.now();
                        send_piece(&mut stream, guarded.as_mut(), (&working, &piece), now);
                    }
                }
            }
        };
        drop(pieces);
        while let Ok(piece) = arriving.try_recv() {
            streamed += piece.len();
            let now = self.clock.now();
            send_piece(&mut stream, guarded.as_mut(), (&working, &piece), now);
        }
        // What is still held goes only to an answer that may be delivered.
        if let Some(rest) = guarded.as_mut().map(StreamedText::finish)
            && !rest.is_empty()
            && !outcome.withheld
        {
            stream.send(&piece_update(&working, &rest, self.clock.now()));
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
}

/// Sends `piece` of the answer to the stream, or what the content rules let out of it so far.
fn send_piece(
    stream: &mut Stream,
    guarded: Option<&mut StreamedText<'_>>,
    (working, piece): (&Task, &str),
    now: Timestamp,
) {
    let released;
    let piece = match guarded {
        Some(guarded) => {
            released = guarded.piece(piece);
            released.as_str()
        }
        None => piece,
    };
    if !piece.is_empty() {
        stream.send(&piece_update(working, piece, now));
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
        metadata: None,
    })
}

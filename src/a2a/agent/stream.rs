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

use super::{Agent, TurnPlan, internal};
use crate::clock::rfc3339_millis;
use crate::layers::auth::AuthenticatedPeer;
use crate::protocol::jsonrpc::{self, RpcError, RpcId};
use crate::protocol::types::{GetTaskParams, SendMessageParams, Task, TaskState};
use crate::shared::streams::StreamPermit;
use serde_json::json;
use serde_json::value::{RawValue, to_raw_value};
use std::net::IpAddr;
use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};
use tokio::sync::mpsc;

/// Events buffered for a client that reads slowly; one that falls further behind is cut off.
const BUFFERED_EVENTS: usize = 64;

/// Bytes of events buffered for a client that reads slowly; past them it is cut off too (one
/// event larger than this is still sent when nothing else waits).
pub const BUFFERED_BYTES: usize = 1024 * 1024;

/// A stream's events as the response reads them, holding the stream's place among its peer's
/// open streams until it is dropped.
#[derive(Debug)]
pub struct EventStream {
    events: mpsc::Receiver<String>,
    buffered: Arc<AtomicUsize>,
    reshape: Option<fn(String) -> String>,
    _place: StreamPermit,
}

impl EventStream {
    /// Events sent into `events` as they come, holding `place` (for a stream made elsewhere
    /// than a turn: tests, another binding's adapter).
    pub fn from_receiver(events: mpsc::Receiver<String>, place: StreamPermit) -> Self {
        Self {
            events,
            buffered: Arc::default(),
            reshape: None,
            _place: place,
        }
    }

    /// The next event; `None` once the stream ended.
    pub async fn next(&mut self) -> Option<String> {
        let event = self.events.recv().await?;
        let _ = self
            .buffered
            .fetch_update(Ordering::SeqCst, Ordering::SeqCst, |waiting| {
                Some(waiting.saturating_sub(event.len()))
            });
        Some(match self.reshape {
            Some(reshape) => reshape(event),
            None => event,
        })
    }

    /// The same stream with each event passed through `reshape` (another binding's shape).
    pub fn reshaped(mut self, reshape: fn(String) -> String) -> Self {
        self.reshape = Some(reshape);
        self
    }
}

/// A stream's two ends: what the turn sends into, and what the response reads.
fn stream_pair(id: &RpcId, place: StreamPermit) -> (Stream, EventStream) {
    let (events, receiver) = mpsc::channel(BUFFERED_EVENTS);
    let buffered = Arc::new(AtomicUsize::new(0));
    (
        Stream {
            id: id.clone(),
            events: Some(events),
            buffered: buffered.clone(),
        },
        EventStream {
            events: receiver,
            buffered,
            reshape: None,
            _place: place,
        },
    )
}

/// Why a stream was not opened.
#[derive(Debug)]
pub(crate) enum StreamRefused {
    /// The protocol's error.
    Rpc(RpcError),
    /// The peer holds as many open streams as it may (its cap).
    AtCap(u32),
}

impl From<RpcError> for StreamRefused {
    fn from(error: RpcError) -> Self {
        Self::Rpc(error)
    }
}

/// How often a subscription looks at the store, in case its task's final state was stored
/// without an event (a sweep, a lost publication).
const SUBSCRIPTION_RECHECK: std::time::Duration = std::time::Duration::from_secs(5);

/// The response events of one stream, under the request's id. Nothing here ever waits for
/// the client: a turn must not stall because a peer stopped reading.
struct Stream {
    id: RpcId,
    events: Option<mpsc::Sender<String>>,
    /// Bytes sent and not yet read by the response.
    buffered: Arc<AtomicUsize>,
}

impl Stream {
    /// Sends one event; a client that left, or fell [`BUFFERED_EVENTS`] events or
    /// [`BUFFERED_BYTES`] behind, gets no more (its stream ends; the turn goes on and is
    /// stored).
    fn push(&mut self, event: String) {
        let Some(events) = &self.events else { return };
        let size = event.len();
        let waiting = self.buffered.fetch_add(size, Ordering::SeqCst);
        if waiting > 0 && waiting + size > BUFFERED_BYTES {
            self.buffered.fetch_sub(size, Ordering::SeqCst);
            tracing::info!("a stream's client fell behind and was cut off; its turn goes on");
            self.events = None;
            return;
        }
        match events.try_send(event) {
            Ok(()) => {}
            Err(mpsc::error::TrySendError::Full(_)) => {
                self.buffered.fetch_sub(size, Ordering::SeqCst);
                tracing::info!("a stream's client fell behind and was cut off; its turn goes on");
                self.events = None;
            }
            Err(mpsc::error::TrySendError::Closed(_)) => {
                self.buffered.fetch_sub(size, Ordering::SeqCst);
                self.events = None;
            }
        }
    }

    fn send(&mut self, result: &serde_json::Value) {
        if let Ok(raw) = to_raw_value(result) {
            self.push(jsonrpc::success(&self.id, &raw));
        }
    }

    fn send_raw(&mut self, result: &RawValue) {
        self.push(jsonrpc::success(&self.id, result));
    }

    fn fail(&mut self, error: &RpcError) {
        self.push(jsonrpc::failure(&self.id, error));
    }
}

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
        peer: &AuthenticatedPeer,
        client: Option<IpAddr>,
        id: &RpcId,
        params: Option<&RawValue>,
    ) -> Result<EventStream, StreamRefused> {
        if !self.settings.streaming {
            return Err(StreamRefused::Rpc(RpcError::UnsupportedOperation(
                "streaming is off (capabilities.streaming is false): send the message with SendMessage",
            )));
        }
        let params: SendMessageParams = jsonrpc::parse_params(params)?;
        let planned = self.plan(peer, params).await?;
        let place = self.stream_place(peer).await?;
        let (stream, receiver) = stream_pair(id, place);
        let agent = self.clone();
        let counted = self.background_turn();
        tokio::spawn(async move {
            agent
                .stream_turn(planned.turn, planned.fresh_context, client, stream)
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
    ) {
        let refusal = match self.refusal(&turn.peer, client).await {
            Ok(refusal) => refusal,
            Err(error) => return stream.fail(&error),
        };
        if let Some(refusal) = refusal {
            match self.refuse(&mut turn, refusal, None).await {
                Ok(answer) => stream.send_raw(&answer),
                Err(error) => stream.fail(&error),
            }
            return;
        }
        let held = match self.begin_turn(&turn).await {
            Ok(held) => held,
            Err(error) => return stream.fail(&error),
        };
        if let Err(error) = self.still_waiting(&mut turn).await {
            return stream.fail(&error);
        }
        let (prompt, unfinished, working_json) =
            match self.store_working(&turn, fresh_context).await {
                Ok(stored) => stored,
                Err(error) => return stream.fail(&error),
            };
        let Ok(working) = serde_json::from_str::<Task>(&working_json) else {
            return stream.fail(&internal("a stored task could not be read"));
        };
        stream.send(&json!({"task": working}));
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
                        stream.send(&piece_update(&working, &piece, self.clock.now_millis()));
                    }
                }
            }
        };
        drop(pieces);
        while let Ok(piece) = arriving.try_recv() {
            streamed += piece.len();
            stream.send(&piece_update(&working, &piece, self.clock.now_millis()));
        }
        // The peer read text whose cost the model did not report (a turn canceled or cut short,
        // or a server that ignores `include_usage`): it counts, at about four bytes a token.
        if streamed > 0 && outcome.usage.as_ref().is_none_or(|usage| usage.tokens == 0) {
            let estimate = u64::try_from(streamed).unwrap_or(u64::MAX).div_ceil(4);
            outcome.usage = Some(self.budgets.record(turn.peer.owner_id(), estimate));
        }
        let answer = self.finish(&turn, outcome, None, Some(unfinished)).await;
        drop(cancelable);
        drop(held);
        let task = match answer.map(|raw| serde_json::from_str::<serde_json::Value>(raw.get())) {
            Ok(Ok(answer)) => answer["task"].clone(),
            Ok(Err(e)) => return stream.fail(&internal(e)),
            Err(error) => return stream.fail(&error),
        };
        for artifact in task["artifacts"].as_array().into_iter().flatten() {
            stream.send(&json!({"artifactUpdate": {
                "taskId": turn.task_id,
                "contextId": turn.context_id,
                "artifact": artifact,
                "lastChunk": true,
            }}));
        }
        stream.send(&json!({"statusUpdate": {
            "taskId": turn.task_id,
            "contextId": turn.context_id,
            "status": task["status"],
        }}));
    }

    /// `SubscribeToTask`: the task as stored, then its stored states until the final one.
    pub(super) async fn subscribe_to_task(
        self: &Arc<Self>,
        peer: &AuthenticatedPeer,
        id: &RpcId,
        params: Option<&RawValue>,
    ) -> Result<EventStream, StreamRefused> {
        if !(self.settings.streaming && self.settings.subscriptions) {
            return Err(StreamRefused::Rpc(RpcError::UnsupportedOperation(
                "task subscriptions are off (capabilities.subscriptions is false): follow the task with GetTask",
            )));
        }
        let params: GetTaskParams = jsonrpc::parse_params(params)?;
        // Listening before the task is read, so a final state stored in between is heard.
        let mut heard = self.shared.events.subscribe(peer.id(), &params.id);
        let task = self.load_task(peer, &params.id).await?;
        if task.status.state.is_final() {
            return Err(StreamRefused::Rpc(RpcError::UnsupportedOperation(
                "the task is already in a final state: read it with GetTask",
            )));
        }
        let place = self.stream_place(peer).await?;
        let (mut stream, receiver) = stream_pair(id, place);
        let closed = stream
            .events
            .clone()
            .ok_or_else(|| internal("a new stream has no sender"))?;
        let (agent, peer, task_id) = (self.clone(), peer.clone(), params.id.clone());
        let counted = self.background_turn();
        tokio::spawn(async move {
            stream.send(&json!({"task": task}));
            let ends_at = tokio::time::Instant::now() + agent.settings.longest_stream;
            let mut recheck = tokio::time::interval(SUBSCRIPTION_RECHECK);
            recheck.tick().await;
            // Ends at the task's final state, when the client leaves, or at the longest a
            // stream may last, whichever comes first.
            let final_json = loop {
                tokio::select! {
                    event = heard.next() => match event {
                        Some(event) if event.state == TaskState::Working => {}
                        // A task waiting for the peer again: its status, and the stream goes on.
                        Some(event) if !event.state.is_final() => {
                            if let Ok(stored) = serde_json::from_str::<Task>(&event.task_json) {
                                stream.send(&json!({"statusUpdate": {
                                    "taskId": stored.id,
                                    "contextId": stored.context_id,
                                    "status": stored.status,
                                }}));
                            }
                        }
                        Some(event) => break Some(event.task_json.to_string()),
                        None => break None,
                    },
                    _ = recheck.tick() => {
                        if let Ok(stored) = agent.load_task_json(&peer, &task_id).await
                            && serde_json::from_str::<Task>(&stored)
                                .is_ok_and(|task| task.status.state.is_final())
                        {
                            break Some(stored);
                        }
                    }
                    () = closed.closed() => break None,
                    () = tokio::time::sleep_until(ends_at) => break None,
                }
            };
            if let Some(stored) = final_json
                && let Ok(stored) = serde_json::from_str::<serde_json::Value>(&stored)
            {
                // The same events a streamed turn ends with: the answer, then the status.
                for artifact in stored["artifacts"].as_array().into_iter().flatten() {
                    stream.send(&json!({"artifactUpdate": {
                        "taskId": stored["id"],
                        "contextId": stored["contextId"],
                        "artifact": artifact,
                        "lastChunk": true,
                    }}));
                }
                stream.send(&json!({"statusUpdate": {
                    "taskId": stored["id"],
                    "contextId": stored["contextId"],
                    "status": stored["status"],
                }}));
            }
            drop(counted);
        });
        Ok(receiver)
    }
}

/// A status update carrying a piece of the model's text as it arrives, at `now` (epoch ms).
fn piece_update(working: &Task, piece: &str, now: i64) -> serde_json::Value {
    json!({"statusUpdate": {
        "taskId": working.id,
        "contextId": working.context_id,
        "status": {
            "state": TaskState::Working.as_str(),
            "message": {
                "messageId": uuid::Uuid::new_v4().to_string(),
                "role": "ROLE_AGENT",
                "parts": [{"text": piece}],
                "taskId": working.id,
                "contextId": working.context_id,
            },
            "timestamp": rfc3339_millis(now),
        },
    }})
}

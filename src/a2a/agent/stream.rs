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
use crate::a2a::jsonrpc::{self, RpcError, RpcId};
use crate::a2a::types::{GetTaskParams, SendMessageParams, Task, TaskState};
use crate::clock::rfc3339_millis;
use crate::layers::auth::AuthenticatedPeer;
use serde_json::json;
use serde_json::value::{RawValue, to_raw_value};
use std::net::IpAddr;
use std::sync::Arc;
use tokio::sync::mpsc;

/// Events buffered for a slow client before the turn waits for it.
const BUFFERED_EVENTS: usize = 64;

/// The response events of one stream, under the request's id.
struct Stream {
    id: RpcId,
    events: mpsc::Sender<String>,
}

impl Stream {
    /// Sends one result; a client that left is no error (the turn goes on).
    async fn send(&self, result: &serde_json::Value) {
        if let Ok(raw) = to_raw_value(result) {
            let _ = self.events.send(jsonrpc::success(&self.id, &raw)).await;
        }
    }

    async fn send_raw(&self, result: &RawValue) {
        let _ = self.events.send(jsonrpc::success(&self.id, result)).await;
    }

    async fn fail(&self, error: &RpcError) {
        let _ = self.events.send(jsonrpc::failure(&self.id, error)).await;
    }
}

impl Agent {
    /// `SendStreamingMessage`: checks the message, then streams its turn.
    pub(super) async fn send_streaming(
        self: &Arc<Self>,
        peer: &AuthenticatedPeer,
        client: Option<IpAddr>,
        id: &RpcId,
        params: Option<&RawValue>,
    ) -> Result<mpsc::Receiver<String>, RpcError> {
        if !self.settings.streaming {
            return Err(RpcError::UnsupportedOperation(
                "streaming is off (capabilities.streaming is false): send the message with SendMessage",
            ));
        }
        let params: SendMessageParams = jsonrpc::parse_params(params)?;
        let planned = self.plan(peer, params).await?;
        let (events, receiver) = mpsc::channel(BUFFERED_EVENTS);
        let stream = Stream {
            id: id.clone(),
            events,
        };
        let agent = self.clone();
        tokio::spawn(async move {
            agent
                .stream_turn(planned.turn, planned.fresh_context, client, stream)
                .await;
        });
        Ok(receiver)
    }

    async fn stream_turn(
        self: Arc<Self>,
        turn: TurnPlan,
        fresh_context: bool,
        client: Option<IpAddr>,
        stream: Stream,
    ) {
        let refusal = match self.refusal(&turn.peer, client).await {
            Ok(refusal) => refusal,
            Err(error) => return stream.fail(&error).await,
        };
        if let Some(refusal) = refusal {
            match self.finish(&turn, refusal, None, None).await {
                Ok(answer) => stream.send_raw(&answer).await,
                Err(error) => stream.fail(&error).await,
            }
            return;
        }
        let held = match self.begin_turn(&turn).await {
            Ok(held) => held,
            Err(error) => return stream.fail(&error).await,
        };
        let (prompt, unfinished, working_json) =
            match self.store_working(&turn, fresh_context).await {
                Ok(stored) => stored,
                Err(error) => return stream.fail(&error).await,
            };
        let Ok(working) = serde_json::from_str::<Task>(&working_json) else {
            return stream
                .fail(&internal("a stored task could not be read"))
                .await;
        };
        stream.send(&json!({"task": working})).await;
        let cancel = self.running_turn(&turn);
        let (pieces, mut arriving) = mpsc::unbounded_channel();
        let outcome = {
            let asked = self.run_model(&turn, &prompt, cancel, Some(&pieces));
            tokio::pin!(asked);
            loop {
                tokio::select! {
                    outcome = &mut asked => break outcome,
                    Some(piece) = arriving.recv() => {
                        stream.send(&piece_update(&working, &piece, self.clock.now_millis())).await;
                    }
                }
            }
        };
        drop(pieces);
        while let Ok(piece) = arriving.try_recv() {
            stream
                .send(&piece_update(&working, &piece, self.clock.now_millis()))
                .await;
        }
        let answer = self.finish(&turn, outcome, None, Some(unfinished)).await;
        self.turn_ended(&turn.task_id);
        drop(held);
        let task = match answer.map(|raw| serde_json::from_str::<serde_json::Value>(raw.get())) {
            Ok(Ok(answer)) => answer["task"].clone(),
            Ok(Err(e)) => return stream.fail(&internal(e)).await,
            Err(error) => return stream.fail(&error).await,
        };
        if let Some(artifact) = task["artifacts"].get(0) {
            stream
                .send(&json!({"artifactUpdate": {
                    "taskId": turn.task_id,
                    "contextId": turn.context_id,
                    "artifact": artifact,
                    "lastChunk": true,
                }}))
                .await;
        }
        stream
            .send(&json!({"statusUpdate": {
                "taskId": turn.task_id,
                "contextId": turn.context_id,
                "status": task["status"],
            }}))
            .await;
    }

    /// `SubscribeToTask`: the task as stored, then its stored states until the final one.
    pub(super) async fn subscribe_to_task(
        self: &Arc<Self>,
        peer: &AuthenticatedPeer,
        id: &RpcId,
        params: Option<&RawValue>,
    ) -> Result<mpsc::Receiver<String>, RpcError> {
        if !(self.settings.streaming && self.settings.subscriptions) {
            return Err(RpcError::UnsupportedOperation(
                "task subscriptions are off (capabilities.subscriptions is false): follow the task with GetTask",
            ));
        }
        let params: GetTaskParams = jsonrpc::parse_params(params)?;
        // Listening before the task is read, so a final state stored in between is heard.
        let mut heard = self.shared.events.subscribe(peer.id(), &params.id);
        let task = self.load_task(peer, &params.id).await?;
        if task.status.state != TaskState::Working {
            return Err(RpcError::UnsupportedOperation(
                "the task is already in a final state: read it with GetTask",
            ));
        }
        let (events, receiver) = mpsc::channel(BUFFERED_EVENTS);
        let stream = Stream {
            id: id.clone(),
            events,
        };
        tokio::spawn(async move {
            stream.send(&json!({"task": task})).await;
            while let Some(event) = heard.next().await {
                if event.state == TaskState::Working.as_str() {
                    continue;
                }
                let Ok(stored) = serde_json::from_str::<serde_json::Value>(&event.task_json) else {
                    break;
                };
                stream
                    .send(&json!({"statusUpdate": {
                        "taskId": stored["id"],
                        "contextId": stored["contextId"],
                        "status": stored["status"],
                    }}))
                    .await;
                break;
            }
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

//! A stream's two ends: what a turn or a subscription sends its events into ([`Stream`]),
//! and what a binding's response reads ([`EventStream`]), with the bounds a slow reader meets.
//! The agent fills streams; the bindings frame their events; neither imports the other.

use crate::jose::receipt::EventChain;
use crate::protocol::error::A2aError;
use crate::protocol::types::{
    StreamResponse, Task, TaskArtifactUpdateEvent, TaskStatusUpdateEvent,
};
use crate::shared::streams::StreamPermit;
use serde_json::value::{RawValue, to_raw_value};
use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};
use tokio::sync::mpsc;

/// Events buffered for a client that reads slowly; one that falls further behind is cut off.
const BUFFERED_EVENTS: usize = 64;

/// Bytes of events buffered for a client that reads slowly; past them it is cut off too (one
/// event larger than this is still sent when nothing else waits).
pub const BUFFERED_BYTES: usize = 1024 * 1024;

/// One event of a stream: a `StreamResponse`, encoded once as ProtoJSON when it is made (the
/// buffer a slow reader may fill is bounded in bytes), or the error that ends the stream.
/// Each binding frames it in its own way. Both variants are boxed: the channel under every
/// open stream holds a block of slots from the start, so its size is paid per stream.
#[derive(Debug)]
pub enum StreamEvent {
    /// A `StreamResponse` as ProtoJSON.
    Response(Box<RawValue>),
    /// The event a stream ends with: the response that brings its task to a final state, or
    /// an error. Boxed again so the enum stays two words.
    Last(Box<LastEvent>),
}

/// The event a stream ends with.
#[derive(Debug)]
pub enum LastEvent {
    /// The `StreamResponse` that brings its task to a final state (its status update, or the
    /// task itself), as ProtoJSON: what the pipeline's *seal* stage sees.
    Final(Box<RawValue>),
    /// The error the stream ends with.
    Error(A2aError),
}

impl StreamEvent {
    /// The error that ends a stream.
    pub fn error(error: A2aError) -> Self {
        Self::Last(Box::new(LastEvent::Error(error)))
    }

    /// What the event carries, as a binding frames it: a `StreamResponse`, or the error that
    /// ends the stream.
    pub fn into_response(self) -> Result<Box<RawValue>, A2aError> {
        match self {
            Self::Response(json) => Ok(json),
            Self::Last(last) => match *last {
                LastEvent::Final(json) => Ok(json),
                LastEvent::Error(error) => Err(error),
            },
        }
    }

    /// The response that brings its task to a final state, when it is that.
    pub fn final_response(&self) -> Option<&RawValue> {
        match self {
            Self::Last(last) => match last.as_ref() {
                LastEvent::Final(json) => Some(json),
                LastEvent::Error(_) => None,
            },
            Self::Response(_) => None,
        }
    }

    /// Bytes it holds in a stream's buffer.
    fn size(&self) -> usize {
        match self {
            Self::Response(json) => json.get().len(),
            Self::Last(last) => match last.as_ref() {
                LastEvent::Final(json) => json.get().len(),
                LastEvent::Error(_) => 256,
            },
        }
    }
}

/// A stream's events as the response reads them, holding the stream's place among its peer's
/// open streams until it is dropped.
pub struct EventStream {
    events: mpsc::Receiver<StreamEvent>,
    buffered: Arc<AtomicUsize>,
    /// What sees each event as it is read (the call pipeline's stages).
    tap: Option<Arc<dyn EventTap>>,
    _place: StreamPermit,
}

impl std::fmt::Debug for EventStream {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("EventStream(…)")
    }
}

/// Sees, and may change, each event of a stream as its response reads it.
pub trait EventTap: Send + Sync {
    /// The event as it is sent on.
    fn event(&self, event: StreamEvent) -> StreamEvent;
}

impl EventStream {
    /// Events sent into `events` as they come, holding `place` (for a stream made elsewhere
    /// than a turn: tests, another binding's adapter).
    pub fn from_receiver(events: mpsc::Receiver<StreamEvent>, place: StreamPermit) -> Self {
        Self {
            events,
            buffered: Arc::default(),
            tap: None,
            _place: place,
        }
    }

    /// The same stream, each event read through `tap`.
    pub fn tapped(mut self, tap: Arc<dyn EventTap>) -> Self {
        self.tap = Some(tap);
        self
    }

    /// The next event; `None` once the stream ended.
    pub async fn next(&mut self) -> Option<StreamEvent> {
        let event = self.events.recv().await?;
        let size = event.size();
        let _ = self
            .buffered
            .fetch_update(Ordering::SeqCst, Ordering::SeqCst, |waiting| {
                Some(waiting.saturating_sub(size))
            });
        Some(match &self.tap {
            Some(tap) => tap.event(event),
            None => event,
        })
    }
}

/// A stream's two ends: what the turn sends into, and what the response reads.
pub(crate) fn stream_pair(place: StreamPermit) -> (Stream, EventStream) {
    let (events, receiver) = mpsc::channel(BUFFERED_EVENTS);
    let buffered = Arc::new(AtomicUsize::new(0));
    (
        Stream {
            events: Some(events),
            buffered: buffered.clone(),
            chain: None,
        },
        EventStream {
            events: receiver,
            buffered,
            tap: None,
            _place: place,
        },
    )
}

/// Why a stream was not opened.
#[derive(Debug)]
pub enum StreamRefused {
    /// The protocol's error.
    Rpc(A2aError),
    /// The peer holds as many open streams as it may (its cap).
    AtCap(u32),
}

impl From<A2aError> for StreamRefused {
    fn from(error: A2aError) -> Self {
        Self::Rpc(error)
    }
}

/// The response events of one stream. Nothing here ever waits for the client: a turn must not
/// stall because a peer stopped reading.
pub(crate) struct Stream {
    events: Option<mpsc::Sender<StreamEvent>>,
    /// Bytes sent and not yet read by the response.
    buffered: Arc<AtomicUsize>,
    /// The running digest of the events sent, when the task's receipt covers them.
    chain: Option<Arc<std::sync::Mutex<EventChain>>>,
}

impl Stream {
    /// Sends one event; a client that left, or fell [`BUFFERED_EVENTS`] events or
    /// [`BUFFERED_BYTES`] behind, gets no more (its stream ends; the turn goes on and is
    /// stored).
    fn push(&mut self, event: StreamEvent) {
        let Some(events) = &self.events else { return };
        let size = event.size();
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

    pub(crate) fn send(&mut self, response: &StreamResponse) {
        if let Some(chain) = &self.chain {
            let mut chain = crate::locks::Locked::locked(&**chain);
            // A chain that misses an event spoils the receipt's dig.evt (refused under
            // `required`), never states a stream it did not see.
            match serde_json::to_value(response) {
                Ok(event) => drop(chain.add(&event)),
                Err(_) => chain.spoil(),
            }
        }
        let finishes = match response {
            StreamResponse::StatusUpdate(update) => update.status.state.is_final(),
            StreamResponse::Task(task) => task.status.state.is_final(),
            _ => false,
        };
        match to_raw_value(response) {
            Ok(json) if finishes => self.push(StreamEvent::Last(Box::new(LastEvent::Final(json)))),
            Ok(json) => self.push(StreamEvent::Response(json)),
            Err(e) => self.fail(A2aError::internal(
                &e,
                "a stream event could not be encoded",
            )),
        }
    }

    pub(crate) fn fail(&mut self, error: A2aError) {
        self.push(StreamEvent::error(error));
    }

    /// The events a finished task ends a stream with ([`final_events`]).
    pub(crate) fn send_final(&mut self, task: Task) {
        // The final events are digested in the receipt already; not again.
        self.chain = None;
        for event in final_events(task) {
            self.send(&event);
        }
    }

    /// Digests every event sent from now on into `chain`.
    pub(crate) fn chained(&mut self, chain: Arc<std::sync::Mutex<EventChain>>) {
        self.chain = Some(chain);
    }
}

/// The events a finished task ends a stream with: its answer, then its status, which carries
/// the task's receipt when it has one.
pub(crate) fn final_events(task: Task) -> Vec<StreamResponse> {
    let receipt = (task.metadata.as_ref())
        .and_then(|metadata| metadata.get(crate::jose::receipt::EXTENSION))
        .cloned();
    let mut events: Vec<StreamResponse> = (task.artifacts.into_iter())
        .map(|artifact| {
            StreamResponse::ArtifactUpdate(TaskArtifactUpdateEvent {
                task_id: task.id.clone(),
                context_id: task.context_id.clone(),
                artifact,
                last_chunk: true,
            })
        })
        .collect();
    events.push(StreamResponse::StatusUpdate(TaskStatusUpdateEvent {
        task_id: task.id,
        context_id: task.context_id,
        status: task.status,
        metadata: receipt
            .map(|receipt| serde_json::json!({crate::jose::receipt::EXTENSION: receipt})),
    }));
    events
}

impl Stream {
    /// A sender of the stream's channel, to hear when its reader has gone (`closed()`); `None`
    /// once the stream was cut off.
    pub(crate) fn sender(&self) -> Option<mpsc::Sender<StreamEvent>> {
        self.events.clone()
    }
}

#[cfg(test)]
mod tests {
    use super::StreamEvent;

    /// The channel under a stream allocates a block of 32 slots when it is made, so each byte
    /// of an event is paid 32 times by every open stream, idle or not.
    #[test]
    fn a_stream_event_is_two_words() {
        assert_eq!(std::mem::size_of::<StreamEvent>(), 16);
    }
}

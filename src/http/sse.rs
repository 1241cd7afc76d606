//! Server-Sent Events for the door's streams: each event a `data:` line, a comment every
//! [`KEEP_ALIVE`] so proxies and clients do not take a quiet model for a dead connection, and a
//! maximum duration after which the stream ends (the turn itself goes on and is stored).
//!
//! The stream also bounds its connection: by its maximum duration plus the write-stall time the
//! connection must be done ([`crate::http::stalled_writes`]), so a client reading too slowly
//! to ever finish is closed rather than kept. Dropping the body (the connection closed) drops
//! the events it buffered and the stream's place among its peer's open streams.

use crate::a2a::events::{EventStream, StreamEvent};
use crate::http::stalled_writes::{ConnectionDeadline, DeadlineGuard};
use axum::body::{Body, Bytes};
use axum::http::{HeaderValue, header};
use axum::response::{IntoResponse, Response};
use std::sync::Arc;
use std::time::Duration;

/// How often a quiet stream sends a comment.
pub const KEEP_ALIVE: Duration = Duration::from_secs(15);

struct Events<F> {
    events: EventStream,
    frame: F,
    keep_alive: tokio::time::Interval,
    ends_at: tokio::time::Instant,
    ended: bool,
    /// Keeps the connection's deadline while the stream lasts.
    _bound: Option<DeadlineGuard>,
}

/// How long a stream, and the connection it is on, may last.
#[derive(Debug, Clone)]
pub struct StreamBounds {
    /// The longest the stream stays open.
    pub longest: Duration,
    /// How long after that the connection may take to deliver what is left.
    pub grace: Duration,
}

/// The response streaming `events`, each framed by `frame` in the binding's shape, within
/// `bounds`, on the connection whose deadline is `deadline` (when the accept loop gave one).
pub fn respond<F>(
    events: EventStream,
    frame: F,
    bounds: &StreamBounds,
    deadline: Option<&Arc<ConnectionDeadline>>,
) -> Response
where
    F: FnMut(StreamEvent) -> String + Send + 'static,
{
    let now = tokio::time::Instant::now();
    let state = Events {
        events,
        frame,
        keep_alive: tokio::time::interval_at(now + KEEP_ALIVE, KEEP_ALIVE),
        ends_at: now + bounds.longest,
        ended: false,
        _bound: deadline.map(|deadline| deadline.bound(bounds.longest + bounds.grace)),
    };
    let stream = futures_util::stream::unfold(state, |mut state| async move {
        if state.ended {
            return None;
        }
        let chunk = tokio::select! {
            event = state.events.next() => match event {
                Some(event) => Bytes::from(format!("data: {}\n\n", (state.frame)(event))),
                None => return None,
            },
            _ = state.keep_alive.tick() => Bytes::from_static(b": keep-alive\n\n"),
            () = tokio::time::sleep_until(state.ends_at) => {
                state.ended = true;
                Bytes::from_static(b": the stream reached its maximum duration; read the task with GetTask\n\n")
            }
        };
        Some((Ok::<_, std::convert::Infallible>(chunk), state))
    });
    (
        [
            (
                header::CONTENT_TYPE,
                HeaderValue::from_static("text/event-stream"),
            ),
            (header::CACHE_CONTROL, HeaderValue::from_static("no-cache")),
            // Tells nginx-style proxies to pass events on as they come.
            (
                header::HeaderName::from_static("x-accel-buffering"),
                HeaderValue::from_static("no"),
            ),
        ],
        Body::from_stream(stream),
    )
        .into_response()
}

#[cfg(test)]
mod tests {
    use super::*;
    use futures_util::StreamExt as _;

    #[tokio::test(start_paused = true)]
    async fn a_quiet_stream_sends_keep_alives_and_ends_at_its_maximum_duration() {
        let (events, receiver) = tokio::sync::mpsc::channel(4);
        let place = crate::shared::streams::StreamPermit::new(());
        let bounds = StreamBounds {
            longest: Duration::from_secs(40),
            grace: Duration::from_secs(20),
        };
        let deadline = ConnectionDeadline::new();
        let response = respond(
            EventStream::from_receiver(receiver, place),
            |event: StreamEvent| match event.into_response() {
                Ok(json) => json.get().to_owned(),
                Err(error) => error.to_json().to_string(),
            },
            &bounds,
            Some(&deadline),
        );
        assert_eq!(
            response.headers()[header::CONTENT_TYPE],
            "text/event-stream"
        );
        let json = serde_json::value::RawValue::from_string("{\"a\":1}".to_owned()).unwrap();
        events.send(StreamEvent::Response(json)).await.unwrap();
        let mut body = response.into_body().into_data_stream();
        let mut seen = Vec::new();
        while let Some(chunk) = body.next().await {
            seen.push(String::from_utf8(chunk.unwrap().to_vec()).unwrap());
        }
        assert_eq!(seen[0], "data: {\"a\":1}\n\n");
        // At 15 s and 30 s; then the end at 40 s, though the sender is still there.
        assert_eq!(seen[1..3], [": keep-alive\n\n", ": keep-alive\n\n"]);
        assert!(seen[3].contains("maximum duration"), "{seen:?}");
        assert_eq!(seen.len(), 4);
        drop(body);
        // The stream is over: the connection's deadline is lifted for what comes next on it.
        assert!(format!("{deadline:?}").contains("at: 0"), "{deadline:?}");
        drop(events);
    }
}

//! Server-Sent Events for the door's streams: each event a `data:` line, a comment every
//! [`KEEP_ALIVE`] so proxies and clients do not take a quiet model for a dead connection, and a
//! maximum duration after which the stream ends (the turn itself goes on and is stored).

use axum::body::{Body, Bytes};
use axum::http::{HeaderValue, header};
use axum::response::{IntoResponse, Response};
use std::time::Duration;
use tokio::sync::mpsc;

/// How often a quiet stream sends a comment.
pub const KEEP_ALIVE: Duration = Duration::from_secs(15);

struct Events {
    events: mpsc::Receiver<String>,
    keep_alive: tokio::time::Interval,
    ends_at: tokio::time::Instant,
    ended: bool,
}

/// The response streaming `events` for at most `longest`.
pub fn respond(events: mpsc::Receiver<String>, longest: Duration) -> Response {
    let now = tokio::time::Instant::now();
    let state = Events {
        events,
        keep_alive: tokio::time::interval_at(now + KEEP_ALIVE, KEEP_ALIVE),
        ends_at: now + longest,
        ended: false,
    };
    let stream = futures_util::stream::unfold(state, |mut state| async move {
        if state.ended {
            return None;
        }
        let chunk = tokio::select! {
            event = state.events.recv() => match event {
                Some(event) => Bytes::from(format!("data: {event}\n\n")),
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
        let (events, receiver) = mpsc::channel(4);
        let response = respond(receiver, Duration::from_secs(40));
        assert_eq!(
            response.headers()[header::CONTENT_TYPE],
            "text/event-stream"
        );
        events.send("{\"a\":1}".to_owned()).await.unwrap();
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
        drop(events);
    }
}

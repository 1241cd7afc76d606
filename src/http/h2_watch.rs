//! An HTTP/2 connection's streams, watched, so a client cannot hold the gateway's memory or its
//! connection slots by not reading or not asking.
//!
//! HTTP/1.1 needs only the socket guard ([`crate::http::stalled_writes`]): an answer nobody
//! reads fills the kernel's buffers and the write stalls. Over HTTP/2 a client that never
//! opens its flow-control window reads every frame the server sends, so no write ever stalls,
//! yet no answer's data may be sent: each answer waits, whole, in memory, and the client opens
//! the next stream. So each HTTP/2 connection has a watch of its own:
//!
//! * **An answer the client does not take.** Every answer's body is [`Watched`]: it gives its
//!   data in pieces of at most [`MAX_SEND_BUFFER`], and each wait is timed from the moment a
//!   piece is given (or, before the first, from the answer) until the connection asks for the
//!   next. The connection asks only once most of the last piece has gone to the client, so an
//!   answer that waits longer than `server.write_stall_seconds` is a client that stopped reading
//!   (or reads slower than a piece per that time), and the connection is closed, releasing
//!   every answer it held. A body waiting on its own source (a stream between events) is not
//!   counted.
//! * **A connection that asks nothing.** One that has not opened a stream within
//!   `server.header_read_timeout_seconds` of being accepted (it sent nothing, or only the
//!   preface) is closed, as the HTTP/1.1 door closes one that sends no head.
//! * **An idle connection.** One with no stream open for `grpc.idle_timeout_seconds` is sent
//!   GOAWAY and closed once its streams are done; a client opens a new one when it needs it.
//! * **Answers held at once.** A connection holding [`MAX_WAITING_ANSWERS`] answers its client
//!   has not taken gets no more: the call that asks for one more is refused at once
//!   (`not_reading`, by the listener's routes, which find the watch among a request's
//!   extensions), and the connection is sent GOAWAY, so it cannot turn into a flood of
//!   refusals; its client takes its answers and opens a new one. A client that reads takes
//!   each answer as it comes, so its answers wait only while in flight.
//! * **A connection told to go.** One sent GOAWAY for being idle or overrun has the write-stall
//!   time to finish its streams, then is closed: the last piece of an answer sits in HTTP/2's
//!   own buffer once its body is done, where only this deadline reaches it.
//!
//! What one connection buffers is so bounded: [`MAX_WAITING_ANSWERS`] answers waiting for a
//! window that does not open (and those of calls already running when the connection
//! overran, at most `grpc.max_concurrent_streams`), each two pieces of at most
//! [`MAX_SEND_BUFFER`] at a time, for at most the write-stall time. The watch asks no timer per stream: a waiting answer's deadline is never earlier than
//! one already known, so the connection's one timer wakes at the earliest deadline it knows of,
//! and looks again.

use crate::locks::Locked;
use axum::body::Bytes;
use std::pin::Pin;
use std::sync::{Arc, Mutex};
use std::task::{Context, Poll};
use std::time::Duration;
use tokio::time::Instant;

/// The most an answer's stream queues for the socket before its body is asked for more
/// (hyper's default is 400 KiB). Each answer is one or a few gRPC messages.
pub const MAX_SEND_BUFFER: usize = 64 * 1024;

/// The most answers one connection may hold that its client has not taken; past it, calls are
/// refused until the client reads.
pub const MAX_WAITING_ANSWERS: usize = 16;

/// The times an HTTP/2 connection is held to.
#[derive(Debug, Clone, Copy)]
pub struct StreamTimes {
    /// How long a new connection may take to open its first stream.
    pub first_stream: Duration,
    /// How long an answer may wait for the client to take its data.
    pub stall: Duration,
    /// How long a connection may have no stream open.
    pub idle: Duration,
}

/// Why a watched connection is to end.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Verdict {
    /// It opened no stream in time: closed at once.
    Silent,
    /// An answer waited too long for the client to take it: closed at once.
    Stalled,
    /// No stream open for the idle time: GOAWAY, then closed once its streams are done.
    Idle,
    /// A call asked for more while the connection held [`MAX_WAITING_ANSWERS`] answers its
    /// client had not taken: GOAWAY, then closed once its streams are done (or stall).
    Overrun,
}

/// One connection's streams: how many are open, and since when each answer that has data for
/// the client has waited.
#[derive(Debug)]
pub struct StreamWatch {
    accepted: Instant,
    state: Mutex<State>,
    /// Wakes the connection's timer early, for an overrun.
    woken: tokio::sync::Notify,
}

#[derive(Debug)]
struct State {
    /// Streams opened, ever.
    opened: u64,
    /// Streams open now (a request in hand, or an answer not yet done).
    open: usize,
    /// When the last open stream ended.
    idle_since: Instant,
    /// Answers with data for the client, by stream: since when they wait.
    waiting: Vec<(u64, Instant)>,
    /// Whether a call asked for more while [`MAX_WAITING_ANSWERS`] answers waited.
    overrun: bool,
}

impl StreamWatch {
    /// The watch of a connection accepted now.
    pub fn new() -> Arc<Self> {
        Self::accepted_at(Instant::now())
    }

    /// The watch of a connection accepted at `accepted`.
    pub fn accepted_at(accepted: Instant) -> Arc<Self> {
        let now = Instant::now();
        Arc::new(Self {
            accepted,
            state: Mutex::new(State {
                opened: 0,
                open: 0,
                idle_since: now,
                waiting: Vec::new(),
                overrun: false,
            }),
            woken: tokio::sync::Notify::new(),
        })
    }

    fn state(&self) -> std::sync::MutexGuard<'_, State> {
        // Nothing here can panic while the lock is held; a poisoned lock's counts are whole.
        self.state.locked()
    }

    /// How many answers wait for the client to take their data now.
    pub fn waiting(&self) -> usize {
        self.state().waiting.len()
    }

    /// Whether the connection holds as many answers its client has not taken as it may.
    pub fn holds_too_many(&self) -> bool {
        self.waiting() >= MAX_WAITING_ANSWERS
    }

    /// A stream opened: held until the returned guard, and the answer carrying it, are done.
    pub fn open(self: &Arc<Self>) -> OpenStream {
        let mut state = self.state();
        state.opened += 1;
        state.open += 1;
        if state.waiting.len() >= MAX_WAITING_ANSWERS && !state.overrun {
            state.overrun = true;
            self.woken.notify_one();
        }
        OpenStream {
            id: state.opened,
            watch: self.clone(),
        }
    }

    /// What the connection deserves at `now`, or when to look again; a connection already
    /// `closing` is not idle, only silent or stalled.
    fn judge(&self, now: Instant, times: StreamTimes, closing: bool) -> Result<Verdict, Instant> {
        let state = self.state();
        if state.overrun && !closing {
            return Ok(Verdict::Overrun);
        }
        let mut next = now + times.stall;
        if let Some(oldest) = state.waiting.iter().map(|(_, since)| *since).min() {
            if now >= oldest + times.stall {
                return Ok(Verdict::Stalled);
            }
            next = oldest + times.stall;
        }
        if state.opened == 0 {
            let due = self.accepted + times.first_stream;
            if now >= due {
                return Ok(Verdict::Silent);
            }
            next = next.min(due);
        } else if state.open == 0 && !closing {
            let due = state.idle_since + times.idle;
            if now >= due {
                return Ok(Verdict::Idle);
            }
            next = next.min(due);
        }
        Err(next)
    }

    /// Resolves when the connection deserves to end, and says why; a connection already
    /// `closing` is never idle.
    pub async fn verdict(&self, times: StreamTimes, closing: bool) -> Verdict {
        loop {
            match self.judge(Instant::now(), times, closing) {
                Ok(verdict) => return verdict,
                Err(next) => {
                    tokio::select! {
                        () = tokio::time::sleep_until(next) => {}
                        () = self.woken.notified() => {}
                    }
                }
            }
        }
    }
}

/// An open stream's place in its connection's watch; the stream ends when this drops.
#[derive(Debug)]
pub struct OpenStream {
    id: u64,
    watch: Arc<StreamWatch>,
}

impl OpenStream {
    /// Marks this stream's answer as waiting for the client from now (`true`: it just gave
    /// data, so an earlier wait ended and a new one begins), or not.
    fn waiting(&self, waiting: bool) {
        let mut state = self.watch.state();
        let at = state.waiting.iter().position(|(id, _)| *id == self.id);
        match (waiting, at) {
            (true, Some(at)) => state.waiting[at].1 = Instant::now(),
            (true, None) => state.waiting.push((self.id, Instant::now())),
            (false, Some(at)) => {
                state.waiting.swap_remove(at);
            }
            (false, None) => {}
        }
    }
}

impl Drop for OpenStream {
    fn drop(&mut self) {
        let mut state = self.watch.state();
        state.open -= 1;
        if let Some(at) = state.waiting.iter().position(|(id, _)| *id == self.id) {
            state.waiting.swap_remove(at);
        }
        if state.open == 0 {
            state.idle_since = Instant::now();
        }
    }
}

pin_project_lite::pin_project! {
    /// An answer's body whose waits for the client are watched (see the module's notes). Its
    /// data goes in pieces of at most [`MAX_SEND_BUFFER`]: the connection asks for the next
    /// piece only once most of the last has gone to the client, so each ask means the client
    /// took data, and no more than a piece waits unwatched.
    pub struct Watched<B> {
        #[pin]
        inner: B,
        stream: OpenStream,
        // What is left of a data frame larger than a piece.
        rest: Option<Bytes>,
    }
}

impl<B: http_body::Body<Data = Bytes>> Watched<B> {
    /// `inner`, answering on `stream`: it has its first frame for the client from now, unless
    /// it is already done.
    pub fn new(inner: B, stream: OpenStream) -> Self {
        stream.waiting(!inner.is_end_stream());
        Self {
            inner,
            stream,
            rest: None,
        }
    }
}

/// The first piece of `data`, leaving the rest in `rest`.
fn piece_of(mut data: Bytes, rest: &mut Option<Bytes>) -> Bytes {
    if data.len() > MAX_SEND_BUFFER {
        *rest = Some(data.split_off(MAX_SEND_BUFFER));
    }
    data
}

impl<B: http_body::Body<Data = Bytes>> http_body::Body for Watched<B> {
    type Data = Bytes;
    type Error = B::Error;

    fn poll_frame(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
    ) -> Poll<Option<Result<http_body::Frame<Bytes>, Self::Error>>> {
        let this = self.project();
        if let Some(rest) = this.rest.take() {
            this.stream.waiting(true);
            return Poll::Ready(Some(Ok(http_body::Frame::data(piece_of(rest, this.rest)))));
        }
        let polled = match this.inner.poll_frame(cx) {
            Poll::Ready(Some(Ok(frame))) => match frame.into_data() {
                Ok(data) => {
                    Poll::Ready(Some(Ok(http_body::Frame::data(piece_of(data, this.rest)))))
                }
                Err(frame) => Poll::Ready(Some(Ok(frame))),
            },
            other => other,
        };
        // Data given to the connection leaves the body with more to give only once the
        // client has room; trailers, the end, an error or a wait on the source are not the
        // client's to answer for.
        let gave_data = matches!(&polled, Poll::Ready(Some(Ok(frame))) if frame.is_data());
        this.stream.waiting(gave_data);
        polled
    }

    fn is_end_stream(&self) -> bool {
        self.rest.is_none() && self.inner.is_end_stream()
    }

    fn size_hint(&self) -> http_body::SizeHint {
        let rest = self.rest.as_ref().map_or(0, |rest| rest.len() as u64);
        let inner = self.inner.size_hint();
        let mut hint = http_body::SizeHint::new();
        hint.set_lower(inner.lower() + rest);
        if let Some(upper) = inner.upper() {
            hint.set_upper(upper + rest);
        }
        hint
    }
}

/// What a connection serves: the listener's app, as hyper calls it.
pub trait ConnectionApp:
    tower::Service<
        hyper::Request<hyper::body::Incoming>,
        Response = axum::response::Response,
        Error = std::convert::Infallible,
        Future: Send + 'static,
    > + Clone
    + Send
    + 'static
{
}

impl<S> ConnectionApp for S where
    S: tower::Service<
            hyper::Request<hyper::body::Incoming>,
            Response = axum::response::Response,
            Error = std::convert::Infallible,
            Future: Send + 'static,
        > + Clone
        + Send
        + 'static
{
}

/// How a connection learns that the listener drains, and holds the drain open until it ends.
pub struct Drain {
    /// Held for as long as the connection is served: the listener waits for every one.
    pub watcher: hyper_util::server::graceful::Watcher,
    /// Turns true when the listener drains.
    pub shutdown: tokio::sync::watch::Receiver<bool>,
    /// When the connection was accepted (before any TLS handshake): its first stream is due
    /// within the header-read time of this.
    pub accepted: Instant,
}

/// Serves `app` over HTTP/2 on `io`, watched: closed at once when silent or stalled, sent
/// GOAWAY when idle or when the listener drains.
pub async fn serve_connection<I, S>(
    http: &hyper::server::conn::http2::Builder<hyper_util::rt::TokioExecutor>,
    io: I,
    app: S,
    drain: Drain,
    times: StreamTimes,
) where
    I: hyper::rt::Read + hyper::rt::Write + Unpin + Send + 'static,
    S: ConnectionApp,
{
    let Drain {
        watcher,
        mut shutdown,
        accepted,
    } = drain;
    let watch = StreamWatch::accepted_at(accepted);
    let app = hyper_util::service::TowerToHyperService::new(watched(app, watch.clone()));
    let mut connection = std::pin::pin!(http.serve_connection(io, app));
    let mut closing = false;
    // Once sent GOAWAY for being idle or overrun, the connection's streams get the write-stall
    // time to end: an answer whose last piece waits in HTTP/2's buffer for a client that
    // trickles its window is watched by nothing else.
    let mut gone_by = None;
    loop {
        let hard_deadline = async {
            match gone_by {
                Some(at) => tokio::time::sleep_until(at).await,
                None => std::future::pending().await,
            }
        };
        tokio::select! {
            // Errors here are the client's (a reset, a protocol error): nothing to do.
            _ = connection.as_mut() => break,
            () = hard_deadline => break,
            _ = shutdown.wait_for(|draining| *draining), if !closing => {
                closing = true;
                connection.as_mut().graceful_shutdown();
            }
            verdict = watch.verdict(times, closing) => match verdict {
                Verdict::Idle | Verdict::Overrun => {
                    closing = true;
                    gone_by = Some(Instant::now() + times.stall);
                    connection.as_mut().graceful_shutdown();
                }
                Verdict::Silent | Verdict::Stalled => break,
            },
        }
    }
    drop(watcher);
}

/// `app` with every request's stream counted in `watch`, and every answer's body watched; the
/// watch goes with each request, for the routes to refuse calls past [`MAX_WAITING_ANSWERS`].
fn watched<S: ConnectionApp>(app: S, watch: Arc<StreamWatch>) -> impl ConnectionApp {
    use tower::ServiceExt;
    tower::service_fn(move |mut request: hyper::Request<hyper::body::Incoming>| {
        // Opened before the request is handled: a client that resets the stream first
        // closes it with the handler's future.
        let stream = watch.open();
        request.extensions_mut().insert(watch.clone());
        let app = app.clone();
        async move {
            let response = app.oneshot(request).await?;
            Ok(response.map(|body| axum::body::Body::new(Watched::new(body, stream))))
        }
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use axum::body::Bytes;
    use http_body::Body as _;
    use http_body_util::{BodyExt, Full, StreamBody};

    const TIMES: StreamTimes = StreamTimes {
        first_stream: Duration::from_secs(5),
        stall: Duration::from_secs(30),
        idle: Duration::from_secs(60),
    };

    fn at(watch: &StreamWatch, after: u64) -> Result<Verdict, Instant> {
        watch.judge(watch.accepted + Duration::from_secs(after), TIMES, false)
    }

    #[tokio::test(start_paused = true)]
    async fn a_connection_that_opens_no_stream_is_silent_at_the_first_stream_deadline() {
        let watch = StreamWatch::new();
        assert_eq!(at(&watch, 4), Err(watch.accepted + Duration::from_secs(5)));
        assert_eq!(at(&watch, 5), Ok(Verdict::Silent));
        let stream = watch.open();
        assert!(at(&watch, 5).is_err(), "a connection with a stream open");
        drop(stream);
        assert_eq!(
            at(&watch, 60),
            Ok(Verdict::Idle),
            "idle since its stream ended"
        );
    }

    #[tokio::test(start_paused = true)]
    async fn an_answer_whose_data_the_client_never_takes_stalls_the_connection() {
        let watch = StreamWatch::new();
        let body = Watched::new(Full::new(Bytes::from_static(b"answer")), watch.open());
        // Never asked for its frame: the client's window never had room.
        assert_eq!(
            at(&watch, 29),
            Err(watch.accepted + Duration::from_secs(30))
        );
        assert_eq!(at(&watch, 30), Ok(Verdict::Stalled));
        drop(body);
        assert!(at(&watch, 30).is_err(), "the answer went with its stream");
    }

    #[tokio::test(start_paused = true)]
    async fn a_call_past_the_answers_a_connection_may_hold_overruns_it() {
        let watch = StreamWatch::new();
        let held: Vec<_> = (0..MAX_WAITING_ANSWERS)
            .map(|_| Watched::new(Full::new(Bytes::from_static(b"answer")), watch.open()))
            .collect();
        assert!(watch.holds_too_many());
        assert!(at(&watch, 1).is_err(), "holding them is not yet an overrun");
        let _asked = watch.open();
        assert_eq!(at(&watch, 1), Ok(Verdict::Overrun));
        assert!(
            watch.judge(watch.accepted, TIMES, true).is_err(),
            "a closing connection is told once"
        );
        drop(held);
        assert!(!watch.holds_too_many());
    }

    #[tokio::test(start_paused = true)]
    async fn a_source_always_ready_restarts_the_wait_at_each_piece_the_client_takes() {
        let watch = StreamWatch::new();
        let big = Bytes::from(vec![7u8; 3 * MAX_SEND_BUFFER + 10]);
        let mut body = std::pin::pin!(Watched::new(Full::new(big), watch.open()));
        let mut taken = 0;
        while let Some(frame) = body.frame().await {
            let data = frame.unwrap().into_data().unwrap();
            assert!(
                data.len() <= MAX_SEND_BUFFER,
                "a piece of {} bytes",
                data.len()
            );
            taken += data.len();
            // The client takes a piece every 20 s: slow, never 30 s behind.
            tokio::time::advance(Duration::from_secs(20)).await;
            assert!(
                watch.judge(Instant::now(), TIMES, false).is_err(),
                "a client that keeps taking pieces was judged stalled"
            );
        }
        assert_eq!(taken, 3 * MAX_SEND_BUFFER + 10);
    }

    #[tokio::test(start_paused = true)]
    async fn an_answer_the_client_takes_or_that_waits_on_its_source_is_not_stalled() {
        let watch = StreamWatch::new();
        let (tx, rx) = tokio::sync::mpsc::channel::<Result<http_body::Frame<Bytes>, String>>(1);
        let events = StreamBody::new(tokio_stream_of(rx));
        let mut body = std::pin::pin!(Watched::new(events, watch.open()));
        tx.send(Ok(http_body::Frame::data(Bytes::from_static(b"e1"))))
            .await
            .unwrap();
        let first = body.frame().await.unwrap().unwrap();
        assert!(first.is_data());
        tokio::time::advance(Duration::from_secs(20)).await;
        // The connection asks again (the client had room); the source has nothing yet.
        let waker = futures_util::task::noop_waker();
        let polled = body
            .as_mut()
            .poll_frame(&mut std::task::Context::from_waker(&waker));
        assert!(polled.is_pending());
        tokio::time::advance(Duration::from_secs(600)).await;
        assert!(
            watch.judge(Instant::now(), TIMES, false).is_err(),
            "a stream between events is the source's wait, not the client's"
        );
        drop(tx);
        assert!(body.frame().await.is_none());
    }

    /// A receiver as a stream of frames.
    fn tokio_stream_of<T>(
        rx: tokio::sync::mpsc::Receiver<T>,
    ) -> impl futures_util::Stream<Item = T> {
        futures_util::stream::unfold(rx, |mut rx| async move {
            rx.recv().await.map(|item| (item, rx))
        })
    }
}

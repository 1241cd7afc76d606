//! A real HTTP server on loopback receiving push notifications: it records each POST (headers
//! and JSON body), answers with the status a test sets, and can hold each request a while so a
//! test sees how many arrive at once.

use axum::Router;
use axum::body::Bytes;
use axum::extract::State;
use axum::http::{HeaderMap, StatusCode};
use axum::routing::post;
use serde_json::Value;
use std::sync::atomic::{AtomicU16, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

/// One notification as received.
#[derive(Debug, Clone)]
pub struct Notification {
    pub headers: HeaderMap,
    pub body: Value,
}

#[derive(Clone, Default)]
struct ReceiverState {
    status: Arc<AtomicU16>,
    hold: Arc<Mutex<Duration>>,
    received: Arc<Mutex<Vec<Notification>>>,
    /// (in flight now, most ever in flight)
    in_flight: Arc<Mutex<(usize, usize)>>,
}

/// A push-notification receiver on 127.0.0.1.
pub struct PushReceiver {
    /// Its callback URL (`http://127.0.0.1:PORT/hook`).
    pub url: String,
    state: ReceiverState,
    /// Connections accepted.
    connections: Arc<AtomicUsize>,
}

impl PushReceiver {
    /// Starts answering 200.
    pub async fn start() -> Self {
        let state = ReceiverState::default();
        state.status.store(200, Ordering::SeqCst);
        let app = Router::new()
            .route("/hook", post(receive))
            .with_state(state.clone());
        let (listener, addr, connections) = super::counting_listener().await;
        tokio::spawn(async move { axum::serve(listener, app).await });
        Self {
            url: format!("http://{addr}/hook"),
            connections,
            state,
        }
    }

    /// Answers every later notification with `status`.
    pub fn answer(&self, status: u16) {
        self.state.status.store(status, Ordering::SeqCst);
    }

    /// Holds every later notification this long before answering.
    pub fn hold(&self, duration: Duration) {
        *self.state.hold.lock().unwrap() = duration;
    }

    /// Everything received so far (answered or not).
    pub fn received(&self) -> Vec<Notification> {
        self.state.received.lock().unwrap().clone()
    }

    /// Connections accepted so far.
    pub fn connections(&self) -> usize {
        self.connections.load(Ordering::SeqCst)
    }

    /// The most notifications ever in flight at once.
    pub fn peak_in_flight(&self) -> usize {
        self.state.in_flight.lock().unwrap().1
    }

    /// Waits (up to 30 s) until at least `n` notifications arrived; returns them all.
    pub async fn wait_for(&self, n: usize) -> Vec<Notification> {
        for _ in 0..600 {
            let received = self.received();
            if received.len() >= n {
                return received;
            }
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
        panic!(
            "{} notifications arrived, {n} expected",
            self.received().len()
        );
    }
}

async fn receive(
    State(state): State<ReceiverState>,
    headers: HeaderMap,
    body: Bytes,
) -> StatusCode {
    let body = serde_json::from_slice(&body).unwrap_or(Value::Null);
    state
        .received
        .lock()
        .unwrap()
        .push(Notification { headers, body });
    {
        let mut counts = state.in_flight.lock().unwrap();
        counts.0 += 1;
        counts.1 = counts.1.max(counts.0);
    }
    let hold = *state.hold.lock().unwrap();
    tokio::time::sleep(hold).await;
    state.in_flight.lock().unwrap().0 -= 1;
    StatusCode::from_u16(state.status.load(Ordering::SeqCst)).unwrap()
}

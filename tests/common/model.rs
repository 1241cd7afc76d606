//! A real HTTP server on loopback speaking the OpenAI chat-completions API, which records what
//! it receives and answers as a test tells it to.

use super::policy::PolicyEdit;
use axum::extract::State;
use axum::http::{HeaderMap, StatusCode};
use axum::response::{IntoResponse, Response};
use axum::routing::post;
use axum::{Json, Router};
use peergate::config::Policy;
use serde_json::{Value, json};
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;
use tokio::sync::Notify;

/// How the fake model server behaves.
#[derive(Clone, Debug)]
pub enum ModelBehaviour {
    /// Answers `model says: <last user text>`.
    Answer,
    /// Waits this long before answering.
    Slow(Duration),
    /// Answers HTTP 500 with a body that must never reach a peer.
    ServerError,
    /// Answers 200 with a body that is not JSON.
    Malformed,
    /// Answers 200 with JSON that holds no choices.
    NoChoices,
    /// Answers 200 with a body over peergate's 4 MiB cap.
    Oversized,
    /// Holds each request until `release` is notified.
    Gated,
    /// Streams its answer without reporting usage (a server that ignores `include_usage`).
    StreamWithoutUsage,
}

/// The secret the fake model puts in every failure body; it must never reach a peer.
pub const UPSTREAM_SECRET: &str = "upstream-internal-detail-7f3a";

#[derive(Clone)]
struct ModelState {
    behaviour: Arc<Mutex<ModelBehaviour>>,
    received: Arc<Mutex<Vec<(HeaderMap, Value)>>>,
    versions: Arc<Mutex<Vec<axum::http::Version>>>,
    release: Arc<Notify>,
    arrived: Arc<Notify>,
    in_flight: Arc<Mutex<(usize, usize)>>,
}

/// A real HTTP server on loopback speaking the OpenAI chat-completions API.
pub struct FakeModel {
    pub base_url: String,
    state: ModelState,
    /// Connections accepted (over TLS: handshakes completed).
    connections: Arc<AtomicUsize>,
}

impl FakeModel {
    pub async fn start(behaviour: ModelBehaviour) -> Self {
        Self::start_on(behaviour, false).await
    }

    /// Serves over TLS with a certificate for `localhost` signed by the test CA.
    pub async fn start_tls(behaviour: ModelBehaviour) -> Self {
        Self::start_on(behaviour, true).await
    }

    async fn start_on(behaviour: ModelBehaviour, tls: bool) -> Self {
        crate::common::install_test_crypto();
        let state = ModelState {
            behaviour: Arc::new(Mutex::new(behaviour)),
            received: Arc::default(),
            versions: Arc::default(),
            release: Arc::new(Notify::new()),
            arrived: Arc::new(Notify::new()),
            in_flight: Arc::default(),
        };
        let app = Router::new()
            .route("/v1/chat/completions", post(chat))
            .with_state(state.clone());
        let (base_url, connections) = if tls {
            let listener = super::tls::TlsListener::bind().await;
            let port = axum::serve::Listener::local_addr(&listener).unwrap().port();
            let handshakes = listener.handshakes();
            tokio::spawn(async move { axum::serve(listener, app).await });
            (format!("https://localhost:{port}/v1"), handshakes)
        } else {
            let (listener, addr, accepted) = super::counting_listener().await;
            tokio::spawn(async move { axum::serve(listener, app).await });
            (format!("http://{addr}/v1"), accepted)
        };
        Self {
            base_url,
            state,
            connections,
        }
    }

    pub fn set(&self, behaviour: ModelBehaviour) {
        *self.state.behaviour.lock().unwrap() = behaviour;
    }

    /// Request bodies received so far.
    pub fn requests(&self) -> Vec<Value> {
        self.state
            .received
            .lock()
            .unwrap()
            .iter()
            .map(|(_, b)| b.clone())
            .collect()
    }

    /// Headers of the requests received so far.
    pub fn headers(&self) -> Vec<HeaderMap> {
        self.state
            .received
            .lock()
            .unwrap()
            .iter()
            .map(|(h, _)| h.clone())
            .collect()
    }

    /// The HTTP version of each request received so far.
    pub fn versions(&self) -> Vec<axum::http::Version> {
        self.state.versions.lock().unwrap().clone()
    }

    /// Connections accepted so far (over TLS: handshakes completed).
    pub fn connections(&self) -> usize {
        self.connections.load(Ordering::SeqCst)
    }

    /// The most requests that were in flight at once.
    pub fn max_in_flight(&self) -> usize {
        self.state.in_flight.lock().unwrap().1
    }

    /// Waits until a request has arrived (for `Gated`).
    pub async fn wait_for_arrival(&self) {
        tokio::time::timeout(Duration::from_secs(30), self.state.arrived.notified())
            .await
            .expect("no request reached the model");
    }

    /// Lets one gated request answer.
    pub fn release_one(&self) {
        self.state.release.notify_one();
    }

    /// A policy using this server as the openai backend.
    pub fn policy(&self, timeout_seconds: u64) -> Policy {
        PolicyEdit::default()
            .openai(&self.base_url, "test-model")
            .set("model.timeout_seconds", timeout_seconds)
            .policy()
    }
}

/// `text` as an OpenAI stream: a chunk a word, then the usage, then `[DONE]`.
fn streamed(text: &str) -> Response {
    let mut body = String::new();
    for word in text.split_inclusive(' ') {
        let chunk = json!({"object": "chat.completion.chunk",
            "choices": [{"index": 0, "delta": {"content": word}}]});
        body.push_str(&format!("data: {chunk}\n\n"));
    }
    let usage = json!({"object": "chat.completion.chunk", "choices": [],
        "usage": {"prompt_tokens": 11, "completion_tokens": 7, "total_tokens": 18}});
    body.push_str(&format!("data: {usage}\n\ndata: [DONE]\n\n"));
    ([("content-type", "text/event-stream")], body).into_response()
}

async fn chat(
    State(state): State<ModelState>,
    version: axum::http::Version,
    headers: HeaderMap,
    Json(body): Json<Value>,
) -> Response {
    state.versions.lock().unwrap().push(version);
    state.received.lock().unwrap().push((headers, body.clone()));
    {
        let mut in_flight = state.in_flight.lock().unwrap();
        in_flight.0 += 1;
        in_flight.1 = in_flight.1.max(in_flight.0);
    }
    state.arrived.notify_one();
    let behaviour = state.behaviour.lock().unwrap().clone();
    let last_user = body["messages"]
        .as_array()
        .and_then(|m| m.last())
        .and_then(|m| m["content"].as_str())
        .unwrap_or("")
        .to_owned();
    let answer = json!({
        "id": "chatcmpl-1",
        "object": "chat.completion",
        "choices": [{"index": 0, "message": {"role": "assistant", "content": format!("model says: {last_user}")}, "finish_reason": "stop"}],
        "usage": {"prompt_tokens": 11, "completion_tokens": 7, "total_tokens": 18},
    });
    if body["stream"] == true && matches!(behaviour, ModelBehaviour::StreamWithoutUsage) {
        state.in_flight.lock().unwrap().0 -= 1;
        let mut streamed = String::new();
        for word in format!("model says: {last_user}").split_inclusive(' ') {
            let chunk = json!({"choices": [{"index": 0, "delta": {"content": word}}]});
            streamed.push_str(&format!("data: {chunk}\n\n"));
        }
        streamed.push_str("data: [DONE]\n\n");
        return ([("content-type", "text/event-stream")], streamed).into_response();
    }
    if body["stream"] == true
        && matches!(
            behaviour,
            ModelBehaviour::Answer | ModelBehaviour::Slow(_) | ModelBehaviour::Gated
        )
    {
        match behaviour {
            ModelBehaviour::Slow(delay) => tokio::time::sleep(delay).await,
            ModelBehaviour::Gated => state.release.notified().await,
            _ => {}
        }
        state.in_flight.lock().unwrap().0 -= 1;
        return streamed(&format!("model says: {last_user}"));
    }
    let response = match behaviour {
        ModelBehaviour::Answer | ModelBehaviour::StreamWithoutUsage => Json(answer).into_response(),
        ModelBehaviour::Slow(delay) => {
            tokio::time::sleep(delay).await;
            Json(answer).into_response()
        }
        ModelBehaviour::Gated => {
            state.release.notified().await;
            Json(answer).into_response()
        }
        ModelBehaviour::ServerError => (
            StatusCode::INTERNAL_SERVER_ERROR,
            format!("{{\"error\":\"{UPSTREAM_SECRET}\"}}"),
        )
            .into_response(),
        ModelBehaviour::Malformed => {
            (StatusCode::OK, format!("{{\"choices\": [{UPSTREAM_SECRET}")).into_response()
        }
        ModelBehaviour::NoChoices => {
            Json(json!({"choices": [], "detail": UPSTREAM_SECRET})).into_response()
        }
        ModelBehaviour::Oversized => {
            let filler = "x".repeat(5 * 1024 * 1024);
            Json(json!({"choices": [{"message": {"content": filler}}]})).into_response()
        }
    };
    state.in_flight.lock().unwrap().0 -= 1;
    response
}

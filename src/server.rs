//! Wiring: the routes, their layers, and the listener.

use crate::agent::{Agent, AgentSettings};
use crate::auth::{AuthenticatedPeer, BearerAuthLayer, PeerAuthenticator};
use crate::backend::{Backend, BackendSetupError};
use crate::card;
use crate::clock::Clock;
use crate::policy::{Policy, PolicySource};
use crate::store::{Store, StoreError};
use axum::body::Bytes;
use axum::extract::{DefaultBodyLimit, State};
use axum::http::{HeaderValue, StatusCode, header};
use axum::response::{IntoResponse, Response};
use axum::routing::{get, post};
use axum::{Json, Router};
use serde_json::json;
use std::net::SocketAddr;
use std::path::PathBuf;
use std::sync::Arc;
use std::time::Duration;
use tokio::sync::oneshot;
use tower_http::catch_panic::CatchPanicLayer;
use tower_http::limit::RequestBodyLimitLayer;

/// Everything needed to start a gateway.
pub struct GatewayOptions {
    /// The policy.
    pub policy: Policy,
    /// Where it came from.
    pub policy_source: PolicySource,
    /// The data directory.
    pub data_dir: PathBuf,
    /// Overrides `server.listen`.
    pub listen: Option<SocketAddr>,
    /// The clock; tests pass a manual one.
    pub clock: Arc<dyn Clock>,
}

/// Why the gateway did not start.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum StartError {
    /// The store could not be opened.
    #[error("cannot open the store: {0}")]
    Store(#[from] StoreError),
    /// The backend could not be set up.
    #[error("{0}")]
    Backend(#[from] BackendSetupError),
    /// The listen address could not be bound.
    #[error("cannot listen on {addr}: {reason}")]
    Bind {
        /// The address.
        addr: SocketAddr,
        /// The operating system's reason.
        reason: std::io::ErrorKind,
    },
}

/// A gateway that is serving.
pub struct RunningGateway {
    /// The bound address (useful with port 0).
    pub local_addr: SocketAddr,
    /// The door's URL as the card advertises it.
    pub door_url: String,
    shutdown: Option<oneshot::Sender<()>>,
    serving: tokio::task::JoinHandle<std::io::Result<()>>,
    sweeper: tokio::task::JoinHandle<()>,
    store: Store,
}

impl RunningGateway {
    /// Stops accepting, lets in-flight requests finish, and closes the store.
    pub async fn shutdown(mut self) {
        if let Some(tx) = self.shutdown.take() {
            let _ = tx.send(());
        }
        let _ = (&mut self.serving).await;
        self.sweeper.abort();
        self.store.close().await;
    }

    /// Serves until `signal` completes, then shuts down gracefully.
    pub async fn run_until(self, signal: impl std::future::Future<Output = ()>) {
        signal.await;
        self.shutdown().await;
    }
}

#[derive(Clone)]
struct AppState {
    agent: Arc<Agent>,
    card: Bytes,
}

/// Opens the store, binds the listener and starts serving.
pub async fn start(options: GatewayOptions) -> Result<RunningGateway, StartError> {
    let policy = options.policy;
    let backend = Backend::from_policy(&policy.model)?;
    let store = Store::open(&options.data_dir).await?;
    let addr = options.listen.unwrap_or(policy.server.listen);
    let listener = tokio::net::TcpListener::bind(addr)
        .await
        .map_err(|e| StartError::Bind {
            addr,
            reason: e.kind(),
        })?;
    let local_addr = listener.local_addr().map_err(|e| StartError::Bind {
        addr,
        reason: e.kind(),
    })?;
    let door_url = card::door_url(&policy, local_addr);
    let card_bytes =
        Bytes::from(serde_json::to_vec(&card::public_card(&policy, &door_url)).unwrap_or_default());

    tracing::info!(policy = %options.policy_source, "policy loaded");
    tracing::info!(
        data_dir = %options.data_dir.display(),
        database = %store.path().display(),
        "store opened"
    );
    tracing::info!("model backend: {}", backend.describe());

    let settings = AgentSettings {
        instructions: policy.model.instructions.clone(),
        task_retention: Duration::from_secs(u64::from(policy.tasks.retention_hours) * 3600),
        context_messages: policy.tasks.context_messages,
        max_text_bytes: policy.tasks.max_text_bytes,
        backend_timeout: Duration::from_secs(policy.model.timeout_seconds),
    };
    let agent = Arc::new(Agent::new(
        store.clone(),
        backend,
        options.clock.clone(),
        settings,
    ));
    let authenticator = PeerAuthenticator::new(
        store.clone(),
        options.clock.clone(),
        Duration::from_secs(policy.auth.credential_cache_seconds),
    );
    let state = AppState {
        agent,
        card: card_bytes,
    };
    let a2a_path = policy.server.a2a_path.clone();
    // The door alone carries authentication; the card and /health are public.
    let door_routes = Router::new()
        .route(&a2a_path, post(door))
        .route(&format!("{a2a_path}/"), post(door))
        .layer(DefaultBodyLimit::disable())
        .layer(RequestBodyLimitLayer::new(policy.server.max_body_bytes))
        .layer(BearerAuthLayer::new(authenticator));
    let router = Router::new()
        .route("/.well-known/agent-card.json", get(agent_card))
        .route("/.well-known/agent.json", get(agent_card))
        .route("/health", get(health))
        .merge(door_routes)
        .fallback(not_found)
        .with_state(state)
        .layer(CatchPanicLayer::custom(panic_response));

    let (shutdown_tx, shutdown_rx) = oneshot::channel::<()>();
    let serving = tokio::spawn(async move {
        axum::serve(
            listener,
            router.into_make_service_with_connect_info::<SocketAddr>(),
        )
        .with_graceful_shutdown(async move {
            let _ = shutdown_rx.await;
        })
        .await
    });
    let sweeper = tokio::spawn(sweep_expired_tasks(store.clone(), options.clock.clone()));
    tracing::info!(
        "peergate listening on http://{local_addr}; A2A door {door_url}; card http://{local_addr}/.well-known/agent-card.json"
    );
    Ok(RunningGateway {
        local_addr,
        door_url,
        shutdown: Some(shutdown_tx),
        serving,
        sweeper,
        store,
    })
}

async fn door(State(state): State<AppState>, peer: AuthenticatedPeer, body: Bytes) -> Response {
    Json(state.agent.handle(&peer, &body).await).into_response()
}

async fn agent_card(State(state): State<AppState>) -> Response {
    (
        [(
            header::CONTENT_TYPE,
            HeaderValue::from_static("application/json"),
        )],
        state.card.clone(),
    )
        .into_response()
}

async fn health() -> Json<serde_json::Value> {
    Json(json!({"status": "healthy"}))
}

async fn not_found() -> Response {
    (
        StatusCode::NOT_FOUND,
        Json(json!({"error": {"code": "not_found", "message": "no such route"}})),
    )
        .into_response()
}

fn panic_response(_panic: Box<dyn std::any::Any + Send + 'static>) -> Response {
    let request_id = uuid::Uuid::new_v4().to_string();
    tracing::error!(request_id = %request_id, "a request handler panicked");
    (
        StatusCode::INTERNAL_SERVER_ERROR,
        Json(json!({"error": {"code": "internal", "message": "internal error", "requestId": request_id}})),
    )
        .into_response()
}

/// Removes expired tasks once a minute; `GetTask` already hides them before that.
async fn sweep_expired_tasks(store: Store, clock: Arc<dyn Clock>) {
    let mut tick = tokio::time::interval(Duration::from_secs(60));
    loop {
        tick.tick().await;
        match store.delete_expired_tasks(clock.now_millis()).await {
            Ok(0) => {}
            Ok(n) => tracing::debug!(removed = n, "expired tasks removed"),
            Err(e) => tracing::warn!(error = %e, "could not remove expired tasks"),
        }
    }
}

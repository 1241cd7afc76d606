//! Wiring: the routes, their layers, and the listener.

use crate::a2a::agent::{Agent, AgentSettings};
use crate::a2a::card;
use crate::admin::api::AdminState;
use crate::admin::budget::{BudgetDefaults, Budgets};
use crate::admin::{AccountDefaults, AccountService, AdminAuthenticator};
use crate::backend::BackendSetupError;
use crate::clock::Clock;
use crate::config::{Policy, PolicySource};
use crate::http::accept::ConnectionLimits;
use crate::http::document::{self, CachedDocument};
use crate::http::refusal::{self, Refusal};
use crate::jose::{keys, sign};
use crate::layers::auth::{
    AuthLayer, AuthMode, AuthSettings, AuthenticatedPeer, PeerAuthenticator,
};
use crate::layers::client_addr::ClientAddr;
use crate::layers::client_addr::ClientAddrLayer;
use crate::layers::gate::GateLayer;
use crate::layers::limit::{PerIpLimitLayer, PerPeerLimitLayer, Quota};
use crate::layers::metrics::{Metrics, MetricsLayer};
use crate::shared::changes::{Change, ChangeListener, ChangeNotifier, LocalChanges};
use crate::store::{Store, StoreError};
use axum::Extension;
use axum::body::Bytes;
use axum::extract::{DefaultBodyLimit, State};
use axum::http::{HeaderMap, HeaderValue, StatusCode, header};
use axum::response::{IntoResponse, Response};
use axum::routing::{get, post};
use axum::{Json, Router};
use serde_json::json;
use std::net::SocketAddr;
use std::path::PathBuf;
use std::sync::Arc;
use std::time::Duration;
use tower_http::catch_panic::CatchPanicLayer;
use tower_http::limit::RequestBodyLimitLayer;
use tower_http::timeout::TimeoutLayer;

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
    /// Overrides `server.admin_listen`.
    pub admin_listen: Option<SocketAddr>,
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
    /// A setting the layers refuse.
    #[error("{0}")]
    Config(String),
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
    /// The admin API's bound address.
    pub admin_addr: SocketAddr,
    shutdown: Option<tokio::sync::watch::Sender<bool>>,
    serving: tokio::task::JoinHandle<std::io::Result<()>>,
    admin_serving: tokio::task::JoinHandle<std::io::Result<()>>,
    accounts: AccountService,
    sweeper: tokio::task::JoinHandle<()>,
    store: Store,
    authenticator: Arc<PeerAuthenticator>,
}

impl RunningGateway {
    /// Stops accepting, lets in-flight requests finish, and closes the store.
    pub async fn shutdown(mut self) {
        if let Some(tx) = self.shutdown.take() {
            let _ = tx.send(true);
        }
        let _ = (&mut self.serving).await;
        let _ = (&mut self.admin_serving).await;
        self.sweeper.abort();
        self.store.close().await;
    }

    /// How many Argon2 password verifications ran since start-up.
    pub fn password_verifications(&self) -> u64 {
        self.authenticator.password_verifications()
    }

    /// The most Argon2 verifications that ever ran at once.
    pub fn password_peak_concurrency(&self) -> usize {
        self.authenticator.password_peak_concurrency()
    }

    /// The account service of this running server: changes made through it drop what the
    /// server cached, so they apply to the very next request.
    pub fn accounts(&self) -> &AccountService {
        &self.accounts
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
    card: Arc<CachedDocument>,
    extended: Arc<CachedDocument>,
    /// Rebuilt when the day changes, so a retiring key leaves on its date.
    jwks: Arc<std::sync::RwLock<Arc<CachedDocument>>>,
}

/// Opens the store, binds the listener and starts serving.
pub async fn start(options: GatewayOptions) -> Result<RunningGateway, StartError> {
    crate::http::tls::ensure_provider();
    let policy = options.policy;
    let backend = crate::backend::from_policy(&policy.model)?;
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
    let admin_bind = options.admin_listen.unwrap_or(policy.server.admin_listen);
    // The command line may override the policy's address: the same rule applies.
    crate::config::check_admin_listen(admin_bind, addr).map_err(|reason| {
        StartError::Config(format!("--admin-listen / server.admin_listen {reason}"))
    })?;
    let admin_listener = tokio::net::TcpListener::bind(admin_bind)
        .await
        .map_err(|e| StartError::Bind {
            addr: admin_bind,
            reason: e.kind(),
        })?;
    let admin_addr = admin_listener.local_addr().map_err(|e| StartError::Bind {
        addr: admin_bind,
        reason: e.kind(),
    })?;
    let door_url = card::door_url(&policy, local_addr);
    let config = |e: &dyn std::fmt::Display| StartError::Config(e.to_string());
    let today = crate::clock::utc_day(options.clock.now_millis());
    let policy_keys = keys::load(&policy.signing, &options.data_dir).map_err(|e| config(&e))?;
    let signing_keys = policy_keys.signing;
    let jku = policy.signing.jwks_url.as_deref();
    let public_card = card::public_card(&policy, &door_url);
    // Fail closed: a card holding values the SDKs drop would verify in some clients only.
    if sign::holds_droppable_values(&public_card) {
        return Err(StartError::Config(
            "the Agent Card would hold an empty value (check the [card] keys: no empty strings or lists)"
                .to_owned(),
        ));
    }
    // The card URL answers differently to requests carrying credentials.
    let vary = if policy
        .auth_schemes()
        .contains(&crate::layers::auth::Scheme::ApiKey)
    {
        format!("Authorization, {}", policy.auth.api_key_header)
    } else {
        "Authorization".to_owned()
    };
    let signed_card = sign::sign_card(&public_card, &signing_keys, jku).map_err(|e| config(&e))?;
    let card_bytes = Bytes::from(serde_json::to_vec(&signed_card).unwrap_or_default());
    let signed_extended = sign::sign_card(&card::extended_card(&public_card), &signing_keys, jku)
        .map_err(|e| config(&e))?;
    let extended_json = serde_json::to_string(&signed_extended).unwrap_or_default();
    let extended_bytes = Bytes::from(extended_json.clone());
    let extended_changed = store
        .documents()
        .document_modified_at(
            "extended-card",
            &document::etag_for(&extended_bytes),
            options.clock.now_millis(),
        )
        .await?;
    let extended = CachedDocument::new(extended_bytes, extended_changed, "private, max-age=60")
        .varying_on(&vary);
    let published = Arc::new(policy_keys.published);
    let jwks = Arc::new(std::sync::RwLock::new(Arc::new(
        build_jwks(&store, &published, &today, options.clock.now_millis()).await?,
    )));
    for key in &signing_keys {
        tracing::info!(kid = key.kid(), alg = key.alg(), "the Agent Card is signed");
    }
    let card_changed = store
        .documents()
        .document_modified_at(
            "public-card",
            &document::etag_for(&card_bytes),
            options.clock.now_millis(),
        )
        .await?;
    // The same URL serves the extended card to authenticated peers.
    let card =
        CachedDocument::new(card_bytes, card_changed, "public, max-age=60").varying_on(&vary);

    tracing::info!(policy = %options.policy_source, "policy loaded");
    tracing::info!(
        data_dir = %options.data_dir.display(),
        store = %store.describe(),
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
    let metrics = Arc::new(Metrics::default());
    let cache_ttl = Duration::from_secs(policy.auth.credential_cache_seconds);
    let budgets = Arc::new(Budgets::new(
        store.usage(),
        options.clock.clone(),
        BudgetDefaults {
            tokens_per_day: policy.budgets.tokens_per_day,
            tokens_per_month: policy.budgets.tokens_per_month,
        },
        cache_ttl,
    ));
    let agent = Arc::new(
        Agent::new(
            store.tasks(),
            backend,
            budgets.clone(),
            metrics.clone(),
            options.clock.clone(),
            settings,
        )
        .with_extended_card(
            serde_json::value::RawValue::from_string(extended_json).map_err(|e| config(&e))?,
        ),
    );
    let agent_for_sweeps = agent.clone();
    // No turn is in flight before serving: every working task was interrupted.
    match agent.fail_interrupted_tasks(None).await? {
        0 => {}
        n => tracing::warn!(
            tasks = n,
            "tasks interrupted by the last stop are now failed (interrupted)"
        ),
    }
    let auth_settings = AuthSettings {
        schemes: policy.auth_schemes().to_vec(),
        api_key_header: axum::http::HeaderName::from_bytes(policy.auth.api_key_header.as_bytes())
            .map_err(|e| config(&e))?,
        api_key_header_label: policy.auth.api_key_header.clone(),
        cache_ttl,
        password_checks_at_once: policy.auth.password_checks_at_once,
        failed_auth_quota: Quota::per_minute(policy.limits.failed_auth_per_ip_per_minute),
        tracked_addresses: policy.limits.tracked_addresses,
    };
    let authenticator = Arc::new(
        PeerAuthenticator::new(store.credentials(), options.clock.clone(), auth_settings)
            .map_err(|e| config(&e))?,
    );
    let per_ip = PerIpLimitLayer::new(
        Quota::per_minute(policy.limits.per_ip_per_minute),
        policy.limits.tracked_addresses,
        options.clock.clone(),
    )
    .map_err(|e| config(&e))?;
    let per_peer = PerPeerLimitLayer::new(policy.limits.tracked_addresses, options.clock.clone())
        .map_err(|e| config(&e))?;
    let trusted_proxies = policy.trusted_proxies().to_vec();
    let state = AppState {
        agent,
        card: Arc::new(card),
        extended: Arc::new(extended),
        jwks: jwks.clone(),
    };
    let a2a_path = policy.server.a2a_path.clone();
    let request_timeout = Duration::from_secs(policy.server.request_timeout_seconds);
    // Outer to inner (the layer added last runs first): client address, per-IP limit,
    // authentication, per-peer limit, request timeout, body limit, protocol gate, handler.
    let door_routes = Router::new()
        .route(&a2a_path, post(door))
        .route(&format!("{a2a_path}/"), post(door))
        .layer(DefaultBodyLimit::disable())
        .layer(GateLayer::new(
            policy.gate.require_version_header,
            policy
                .card
                .extensions
                .iter()
                .map(|e| (e.uri.clone(), e.required))
                .collect(),
            policy.server.max_body_bytes,
        ))
        .layer(RequestBodyLimitLayer::new(policy.server.max_body_bytes))
        // Only requests that got this far read a body or wait for the model; the card and the
        // refusals in front are answered from memory, so their floods pay for no timer.
        .layer(TimeoutLayer::with_status_code(
            StatusCode::REQUEST_TIMEOUT,
            request_timeout,
        ))
        .layer(axum::middleware::map_response(
            refusal::explain_layer_refusals,
        ))
        .layer(per_peer.clone())
        .layer(AuthLayer::shared(authenticator.clone()));
    // A credential on the card URL is checked by the same layer as on the door: a valid peer
    // gets the extended card, an invalid credential a 401.
    let card_routes = Router::new()
        .route("/.well-known/agent-card.json", get(agent_card))
        .route("/.well-known/agent.json", get(agent_card))
        .layer(AuthLayer::shared(authenticator.clone()).mode(AuthMode::Optional));
    let guarded = Router::new()
        .merge(card_routes)
        .route("/.well-known/jwks.json", get(jwks_document))
        .merge(door_routes)
        .layer(per_ip.clone())
        .layer(ClientAddrLayer::new(trusted_proxies));
    let router = Router::new()
        .route("/health", get(health))
        .merge(guarded)
        .fallback(not_found)
        .with_state(state)
        .layer(CatchPanicLayer::custom(panic_response))
        .layer(MetricsLayer::new(metrics.clone(), &a2a_path));

    let changes: Arc<dyn ChangeNotifier> = Arc::new(LocalChanges::default());
    let accounts = AccountService::new(
        store.clone(),
        options.clock.clone(),
        AccountDefaults {
            default_owner: policy.peers.default_owner.clone(),
            rate_per_minute: policy.peers.default_rate_per_minute,
        },
    )
    .with_changes(changes.clone());
    changes.subscribe(Arc::new(ForgetOnChange {
        authenticator: authenticator.clone(),
        budgets: budgets.clone(),
    }));
    let admin_authenticator = Arc::new(
        AdminAuthenticator::new(
            accounts.clone(),
            options.clock.clone(),
            policy.limits.failed_auth_per_ip_per_minute,
            policy.limits.tracked_addresses,
            authenticator.passwords().clone(),
        )
        .map_err(StartError::Config)?,
    );
    let admin_router = crate::admin::api::router(
        AdminState::new(
            accounts.clone(),
            budgets.clone(),
            metrics.clone(),
            options.clock.clone(),
        ),
        admin_authenticator,
    )
    .layer(CatchPanicLayer::custom(panic_response))
    .layer(TimeoutLayer::with_status_code(
        StatusCode::REQUEST_TIMEOUT,
        request_timeout,
    ))
    .layer(axum::middleware::map_response(
        refusal::explain_layer_refusals,
    ));

    let (shutdown_tx, shutdown_rx) = tokio::sync::watch::channel(false);
    let limits = ConnectionLimits {
        header_read_timeout: Duration::from_secs(policy.server.header_read_timeout_seconds),
        max_connections: policy.server.max_connections,
        shutdown_grace: Duration::from_secs(policy.server.shutdown_grace_seconds),
    };
    let serving = tokio::spawn(crate::http::accept::serve(
        listener,
        router,
        limits,
        shutdown_rx.clone(),
        metrics.clone(),
    ));
    let admin_serving = tokio::spawn(crate::http::accept::serve(
        admin_listener,
        admin_router,
        limits,
        shutdown_rx,
        metrics.clone(),
    ));
    let sweeper = tokio::spawn(housekeeping(
        store.clone(),
        options.clock.clone(),
        Caches {
            per_ip,
            per_peer,
            authenticator: authenticator.clone(),
            budgets,
        },
        agent_for_sweeps,
        request_timeout,
        JwksRefresh {
            published,
            document: jwks,
            day: today,
        },
    ));
    tracing::info!("admin API on http://{admin_addr} (OpenAPI at /openapi.json)");
    tracing::info!(
        "peergate listening on http://{local_addr}; A2A door {door_url}; card http://{local_addr}/.well-known/agent-card.json"
    );
    Ok(RunningGateway {
        local_addr,
        door_url,
        admin_addr,
        shutdown: Some(shutdown_tx),
        serving,
        admin_serving,
        accounts,
        sweeper,
        store,
        authenticator,
    })
}

/// Drops what the running gateway cached about a peer or an administrator when the account
/// service changes it.
struct ForgetOnChange {
    authenticator: Arc<PeerAuthenticator>,
    budgets: Arc<Budgets>,
}

impl ChangeListener for ForgetOnChange {
    fn changed(&self, change: &Change) {
        match change {
            Change::Peer(peer_id) => self.authenticator.forget_peer(peer_id),
            Change::Admin(admin_id) => self.budgets.forget(admin_id),
        }
    }
}

async fn door(
    State(state): State<AppState>,
    peer: AuthenticatedPeer,
    client: Option<Extension<ClientAddr>>,
    body: Bytes,
) -> Response {
    // The turn runs in a task of its own: a client that hangs up (or a request timeout) must
    // not cut it between storing the task and storing its answer.
    let agent = state.agent.clone();
    let client = client.map(|c| c.0.ip());
    let turn = tokio::spawn(async move { agent.handle(&peer, client, &body).await });
    let answer = match turn.await {
        Ok(answer) => answer,
        Err(_) => return panic_response(Box::new("the turn panicked")),
    };
    (
        [(
            header::CONTENT_TYPE,
            HeaderValue::from_static("application/json"),
        )],
        answer,
    )
        .into_response()
}

/// The public card, or the extended card for a request that carries a valid credential. An
/// invalid credential is a 401, never a quiet downgrade to the public card.
async fn agent_card(
    State(state): State<AppState>,
    peer: Option<Extension<AuthenticatedPeer>>,
    headers: HeaderMap,
) -> Response {
    match peer {
        Some(_) => state.extended.respond(&headers),
        None => state.card.respond(&headers),
    }
}

async fn jwks_document(State(state): State<AppState>, headers: HeaderMap) -> Response {
    let document = state.jwks.read().unwrap_or_else(|e| e.into_inner()).clone();
    document.respond(&headers)
}

/// The JWKS of `published` on `today`, with its validators.
async fn build_jwks(
    store: &Store,
    published: &[(crate::jose::sign::CardSigningKey, Option<String>)],
    today: &str,
    now_millis: i64,
) -> Result<CachedDocument, StoreError> {
    let bytes = Bytes::from(keys::jwks_on(published, today).to_string());
    let changed = store
        .documents()
        .document_modified_at("jwks", &document::etag_for(&bytes), now_millis)
        .await?;
    Ok(CachedDocument::new(bytes, changed, "public, max-age=300"))
}

async fn health() -> Json<serde_json::Value> {
    Json(json!({"status": "healthy"}))
}

async fn not_found() -> Response {
    Refusal::NoRoute.into_response()
}

fn panic_response(_panic: Box<dyn std::any::Any + Send + 'static>) -> Response {
    Refusal::internal(&"a panic", "a request handler panicked").into_response()
}

/// Once a minute: removes expired tasks (`GetTask` already hides them before that) and lets the
/// limiters forget addresses and peers whose budgets are whole again.
struct JwksRefresh {
    published: Arc<Vec<(crate::jose::sign::CardSigningKey, Option<String>)>>,
    document: Arc<std::sync::RwLock<Arc<CachedDocument>>>,
    day: String,
}

/// What the gateway keeps in memory about clients and owners, bounded and purged periodically.
struct Caches {
    per_ip: PerIpLimitLayer,
    per_peer: PerPeerLimitLayer,
    authenticator: Arc<PeerAuthenticator>,
    budgets: Arc<Budgets>,
}

impl Caches {
    fn purge(&self) {
        self.per_ip.limiter().forget_rested();
        self.per_peer.limiter().forget_rested();
        self.authenticator.purge();
        self.budgets.purge();
    }
}

async fn housekeeping(
    store: Store,
    clock: Arc<dyn Clock>,
    caches: Caches,
    agent: Arc<Agent>,
    request_timeout: Duration,
    mut jwks: JwksRefresh,
) {
    let mut tick = tokio::time::interval(Duration::from_secs(60));
    loop {
        tick.tick().await;
        let today = crate::clock::utc_day(clock.now_millis());
        if today != jwks.day {
            match build_jwks(&store, &jwks.published, &today, clock.now_millis()).await {
                Ok(document) => {
                    *jwks.document.write().unwrap_or_else(|e| e.into_inner()) = Arc::new(document);
                    jwks.day = today;
                }
                Err(e) => tracing::warn!(error = %e, "could not rebuild the JWKS"),
            }
        }
        caches.purge();
        // A task still working past the request timeout lost its turn (its answer could not be
        // stored): say so instead of leaving it working until the next start.
        let cutoff =
            clock.now_millis() - i64::try_from(request_timeout.as_millis()).unwrap_or(i64::MAX / 2);
        match agent.fail_interrupted_tasks(Some(cutoff)).await {
            Ok(0) => {}
            Ok(n) => tracing::warn!(
                tasks = n,
                "tasks that lost their turn are now failed (interrupted)"
            ),
            Err(e) => tracing::warn!(error = %e, "could not fail interrupted tasks"),
        }
        match store.tasks().delete_expired_tasks(clock.now_millis()).await {
            Ok(0) => {}
            Ok(n) => tracing::debug!(removed = n, "expired tasks removed"),
            Err(e) => tracing::warn!(error = %e, "could not remove expired tasks"),
        }
    }
}

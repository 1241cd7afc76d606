//! Wiring: the routes, their layers, and the listener.

use crate::a2a::agent::{Agent, AgentSettings};
use crate::a2a::card;
use crate::admin::api::AdminState;
use crate::admin::budget::{BudgetDefaults, Budgets};
use crate::admin::{AccountDefaults, AccountService, admin_authenticator};
use crate::backend::BackendSetupError;
use crate::clock::Clock;
use crate::config::{Policy, PolicySource};
use crate::guard::refusal::{self, Refusal};
use crate::http::accept::ConnectionLimits;
use crate::http::document::{self, CachedDocument};
use crate::http::sharing::{SharedLimits, Sharing};
use crate::jose::{keys, sign};
use crate::layers::auth::known_ids::KnownCredentialIds;
use crate::layers::auth::{
    AuthLayer, AuthMode, AuthSettings, AuthenticatedPeer, PeerAuthenticator, Scheme,
};
use crate::layers::client_addr::ClientAddr;
use crate::layers::client_addr::ClientAddrLayer;
use crate::layers::gate::GateLayer;
use crate::layers::limit::{PerIpLimitLayer, PerPeerLimitLayer, Quota};
use crate::layers::metrics::{Metrics, MetricsLayer};
use crate::shared::changes::ChangeNotifier;
use crate::shared::rate_limit::RateLimiter;
use crate::store::{Store, StoreError, StoreLocation};
use axum::Extension;
use axum::body::Bytes;
use axum::extract::{DefaultBodyLimit, State};
use axum::http::{HeaderMap, HeaderValue, StatusCode, header};
use axum::response::{IntoResponse, Response};
use axum::routing::{get, post};
use axum::{Json, Router};
use serde_json::json;
use std::net::{IpAddr, SocketAddr};
use std::path::PathBuf;
use std::sync::Arc;
use std::time::Duration;
use tower::ServiceBuilder;
use tower_http::catch_panic::CatchPanicLayer;
use tower_http::limit::RequestBodyLimitLayer;
use tower_http::timeout::TimeoutLayer;

/// Everything needed to start a gateway.
pub struct GatewayOptions {
    /// The policy.
    pub policy: Policy,
    /// Where it came from.
    pub policy_source: PolicySource,
    /// The data directory (the embedded store, and the default card-signing key).
    pub data_dir: PathBuf,
    /// A PostgreSQL store instead of the embedded one (`--store`, `PEERGATE_STORE_URL`).
    pub store_url: Option<String>,
    /// Redis, for what instances share (`--redis`, `PEERGATE_REDIS_URL`).
    pub redis_url: Option<String>,
    /// Overrides `server.listen`.
    pub listen: Option<SocketAddr>,
    /// Overrides `server.admin_listen`.
    pub admin_listen: Option<SocketAddr>,
    /// The clock; tests pass a manual one.
    pub clock: Arc<dyn Clock>,
}

impl GatewayOptions {
    /// Where the store is.
    pub fn store_location(&self) -> StoreLocation {
        match &self.store_url {
            Some(url) => StoreLocation::Postgres(url.clone()),
            None => StoreLocation::Embedded(self.data_dir.clone()),
        }
    }
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
    /// Hears account changes from the command line and re-reads the known credential ids.
    hearing: tokio::task::JoinHandle<()>,
    /// The push-notification delivery loop; a delivery it cuts short is due again once its
    /// claim lapses.
    deliveries: Option<tokio::task::JoinHandle<()>>,
    kept: Option<crate::http::sharing::Kept>,
    agent: Arc<Agent>,
    shutdown_grace: Duration,
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
        self.hearing.abort();
        // Turns running without a request (non-blocking sends, streams) store their answers
        // before the store closes, within the grace period.
        self.agent.settle(self.shutdown_grace).await;
        if let Some(deliveries) = self.deliveries.take() {
            deliveries.abort();
        }
        if let Some(kept) = self.kept.take() {
            kept.stop().await;
        }
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
    /// How long a stream, and its connection, may last.
    bounds: crate::http::sse::StreamBounds,
    card: Arc<CachedDocument>,
    extended: Arc<CachedDocument>,
    /// The extended card by the identity provider a peer signed in with, when the public card
    /// does not list it.
    issuer_extended: Arc<std::collections::HashMap<String, Arc<CachedDocument>>>,
    /// Rebuilt when the day changes, so a retiring key leaves on its date.
    jwks: Arc<std::sync::RwLock<Arc<CachedDocument>>>,
    /// What `/ready` asks.
    readiness: Arc<super::ready::Readiness>,
}

/// Opens the store, binds the listener and starts serving.
pub async fn start(options: GatewayOptions) -> Result<RunningGateway, StartError> {
    let policy = &options.policy;
    let backend = crate::backend::from_policy(&policy.model).await?;
    let store = Store::open_at(&options.store_location()).await?;
    let sharing = Sharing::connect(&options, &store).await?;
    store.claim_for_serving(sharing.serving).await?;
    sharing.begin().await?;
    let listeners = Listeners::bind(&options).await?;
    let door_url = card::door_url(policy, listeners.local_addr);
    let identity_providers = identity_providers(policy, &options.clock)?;
    let card_identities = card::CardIdentities {
        issuers: issuer_cards(policy, identity_providers.as_deref()).await,
        client_ca_sha256: listeners.client_ca_sha256.clone(),
    };
    let documents = Documents::build(&options, &store, &door_url, &card_identities).await?;
    tracing::info!(policy = %options.policy_source, "policy loaded");
    tracing::info!(
        data_dir = %options.data_dir.display(),
        store = %store.describe(),
        "store opened"
    );
    tracing::info!("model backend: {}", backend.describe());

    let metrics = Arc::new(Metrics::default());
    let cache_ttl = Duration::from_secs(policy.auth.credential_cache_seconds);
    let mut budgets = Budgets::new(
        store.usage(),
        options.clock.clone(),
        BudgetDefaults {
            tokens_per_day: policy.budgets.tokens_per_day,
            tokens_per_month: policy.budgets.tokens_per_month,
        },
        cache_ttl,
    );
    if let Some(spend) = &sharing.spend {
        budgets = budgets.with_shared_spend(spend.clone());
    }
    let budgets = Arc::new(budgets);
    let push = push_notifications(&options, &store, sharing.serving, &metrics)?;
    let mut agent = Agent::new(
        store.tasks(),
        backend,
        budgets.clone(),
        metrics.clone(),
        options.clock.clone(),
        agent_settings(policy),
    )
    .with_shared_state(sharing.agent.clone())
    .with_extended_card(
        serde_json::value::RawValue::from_string(documents.extended_json.clone())
            .map_err(|e| config(&e))?,
    );
    for (issuer, (_, json)) in &documents.issuer_extended {
        agent = agent.with_issuer_extended_card(
            issuer,
            serde_json::value::RawValue::from_string(json.clone()).map_err(|e| config(&e))?,
        );
    }
    if let Some(push) = &push {
        agent = agent.with_push(push.clone());
    }
    let agent = Arc::new(agent);
    agent.hear_cancels();
    // No turn is in flight before serving: every working task was interrupted.
    match agent.fail_interrupted_tasks(None).await? {
        0 => {}
        n => tracing::warn!(
            tasks = n,
            "tasks interrupted by the last stop are now failed (interrupted)"
        ),
    }
    let shared = &sharing.limits;
    let mut settings = auth_settings(policy, cache_ttl, shared.failed_auth.clone())?;
    // Unknown credential ids are refused from memory: a flood of made-up tokens never reaches
    // the store. The command line's announcements are heard before the ids are read, so a
    // credential it issues meanwhile is in one or the other.
    let announcements = match store.hear_announcements().await {
        Ok(announcements) => Some(announcements),
        Err(e) => {
            tracing::warn!(
                error = %e,
                "the command line's changes reach this gateway by its periodic re-read (within {} s), not at once",
                crate::layers::auth::known_ids::RECONCILE_EVERY.as_secs()
            );
            None
        }
    };
    let known_ids = Arc::new(KnownCredentialIds::load(&*store.credentials()).await?);
    settings.known_ids = Some(known_ids.clone());
    settings.identity_providers = identity_providers;
    let authenticator = Arc::new(
        PeerAuthenticator::new(store.credentials(), options.clock.clone(), settings)
            .map_err(|e| config(&e))?,
    );
    let (per_ip, per_peer) = limit_layers(&options, shared)?;
    let guards = Guards {
        per_ip,
        per_peer,
        authenticator: authenticator.clone(),
    };
    let readiness = Arc::new(super::ready::Readiness::new(
        store.clone(),
        sharing.redis.clone(),
        policy.model.backend.name(),
    ));
    let state = AppState {
        agent: agent.clone(),
        bounds: stream_bounds(policy),
        card: Arc::new(documents.card),
        extended: Arc::new(documents.extended),
        issuer_extended: Arc::new(
            documents
                .issuer_extended
                .iter()
                .map(|(name, (document, _))| (name.clone(), document.clone()))
                .collect(),
        ),
        jwks: documents.jwks.clone(),
        readiness: readiness.clone(),
    };
    let router = door_router(policy, state, &guards, metrics.clone());

    let forget = Arc::new(super::account_changes::ForgetOnChange {
        authenticator: authenticator.clone(),
        budgets: budgets.clone(),
        reread: Arc::default(),
    });
    let accounts = account_service(&options, &store, sharing.changes.clone(), &forget);
    let hearing =
        super::account_changes::keep_current(store.credentials(), known_ids, announcements, forget);
    let admin_router = admin_router(
        &options,
        AdminState::new(
            accounts.clone(),
            budgets.clone(),
            metrics.clone(),
            options.clock.clone(),
        )
        .with_readiness(readiness),
        &authenticator,
    )?;

    let (local_addr, admin_addr) = (listeners.local_addr, listeners.admin_addr);
    let (shutdown_tx, serving, admin_serving) =
        listeners.serve(policy, router, admin_router, &metrics);
    let registry = sharing.registry();
    let state_agent = agent.clone();
    let kept = sharing.keep(&options, agent.clone());
    let sweeper = tokio::spawn(housekeeping(
        store.clone(),
        registry,
        options.clock.clone(),
        Caches {
            per_ip: guards.per_ip,
            per_peer: guards.per_peer,
            authenticator: authenticator.clone(),
            budgets,
        },
        agent,
        Duration::from_secs(policy.server.request_timeout_seconds),
        documents.refresh,
    ));
    // Started once the interrupted tasks are failed, so their last states are queued too.
    let deliveries = push
        .map(crate::push::deliver::spawn)
        .transpose()
        .map_err(|e| config(&e))?;
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
        hearing,
        deliveries,
        kept: Some(kept),
        agent: state_agent,
        shutdown_grace: Duration::from_secs(policy.server.shutdown_grace_seconds),
        store,
        authenticator,
    })
}

fn config(e: &dyn std::fmt::Display) -> StartError {
    StartError::Config(e.to_string())
}

/// An accept loop, running.
type Serving = tokio::task::JoinHandle<std::io::Result<()>>;

/// The door's and the admin API's listeners, bound.
struct Listeners {
    door: tokio::net::TcpListener,
    admin: tokio::net::TcpListener,
    local_addr: SocketAddr,
    admin_addr: SocketAddr,
    /// The door's own TLS, with `[server.tls]`.
    tls: Option<tokio_rustls::TlsAcceptor>,
    /// The SHA-256 of the client CA's certificate, when client certificates are asked for.
    client_ca_sha256: Option<String>,
}

impl Listeners {
    async fn bind(options: &GatewayOptions) -> Result<Self, StartError> {
        let policy = &options.policy;
        let addr = options.listen.unwrap_or(policy.server.listen);
        let admin_bind = options.admin_listen.unwrap_or(policy.server.admin_listen);
        // The command line may override the policy's address: the same rule applies.
        crate::config::check_admin_listen(admin_bind, addr).map_err(|reason| {
            StartError::Config(format!("--admin-listen / server.admin_listen {reason}"))
        })?;
        // Read before binding: a wrong file stops start-up naming its setting.
        let (tls, client_ca_sha256) = match &policy.server.tls {
            Some(tls) => {
                let (acceptor, ca) =
                    crate::http::server_tls::acceptor(tls).map_err(StartError::Config)?;
                (Some(acceptor), ca)
            }
            None => (None, None),
        };
        let (door, local_addr) = bind(addr).await?;
        let (admin, admin_addr) = bind(admin_bind).await?;
        Ok(Self {
            door,
            admin,
            local_addr,
            admin_addr,
            tls,
            client_ca_sha256,
        })
    }
}

impl Listeners {
    /// Starts both accept loops; they drain when the returned sender says so.
    fn serve(
        self,
        policy: &Policy,
        router: Router,
        admin_router: Router,
        metrics: &Arc<Metrics>,
    ) -> (tokio::sync::watch::Sender<bool>, Serving, Serving) {
        let (shutdown_tx, shutdown_rx) = tokio::sync::watch::channel(false);
        let limits = ConnectionLimits {
            header_read_timeout: Duration::from_secs(policy.server.header_read_timeout_seconds),
            max_connections: policy.server.max_connections,
            max_per_address: policy.server.max_connections_per_address,
            exempt: policy.server.trusted_proxies.clone().into(),
            write_stall: Duration::from_secs(policy.server.write_stall_seconds),
            shutdown_grace: Duration::from_secs(policy.server.shutdown_grace_seconds),
        };
        let serving = tokio::spawn(crate::http::accept::serve(
            self.door,
            router,
            limits.clone(),
            shutdown_rx.clone(),
            metrics.clone(),
            self.tls,
        ));
        // The admin listener is loopback only, without TLS of its own.
        let admin_serving = tokio::spawn(crate::http::accept::serve(
            self.admin,
            admin_router,
            limits,
            shutdown_rx,
            metrics.clone(),
            None,
        ));
        (shutdown_tx, serving, admin_serving)
    }
}

/// The account service, publishing its changes to the caches of this gateway.
fn account_service(
    options: &GatewayOptions,
    store: &Store,
    changes: Arc<dyn ChangeNotifier>,
    forget: &Arc<super::account_changes::ForgetOnChange>,
) -> AccountService {
    changes.subscribe(forget.clone());
    AccountService::new(
        store.clone(),
        options.clock.clone(),
        AccountDefaults {
            default_owner: options.policy.peers.default_owner.clone(),
            rate_per_minute: options.policy.peers.default_rate_per_minute,
        },
    )
    .with_changes(changes)
    .with_password_pool(forget.authenticator.passwords().clone())
}

async fn bind(addr: SocketAddr) -> Result<(tokio::net::TcpListener, SocketAddr), StartError> {
    let fail = |e: std::io::Error| StartError::Bind {
        addr,
        reason: e.kind(),
    };
    let listener = tokio::net::TcpListener::bind(addr).await.map_err(fail)?;
    let local = listener.local_addr().map_err(fail)?;
    Ok((listener, local))
}

/// The documents served from memory: the signed cards and the key set.
struct Documents {
    card: CachedDocument,
    extended: CachedDocument,
    /// The extended card, signed, for `GetExtendedAgentCard`.
    extended_json: String,
    /// The extended card of peers signed in with an identity provider the public card does
    /// not list, by the provider's name: served, and signed for `GetExtendedAgentCard`.
    issuer_extended: std::collections::HashMap<String, (Arc<CachedDocument>, String)>,
    jwks: Arc<std::sync::RwLock<Arc<CachedDocument>>>,
    /// What housekeeping needs to rebuild the key set when a day passes.
    refresh: JwksRefresh,
}

impl Documents {
    async fn build(
        options: &GatewayOptions,
        store: &Store,
        door_url: &str,
        identities: &card::CardIdentities,
    ) -> Result<Self, StartError> {
        let issuers = &identities.issuers;
        let policy = &options.policy;
        let now = options.clock.now_millis();
        let today = crate::clock::utc_day(now);
        let policy_keys = keys::load(&policy.signing, &options.data_dir).map_err(|e| config(&e))?;
        let signing_keys = policy_keys.signing;
        let jku = policy.signing.jwks_url.as_deref();
        let public_card = card::public_card(policy, door_url, identities);
        // Fail closed: a card holding values the SDKs drop would verify in some clients only.
        if sign::holds_droppable_values(&public_card) {
            return Err(StartError::Config(
                "the Agent Card would hold an empty value (check the [card] keys: no empty strings or lists)"
                    .to_owned(),
            ));
        }
        // The card URL answers differently to requests carrying credentials.
        let vary = if policy.auth_schemes().contains(&Scheme::ApiKey) {
            format!("Authorization, {}", policy.auth.api_key_header)
        } else {
            "Authorization".to_owned()
        };
        let signed_card =
            sign::sign_card(&public_card, &signing_keys, jku).map_err(|e| config(&e))?;
        let card_bytes = Bytes::from(serde_json::to_vec(&signed_card).unwrap_or_default());
        let signed_extended =
            sign::sign_card(&card::extended_card(&public_card, None), &signing_keys, jku)
                .map_err(|e| config(&e))?;
        let mut issuer_extended = std::collections::HashMap::new();
        for issuer in issuers.iter().filter(|i| !i.public) {
            let signed = sign::sign_card(
                &card::extended_card(&public_card, Some(issuer)),
                &signing_keys,
                jku,
            )
            .map_err(|e| config(&e))?;
            let json = serde_json::to_string(&signed).unwrap_or_default();
            let bytes = Bytes::from(json.clone());
            let document =
                CachedDocument::new(bytes, now, "private, max-age=60").varying_on("Authorization");
            issuer_extended.insert(issuer.name.clone(), (Arc::new(document), json));
        }
        let extended_json = serde_json::to_string(&signed_extended).unwrap_or_default();
        let extended_bytes = Bytes::from(extended_json.clone());
        let documents = store.documents();
        let extended_changed = documents
            .document_modified_at("extended-card", &document::etag_for(&extended_bytes), now)
            .await?;
        let published = Arc::new(policy_keys.published);
        let jwks = Arc::new(std::sync::RwLock::new(Arc::new(
            build_jwks(store, &published, &today, now).await?,
        )));
        for key in &signing_keys {
            tracing::info!(kid = key.kid(), alg = key.alg(), "the Agent Card is signed");
        }
        let card_changed = documents
            .document_modified_at("public-card", &document::etag_for(&card_bytes), now)
            .await?;
        Ok(Self {
            // The same URL serves the extended card to authenticated peers.
            card: CachedDocument::new(card_bytes, card_changed, "public, max-age=60")
                .varying_on(&vary),
            extended: CachedDocument::new(extended_bytes, extended_changed, "private, max-age=60")
                .varying_on(&vary),
            extended_json,
            issuer_extended,
            jwks: jwks.clone(),
            refresh: JwksRefresh {
                published,
                document: jwks,
                day: today,
            },
        })
    }
}

/// Push notifications when `capabilities.push_notifications` is on: the sealing key (named by
/// the policy, or generated in the data directory for a lone instance) and the callback rules.
fn push_notifications(
    options: &GatewayOptions,
    store: &Store,
    serving: crate::store::Serving,
    metrics: &Arc<Metrics>,
) -> Result<Option<Arc<crate::push::Push>>, StartError> {
    let policy = &options.policy;
    if !policy.capabilities.push_notifications {
        return Ok(None);
    }
    let alone = matches!(serving, crate::store::Serving::Alone);
    let key = crate::push::seal::SealingKey::load(&policy.push, &options.data_dir, alone)
        .map_err(|e| config(&e))?;
    let callbacks = crate::push::callback::CallbackPolicy::from_policy(&policy.push);
    if callbacks.dangerous_allow_loopback {
        tracing::warn!(
            "push.dangerous_allow_loopback_callbacks is on: any peer can make this gateway POST to services on this host"
        );
    }
    Ok(Some(Arc::new(crate::push::Push::new(
        store.push(),
        key,
        callbacks,
        crate::push::PushSettings::from_policy(&policy.push),
        options.clock.clone(),
        metrics.clone(),
    ))))
}

fn agent_settings(policy: &Policy) -> AgentSettings {
    AgentSettings {
        instructions: policy.model.instructions.clone(),
        task_retention: Duration::from_secs(u64::from(policy.tasks.retention_hours) * 3600),
        context_messages: policy.tasks.context_messages,
        max_text_bytes: policy.tasks.max_text_bytes,
        backend_timeout: Duration::from_secs(policy.model.timeout_seconds),
        non_blocking: policy.capabilities.non_blocking,
        cancel_running: policy.capabilities.cancel_running,
        streaming: policy.capabilities.streaming,
        subscriptions: policy.capabilities.subscriptions,
        longest_stream: Duration::from_secs(policy.server.request_timeout_seconds),
        streams_per_peer: policy.limits.streams_per_peer,
    }
}

/// How long a stream may last, and its connection after it.
fn stream_bounds(policy: &Policy) -> crate::http::sse::StreamBounds {
    crate::http::sse::StreamBounds {
        longest: Duration::from_secs(policy.server.request_timeout_seconds),
        grace: Duration::from_secs(policy.server.write_stall_seconds),
    }
}

fn auth_settings(
    policy: &Policy,
    cache_ttl: Duration,
    failed_attempts: Option<Arc<dyn RateLimiter<IpAddr>>>,
) -> Result<AuthSettings, StartError> {
    Ok(AuthSettings {
        schemes: policy.auth_schemes().to_vec(),
        api_key_header: axum::http::HeaderName::from_bytes(policy.auth.api_key_header.as_bytes())
            .map_err(|e| config(&e))?,
        api_key_header_label: policy.auth.api_key_header.clone(),
        cache_ttl,
        password_checks_at_once: policy.auth.password_checks_at_once,
        failed_auth_quota: Quota::per_minute(policy.limits.failed_auth_per_ip_per_minute),
        tracked_addresses: policy.limits.tracked_addresses,
        failed_attempts,
        known_ids: None,
        identity_providers: None,
    })
}

/// How the cards describe the identity providers: the token endpoint configured, else the one
/// discovery names (asked now, for providers whose keys come from discovery; one that does not
/// answer is described by its discovery document's URL instead, and the start goes on).
async fn issuer_cards(
    policy: &Policy,
    providers: Option<&crate::layers::auth::jwt::IdentityProviders>,
) -> Vec<card::IssuerCard> {
    let mut cards = Vec::new();
    for issuer in &policy.auth.issuers {
        let discovering = issuer.jwks_uri.is_none() && issuer.jwks_file.is_none();
        let discovered = match (providers, discovering && issuer.token_url.is_none()) {
            (Some(providers), true) => providers.discovered(&issuer.name).await,
            _ => None,
        };
        cards.push(card::IssuerCard {
            name: issuer.name.clone(),
            issuer: issuer.issuer.clone(),
            token_url: issuer
                .token_url
                .clone()
                .or_else(|| discovered.as_ref().and_then(|d| d.token_endpoint.clone())),
            metadata_url: discovered.map_or_else(
                || {
                    format!(
                        "{}/.well-known/openid-configuration",
                        issuer.issuer.trim_end_matches('/')
                    )
                },
                |d| d.metadata_url,
            ),
            public: issuer.public,
        });
    }
    cards
}

/// The identity providers of `[[auth.issuers]]`.
fn identity_providers(
    policy: &Policy,
    clock: &Arc<dyn Clock>,
) -> Result<Option<Arc<crate::layers::auth::jwt::IdentityProviders>>, StartError> {
    let issuers: Vec<(String, &crate::config::IssuerPolicy)> = policy
        .auth
        .issuers
        .iter()
        .enumerate()
        .map(|(at, issuer)| (format!("auth.issuers[{at}]"), issuer))
        .collect();
    providers_of(&issuers, clock)
}

/// The providers of `issuers` (each with the table that names it). A key set named by
/// `jwks_file` is read and checked now: one that cannot be read, or holds no usable key, stops
/// start-up naming the setting.
fn providers_of(
    issuers: &[(String, &crate::config::IssuerPolicy)],
    clock: &Arc<dyn Clock>,
) -> Result<Option<Arc<crate::layers::auth::jwt::IdentityProviders>>, StartError> {
    use crate::layers::auth::jwt::{IdentityProviders, IssuerSettings, KeySource};
    if issuers.is_empty() {
        return Ok(None);
    }
    let mut settings = Vec::new();
    for (table, issuer) in issuers {
        let keys = match (&issuer.jwks_file, &issuer.jwks_uri) {
            (Some(path), _) => KeySource::Fixed(std::fs::read_to_string(path).map_err(|e| {
                StartError::Config(format!("{table}.jwks_file: cannot be read ({})", e.kind()))
            })?),
            (None, Some(uri)) => KeySource::Uri(uri.clone()),
            (None, None) => KeySource::Discovery,
        };
        settings.push(IssuerSettings {
            name: issuer.name.clone(),
            rules: crate::jose::access_token::AccessTokenRules {
                issuer: issuer.issuer.clone(),
                audience: issuer.audience.clone(),
                algorithms: issuer.algorithms.clone(),
                plain_jwt: issuer.plain_jwt,
                skew: Duration::from_secs(issuer.clock_skew_seconds),
                max_lifetime: Duration::from_secs(issuer.max_token_lifetime_seconds),
            },
            keys,
            require_scopes: issuer.require_scopes,
            dangerous_allow_http_loopback: issuer.dangerous_allow_http_loopback,
        });
    }
    let providers = IdentityProviders::new(
        settings,
        &crate::jose::fetch::FetchPolicy::default(),
        clock.clone(),
    )
    .map_err(StartError::Config)?;
    Ok(Some(Arc::new(providers)))
}

/// The per-IP and per-peer layers: in process, or over the shared limiters.
fn limit_layers(
    options: &GatewayOptions,
    shared: &SharedLimits,
) -> Result<(PerIpLimitLayer, PerPeerLimitLayer), StartError> {
    let limits = &options.policy.limits;
    let per_ip_quota = Quota::per_minute(limits.per_ip_per_minute);
    let per_ip = match &shared.per_ip {
        Some(limiter) => PerIpLimitLayer::with_limiter(per_ip_quota, limiter.clone()),
        None => PerIpLimitLayer::new(
            per_ip_quota,
            limits.tracked_addresses,
            options.clock.clone(),
        )
        .map_err(|e| config(&e))?,
    };
    let per_peer = match &shared.per_peer {
        Some(limiter) => PerPeerLimitLayer::with_limiter(limiter.clone()),
        None => PerPeerLimitLayer::new(limits.tracked_addresses, options.clock.clone())
            .map_err(|e| config(&e))?,
    };
    Ok((per_ip, per_peer))
}

/// The guard layers the door's routes share with housekeeping.
struct Guards {
    per_ip: PerIpLimitLayer,
    per_peer: PerPeerLimitLayer,
    authenticator: Arc<PeerAuthenticator>,
}

/// The door's listener: the card routes, the A2A door and `/health`, behind their layers.
fn door_router(policy: &Policy, state: AppState, guards: &Guards, metrics: Arc<Metrics>) -> Router {
    let a2a_path = policy.server.a2a_path.clone();
    let request_timeout = Duration::from_secs(policy.server.request_timeout_seconds);
    // Outer to inner (the layer added last runs first): client address, per-IP limit,
    // authentication, per-peer limit, request timeout, body limit, protocol gate, handler.
    let gate = GateLayer::new(
        policy.gate.require_version_header,
        policy
            .card
            .extensions
            .iter()
            .map(|e| (e.uri.clone(), e.required))
            .collect(),
        policy.server.max_body_bytes,
    );
    let json_rpc = Router::new()
        .route(&a2a_path, post(door))
        .route(&format!("{a2a_path}/"), post(door))
        .layer(gate.clone());
    // The HTTP+JSON binding, when on, under the same layers with the gate in its shape.
    let bindings = if policy.capabilities.http_json {
        json_rpc.merge(
            crate::http::rest::routes(&card::http_json_path(policy)).layer(gate.for_http_json()),
        )
    } else {
        json_rpc
    };
    // Each `Router::layer` call boxes every route once more, and each box is cloned for every
    // request: layers are stacked with `ServiceBuilder` (outer first) where their types allow,
    // so a request clones one box per stack instead of one per layer. The body limit changes
    // the response body's type, which the layers outside it do not take: a box between.
    let door_routes = bindings
        .layer(
            ServiceBuilder::new()
                // Only requests that got this far read a body or wait for the model; the card
                // and the refusals in front are answered from memory, so their floods pay for
                // no timer.
                .layer(TimeoutLayer::with_status_code(
                    StatusCode::REQUEST_TIMEOUT,
                    request_timeout,
                ))
                .layer(RequestBodyLimitLayer::new(policy.server.max_body_bytes))
                .layer(DefaultBodyLimit::disable()),
        )
        .layer(
            ServiceBuilder::new()
                .layer(AuthLayer::shared(guards.authenticator.clone()))
                .layer(guards.per_peer.clone())
                .layer(axum::middleware::map_response(
                    refusal::explain_layer_refusals,
                )),
        );
    // A credential on the card URL is checked by the same layer as on the door: a valid peer
    // gets the extended card, an invalid credential a 401.
    let card_routes = Router::new()
        .route("/.well-known/agent-card.json", get(agent_card))
        .route("/.well-known/agent.json", get(agent_card))
        .layer(AuthLayer::shared(guards.authenticator.clone()).mode(AuthMode::Optional));
    let guarded = Router::new()
        .merge(card_routes)
        .route("/.well-known/jwks.json", get(jwks_document))
        .merge(door_routes)
        .layer(
            ServiceBuilder::new()
                .layer(
                    ClientAddrLayer::new(policy.trusted_proxies().to_vec())
                        .forwarding_certificates_in(
                            policy
                                .auth
                                .forwarded_client_certificate_header
                                .as_deref()
                                .and_then(|h| {
                                    axum::http::HeaderName::from_bytes(h.as_bytes()).ok()
                                }),
                        ),
                )
                .layer(guards.per_ip.clone()),
        );
    Router::new()
        .route("/health", get(health))
        .route("/ready", get(ready))
        .merge(guarded)
        .fallback(not_found)
        .method_not_allowed_fallback(method_not_allowed)
        .with_state(state)
        .layer(CatchPanicLayer::custom(panic_response))
        .layer(MetricsLayer::new(metrics, &a2a_path))
        .layer(tower::util::option_layer(policy.log.access.then(|| {
            crate::layers::access_log::AccessLogLayer::new(&a2a_path)
        })))
}

/// The admin API's listener: its routes behind administrator authentication (sharing the
/// door's Argon2 pool), the panic catcher and the request timeout.
fn admin_router(
    options: &GatewayOptions,
    state: AdminState,
    authenticator: &PeerAuthenticator,
) -> Result<Router, StartError> {
    let policy = &options.policy;
    let admin_authenticator = Arc::new(
        admin_authenticator(
            state.accounts().clone(),
            options.clock.clone(),
            (
                policy.limits.failed_auth_per_ip_per_minute,
                policy.limits.tracked_addresses,
            ),
            authenticator.passwords().clone(),
            (
                scrape_token(policy)?,
                match &policy.admin.issuer {
                    Some(issuer) => {
                        providers_of(&[("admin.issuer".to_owned(), issuer)], &options.clock)?
                    }
                    None => None,
                },
            ),
        )
        .map_err(StartError::Config)?,
    );
    let allowed_origins = &policy.server.admin_allowed_origins;
    Ok(
        crate::admin::api::router(state, admin_authenticator, allowed_origins)
            .layer(CatchPanicLayer::custom(panic_response))
            .layer(TimeoutLayer::with_status_code(
                StatusCode::REQUEST_TIMEOUT,
                Duration::from_secs(policy.server.request_timeout_seconds),
            ))
            .layer(axum::middleware::map_response(
                refusal::explain_layer_refusals,
            )),
    )
}

/// The scrape token `server.metrics_token_env` names, read from the environment. Fails closed:
/// a named variable that is unset, or holds a short secret, stops start-up.
fn scrape_token(policy: &Policy) -> Result<Option<crate::admin::ScrapeToken>, StartError> {
    let Some(name) = &policy.server.metrics_token_env else {
        return Ok(None);
    };
    let secret = std::env::var(name).map_err(|_| {
        StartError::Config(format!(
            "server.metrics_token_env: the environment variable {name} is not set (or not UTF-8)"
        ))
    })?;
    crate::admin::ScrapeToken::new(&secret)
        .map(Some)
        .map_err(|why| StartError::Config(format!("server.metrics_token_env: {name} {why}")))
}

impl axum::extract::FromRef<AppState> for crate::http::rest::RestState {
    fn from_ref(state: &AppState) -> Self {
        Self {
            agent: state.agent.clone(),
            bounds: state.bounds.clone(),
        }
    }
}

async fn door(
    State(state): State<AppState>,
    peer: AuthenticatedPeer,
    client: Option<Extension<ClientAddr>>,
    deadline: Option<Extension<Arc<crate::http::stalled_writes::ConnectionDeadline>>>,
    headers: HeaderMap,
    body: Bytes,
) -> Response {
    let mut logged = None;
    let answer = if is_json(&headers) {
        // The turn runs in a task of its own: a client that hangs up (or a request timeout)
        // must not cut it between storing the task and storing its answer.
        let agent = state.agent.clone();
        let client = client.map(|c| c.0.ip());
        let turn = tokio::spawn(async move { agent.handle(&peer, client, &body).await });
        match turn.await {
            Ok(crate::a2a::agent::Answer::Body(answer)) => answer,
            Ok(crate::a2a::agent::Answer::Internal { body, request_id }) => {
                logged = Some(refusal::LoggedRequestId(request_id));
                body
            }
            Ok(crate::a2a::agent::Answer::Events(events)) => {
                let deadline = deadline.map(|Extension(deadline)| deadline);
                return crate::http::sse::respond(events, &state.bounds, deadline.as_ref());
            }
            Ok(crate::a2a::agent::Answer::Refused(refusal)) => return refusal.into_response(),
            Err(_) => return panic_response(Box::new("the turn panicked")),
        }
    } else {
        crate::a2a::jsonrpc::refuse(
            &body,
            &crate::a2a::jsonrpc::RpcError::ContentTypeNotSupported(
                "send the JSON-RPC request with Content-Type: application/json",
            ),
        )
    };
    let mut response = (
        [(
            header::CONTENT_TYPE,
            HeaderValue::from_static("application/json"),
        )],
        answer,
    )
        .into_response();
    if let Some(logged) = logged {
        // The access log names the id the -32603 answer names.
        response.extensions_mut().insert(logged);
    }
    response
}

/// Whether the request says its body is JSON: `application/json` or `application/a2a+json`,
/// with or without parameters (a charset). A body sent as anything else, or as nothing, is
/// refused (-32005) before it is read as JSON, so a form post or a text upload never reaches
/// the agent by accident.
pub(crate) fn is_json(headers: &HeaderMap) -> bool {
    let Some(value) = headers
        .get(header::CONTENT_TYPE)
        .and_then(|v| v.to_str().ok())
    else {
        return false;
    };
    let essence = value.split(';').next().unwrap_or("").trim();
    essence.eq_ignore_ascii_case("application/json")
        || essence.eq_ignore_ascii_case("application/a2a+json")
}

/// The public card, or the extended card for a request that carries a valid credential. An
/// invalid credential is a 401, never a quiet downgrade to the public card.
async fn agent_card(
    State(state): State<AppState>,
    peer: Option<Extension<AuthenticatedPeer>>,
    headers: HeaderMap,
) -> Response {
    match peer {
        Some(Extension(peer)) => peer
            .issuer()
            .and_then(|issuer| state.issuer_extended.get(issuer))
            .unwrap_or(&state.extended)
            .respond(&headers),
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
    published: &[keys::PublishedKey],
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

async fn ready(State(state): State<AppState>) -> Response {
    // Anyone reaches the door: whether it can serve, and nothing about its parts.
    state.readiness.answer(false).await
}

async fn not_found() -> Response {
    Refusal::NoRoute.into_response()
}

/// A known path asked with a method it does not take: the refusal's JSON, and axum adds `Allow`.
pub(crate) async fn method_not_allowed() -> Response {
    Refusal::MethodNotAllowed.into_response()
}

fn panic_response(_panic: Box<dyn std::any::Any + Send + 'static>) -> Response {
    Refusal::internal(&"a panic", "a request handler panicked").into_response()
}

/// Once a minute: removes expired tasks (`GetTask` already hides them before that) and lets the
/// limiters forget addresses and peers whose budgets are whole again.
struct JwksRefresh {
    published: Arc<Vec<keys::PublishedKey>>,
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

#[allow(clippy::too_many_arguments)]
async fn housekeeping(
    store: Store,
    registry: Option<Arc<dyn crate::store::InstanceRegistry>>,
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
        // Once across the cluster: the instance leading housekeeping removes expired tasks.
        let leading = match &registry {
            Some(registry) => matches!(
                tokio::time::timeout(Duration::from_secs(5), registry.lead_housekeeping()).await,
                Ok(Ok(true))
            ),
            None => true,
        };
        if !leading {
            continue;
        }
        match store.tasks().delete_expired_tasks(clock.now_millis()).await {
            Ok(0) => {}
            Ok(n) => tracing::debug!(removed = n, "expired tasks removed"),
            Err(e) => tracing::warn!(error = %e, "could not remove expired tasks"),
        }
    }
}

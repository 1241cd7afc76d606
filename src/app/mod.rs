//! Start-up: the policy becomes a store, shared engines, the agent, the guard, the documents
//! and two listeners, and housekeeping runs beside them until shutdown.

mod account_changes;
mod documents;
mod housekeeping;
mod identity;
mod open_files;
mod reload;
mod settings;
mod sharing;
mod telemetry;

use crate::a2a::agent::{Agent, AgentSettings};
use crate::a2a::card;
use crate::a2a::pipeline::Pipeline;
use crate::admin::budget::{BudgetDefaults, Budgets};
use crate::admin::{AccountDefaults, AccountService, admin_authenticator};
use crate::backend::BackendSetupError;
use crate::clock::Clock;
use crate::config::{Policy, PolicySource};
use crate::guard::refusal::{self};
use crate::http::accept::{ConnectionLimits, Http2Limits, Protocol};
use crate::http::admin_api::AdminState;
use crate::http::door::{DoorGuards, DoorState, Observers, door_router, panic_response};
use crate::http::ready::Readiness;
use crate::layers::auth::PeerAuthenticator;
use crate::layers::auth::known_ids::KnownCredentialIds;
use crate::layers::limit::{PerIpLimitLayer, PerPeerLimitLayer, Quota};
use crate::layers::metrics::Metrics;
use crate::shared::changes::ChangeNotifier;
use crate::store::{Announcements, Store, StoreError, StoreLocation};
use axum::Router;
use axum::http::StatusCode;
use documents::Documents;
use housekeeping::{Caches, housekeeping};
use identity::{auth_settings, identity_providers, issuer_cards, providers_of};
use sharing::{SharedLimits, Sharing};
use std::net::SocketAddr;
use std::path::PathBuf;
use std::sync::Arc;
use std::time::Duration;
use tower_http::catch_panic::CatchPanicLayer;
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
    /// Overrides `grpc.listen` (only with `[grpc]`).
    pub grpc_listen: Option<SocketAddr>,
    /// The clock; tests pass a manual one.
    pub clock: Arc<dyn Clock>,
    /// Where spans are exported (the `OTEL_*` variables, which `serve` reads); `None` exports
    /// nothing.
    pub telemetry: Option<crate::telemetry::settings::Export>,
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
    /// The gRPC listener's bound address, with `[grpc]`.
    pub grpc_addr: Option<SocketAddr>,
    shutdown: Option<tokio::sync::watch::Sender<bool>>,
    serving: Serving,
    admin_serving: Serving,
    grpc_serving: Option<Serving>,
    accounts: AccountService,
    sweeper: tokio::task::JoinHandle<()>,
    /// Hears account changes from the command line and re-reads the known credential ids.
    hearing: tokio::task::JoinHandle<()>,
    /// The push-notification delivery loop; a delivery it cuts short is due again once its
    /// claim lapses.
    deliveries: Option<tokio::task::JoinHandle<()>>,
    kept: Option<crate::app::sharing::Kept>,
    agent: Arc<Agent>,
    shutdown_grace: Duration,
    store: Store,
    authenticator: Arc<PeerAuthenticator>,
    /// Spans still queued are sent before the process ends.
    telemetry: Option<crate::telemetry::Telemetry>,
    reloader: Arc<reload::Reloader>,
}

impl RunningGateway {
    /// Stops accepting, lets in-flight requests finish, and closes the store.
    pub async fn shutdown(mut self) {
        if let Some(tx) = self.shutdown.take() {
            let _ = tx.send(true);
        }
        let _ = (&mut self.serving).await;
        let _ = (&mut self.admin_serving).await;
        if let Some(grpc_serving) = &mut self.grpc_serving {
            let _ = grpc_serving.await;
        }
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
        if let Some(telemetry) = self.telemetry.take() {
            telemetry.shutdown(self.shutdown_grace).await;
        }
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

    /// Reads the policy file again and applies what can change while serving (`SIGHUP`).
    pub fn policy_reload(&self) -> Arc<dyn crate::admin::reload::PolicyReload> {
        self.reloader.clone()
    }

    /// Serves until `signal` completes, then shuts down gracefully.
    pub async fn run_until(self, signal: impl std::future::Future<Output = ()>) {
        signal.await;
        self.shutdown().await;
    }
}

/// Opens the store, binds the listener and starts serving.
pub async fn start(mut options: GatewayOptions) -> Result<RunningGateway, StartError> {
    let grpc_bound = grpc_listener(&mut options).await?;
    let policy = &options.policy;
    let backend = crate::backend::from_settings(&policy.model).await?;
    let store = Store::open_at(&options.store_location()).await?;
    let sharing = Sharing::connect(&options, &store).await?;
    store.claim_for_serving(sharing.serving).await?;
    sharing.begin().await?;
    let listeners = Listeners::bind(&options, grpc_bound).await?;
    let (door_url, identity_providers, documents) =
        documents(&options, &store, &listeners, backend.as_ref()).await?;

    let (observers, telemetry) = observers(&options)?;
    let metrics = &observers.metrics;
    let budgets = budgets(&options, &store, &sharing);
    let push = push_notifications(&options, &store, sharing.serving, &observers)?;
    let providers = (&identity_providers, door_url.as_str(), metrics);
    let (guards, known_ids, announcements) =
        door_guards(&options, &store, &sharing.limits, providers).await?;
    let shared = (&sharing, &documents, push.as_ref(), guards.content.as_ref());
    let agent = agent(&options, &store, backend, (&budgets, metrics), shared).await?;
    let authenticator = guards.authenticator.clone();
    let reloading = (identity_providers, &guards, &documents, &agent, &listeners);
    let (readiness, router, grpc_router) = a2a_routers(
        &store,
        &sharing,
        (&agent, &documents),
        &guards,
        &observers,
        &options,
    );

    let (accounts, hearing, admin_router, reloader) = admin_side(
        &options,
        &store,
        &sharing,
        (&authenticator, &budgets, metrics),
        (
            readiness,
            reload_parts(&store, &sharing, &door_url, reloading),
        ),
        (known_ids, announcements),
    )?;

    let (local_addr, admin_addr) = (listeners.local_addr, listeners.admin_addr);
    let grpc_addr = listeners.grpc.as_ref().map(|(_, addr)| *addr);
    let (shutdown_tx, serving, admin_serving, grpc_serving) = listeners.serve(
        policy,
        (router, admin_router, grpc_router),
        (metrics, scrape_token(policy)?),
    );
    let housekeeping = (&store, sharing.registry());
    let kept = sharing.keep(&options, agent.clone());
    let caches = Caches::of(guards, budgets);
    let sweeper = spawn_housekeeping(&options, housekeeping, caches, &agent, documents.kept());
    // Started once the interrupted tasks are failed, so their last states are queued too.
    let deliveries = push.map(deliver_pushes).transpose()?;
    announce_listeners(
        (local_addr, admin_addr, grpc_addr),
        &door_url,
        policy.server.tls.is_some(),
    );
    Ok(RunningGateway {
        local_addr,
        door_url,
        admin_addr,
        grpc_addr,
        shutdown: Some(shutdown_tx),
        serving,
        admin_serving,
        grpc_serving,
        accounts,
        sweeper,
        hearing,
        deliveries,
        kept: Some(kept),
        agent,
        shutdown_grace: policy.server.shutdown_grace_seconds.duration(),
        store,
        authenticator,
        telemetry: Some(telemetry),
        reloader,
    })
}

/// What watches the listeners' requests: the metrics, and the traces when an endpoint is set
/// (their spans' fate counted in the metrics).
fn observers(
    options: &GatewayOptions,
) -> Result<(Observers, crate::telemetry::Telemetry), StartError> {
    let metrics = Arc::new(Metrics::default());
    if options.policy.telemetry.peer_series > 0 {
        metrics
            .calls()
            .label_peers(options.policy.telemetry.peer_series);
    }
    let telemetry = telemetry::start(options)?;
    if telemetry.tracing.is_some() {
        metrics.watch_spans(telemetry.losses.clone());
    }
    if let Some(instruments) = &telemetry.instruments {
        metrics.calls().export_to(instruments.clone());
    }
    let observers = Observers {
        metrics,
        tracing: telemetry.tracing.clone(),
    };
    Ok((observers, telemetry))
}

/// The loop delivering push notifications.
fn deliver_pushes(push: Arc<crate::push::Push>) -> Result<tokio::task::JoinHandle<()>, StartError> {
    crate::push::deliver::spawn(push).map_err(|e| config(&e))
}

/// The door's URL, the identity providers and the documents the gateway publishes, once the
/// listeners are bound; what start-up opened is logged then.
async fn documents(
    options: &GatewayOptions,
    store: &Store,
    listeners: &Listeners,
    backend: &dyn crate::backend::ModelBackend,
) -> Result<
    (
        String,
        Option<Arc<crate::layers::auth::jwt::IdentityProviders>>,
        Documents,
    ),
    StartError,
> {
    let door_url = settings::door_url(&options.policy, listeners.local_addr);
    let identity_providers = identity_providers(&options.policy, &options.clock)?;
    let mut documents = published_documents(
        options,
        store,
        listeners,
        &door_url,
        &identity_providers,
        backend.description(),
    )
    .await?;
    if let Some(key) = documents.caller_key.take() {
        assert_callers(backend, key, &door_url)?;
    }
    log_opened(options, store, backend);
    Ok((door_url, identity_providers, documents))
}

/// Hands the backend what signs callers' assertions, issued as the gateway's origin (the one
/// its card is served from); an agent whose policy does not send them ignores it.
fn assert_callers(
    backend: &dyn crate::backend::ModelBackend,
    key: crate::jose::sign::CardSigningKey,
    door_url: &str,
) -> Result<(), StartError> {
    let origin = reqwest::Url::parse(door_url)
        .map(|url| url.origin().ascii_serialization())
        .unwrap_or_else(|_| door_url.to_owned());
    let kid = key.kid().to_owned();
    let assertions = crate::jose::caller::CallerAssertions::new(key, origin)
        .map_err(|e| StartError::Config(format!("signing.caller_keys: {e}")))?;
    backend.assert_callers(Arc::new(assertions));
    if backend.asserts_callers() {
        tracing::info!(
            kid,
            "the agent behind the door is told who calls, in a signed assertion"
        );
    }
    Ok(())
}

/// The documents the gateway publishes (its cards, with the issuers and client CA they name).
async fn published_documents(
    options: &GatewayOptions,
    store: &Store,
    listeners: &Listeners,
    door_url: &str,
    identity_providers: &Option<Arc<crate::layers::auth::jwt::IdentityProviders>>,
    agent: Option<&crate::backend::AgentDescription>,
) -> Result<Documents, StartError> {
    let card_identities = card::CardIdentities {
        issuers: issuer_cards(&options.policy, identity_providers.as_deref()).await,
        client_ca_sha256: listeners.client_ca_sha256.clone(),
    };
    let (receipts, receipt_keys) = documents::receipts(options, door_url, store)?.unzip();
    if let Some(log) = receipts.as_ref().and_then(|receipts| receipts.log()) {
        log.check_origin().await.map_err(StartError::Config)?;
    }
    let inputs = documents::CardInputs {
        door_url,
        identities: &card_identities,
        agent,
        receipts: receipts.as_ref(),
    };
    Documents::build(options, store, &inputs, receipt_keys.unwrap_or_default()).await
}

/// What start-up opened, once the documents are built.
fn log_opened(options: &GatewayOptions, store: &Store, backend: &dyn crate::backend::ModelBackend) {
    tracing::info!(policy = %options.policy_source, "policy loaded");
    let described = store.describe();
    tracing::info!(data_dir = %options.data_dir.display(), store = %described, "store opened");
    tracing::info!("model backend: {}", backend.describe());
}

/// The door's guards (authentication, both limits, the policies and the content guard), with
/// the credential ids the authenticator refuses unknown ones by and the announcements that
/// keep them current.
async fn door_guards(
    options: &GatewayOptions,
    store: &Store,
    shared: &SharedLimits,
    (identity_providers, door_url, metrics): (
        &Option<Arc<crate::layers::auth::jwt::IdentityProviders>>,
        &str,
        &Arc<Metrics>,
    ),
) -> Result<(DoorGuards, Arc<KnownCredentialIds>, Option<Announcements>), StartError> {
    let cache_ttl = options.policy.auth.credential_cache_seconds.duration();
    let (authenticator, known_ids, announcements) = door_authenticator(
        options,
        store,
        shared,
        cache_ttl,
        (identity_providers.clone(), door_url),
    )
    .await?;
    let (per_ip, per_peer) = limit_layers(options, shared)?;
    let guards = DoorGuards {
        per_ip,
        per_peer,
        authenticator,
        authorization: authorization(&options.policy)?,
        content: content_guard(options, store, metrics)?,
    };
    Ok((guards, known_ids, announcements))
}

/// The content guard `[content_guard]` describes, when it has a rule (start-up stops naming
/// a rule that cannot be used).
fn content_guard(
    options: &GatewayOptions,
    store: &Store,
    metrics: &Arc<Metrics>,
) -> Result<Option<Arc<crate::a2a::inspect::ContentGuard>>, StartError> {
    let settings = &options.policy.content_guard;
    if !settings.any_rule() {
        return Ok(None);
    }
    let rules = crate::content::ContentRules::compile(settings)
        .map_err(|e| StartError::Config(format!("{}: {e}", e.key())))?;
    let inspector = (settings.inspector.as_ref())
        .map(crate::a2a::inspector::Inspector::new)
        .transpose()
        .map_err(StartError::Config)?;
    tracing::info!(packs = %rules.versions().join(", "), inspector = inspector.is_some(), "content guard: rules in force");
    let params = crate::a2a::inspect::GuardParams {
        keep_denied_answers: settings.keep_denied_answers,
        failure_mode: settings.failure_mode,
    };
    Ok(Some(Arc::new(crate::a2a::inspect::ContentGuard::new(
        (Arc::new(rules), inspector),
        params,
        (metrics.clone(), options.clock.clone()),
        store.clone(),
    ))))
}

/// A client that discovers a public provider from the door's metadata asks it for a token for
/// the door's URL (RFC 8707): an audience other than that URL refuses such tokens.
fn warn_of_other_audiences(policy: &Policy, door_url: &str) {
    let door = door_url.trim_end_matches('/');
    for issuer in policy.auth.issuers.iter().filter(|issuer| issuer.public) {
        if issuer.audience.trim_end_matches('/') != door {
            tracing::warn!(
                issuer = %issuer.name,
                audience = %issuer.audience,
                door = %door,
                "a public identity provider's audience is not the door's URL: tokens clients ask for this resource (RFC 9728, RFC 8707) will not name it"
            );
        }
    }
}

/// The Cedar policies `[authorization]` names, read and checked (start-up stops naming the
/// key, the policy and the problem).
fn authorization(policy: &Policy) -> Result<Option<Arc<crate::authz::Authorization>>, StartError> {
    let Some(section) = &policy.authorization else {
        return Ok(None);
    };
    let authorization = crate::authz::Authorization::load(&policy_files(section))
        .map_err(|e| StartError::Config(e.to_string()))?;
    tracing::info!(
        policies = authorization.current().policy_count(),
        "authorization: Cedar policies decide every call"
    );
    Ok(Some(Arc::new(authorization)))
}

/// The files `[authorization]` names.
pub(crate) fn policy_files(
    section: &crate::config::authorization::AuthorizationPolicy,
) -> crate::authz::PolicyFiles {
    crate::authz::PolicyFiles {
        policies: section.policies.clone(),
        schema: section.schema.clone(),
    }
}

/// What new peers get: `[peers]`.
fn account_defaults(policy: &Policy) -> AccountDefaults {
    AccountDefaults {
        default_owner: policy.peers.default_owner.clone(),
        rate_per_minute: policy.peers.default_rate_per_minute.u32(),
    }
}

/// The budgets of administrators without their own: `[budgets]`.
fn budget_defaults(policy: &Policy) -> BudgetDefaults {
    BudgetDefaults {
        tokens_per_day: policy.budgets.tokens_per_day,
        tokens_per_month: policy.budgets.tokens_per_month,
    }
}

/// Each owner's model budget, spent through the shared engine when there is one.
fn budgets(options: &GatewayOptions, store: &Store, sharing: &Sharing) -> Arc<Budgets> {
    let policy = &options.policy;
    let cache_ttl = policy.auth.credential_cache_seconds.duration();
    let mut budgets = Budgets::new(
        store.usage(),
        options.clock.clone(),
        budget_defaults(policy),
        cache_ttl,
    );
    if let Some(spend) = &sharing.spend {
        budgets = budgets.with_shared_spend(spend.clone());
    }
    Arc::new(budgets)
}

/// The agent over the store and the backend, hearing cancels, with the tasks the last stop
/// interrupted failed (no turn is in flight before serving).
async fn agent(
    options: &GatewayOptions,
    store: &Store,
    backend: Arc<dyn crate::backend::ModelBackend>,
    (budgets, metrics): (&Arc<Budgets>, &Arc<Metrics>),
    (sharing, documents, push, content): (
        &Sharing,
        &Documents,
        Option<&Arc<crate::push::Push>>,
        Option<&Arc<crate::a2a::inspect::ContentGuard>>,
    ),
) -> Result<Arc<Agent>, StartError> {
    let policy = &options.policy;
    let mut agent = Agent::builder(
        store.tasks(),
        backend,
        budgets.clone(),
        metrics.clone(),
        options.clock.clone(),
        agent_settings(policy),
    )
    .with_shared_state(sharing.agent.clone())
    .with_extended_cards(documents.cards.answered()?);
    if let Some(receipts) = &documents.receipts {
        agent = agent.with_receipts(receipts.clone());
    }
    if let Some(push) = push {
        agent = agent.with_push(push.clone());
    }
    if let Some(content) = content {
        agent = agent.with_content_guard(content.clone());
    }
    let agent = Arc::new(agent.build());
    agent.hear_cancels();
    match agent.fail_interrupted_tasks(None).await? {
        0 => {}
        n => tracing::warn!(
            tasks = n,
            "tasks interrupted by the last stop are now failed (interrupted)"
        ),
    }
    Ok(agent)
}

/// The door's authenticator, the credential ids it knows, and the command line's
/// announcements that keep them current (when they can be heard).
type DoorAuthenticator = (
    Arc<PeerAuthenticator>,
    Arc<KnownCredentialIds>,
    Option<Announcements>,
);

/// The door's authenticator, with the credential ids it refuses unknown ones by, and the
/// command line's announcements that keep them current (heard before the ids are read).
async fn door_authenticator(
    options: &GatewayOptions,
    store: &Store,
    shared: &SharedLimits,
    cache_ttl: Duration,
    (identity_providers, door_url): (
        Option<Arc<crate::layers::auth::jwt::IdentityProviders>>,
        &str,
    ),
) -> Result<DoorAuthenticator, StartError> {
    let policy = &options.policy;
    let mut settings = auth_settings(policy, cache_ttl, shared.failed_auth.clone())?;
    if policy
        .auth_schemes()
        .contains(&crate::guard::scheme::Scheme::Jwt)
    {
        settings.resource_metadata = crate::a2a::resource_metadata::url(door_url);
        warn_of_other_audiences(policy, door_url);
    }
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
    Ok((authenticator, known_ids, announcements))
}

/// The admin side: the account service, whose changes reach this gateway's caches (and the
/// other instances'), the task keeping the known credential ids current, and the admin API.
fn admin_side(
    options: &GatewayOptions,
    store: &Store,
    sharing: &Sharing,
    (authenticator, budgets, metrics): (&Arc<PeerAuthenticator>, &Arc<Budgets>, &Arc<Metrics>),
    (readiness, reloading): (Arc<crate::http::ready::Readiness>, ReloadParts),
    (known_ids, announcements): (Arc<KnownCredentialIds>, Option<crate::store::Announcements>),
) -> Result<
    (
        AccountService,
        tokio::task::JoinHandle<()>,
        axum::Router,
        Arc<reload::Reloader>,
    ),
    StartError,
> {
    let forget = Arc::new(account_changes::ForgetOnChange {
        authenticator: authenticator.clone(),
        budgets: budgets.clone(),
        reread: Arc::default(),
    });
    let accounts = account_service(options, store, sharing.changes.clone(), &forget);
    let authorization = reloading.authorization.clone();
    let reloader = Arc::new(reloading.reloader(options, &accounts, (authenticator, budgets)));
    sharing
        .changes
        .subscribe(Arc::new(reload::ReloadOnChange(reloader.clone())));
    let hearing =
        account_changes::keep_current(store.credentials(), known_ids, announcements, forget);
    let mut state = AdminState::new(
        accounts.clone(),
        budgets.clone(),
        metrics.clone(),
        options.clock.clone(),
    )
    .with_readiness(readiness)
    .with_reload(reloader.clone());
    if let Some(authorization) = authorization {
        state = state.with_authorization(authorization);
    }
    let admin_router = admin_router(options, state, authenticator)?;
    Ok((accounts, hearing, admin_router, reloader))
}

/// What a policy reload replaces besides the account service and the authenticator.
struct ReloadParts {
    identity: Option<Arc<crate::layers::auth::jwt::IdentityProviders>>,
    signing_keys: Vec<crate::jose::sign::CardSigningKey>,
    per_ip: PerIpLimitLayer,
    cards: Arc<std::sync::RwLock<Arc<crate::http::door::CardDocuments>>>,
    agent: Arc<Agent>,
    store: Store,
    door_url: String,
    client_ca_sha256: Option<String>,
    changes: Arc<dyn ChangeNotifier>,
    authorization: Option<Arc<crate::authz::Authorization>>,
    receipts: Option<Arc<crate::a2a::receipts::Receipts>>,
}

/// What a policy reload replaces, gathered once the door is built.
fn reload_parts(
    store: &Store,
    sharing: &Sharing,
    door_url: &str,
    (identity, guards, documents, agent, listeners): (
        Option<Arc<crate::layers::auth::jwt::IdentityProviders>>,
        &DoorGuards,
        &Documents,
        &Arc<Agent>,
        &Listeners,
    ),
) -> ReloadParts {
    ReloadParts {
        identity,
        signing_keys: documents.signing_keys.clone(),
        per_ip: guards.per_ip.clone(),
        cards: documents.served.clone(),
        agent: agent.clone(),
        store: store.clone(),
        door_url: door_url.to_owned(),
        client_ca_sha256: listeners.client_ca_sha256.clone(),
        changes: sharing.changes.clone(),
        authorization: guards.authorization.clone(),
        receipts: documents.receipts.clone(),
    }
}

impl ReloadParts {
    fn reloader(
        self,
        options: &GatewayOptions,
        accounts: &AccountService,
        (authenticator, budgets): (&Arc<PeerAuthenticator>, &Arc<Budgets>),
    ) -> reload::Reloader {
        let parts = reload::Parts {
            identity: self.identity,
            authenticator: authenticator.clone(),
            accounts: accounts.clone(),
            budgets: budgets.clone(),
            per_ip: self.per_ip,
            cards: self.cards,
            agent: self.agent,
            store: self.store,
            clock: options.clock.clone(),
            signing_keys: self.signing_keys,
            door_url: self.door_url,
            client_ca_sha256: self.client_ca_sha256,
            changes: self.changes,
            authorization: self.authorization,
            receipts: self.receipts,
        };
        reload::Reloader::new(options.policy.clone(), options.policy_source.clone(), parts)
    }
}

/// What the door's handlers share: the agent, the documents, readiness.
/// What `/ready` asks, the door's routes and, when the policy serves gRPC, the gRPC
/// listener's: both over the same agent, readiness and guards.
fn a2a_routers(
    store: &Store,
    sharing: &Sharing,
    (agent, documents): (&Arc<Agent>, &Documents),
    guards: &DoorGuards,
    observers: &Observers,
    options: &GatewayOptions,
) -> (Arc<Readiness>, Router, Option<Router>) {
    let policy = &options.policy;
    let readiness = Arc::new(Readiness::new(
        store.clone(),
        sharing.redis.clone(),
        (policy.model.backend.name(), agent.backend()),
        observers.metrics.clone(),
    ));
    readiness.probe_in_background();
    // Every binding calls the agent through the one pipeline.
    let mut pipeline =
        Pipeline::new(Arc::new(agent.clone())).with_metrics(observers.metrics.clone());
    let policies = guards.authorization.as_ref().map(|authorization| {
        Arc::new(crate::a2a::authorize::PolicyStage::new(
            authorization.clone(),
            options.clock.clone(),
            observers.metrics.clone(),
            store.clone(),
        ))
    });
    let mut stages: Vec<Arc<dyn crate::a2a::stages::CallStages>> = Vec::new();
    if let Some(policies) = &policies {
        stages.push(policies.clone());
    }
    if let Some(content) = &guards.content {
        stages.push(Arc::new(crate::a2a::inspect::ContentStage::new(
            content.clone(),
        )));
    }
    pipeline = match stages.len() {
        0 => pipeline,
        1 => pipeline.with_stages(stages.remove(0)),
        _ => pipeline.with_stages(Arc::new(crate::a2a::stages::Stacked(stages))),
    };
    let mut state = door_state(policy, pipeline.clone(), documents, readiness.clone());
    state.policies = policies;
    let door = settings::door(policy);
    let router = door_router(&door, state, guards, observers.clone());
    let grpc = grpc_router((policy, &door), pipeline, &readiness, guards, observers);
    (readiness, router, grpc)
}

fn door_state(
    policy: &Policy,
    pipeline: Pipeline,
    documents: &Documents,
    readiness: Arc<crate::http::ready::Readiness>,
) -> DoorState {
    DoorState {
        pipeline,
        bounds: stream_bounds(policy),
        cards: documents.served.clone(),
        jwks: documents.jwks.clone(),
        readiness,
        policies: None,
        log: (documents.receipts.as_ref()).and_then(|receipts| receipts.log().cloned()),
    }
}

/// The housekeeping loop over this gateway's store and caches, and the answer log's
/// integrator beside it when receipts are on (stopped together).
fn spawn_housekeeping(
    options: &GatewayOptions,
    (store, registry): (&Store, Option<Arc<dyn crate::store::InstanceRegistry>>),
    caches: Caches,
    agent: &Arc<Agent>,
    (refresh, log): (
        documents::JwksRefresh,
        Option<crate::a2a::answer_log::AnswerLog>,
    ),
) -> tokio::task::JoinHandle<()> {
    let sweeping = housekeeping(
        store.clone(),
        registry,
        options.clock.clone(),
        caches,
        agent.clone(),
        options.policy.server.request_timeout_seconds.duration(),
        refresh,
    );
    let clock = options.clock.clone();
    tokio::spawn(async move {
        match log {
            Some(log) => {
                let integrating = crate::a2a::answer_log::run_integrator(log, clock);
                tokio::join!(sweeping, integrating);
            }
            None => sweeping.await,
        }
    })
}

/// Where each listener is: the tests read these lines for the bound addresses.
/// Says where each listener is, in the scheme it speaks: `https` (and TLS on the gRPC
/// listener) with `[server.tls]`.
fn announce_listeners(
    (local_addr, admin_addr, grpc_addr): (SocketAddr, SocketAddr, Option<SocketAddr>),
    door_url: &str,
    tls: bool,
) {
    tracing::info!("admin API on http://{admin_addr} (OpenAPI at /openapi.json)");
    let scheme = if tls { "https" } else { "http" };
    if let Some(grpc_addr) = grpc_addr {
        let over = if tls { ", over TLS" } else { "" };
        tracing::info!(
            "gRPC binding on {grpc_addr} (lf.a2a.v1.A2AService, grpc.health.v1.Health{over})"
        );
    }
    tracing::info!(
        "peergate listening on {scheme}://{local_addr}; A2A door {door_url}; card {scheme}://{local_addr}/.well-known/agent-card.json"
    );
}

/// The gRPC listener, with `[grpc]`, bound first: a card naming no address of its own names
/// the bound one (port 0 in tests).
async fn grpc_listener(
    options: &mut GatewayOptions,
) -> Result<Option<(tokio::net::TcpListener, SocketAddr)>, StartError> {
    let Some(grpc) = options.policy.grpc.as_mut() else {
        return match options.grpc_listen {
            Some(_) => Err(StartError::Config(
                "--grpc-listen: the policy has no [grpc] section; add one to serve gRPC".to_owned(),
            )),
            None => Ok(None),
        };
    };
    if let Some(addr) = options.grpc_listen {
        grpc.listen = addr;
    }
    if grpc.listen.ip().is_unspecified() && grpc.public_address.is_none() {
        return Err(StartError::Config(
            "grpc.public_address: is required when the gRPC listener binds an unspecified address; name the host:port partners reach".to_owned(),
        ));
    }
    let (listener, bound) = bind(grpc.listen).await?;
    if grpc.public_address.is_none() {
        grpc.public_address = Some(bound.to_string());
    }
    Ok(Some((listener, bound)))
}

/// The gRPC listener's routes, with `[grpc]`: the same agent behind the same guards.
fn grpc_router(
    (policy, door): (&Policy, &crate::http::door::DoorSettings),
    pipeline: Pipeline,
    readiness: &Arc<crate::http::ready::Readiness>,
    guards: &DoorGuards,
    observers: &Observers,
) -> Option<Router> {
    policy.grpc.as_ref()?;
    let state = crate::http::grpc::GrpcState {
        pipeline,
        longest_stream: stream_bounds(policy).longest,
        max_message_bytes: policy.server.max_body_bytes.usize(),
    };
    Some(crate::http::grpc::grpc_router(
        door,
        (state, readiness.clone()),
        guards,
        observers.clone(),
    ))
}

pub(super) fn config(e: &dyn std::fmt::Display) -> StartError {
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
    /// The gRPC listener, with `[grpc]`.
    grpc: Option<(tokio::net::TcpListener, SocketAddr)>,
    /// The metrics listener, with `server.metrics_listen`.
    metrics: Option<(tokio::net::TcpListener, SocketAddr)>,
    /// The door's own TLS, with `[server.tls]`.
    tls: Option<tokio_rustls::TlsAcceptor>,
    /// The same for the gRPC listener, offering HTTP/2.
    grpc_tls: Option<tokio_rustls::TlsAcceptor>,
    /// The SHA-256 of the client CA's certificate, when client certificates are asked for.
    client_ca_sha256: Option<String>,
}

impl Listeners {
    async fn bind(
        options: &GatewayOptions,
        grpc: Option<(tokio::net::TcpListener, SocketAddr)>,
    ) -> Result<Self, StartError> {
        let policy = &options.policy;
        open_files::fit(policy);
        let addr = options.listen.unwrap_or(policy.server.listen);
        // The card names the door's URL: on every address, only the operator knows it.
        if addr.ip().is_unspecified() && policy.server.public_base_url.is_none() {
            return Err(StartError::Config(format!(
                "server.public_base_url: is required when the door listens on every address ({addr}, from --listen or server.listen): the card would name http://{addr}, which no partner can reach; set it (or --public-base-url, PEERGATE_PUBLIC_BASE_URL) to the URL partners use"
            )));
        }
        let admin_bind = options.admin_listen.unwrap_or(policy.server.admin_listen);
        // The command line may override the policy's address: the same rule applies.
        crate::config::check_admin_listen(admin_bind, addr).map_err(|reason| {
            StartError::Config(format!("--admin-listen / server.admin_listen {reason}"))
        })?;
        // Read before binding: a wrong file stops start-up naming its setting.
        let (tls, client_ca_sha256) = match &policy.server.tls {
            Some(tls) => {
                crate::http::server_tls::check_client_trust(tls, options.clock.now())
                    .map_err(StartError::Config)?;
                let (acceptor, ca) = crate::http::server_tls::acceptor(tls, b"http/1.1")
                    .map_err(StartError::Config)?;
                (Some(acceptor), ca)
            }
            None => (None, None),
        };
        let grpc_tls = match (&policy.server.tls, &policy.grpc) {
            (Some(tls), Some(_)) => Some(
                crate::http::server_tls::acceptor(tls, b"h2")
                    .map_err(StartError::Config)?
                    .0,
            ),
            _ => None,
        };
        let (door, local_addr) = bind(addr).await?;
        let (admin, admin_addr) = bind(admin_bind).await?;
        let metrics = match policy.server.metrics_listen {
            Some(metrics) => Some(bind(metrics).await?),
            None => None,
        };
        Ok(Self {
            door,
            admin,
            local_addr,
            admin_addr,
            grpc,
            metrics,
            tls,
            grpc_tls,
            client_ca_sha256,
        })
    }
}

impl Listeners {
    /// Starts the accept loops; they drain when the returned sender says so.
    fn serve(
        self,
        policy: &Policy,
        (router, admin_router, grpc_router): (Router, Router, Option<Router>),
        (metrics, scrape_token): (&Arc<Metrics>, Option<crate::admin::ScrapeToken>),
    ) -> (
        tokio::sync::watch::Sender<bool>,
        Serving,
        Serving,
        Option<Serving>,
    ) {
        let (shutdown_tx, shutdown_rx) = tokio::sync::watch::channel(false);
        let limits = ConnectionLimits {
            header_read_timeout: policy.server.header_read_timeout_seconds.duration(),
            max_connections: policy.server.max_connections.usize(),
            max_per_address: policy.server.max_connections_per_address.usize(),
            exempt: policy.server.trusted_proxies.clone().into(),
            write_stall: policy.server.write_stall_seconds.duration(),
            shutdown_grace: policy.server.shutdown_grace_seconds.duration(),
        };
        let serving = tokio::spawn(crate::http::accept::serve(
            self.door,
            (router, Protocol::Http1),
            limits.clone(),
            shutdown_rx.clone(),
            metrics.clone(),
            self.tls,
        ));
        let grpc_serving = match (self.grpc, grpc_router, &policy.grpc) {
            (Some((listener, _)), Some(router), Some(grpc)) => {
                let protocol = Protocol::Http2(Http2Limits {
                    max_concurrent_streams: grpc.max_concurrent_streams.u32(),
                    idle_timeout: grpc.idle_timeout_seconds.duration(),
                });
                Some(tokio::spawn(crate::http::accept::serve(
                    listener,
                    (router, protocol),
                    limits.clone(),
                    shutdown_rx.clone(),
                    metrics.clone(),
                    self.grpc_tls,
                )))
            }
            _ => None,
        };
        // The metrics listener opens /metrics to the scrape token only; it is served, and
        // drained, with the admin listener.
        let scraping = match (self.metrics, scrape_token) {
            (Some((listener, addr)), Some(token)) => {
                tracing::info!("metrics on http://{addr}/metrics (the scrape token only)");
                Some(crate::http::accept::serve(
                    listener,
                    (
                        crate::http::metrics_listener::router(metrics.clone(), token),
                        Protocol::Http1,
                    ),
                    limits.clone(),
                    shutdown_rx.clone(),
                    metrics.clone(),
                    None,
                ))
            }
            _ => None,
        };
        // The admin listener is loopback only, without TLS of its own.
        let admin = crate::http::accept::serve(
            self.admin,
            (admin_router, Protocol::Http1),
            limits,
            shutdown_rx,
            metrics.clone(),
            None,
        );
        let admin_serving = tokio::spawn(async move {
            match scraping {
                Some(scraping) => {
                    let (admin, scraping) = tokio::join!(admin, scraping);
                    admin.and(scraping)
                }
                None => admin.await,
            }
        });
        (shutdown_tx, serving, admin_serving, grpc_serving)
    }
}

/// The account service, publishing its changes to the caches of this gateway.
fn account_service(
    options: &GatewayOptions,
    store: &Store,
    changes: Arc<dyn ChangeNotifier>,
    forget: &Arc<account_changes::ForgetOnChange>,
) -> AccountService {
    changes.subscribe(forget.clone());
    AccountService::new(
        store.clone(),
        options.clock.clone(),
        account_defaults(&options.policy),
    )
    .with_changes(changes)
    .knowing_issuers(&options.policy.auth.issuer_names())
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

/// Push notifications when `capabilities.push_notifications` is on: the sealing key (named by
/// the policy, or generated in the data directory for a lone instance) and the callback rules.
fn push_notifications(
    options: &GatewayOptions,
    store: &Store,
    serving: crate::store::Serving,
    observers: &Observers,
) -> Result<Option<Arc<crate::push::Push>>, StartError> {
    let policy = &options.policy;
    if !policy.capabilities.push_notifications {
        return Ok(None);
    }
    let alone = matches!(serving, crate::store::Serving::Alone);
    let named = crate::push::seal::KeySource {
        env: policy.push.key_env.as_deref(),
        file: policy.push.key_file.as_deref(),
    };
    let key = crate::push::seal::SealingKey::load(named, &options.data_dir, alone)
        .map_err(|e| config(&e))?;
    let callbacks = crate::push::callback::CallbackPolicy::resolving(
        policy.push.dangerous_allow_loopback_callbacks,
    );
    if callbacks.dangerous_allow_loopback {
        tracing::warn!(
            "push.dangerous_allow_loopback_callbacks is on: any peer can make this gateway POST to services on this host"
        );
    }
    let push = crate::push::Push::new(
        store.push(),
        key,
        callbacks,
        settings::push(&policy.push),
        options.clock.clone(),
        observers.metrics.clone(),
    );
    Ok(Some(Arc::new(push.traced(observers.tracing.clone()))))
}

fn agent_settings(policy: &Policy) -> AgentSettings {
    AgentSettings {
        instructions: policy.model.instructions.clone(),
        task_retention: Duration::from_secs(policy.tasks.retention_hours.get() * 3600),
        context_messages: policy.tasks.context_messages.u32(),
        max_text_bytes: policy.tasks.max_text_bytes.usize(),
        refuse_unread_parts: policy.tasks.unread_parts == crate::config::UnreadParts::Refuse,
        backend_timeout: policy.model.timeout_seconds.duration(),
        non_blocking: policy.capabilities.non_blocking,
        cancel_running: policy.capabilities.cancel_running,
        streaming: policy.capabilities.streaming,
        subscriptions: policy.capabilities.subscriptions,
        longest_stream: policy.server.request_timeout_seconds.duration(),
        streams_per_peer: policy.limits.streams_per_peer.u32(),
    }
}

/// How long a stream may last, and its connection after it.
fn stream_bounds(policy: &Policy) -> crate::http::sse::StreamBounds {
    crate::http::sse::StreamBounds {
        longest: policy.server.request_timeout_seconds.duration(),
        grace: policy.server.write_stall_seconds.duration(),
    }
}

/// The per-IP and per-peer layers: in process, or over the shared limiters.
fn limit_layers(
    options: &GatewayOptions,
    shared: &SharedLimits,
) -> Result<(PerIpLimitLayer, PerPeerLimitLayer), StartError> {
    let limits = &options.policy.limits;
    let per_ip_quota = Quota::per_minute(limits.per_ip_per_minute.u32());
    let capacity = limits.tracked_addresses.usize();
    let clock = options.clock.clone();
    let (per_ip, per_peer) = match &shared.admission {
        Some(engine) => (
            PerIpLimitLayer::admitted(per_ip_quota, capacity, clock.clone(), engine.clone()),
            PerPeerLimitLayer::admitted(capacity, clock, engine.clone()),
        ),
        None => (
            PerIpLimitLayer::new(per_ip_quota, capacity, clock.clone()),
            PerPeerLimitLayer::new(capacity, clock),
        ),
    };
    let (per_ip, per_peer) = (
        per_ip.map_err(|e| config(&e))?,
        per_peer.map_err(|e| config(&e))?,
    );
    Ok((per_ip, per_peer))
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
                policy.limits.failed_auth_per_ip_per_minute.u32(),
                policy.limits.tracked_addresses.usize(),
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
    Ok(crate::http::admin_api::router(
        state,
        admin_authenticator,
        crate::layers::cross_site::CrossSiteLayer::new(allowed_origins)
            .answering(&policy.server.admin_hosts),
    )
    .layer(CatchPanicLayer::custom(panic_response))
    .layer(TimeoutLayer::with_status_code(
        StatusCode::REQUEST_TIMEOUT,
        policy.server.request_timeout_seconds.duration(),
    ))
    .layer(axum::middleware::map_response(
        refusal::explain_layer_refusals,
    )))
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

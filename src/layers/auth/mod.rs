//! Authentication of partner agents: Bearer peer tokens, Basic (peer name and password) and an
//! API-key header, whichever the policy enables.
//!
//! [`AuthLayer`] sits behind the per-IP limit and in front of the per-peer limit. Its service
//! decides before anything below runs: a request without exactly one valid credential is
//! answered 401, with one `WWW-Authenticate` challenge per enabled scheme, and never reaches the
//! handler. A request that passes carries an [`AuthenticatedPeer`], which only this module can
//! construct, so a handler that takes one cannot be reached unauthenticated.
//!
//! * Two credentials (two `Authorization` headers, or `Authorization` and the API-key header)
//!   are refused whole: neither is tried.
//! * Every attempt that presents a credential is counted against a per-address budget before any
//!   work and given back when it succeeds. Once the budget is spent, the layer answers 429 before
//!   looking at any credential, so guessing and Argon2 work stay bounded, concurrent guesses too.
//! * The verdict on a credential is cached for `auth.credential_cache_seconds` (at most 5 s, by
//!   the gateway's clock), keyed by a SHA-256 of the credential, so the hot path does no store read and no Argon2,
//!   and neither does a flood repeating one bad credential. A refused credential stays refused
//!   for that time even if it becomes valid (a password just set by the administrator).
//!   A credential past its expiry (the peer's, or the end of a rotation's grace period) is refused
//!   on every request by the gateway's clock, cached or not, and costs an attempt like a wrong one.
//!   [`PeerAuthenticator::forget_peer`] drops a peer's entries at once, so a revocation made
//!   through the running server applies to the very next request; one written by the command
//!   line reaches a running server within the cache time.
//!
//! ```
//! use axum::{Router, routing::post, body::Body, http::{Request, StatusCode}};
//! use peergate::layers::auth::{AuthenticatedPeer, AuthLayer, AuthSettings, PeerAuthenticator};
//! use tower::ServiceExt;
//! # tokio::runtime::Runtime::new().unwrap().block_on(async {
//! let dir = tempfile::tempdir().unwrap();
//! let store = peergate::store::Store::open(dir.path()).await.unwrap();
//! let clock = std::sync::Arc::new(peergate::clock::SystemClock);
//! let auth = PeerAuthenticator::new(store.credentials(), clock, AuthSettings::default()).unwrap();
//! let app = Router::new()
//!     .route("/a2a", post(|peer: AuthenticatedPeer| async move { peer.name().to_owned() }))
//!     .layer(AuthLayer::new(auth));
//! let response = app
//!     .oneshot(Request::post("/a2a").body(Body::empty()).unwrap())
//!     .await
//!     .unwrap();
//! assert_eq!(response.status(), StatusCode::UNAUTHORIZED);
//! assert!(response.headers()["www-authenticate"].to_str().unwrap().starts_with("Bearer"));
//! # });
//! ```

pub mod attempts;
pub mod basic;
pub mod generated;
pub mod known_ids;
pub mod password;
pub mod scheme;

pub use crate::guard::unauthenticated::AuthError;
pub use attempts::FailedAttempts;
pub use basic::parse_basic;

use crate::clock::Clock;
use crate::guard::refusal::{Challenges, Refusal};
use crate::layers::client_addr::ClientAddr;
use crate::layers::limit::{Quota, RateLimited};
use crate::shared::rate_limit::RateLimiter;
use crate::store::{CredentialStore, StoreError};
use crate::token::CredentialKind;
use async_trait::async_trait;
use axum::body::Body;
use axum::extract::FromRequestParts;
use axum::http::request::Parts;
use axum::http::{HeaderMap, HeaderName, Request, header};
use axum::response::{IntoResponse, Response};
use basic::{Basic, Login, Logins};
use generated::{Carrier, GeneratedCredential, TokenRecord, TokenRecords};
use moka::future::Cache;
use password::PasswordChecker;
use scheme::{CredentialScheme, Presented};
use sha2::{Digest, Sha256};
use std::future::Future;
use std::net::{IpAddr, Ipv4Addr};
use std::pin::Pin;
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::task::{Context, Poll};
use std::time::Duration;
use tower::{Layer, Service};

/// A peer whose credential was verified for this request. Only this module constructs it.
#[derive(Debug, Clone)]
pub struct AuthenticatedPeer {
    id: Arc<str>,
    name: Arc<str>,
    owner_id: Arc<str>,
    rate_per_minute: u32,
    max_streams: Option<u32>,
    scheme: Scheme,
}

impl AuthenticatedPeer {
    /// The peer's stable id.
    pub fn id(&self) -> &str {
        &self.id
    }
    /// The peer's id, shared.
    pub fn id_arc(&self) -> Arc<str> {
        self.id.clone()
    }
    /// The peer's name.
    pub fn name(&self) -> &str {
        &self.name
    }
    /// The administrator the peer acts for: its turns count against their budget.
    pub fn owner_id(&self) -> &str {
        &self.owner_id
    }
    /// The peer's quota in requests per minute.
    pub fn rate_per_minute(&self) -> u32 {
        self.rate_per_minute
    }
    /// The peer's own cap on open streams, if it has one (else the policy's applies).
    pub fn max_streams(&self) -> Option<u32> {
        self.max_streams
    }
    /// How the peer authenticated.
    pub fn scheme(&self) -> Scheme {
        self.scheme
    }

    /// A peer for the crate's own unit tests, which have no layer in front.
    #[cfg(test)]
    pub(crate) fn for_tests(id: &str, owner_id: &str) -> Self {
        Self {
            id: id.into(),
            name: id.into(),
            owner_id: owner_id.into(),
            rate_per_minute: 60,
            max_streams: None,
            scheme: Scheme::Bearer,
        }
    }
}

impl<S: Send + Sync> FromRequestParts<S> for AuthenticatedPeer {
    type Rejection = AuthError;

    async fn from_request_parts(parts: &mut Parts, _state: &S) -> Result<Self, Self::Rejection> {
        // Absent only when a route was mounted without the layer: fail closed.
        parts
            .extensions
            .get::<AuthenticatedPeer>()
            .cloned()
            .ok_or(AuthError::MissingCredentials)
    }
}

/// The authentication schemes peergate knows, as the policy names them.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, serde::Deserialize)]
#[serde(rename_all = "snake_case")]
#[non_exhaustive]
pub enum Scheme {
    /// `Authorization: Bearer <peer token>`
    Bearer,
    /// `Authorization: Basic base64(name:password)`
    Basic,
    /// `<configured header>: <API key>`
    ApiKey,
}

impl Scheme {
    /// The name used in the policy (`auth.schemes`).
    pub fn policy_name(self) -> &'static str {
        match self {
            Self::Bearer => "bearer",
            Self::Basic => "basic",
            Self::ApiKey => "api_key",
        }
    }
}

/// A refusal by the authentication layer: bad credentials, or the failed-attempt budget.
#[derive(Debug, Clone, Copy, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum AuthRefusal {
    /// The credentials were missing or wrong.
    #[error(transparent)]
    Unauthenticated(#[from] AuthError),
    /// Too many failed attempts from this address.
    #[error(transparent)]
    Limited(#[from] RateLimited),
}

/// How the authentication layer is configured.
#[derive(Debug, Clone)]
pub struct AuthSettings {
    /// Enabled schemes, in the order challenges are sent.
    pub schemes: Vec<Scheme>,
    /// Header that carries API keys.
    pub api_key_header: HeaderName,
    /// The same header as the operator spelled it, for the challenge.
    pub api_key_header_label: String,
    /// How long a verified credential is trusted without asking the store again.
    pub cache_ttl: Duration,
    /// Argon2 verifications allowed at once.
    pub password_checks_at_once: usize,
    /// Failed attempts allowed per client address.
    pub failed_auth_quota: Quota,
    /// Addresses tracked by the failed-attempt budget.
    pub tracked_addresses: usize,
    /// Where the failed-attempt budget is counted when not in this process (Redis, shared by
    /// every instance).
    pub failed_attempts: Option<Arc<dyn RateLimiter<IpAddr>>>,
    /// The credential ids the store holds, so unknown ones are refused without a store read
    /// (`None`: every id is looked up).
    pub known_ids: Option<Arc<known_ids::KnownCredentialIds>>,
}

impl Default for AuthSettings {
    fn default() -> Self {
        Self {
            schemes: vec![Scheme::Bearer],
            api_key_header: HeaderName::from_static("x-api-key"),
            api_key_header_label: "X-API-Key".to_owned(),
            cache_ttl: Duration::from_secs(2),
            password_checks_at_once: 2,
            failed_auth_quota: Quota::per_minute(10),
            tracked_addresses: 100_000,
            failed_attempts: None,
            known_ids: None,
        }
    }
}

/// Why the authenticator could not be built.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum AuthConfigError {
    /// No scheme enabled: nobody could ever get in.
    #[error("auth.schemes: at least one scheme must be enabled")]
    NoScheme,
    /// The API-key header would collide with `Authorization`.
    #[error("auth.api_key_header: must not be Authorization")]
    ApiKeyHeader,
    /// The failed-attempt budget is unusable.
    #[error("limits.failed_auth_per_ip_per_minute: {0}")]
    Budget(String),
    /// The dummy password hash could not be made.
    #[error("cannot prepare password hashing: {0}")]
    Hashing(String),
}

/// A verdict and when (by the gateway's clock) it was reached.
#[derive(Debug, Clone)]
struct CachedVerdict {
    /// The peer, or `None` for a credential that was refused.
    peer: Option<Arc<VerifiedPeer>>,
    at_millis: i64,
}

#[derive(Debug)]
struct VerifiedPeer {
    id: Arc<str>,
    name: Arc<str>,
    owner_id: Arc<str>,
    rate_per_minute: u32,
    max_streams: Option<u32>,
    /// When the credential stops working (expiry, or the end of a rotation's grace), epoch ms;
    /// checked on every request, cached verdicts included.
    valid_until: Option<i64>,
    /// Whether "last used" was looked after for this verdict; later hits skip the bookkeeping.
    noted: std::sync::atomic::AtomicBool,
}

impl VerifiedPeer {
    fn new(
        id: String,
        name: String,
        owner_id: String,
        (rate_per_minute, max_streams): (u32, Option<u32>),
        valid_until: Option<i64>,
    ) -> Self {
        Self {
            id: id.into(),
            name: name.into(),
            owner_id: owner_id.into(),
            rate_per_minute,
            max_streams,
            valid_until,
            noted: Default::default(),
        }
    }
}

/// The cache key of a presented credential: a hash, so no credential is kept in memory longer
/// than the request.
fn cache_key(scheme: Scheme, credentials: &str) -> [u8; 32] {
    let mut hasher = Sha256::new();
    hasher.update(scheme.policy_name().as_bytes());
    hasher.update(b"\0");
    hasher.update(credentials.as_bytes());
    hasher.finalize().into()
}

/// A credential the request presented, claimed by one enabled scheme and past its precheck.
struct Claimed<'h> {
    scheme: usize,
    credentials: &'h str,
}

/// Verifies credentials against the store, with a short-lived cache.
pub struct PeerAuthenticator {
    store: Arc<dyn CredentialStore>,
    clock: Arc<dyn Clock>,
    settings: AuthSettings,
    challenges: Challenges,
    /// Recent verdicts by credential hash.
    verified: Option<Cache<[u8; 32], CachedVerdict>>,
    /// Bumped by every `forget_peer`: a verification that started before a revocation must not
    /// put its (now stale) verdict into the cache.
    generation: AtomicU64,
    passwords: PasswordChecker,
    failures: FailedAttempts,
    /// The enabled schemes, in the order their challenges are sent.
    schemes: Vec<(Scheme, Box<dyn CredentialScheme<VerifiedPeer>>)>,
    /// The API-key header, when API keys are enabled.
    key_header: Option<HeaderName>,
    recently_touched: Cache<Arc<str>, ()>,
}

/// The realm of the door's challenges.
const REALM: &str = "peergate";

/// Peers' credentials of one kind, as the generated-credential scheme reads them.
struct PeerTokens {
    store: Arc<dyn CredentialStore>,
    kind: CredentialKind,
}

#[async_trait]
impl TokenRecords<VerifiedPeer> for PeerTokens {
    async fn record(
        &self,
        token_id: &str,
    ) -> Result<Option<TokenRecord<VerifiedPeer>>, StoreError> {
        let record = self.store.find_credential(self.kind, token_id).await?;
        Ok(record.map(|record| TokenRecord {
            name: record.peer_name.clone(),
            secret_hash: record.secret_hash,
            active: record.active,
            who: VerifiedPeer::new(
                record.peer_id,
                record.peer_name,
                record.owner_id,
                (record.rate_per_minute, record.max_streams),
                record.valid_until,
            ),
        }))
    }
}

/// Peers' Basic logins.
struct PeerLogins {
    store: Arc<dyn CredentialStore>,
}

#[async_trait]
impl Logins<VerifiedPeer> for PeerLogins {
    async fn login(&self, name: &str) -> Result<Option<Login<VerifiedPeer>>, StoreError> {
        Ok(self.store.find_peer_login(name).await?.map(|login| Login {
            password_hash: login.password_hash,
            active: login.active,
            who: VerifiedPeer::new(
                login.peer_id,
                login.peer_name,
                login.owner_id,
                (login.rate_per_minute, login.max_streams),
                login.valid_until,
            ),
        }))
    }
}

/// The one place the door's schemes are registered: a new scheme is a new module and an arm
/// here.
fn door_scheme(
    scheme: Scheme,
    store: &Arc<dyn CredentialStore>,
    passwords: &PasswordChecker,
    settings: &AuthSettings,
) -> Box<dyn CredentialScheme<VerifiedPeer>> {
    let tokens = |kind| -> Arc<dyn TokenRecords<VerifiedPeer>> {
        Arc::new(PeerTokens {
            store: store.clone(),
            kind,
        })
    };
    match scheme {
        Scheme::Bearer => Box::new(GeneratedCredential::new(
            CredentialKind::PeerToken,
            Carrier::Bearer,
            tokens(CredentialKind::PeerToken),
            REALM,
        )),
        Scheme::Basic => Box::new(Basic::new(
            Arc::new(PeerLogins {
                store: store.clone(),
            }),
            passwords.clone(),
            REALM,
        )),
        Scheme::ApiKey => Box::new(GeneratedCredential::new(
            CredentialKind::ApiKey,
            Carrier::Header {
                label: settings.api_key_header_label.clone(),
            },
            tokens(CredentialKind::ApiKey),
            REALM,
        )),
    }
}

impl std::fmt::Debug for PeerAuthenticator {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("PeerAuthenticator")
            .field("settings", &self.settings)
            .finish_non_exhaustive()
    }
}

impl PeerAuthenticator {
    /// An authenticator over `store`; refuses settings that could never work.
    pub fn new(
        store: Arc<dyn CredentialStore>,
        clock: Arc<dyn Clock>,
        settings: AuthSettings,
    ) -> Result<Self, AuthConfigError> {
        if settings.schemes.is_empty() {
            return Err(AuthConfigError::NoScheme);
        }
        if settings.api_key_header == header::AUTHORIZATION {
            return Err(AuthConfigError::ApiKeyHeader);
        }
        let mut failures = FailedAttempts::new(
            settings.failed_auth_quota,
            settings.tracked_addresses,
            clock.clone(),
        )
        .map_err(|e| AuthConfigError::Budget(e.to_string()))?;
        if let Some(shared) = &settings.failed_attempts {
            failures = FailedAttempts::with_limiter(settings.failed_auth_quota, shared.clone());
        }
        // Made even without Basic on the door: the admin API shares this one pool.
        let passwords = PasswordChecker::new(settings.password_checks_at_once)
            .map_err(AuthConfigError::Hashing)?;
        let schemes: Vec<_> = settings
            .schemes
            .iter()
            .map(|&scheme| (scheme, door_scheme(scheme, &store, &passwords, &settings)))
            .collect();
        let challenges = Challenges::new(schemes.iter().map(|(_, s)| s.challenge()));
        let key_header = settings
            .schemes
            .contains(&Scheme::ApiKey)
            .then(|| settings.api_key_header.clone());
        let verified = (!settings.cache_ttl.is_zero()).then(|| {
            Cache::builder()
                .max_capacity(100_000)
                .time_to_live(settings.cache_ttl)
                .support_invalidation_closures()
                .build()
        });
        Ok(Self {
            failures,
            schemes,
            key_header,
            store,
            clock,
            challenges,
            verified,
            passwords,
            generation: AtomicU64::new(0),
            recently_touched: Cache::builder()
                .max_capacity(100_000)
                .time_to_live(Duration::from_secs(60))
                .build(),
            settings,
        })
    }

    /// The `WWW-Authenticate` challenges, one per enabled scheme.
    pub fn challenges(&self) -> &Challenges {
        &self.challenges
    }

    /// Whether a request carries anything that claims to be a credential: an `Authorization`
    /// header, or the API-key header when API keys are enabled.
    pub fn carries_credentials(&self, headers: &HeaderMap) -> bool {
        headers.contains_key(header::AUTHORIZATION)
            || self
                .key_header
                .as_ref()
                .is_some_and(|name| headers.contains_key(name))
    }

    /// The one Argon2 pool, shared with the admin API.
    pub fn passwords(&self) -> &PasswordChecker {
        &self.passwords
    }

    /// The enabled schemes.
    pub fn schemes(&self) -> &[Scheme] {
        &self.settings.schemes
    }

    /// How many Argon2 verifications ran since start-up.
    pub fn password_verifications(&self) -> u64 {
        self.passwords.verifications()
    }

    /// The most Argon2 verifications that ever ran at once.
    pub fn password_peak_concurrency(&self) -> usize {
        self.passwords.peak_concurrency()
    }

    /// Drops every cached credential of a peer, so a change made through this process (a
    /// revocation, a new quota) applies to the very next request, including over verifications
    /// already under way.
    pub fn forget_peer(&self, peer_id: &str) {
        if let Some(cache) = &self.verified {
            self.generation.fetch_add(1, Ordering::SeqCst);
            let peer_id: Arc<str> = Arc::from(peer_id);
            let _ = cache.invalidate_entries_if(move |_, v| {
                v.peer.as_ref().is_some_and(|p| p.id == peer_id)
            });
        }
    }

    /// A credential was issued to a peer: its id is known from now on, and the peer's cached
    /// verdicts are dropped.
    pub fn credential_issued(&self, peer_id: &str, token_id: &str) {
        if let Some(known) = &self.settings.known_ids {
            known.insert(token_id);
        }
        self.forget_peer(peer_id);
    }

    /// The set of known credential ids, when there is one.
    pub fn known_ids(&self) -> Option<&Arc<known_ids::KnownCredentialIds>> {
        self.settings.known_ids.as_ref()
    }

    /// Forgets every cached verdict (changes may have been missed; the set of known ids is
    /// read again by whoever hears of it, see [`known_ids::KnownCredentialIds::reconcile`]).
    pub fn forget_everyone(&self) {
        if let Some(cache) = &self.verified {
            self.generation.fetch_add(1, Ordering::SeqCst);
            cache.invalidate_all();
        }
    }

    /// Drops failure budgets that are whole again (call periodically).
    pub fn purge(&self) {
        self.failures.forget_rested();
    }

    /// Authenticates one request from `client`.
    ///
    /// A credential with a fresh cached verdict is answered from the cache; concurrent requests
    /// with the same uncached credential share one verification. Every verification, and every
    /// repeat of a refused or malformed credential, is counted against the client's
    /// failed-attempt budget *before* any work and given back when it succeeds, so concurrent
    /// guesses cannot slip past the budget while the first ones are still being verified.
    pub async fn authenticate(
        &self,
        headers: &HeaderMap,
        client: IpAddr,
    ) -> Result<AuthenticatedPeer, AuthRefusal> {
        let presented = match self.claimed(headers) {
            Ok(presented) => presented,
            Err(AuthError::MissingCredentials) => return Err(AuthError::MissingCredentials.into()),
            Err(error) => {
                self.spend_attempt(client).await?;
                return Err(error.into());
            }
        };
        // An id no credential has: refused from memory, before the verdict cache (a flood of
        // distinct made-up ids would only fill it) and the store. It costs an attempt like any
        // refusal.
        if let Some(known) = &self.settings.known_ids
            && let Some(id) = self.schemes[presented.scheme]
                .1
                .credential_id(presented.credentials)
            && !known.holds(id)
        {
            self.spend_attempt(client).await?;
            return Err(self.refused(&presented).into());
        }
        let Some(cache) = &self.verified else {
            // No cache: every attempt is verified and counted.
            return match self.verify_counted(&presented, client).await? {
                Some(peer) if self.still_valid(&peer) => {
                    Ok(self.admit(&peer, self.schemes[presented.scheme].0).await)
                }
                _ => Err(self.refused(&presented).into()),
            };
        };
        let key = cache_key(self.schemes[presented.scheme].0, presented.credentials);
        let mut verified_here = false;
        let entry = match cache.get(&key).await {
            Some(entry) if self.is_fresh(&entry) => entry,
            stale => {
                if stale.is_some() {
                    cache.invalidate(&key).await;
                }
                let generation = self.generation.load(Ordering::SeqCst);
                let entry = cache
                    .try_get_with(key, async {
                        verified_here = true;
                        let peer = self.verify_counted(&presented, client).await?;
                        Ok::<_, AuthRefusal>(CachedVerdict {
                            peer,
                            at_millis: self.clock.now_millis(),
                        })
                    })
                    .await
                    .map_err(|e| *e)?;
                if self.generation.load(Ordering::SeqCst) != generation {
                    // A revocation arrived while this verdict was being reached: keep it out.
                    cache.invalidate(&key).await;
                }
                entry
            }
        };
        match entry.peer {
            Some(peer) if self.still_valid(&peer) => {
                Ok(self.admit(&peer, self.schemes[presented.scheme].0).await)
            }
            // Expired (possibly while cached): refused like a wrong credential, and a repeat
            // costs an attempt like one.
            Some(_) | None => {
                // A repeat of a refused credential costs an attempt like the first one did.
                if !verified_here {
                    self.spend_attempt(client).await?;
                }
                Err(self.refused(&presented).into())
            }
        }
    }

    /// Counts one attempt against the client's budget; refuses when it is spent.
    async fn spend_attempt(&self, client: IpAddr) -> Result<(), RateLimited> {
        self.failures.spend(client).await
    }

    /// Verifies, counting a failure against the client's budget: before the work for a costly
    /// scheme (given back on success), after it for a cheap one (see
    /// [`CredentialScheme::verification_is_costly`]). `Ok(None)` is a refused credential (a
    /// verdict worth caching); errors are not cached.
    async fn verify_counted(
        &self,
        presented: &Claimed<'_>,
        client: IpAddr,
    ) -> Result<Option<Arc<VerifiedPeer>>, AuthRefusal> {
        if !self.schemes[presented.scheme].1.verification_is_costly() {
            return match self.verify(presented).await {
                Ok(peer) => {
                    if self.expired(peer.valid_until) {
                        self.spend_attempt(client).await?;
                    }
                    Ok(Some(Arc::new(peer)))
                }
                Err(AuthError::InvalidToken | AuthError::InvalidCredentials) => {
                    self.spend_attempt(client).await?;
                    Ok(None)
                }
                Err(error) => Err(error.into()),
            };
        }
        self.spend_attempt(client).await?;
        match self.verify(presented).await {
            Ok(peer) => {
                // An expired credential is kept with its peer (so a change to that peer drops
                // it from the cache) but is no success: its attempt stays spent.
                if !self.expired(peer.valid_until) {
                    self.failures.refund(client);
                }
                Ok(Some(Arc::new(peer)))
            }
            Err(AuthError::InvalidToken | AuthError::InvalidCredentials) => Ok(None),
            // Nothing was decided about the credential (the password slots were busy, or the
            // store did not answer): the attempt is given back.
            Err(error @ (AuthError::Busy | AuthError::Unavailable)) => {
                self.failures.refund(client);
                Err(error.into())
            }
            Err(error) => Err(error.into()),
        }
    }

    /// Whether a credential that ends at `valid_until` has ended by the gateway's clock.
    fn expired(&self, valid_until: Option<i64>) -> bool {
        valid_until.is_some_and(|until| self.clock.now_millis() >= until)
    }

    /// Whether a verified peer is still valid now: a cached verdict can outlive an expiry.
    fn still_valid(&self, peer: &VerifiedPeer) -> bool {
        !self.expired(peer.valid_until)
    }

    fn is_fresh(&self, entry: &CachedVerdict) -> bool {
        let ttl = i64::try_from(self.settings.cache_ttl.as_millis()).unwrap_or(i64::MAX);
        self.clock.now_millis() - entry.at_millis < ttl
    }

    /// The request's one credential, claimed by an enabled scheme and past its precheck.
    fn claimed<'h>(&self, headers: &'h HeaderMap) -> Result<Claimed<'h>, AuthError> {
        let presented = Presented::from_headers(headers, self.key_header.as_ref())?
            .ok_or(AuthError::MissingCredentials)?;
        let scheme = self
            .schemes
            .iter()
            .position(|(_, s)| s.claims(&presented))
            .ok_or(AuthError::SchemeNotEnabled)?;
        let credentials = presented.credentials();
        // Junk and typos are refused here, before any cache or store.
        self.schemes[scheme].1.precheck(credentials)?;
        Ok(Claimed {
            scheme,
            credentials,
        })
    }

    async fn verify(&self, presented: &Claimed<'_>) -> Result<VerifiedPeer, AuthError> {
        self.schemes[presented.scheme]
            .1
            .verify(presented.credentials)
            .await
            .map_err(|failure| failure.error)
    }

    /// The refusal for a credential that was checked and found wrong (unknown, wrong or
    /// revoked).
    fn refused(&self, presented: &Claimed<'_>) -> AuthError {
        self.schemes[presented.scheme].1.refused()
    }

    async fn admit(&self, peer: &VerifiedPeer, scheme: Scheme) -> AuthenticatedPeer {
        if !peer.noted.swap(true, Ordering::Relaxed) {
            self.note_use(&peer.id).await;
        }
        AuthenticatedPeer {
            id: peer.id.clone(),
            name: peer.name.clone(),
            owner_id: peer.owner_id.clone(),
            rate_per_minute: peer.rate_per_minute,
            max_streams: peer.max_streams,
            scheme,
        }
    }

    /// Notes "last used" at most once a minute per peer. The store writes it later, off
    /// this path; a failure costs only the timestamp.
    async fn note_use(&self, peer_id: &Arc<str>) {
        if self.recently_touched.contains_key(peer_id) {
            return;
        }
        self.recently_touched.insert(peer_id.clone(), ()).await;
        self.store.record_peer_use(peer_id, self.clock.now_millis());
    }
}

/// Whether a request must authenticate.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum AuthMode {
    /// No valid credential, no entry (the A2A door).
    Required,
    /// A request without any credential passes as anonymous; one that presents a credential
    /// must present a valid one (the card routes: a valid peer gets the extended card, an
    /// invalid credential is a 401, never a quiet downgrade to the public card).
    Optional,
}

/// Authenticates in front of the wrapped service, in one [`AuthMode`].
#[derive(Clone)]
pub struct AuthLayer {
    authenticator: Arc<PeerAuthenticator>,
    mode: AuthMode,
}

impl AuthLayer {
    /// A layer that requires a valid credential, checked by `authenticator`.
    pub fn new(authenticator: PeerAuthenticator) -> Self {
        Self::shared(Arc::new(authenticator))
    }

    /// A layer over an authenticator shared with other parts of the gateway.
    pub fn shared(authenticator: Arc<PeerAuthenticator>) -> Self {
        Self {
            authenticator,
            mode: AuthMode::Required,
        }
    }

    /// The same layer in `mode`.
    pub fn mode(mut self, mode: AuthMode) -> Self {
        self.mode = mode;
        self
    }
}

impl<S> Layer<S> for AuthLayer {
    type Service = Auth<S>;

    fn layer(&self, inner: S) -> Self::Service {
        Auth {
            inner,
            authenticator: self.authenticator.clone(),
            mode: self.mode,
        }
    }
}

/// The service made by [`AuthLayer`].
#[derive(Clone)]
pub struct Auth<S> {
    inner: S,
    authenticator: Arc<PeerAuthenticator>,
    mode: AuthMode,
}

impl<S> Service<Request<Body>> for Auth<S>
where
    S: Service<Request<Body>, Response = Response> + Clone + Send + 'static,
    S::Future: Send + 'static,
{
    type Response = Response;
    type Error = S::Error;
    type Future = Pin<Box<dyn Future<Output = Result<Response, S::Error>> + Send>>;

    fn poll_ready(&mut self, cx: &mut Context<'_>) -> Poll<Result<(), Self::Error>> {
        self.inner.poll_ready(cx)
    }

    fn call(&mut self, mut request: Request<Body>) -> Self::Future {
        if self.mode == AuthMode::Optional
            && !self.authenticator.carries_credentials(request.headers())
        {
            return Box::pin(self.inner.call(request));
        }
        // The readied service goes into the future; a fresh clone stays for the next call.
        let clone = self.inner.clone();
        let mut inner = std::mem::replace(&mut self.inner, clone);
        let authenticator = self.authenticator.clone();
        let client = request
            .extensions()
            .get::<ClientAddr>()
            .map_or(IpAddr::V4(Ipv4Addr::UNSPECIFIED), ClientAddr::limit_key);
        Box::pin(async move {
            match authenticator.authenticate(request.headers(), client).await {
                Ok(peer) => {
                    crate::layers::access_log::note_peer(request.extensions(), peer.id());
                    request.extensions_mut().insert(peer);
                    inner.call(request).await
                }
                Err(AuthRefusal::Unauthenticated(error)) => {
                    Ok(error.refusal(authenticator.challenges()).into_response())
                }
                Err(AuthRefusal::Limited(limited)) => {
                    Ok(Refusal::RateLimited(limited).into_response())
                }
            }
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use axum::Router;
    use axum::routing::post;
    use tower::ServiceExt;

    #[tokio::test]
    async fn a_route_mounted_without_the_layer_refuses() {
        let app = Router::new().route(
            "/a2a",
            post(|peer: AuthenticatedPeer| async move { peer.name().to_owned() }),
        );
        let request = Request::post("/a2a")
            .header("authorization", "Bearer anything")
            .body(Body::empty())
            .unwrap();
        let response = app.oneshot(request).await.unwrap();
        assert_eq!(response.status(), axum::http::StatusCode::UNAUTHORIZED);
    }

    /// The store, counting the credential look-ups it is asked for.
    #[derive(Debug)]
    struct Counting {
        store: Arc<dyn CredentialStore>,
        looked_up: AtomicU64,
    }

    #[async_trait]
    impl CredentialStore for Counting {
        async fn find_credential(
            &self,
            kind: CredentialKind,
            token_id: &str,
        ) -> Result<Option<crate::store::CredentialRecord>, StoreError> {
            self.looked_up.fetch_add(1, Ordering::SeqCst);
            self.store.find_credential(kind, token_id).await
        }
        async fn find_peer_login(
            &self,
            name: &str,
        ) -> Result<Option<crate::store::PeerLogin>, StoreError> {
            self.store.find_peer_login(name).await
        }
        async fn find_admin_login(
            &self,
            name: &str,
        ) -> Result<Option<crate::store::AdminLogin>, StoreError> {
            self.store.find_admin_login(name).await
        }
        async fn find_admin_token(
            &self,
            token_id: &str,
        ) -> Result<Option<(crate::store::AdminLogin, crate::token::TokenSecretHash)>, StoreError>
        {
            self.store.find_admin_token(token_id).await
        }
        fn record_peer_use(&self, peer_id: &str, now: i64) {
            self.store.record_peer_use(peer_id, now);
        }
        async fn credential_ids(&self) -> Result<Vec<String>, StoreError> {
            self.store.credential_ids().await
        }
    }

    #[tokio::test]
    async fn made_up_ids_never_reach_the_store_and_an_issued_one_always_does() {
        use crate::admin::{AccountDefaults, AccountService, Caller, NewPeer};
        let dir = tempfile::tempdir().unwrap();
        let store = crate::store::Store::open(dir.path()).await.unwrap();
        let clock: Arc<dyn Clock> = Arc::new(crate::clock::ManualClock::new(1_800_000_000_000));
        let accounts = AccountService::new(
            store.clone(),
            clock.clone(),
            AccountDefaults {
                default_owner: Some("operator".to_owned()),
                rate_per_minute: 60,
            },
        );
        let counting = Arc::new(Counting {
            store: store.credentials(),
            looked_up: AtomicU64::new(0),
        });
        let known = Arc::new(
            known_ids::KnownCredentialIds::load(&*counting)
                .await
                .unwrap(),
        );
        let settings = AuthSettings {
            known_ids: Some(known),
            failed_auth_quota: Quota::per_minute(1_000_000_000),
            ..AuthSettings::default()
        };
        let auth = PeerAuthenticator::new(counting.clone(), clock, settings).unwrap();
        let client = IpAddr::V4(Ipv4Addr::LOCALHOST);
        let bearer = |token: &str| {
            let mut headers = HeaderMap::new();
            headers.insert(
                header::AUTHORIZATION,
                format!("Bearer {token}").parse().unwrap(),
            );
            headers
        };
        for _ in 0..1_000 {
            let made_up = crate::token::issue(CredentialKind::PeerToken)
                .unwrap()
                .token;
            assert!(auth.authenticate(&bearer(&made_up), client).await.is_err());
        }
        assert_eq!(
            counting.looked_up.load(Ordering::SeqCst),
            0,
            "a made-up id reached the store"
        );
        // Issued and announced (as the account service announces it): looked up, and let in.
        let created = accounts
            .create_peer(
                &Caller::operator(),
                NewPeer {
                    name: "alice".to_owned(),
                    ..NewPeer::default()
                },
            )
            .await
            .unwrap();
        let token_id = crate::token::parse(CredentialKind::PeerToken, &created.token)
            .unwrap()
            .token_id
            .to_owned();
        auth.credential_issued(&created.peer.id, &token_id);
        assert!(
            auth.authenticate(&bearer(&created.token), client)
                .await
                .is_ok()
        );
        assert_eq!(counting.looked_up.load(Ordering::SeqCst), 1);
        store.close().await;
    }
}

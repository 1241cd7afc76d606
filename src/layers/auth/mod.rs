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
pub mod authenticator;
pub mod basic;
pub mod certificate;
pub mod generated;
pub mod jwt;
pub mod known_ids;
pub mod layer;
pub mod password;
pub mod scheme;

pub use crate::guard::unauthenticated::AuthError;
pub use attempts::{FailedAttempts, SharedAttempts};
pub use authenticator::{
    Attempt, AuthRefusal, Authenticator, Listener, NoWitness, Principal, Witness,
};
pub use basic::parse_basic;
pub use layer::{Auth, AuthLayer, AuthMode};

use crate::clock::{Clock, Timestamp};
use crate::guard::refusal::RefusalReason;
pub use crate::guard::scheme::Scheme;
use crate::guard::scopes::{GrantedScopes, OperationScope};
use crate::layers::limit::Quota;
use crate::protocol::operations::OperationSet;
use crate::shared::rate_limit::RateLimiter;
use crate::store::{CredentialStore, PeerId, StoreError};
use crate::token::CredentialKind;
use async_trait::async_trait;
use axum::extract::FromRequestParts;
use axum::http::request::Parts;
use axum::http::{HeaderName, header};
use basic::{Basic, Login, Logins};
use generated::{Carrier, GeneratedCredential, TokenRecord, TokenRecords};
use moka::future::Cache;
use password::PasswordChecker;
use scheme::CredentialScheme;
use std::net::IpAddr;
use std::sync::Arc;
use std::time::Duration;

/// A peer whose credential was verified for this request. Only this module constructs it.
#[derive(Debug, Clone)]
pub struct AuthenticatedPeer {
    id: PeerId,
    name: Arc<str>,
    owner_id: crate::store::AdminId,
    rate_per_minute: u32,
    max_streams: Option<u32>,
    /// Its own trace context is continued, not only linked to.
    trusts_trace: bool,
    /// The operations its administrator limited it to (`None`: every one offered).
    operations: Option<OperationSet>,
    scheme: Scheme,
    /// When the credential stops working (expiry, or the end of a rotation's grace);
    /// checked on every request, cached verdicts included.
    valid_until: Option<Timestamp>,
    /// The operations an identity provider's token narrowed the peer to (`None`: every
    /// operation the peer may do, as with the credentials peergate issues).
    granted: Option<GrantedScopes>,
    /// The identity provider whose token admitted the peer, by its policy name.
    issuer: Option<Arc<str>>,
    /// The subject of that token (its `client_id`, else `sub`), bound to the peer.
    subject: Option<Arc<str>>,
    /// The claims of that token the authorization policies read.
    claims: Option<crate::jose::access_token::Claims>,
    /// The credential it signed in with, as a receipt names it.
    signed_in_with: SignedInWith,
}

/// What a receipt says of the credential a peer signed in with: enough for anyone to tell
/// which credential it was, never enough to use it.
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub enum SignedInWith {
    /// A token or API key peergate issued, by its public id.
    Issued {
        /// The public part of the credential (never its secret).
        token_id: Arc<str>,
    },
    /// Its name and password.
    Password,
    /// An identity provider's access token: the provider's `iss` and the token's SHA-256
    /// (`ath`, base64url, as RFC 9449 names it).
    AccessToken {
        /// The provider's `iss`.
        issuer: Arc<str>,
        /// The token's SHA-256.
        ath: Arc<str>,
    },
    /// A client certificate, by the SHA-256 of its DER (`x5t#S256`, base64url).
    Certificate {
        /// The thumbprint.
        thumbprint: Arc<str>,
    },
}

impl SignedInWith {
    /// The receipt's `cred` claim: the scheme, and what tells its credential apart.
    pub fn claim(&self, scheme: Scheme) -> serde_json::Value {
        let mut claim = serde_json::json!({"scheme": scheme.policy_name()});
        match self {
            Self::Issued { token_id } => claim["id"] = token_id.as_ref().into(),
            Self::Password => {}
            Self::AccessToken { issuer, ath } => {
                claim["iss"] = issuer.as_ref().into();
                claim["ath"] = ath.as_ref().into();
            }
            Self::Certificate { thumbprint } => claim["x5t#S256"] = thumbprint.as_ref().into(),
        }
        claim
    }
}

impl AuthenticatedPeer {
    /// The peer's stable id.
    pub fn id(&self) -> &PeerId {
        &self.id
    }
    /// The peer's name.
    pub fn name(&self) -> &str {
        &self.name
    }
    /// The administrator the peer acts for: its turns count against their budget.
    pub fn owner_id(&self) -> &crate::store::AdminId {
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
    /// Whether its own trace context is continued (`peergate peer trace NAME trusted`).
    pub fn trusts_trace(&self) -> bool {
        self.trusts_trace
    }
    /// Whether its administrator lets it call `method` (`peergate peer operations`); what the
    /// policy offers and its token's scopes are checked besides.
    pub fn may_call(&self, method: crate::protocol::jsonrpc::Method) -> bool {
        self.operations.is_none_or(|set| set.contains(method))
    }
    /// The operations it is limited to, if it is.
    pub fn operations(&self) -> Option<OperationSet> {
        self.operations
    }
    /// How the peer authenticated.
    pub fn scheme(&self) -> Scheme {
        self.scheme
    }
    /// The identity provider whose token admitted the peer (its `[[auth.issuers]]` name).
    pub fn issuer(&self) -> Option<&str> {
        self.issuer.as_deref()
    }
    /// The subject of the identity provider's token that admitted the peer.
    pub fn subject(&self) -> Option<&str> {
        self.subject.as_deref()
    }
    /// Whether the credential lets the peer do an operation that needs `scope`: always, unless
    /// it was a token whose scopes the issuer's policy requires and which lacks it.
    pub fn may(&self, scope: OperationScope) -> bool {
        self.granted.is_none_or(|granted| granted.allows(scope))
    }

    /// The scopes its token granted, when its provider requires scopes.
    pub fn granted_scopes(&self) -> Option<Vec<&'static str>> {
        self.granted.map(GrantedScopes::names)
    }

    /// The credential it signed in with, as a receipt names it.
    pub fn signed_in_with(&self) -> &SignedInWith {
        &self.signed_in_with
    }

    /// The claims of its token the authorization policies read (none without a token).
    pub fn claims(&self) -> &[crate::jose::access_token::Claim] {
        self.claims.as_deref().unwrap_or_default()
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
            trusts_trace: false,
            operations: None,
            scheme: Scheme::Bearer,
            valid_until: None,
            granted: None,
            issuer: None,
            subject: None,
            claims: None,
            signed_in_with: SignedInWith::Password,
        }
    }
}

impl Principal for AuthenticatedPeer {
    fn principal_id(&self) -> &str {
        &self.id
    }
    fn principal_name(&self) -> &str {
        &self.name
    }
    fn valid_until(&self) -> Option<Timestamp> {
        self.valid_until
    }
    fn scheme_name(&self) -> &'static str {
        self.scheme.policy_name()
    }
    fn continues_trace(&self) -> bool {
        self.trusts_trace
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

/// How the door's authentication is configured.
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
    /// With `failed_attempts`: the in-process limiter that answers for attempts counted in a
    /// request's [`crate::guard::admission::Admission`] while Redis does not.
    pub admitted_attempts: Option<Arc<crate::shared::rate_limit::LocalLimiter<IpAddr>>>,
    /// The credential ids the store holds, so unknown ones are refused without a store read
    /// (`None`: every id is looked up).
    pub known_ids: Option<Arc<known_ids::KnownCredentialIds>>,
    /// The identity providers whose tokens the `"jwt"` scheme accepts.
    pub identity_providers: Option<Arc<jwt::IdentityProviders>>,
    /// The URL of the door's RFC 9728 metadata, named by its Bearer challenges (when a public
    /// provider issues tokens for it).
    pub resource_metadata: Option<String>,
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
            admitted_attempts: None,
            known_ids: None,
            identity_providers: None,
            resource_metadata: None,
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
    /// `"jwt"` is enabled with no identity provider to trust.
    #[error("auth.issuers: \"jwt\" is enabled but no identity provider is configured")]
    NoIssuers,
}

/// The door's authenticator: peers, by the schemes the policy enables.
pub type PeerAuthenticator = Authenticator<AuthenticatedPeer>;

/// The realm of the door's challenges.
const REALM: &str = "peergate";

/// A peer as a scheme of `scheme` verified it, from its record, let in until `valid_until`,
/// signed in with `signed_in_with` (every scheme names its credential: a receipt states it).
fn peer(
    scheme: Scheme,
    login: crate::store::PeerLogin,
    valid_until: Option<Timestamp>,
    signed_in_with: SignedInWith,
) -> AuthenticatedPeer {
    AuthenticatedPeer {
        id: login.peer_id,
        name: login.peer_name.into(),
        owner_id: login.owner_id,
        rate_per_minute: login.rate_per_minute,
        max_streams: login.max_streams,
        trusts_trace: login.trusts_trace,
        operations: login.operations,
        scheme,
        valid_until,
        granted: None,
        issuer: None,
        subject: None,
        claims: None,
        signed_in_with,
    }
}

/// Peers' credentials of one kind, as the generated-credential scheme reads them.
struct PeerTokens {
    store: Arc<dyn CredentialStore>,
    kind: CredentialKind,
    scheme: Scheme,
}

#[async_trait]
impl TokenRecords<AuthenticatedPeer> for PeerTokens {
    async fn record(
        &self,
        token_id: &str,
    ) -> Result<Option<TokenRecord<AuthenticatedPeer>>, StoreError> {
        let record = self.store.find_credential(self.kind, token_id).await?;
        Ok(record.map(|record| TokenRecord {
            name: record.login.peer_name.clone(),
            secret_hash: record.secret_hash,
            active: record.login.active,
            who: {
                let valid_until = record.login.valid_until;
                let issued = SignedInWith::Issued {
                    token_id: token_id.into(),
                };
                peer(self.scheme, record.login, valid_until, issued)
            },
        }))
    }
}

/// Peers' Basic logins.
struct PeerLogins {
    store: Arc<dyn CredentialStore>,
}

#[async_trait]
impl Logins<AuthenticatedPeer> for PeerLogins {
    async fn login(&self, name: &str) -> Result<Option<Login<AuthenticatedPeer>>, StoreError> {
        Ok(self
            .store
            .find_peer_login(name)
            .await?
            .map(|mut login| Login {
                password_hash: login.password_hash.take(),
                active: login.active,
                who: {
                    let valid_until = login.valid_until;
                    peer(Scheme::Basic, login, valid_until, SignedInWith::Password)
                },
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
) -> Result<Box<dyn CredentialScheme<AuthenticatedPeer>>, AuthConfigError> {
    let tokens = |kind| -> Arc<dyn TokenRecords<AuthenticatedPeer>> {
        Arc::new(PeerTokens {
            store: store.clone(),
            kind,
            scheme,
        })
    };
    Ok(match scheme {
        Scheme::Bearer => Box::new(GeneratedCredential::new(
            CredentialKind::PeerToken,
            Carrier::Bearer,
            tokens(CredentialKind::PeerToken),
            REALM,
        )),
        Scheme::Mtls => Box::new(certificate::ClientCertificates::new(store.clone())),
        Scheme::Jwt => Box::new(jwt::IdentityProviderTokens::new(
            settings
                .identity_providers
                .clone()
                .ok_or(AuthConfigError::NoIssuers)?,
            Arc::new(jwt::PeerBindings::new(store.clone())),
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
    })
}

/// What the door keeps on the side: when each peer last used a credential.
struct LastUse {
    store: Arc<dyn CredentialStore>,
    clock: Arc<dyn Clock>,
    recently_touched: Cache<PeerId, ()>,
}

#[async_trait]
impl Witness<AuthenticatedPeer> for LastUse {
    /// Notes "last used" at most once a minute per peer. The store writes it later, off the
    /// request's path; a failure costs only the timestamp.
    async fn admitted(&self, peer: &AuthenticatedPeer) {
        if self.recently_touched.contains_key(&peer.id) {
            return;
        }
        self.recently_touched.insert(peer.id.clone(), ()).await;
        self.store.record_peer_use(&peer.id, self.clock.now());
    }
}

impl Authenticator<AuthenticatedPeer> {
    /// The door's authenticator over `store`; refuses settings that could never work.
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
        let failures = match (&settings.failed_attempts, &settings.admitted_attempts) {
            (Some(shared), Some(local)) => {
                FailedAttempts::admitted(settings.failed_auth_quota, shared.clone(), local.clone())
            }
            (Some(shared), None) => {
                FailedAttempts::with_limiter(settings.failed_auth_quota, shared.clone())
            }
            (None, _) => FailedAttempts::new(
                settings.failed_auth_quota,
                settings.tracked_addresses,
                clock.clone(),
            )
            .map_err(|e| AuthConfigError::Budget(e.to_string()))?,
        };
        // Made even without Basic on the door: the admin API shares this one pool.
        let passwords = PasswordChecker::new(settings.password_checks_at_once)
            .map_err(AuthConfigError::Hashing)?;
        // A token shaped like a JWT is the identity providers' to judge, before the peer
        // tokens' scheme claims every Bearer credential (their challenges are one).
        let mut order = settings.schemes.clone();
        order.sort_by_key(|scheme| *scheme != Scheme::Jwt);
        let schemes = order
            .into_iter()
            .map(|scheme| door_scheme(scheme, &store, &passwords, &settings))
            .collect::<Result<_, _>>()?;
        let listener = Listener {
            key_header: settings
                .schemes
                .contains(&Scheme::ApiKey)
                .then(|| settings.api_key_header.clone()),
            cache_ttl: settings.cache_ttl,
            failures,
            known_ids: settings.known_ids.clone(),
            witness: Arc::new(LastUse {
                store,
                clock: clock.clone(),
                recently_touched: Cache::builder()
                    .max_capacity(100_000)
                    .time_to_live(Duration::from_secs(60))
                    .build(),
            }),
            counted_as: RefusalReason::Unauthenticated,
            takes_certificates: settings.schemes.contains(&Scheme::Mtls),
            resource_metadata: settings.resource_metadata.clone(),
        };
        Ok(Self::with_schemes(schemes, listener, passwords, clock))
    }

    /// Drops every cached credential of a peer (see [`Authenticator::forget`]).
    pub fn forget_peer(&self, peer_id: &str) {
        self.forget(peer_id);
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use axum::Router;
    use axum::body::Body;
    use axum::http::{HeaderMap, Request};
    use axum::routing::post;
    use std::net::Ipv4Addr;
    use std::sync::atomic::{AtomicU64, Ordering};
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
        async fn find_bound_admin(
            &self,
            issuer: &str,
            subject: &str,
        ) -> Result<Option<crate::store::AdminLogin>, StoreError> {
            self.store.find_bound_admin(issuer, subject).await
        }
        async fn find_bound_peer(
            &self,
            identity: &crate::store::PeerIdentity,
        ) -> Result<Option<crate::store::PeerLogin>, StoreError> {
            self.store.find_bound_peer(identity).await
        }
        async fn find_admin_token(
            &self,
            token_id: &str,
        ) -> Result<Option<(crate::store::AdminLogin, crate::token::TokenSecretHash)>, StoreError>
        {
            self.store.find_admin_token(token_id).await
        }
        fn record_peer_use(&self, peer_id: &PeerId, now: Timestamp) {
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
        let clock: Arc<dyn Clock> = Arc::new(crate::clock::ManualClock::new(
            crate::clock::from_millis(1_800_000_000_000),
        ));
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
        let token = created.token.clone().unwrap();
        let token_id = crate::token::parse(CredentialKind::PeerToken, &token)
            .unwrap()
            .token_id
            .to_owned();
        auth.credential_issued(&created.peer.id, &token_id);
        assert!(auth.authenticate(&bearer(&token), client).await.is_ok());
        assert_eq!(counting.looked_up.load(Ordering::SeqCst), 1);
        store.close().await;
    }
}

//! Who may use the admin API: an administrator, by Basic name and password or by an
//! administrator token (`Authorization: Bearer pga_…`), and the metrics scraper on `GET
//! /metrics` alone. Nothing else opens it; a peer token or API key is refused by its prefix
//! before any look-up.
//!
//! The admin API is guarded by the same [`AuthLayer`] and [`Authenticator`] as the door, with
//! its own schemes, budget and [`Witness`]: failed sign-ins are counted per client address
//! against a budget of their own with the door's quota, and each one is written to the audit log
//! until the budget is spent; after that the answer is 429 and one record a minute per address
//! says so, so a flood leaves a trace without growing the log without bound. Administrators'
//! verdicts are not cached: a disabled administrator is refused on the next request. On a
//! loopback listener every tunnelled or proxied client shares one address, so a local flood of
//! wrong passwords can hold every administrator's password sign-ins at 429 for its duration; an
//! administrator token, a cheap check, is never refused for a spent budget, and the command line
//! keeps working.
//!
//! ```
//! use axum::{Router, routing::get, body::Body, http::{Request, StatusCode}};
//! use peergate::admin::{AccountDefaults, AccountService, AdminAuthLayer, AuthenticatedAdmin, admin_authenticator};
//! use std::sync::Arc;
//! use tower::ServiceExt;
//! # tokio::runtime::Runtime::new().unwrap().block_on(async {
//! let dir = tempfile::tempdir().unwrap();
//! let store = peergate::store::Store::open(dir.path()).await.unwrap();
//! let clock = Arc::new(peergate::clock::SystemClock);
//! let defaults = AccountDefaults { default_owner: None, rate_per_minute: 30 };
//! let service = AccountService::new(store, clock.clone(), defaults);
//! let passwords = peergate::layers::auth::password::PasswordChecker::new(1).unwrap();
//! let auth = admin_authenticator(service, clock, (10, 1000), passwords, (None, None)).unwrap();
//! let app = Router::new()
//!     .route("/v1/me", get(|admin: AuthenticatedAdmin| async move { admin.name().to_owned() }))
//!     .layer(AdminAuthLayer::shared(Arc::new(auth)));
//! let request = Request::get("/v1/me")
//!     .header("authorization", "Bearer pgt_notanadmintoken")
//!     .body(Body::empty())
//!     .unwrap();
//! let response = app.oneshot(request).await.unwrap();
//! assert_eq!(response.status(), StatusCode::UNAUTHORIZED);
//! # });
//! ```

use super::service::AccountService;
use crate::clock::Clock;
use crate::guard::refusal::{Challenges, Refusal, RefusalReason};
use crate::layers::auth::basic::{Basic, Login, Logins, basic_challenge};
use crate::layers::auth::generated::{
    Carrier, GeneratedCredential, TokenRecord, TokenRecords, bearer_challenge,
};
use crate::layers::auth::jwt::{
    IdentityProviderTokens, IdentityProviders, TokenBindings, VerifiedToken,
};
use crate::layers::auth::layer::budget_key_of;
use crate::layers::auth::password::PasswordChecker;
use crate::layers::auth::scheme::{Context, CredentialScheme, Failure, Presented};
use crate::layers::auth::{
    Attempt, AuthError, AuthLayer, Authenticator, FailedAttempts, Listener, Principal, Witness,
};
use crate::layers::limit::Quota;
use crate::shared::rate_limit::{LocalLimiter, RateLimiter};
use crate::store::{AdminId, CredentialStore, StoreError};
use crate::token::CredentialKind;
use async_trait::async_trait;
use axum::extract::FromRequestParts;
use axum::http::request::Parts;
use std::net::IpAddr;
use std::sync::Arc;
use std::time::Duration;

/// Who the admin API's layer let in.
#[derive(Debug, Clone)]
#[non_exhaustive]
pub enum AdminPrincipal {
    /// An administrator.
    Administrator {
        /// Their id.
        id: AdminId,
        /// Their name.
        name: Arc<str>,
        /// An auditor: reads, and changes nothing.
        auditor: bool,
    },
    /// The holder of the scrape token: `GET /metrics` and nothing else.
    Scraper,
}

impl Principal for AdminPrincipal {
    fn principal_id(&self) -> &str {
        match self {
            Self::Administrator { id, .. } => id,
            Self::Scraper => "metrics-scraper",
        }
    }
    fn principal_name(&self) -> &str {
        match self {
            Self::Administrator { name, .. } => name,
            Self::Scraper => "metrics-scraper",
        }
    }
}

/// The admin API's authenticator.
pub type AdminAuthenticator = Authenticator<AdminPrincipal>;

/// The admin API's authentication layer.
pub type AdminAuthLayer = AuthLayer<AdminPrincipal>;

/// An administrator whose credentials were verified for this request. Only this module
/// constructs it, from what the layer verified; the scrape token never becomes one.
#[derive(Debug, Clone)]
pub struct AuthenticatedAdmin {
    id: AdminId,
    name: Arc<str>,
    client: IpAddr,
}

impl AuthenticatedAdmin {
    /// The administrator's id.
    pub fn id(&self) -> &AdminId {
        &self.id
    }
    /// Their name.
    pub fn name(&self) -> &str {
        &self.name
    }
    /// The address the request came from.
    pub fn client(&self) -> IpAddr {
        self.client
    }
}

/// The realm of the admin API's challenges.
const ADMIN_REALM: &str = "peergate admin";

/// The admin API's challenges: Basic, announced as `xBasic` (see
/// [`Basic::announced_as_xbasic`]), and Bearer (an administrator token).
fn admin_challenges() -> Challenges {
    Challenges::new([
        basic_challenge(ADMIN_REALM, true),
        bearer_challenge(ADMIN_REALM),
    ])
    .counted_as(RefusalReason::AdminUnauthenticated)
}

impl<S: Send + Sync> FromRequestParts<S> for AuthenticatedAdmin {
    type Rejection = Refusal;

    async fn from_request_parts(parts: &mut Parts, _state: &S) -> Result<Self, Self::Rejection> {
        // Absent only when a route was mounted without the layer, and the scraper is no
        // administrator: fail closed.
        match parts.extensions.get::<AdminPrincipal>() {
            Some(AdminPrincipal::Administrator { id, name, .. }) => Ok(Self {
                id: id.clone(),
                name: name.clone(),
                client: budget_key_of(parts),
            }),
            Some(AdminPrincipal::Scraper) => {
                Err(AuthError::InvalidCredentials.refusal(&admin_challenges()))
            }
            None => Err(AuthError::MissingCredentials.refusal(&admin_challenges())),
        }
    }
}

/// The credential a metrics scraper presents (`Authorization: Bearer …`), configured through
/// `server.metrics_token_env`. It opens `GET /metrics` and nothing else: it verifies as
/// [`AdminPrincipal::Scraper`], the metrics handler is the only one that takes it, and every
/// other handler requires an [`AuthenticatedAdmin`], which it never becomes. Kept as its
/// SHA-256 and compared in constant time; an administrator's credentials still open `/metrics`
/// too.
#[derive(Clone)]
pub struct ScrapeToken {
    digest: [u8; 32],
}

impl std::fmt::Debug for ScrapeToken {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("ScrapeToken(..)")
    }
}

impl ScrapeToken {
    /// The shortest secret accepted: 32 bytes, about 190 bits when generated as base64.
    pub const MIN_BYTES: usize = 32;

    /// A scrape token from its secret; refuses one shorter than [`ScrapeToken::MIN_BYTES`].
    pub fn new(secret: &str) -> Result<Self, String> {
        let secret = secret.trim();
        if secret.len() < Self::MIN_BYTES {
            return Err(format!(
                "is {} bytes; a scrape token needs at least {} (for example `openssl rand -base64 32`)",
                secret.len(),
                Self::MIN_BYTES
            ));
        }
        Ok(Self {
            digest: Self::hash(secret),
        })
    }

    /// Whether `credentials` (a Bearer credential) is this token, compared in constant time.
    pub fn opens(&self, credentials: &str) -> bool {
        use subtle::ConstantTimeEq as _;
        bool::from(Self::hash(credentials).ct_eq(&self.digest))
    }

    fn hash(secret: &str) -> [u8; 32] {
        use sha2::Digest as _;
        sha2::Sha256::digest(secret.as_bytes()).into()
    }
}

#[async_trait]
impl CredentialScheme<AdminPrincipal> for ScrapeToken {
    fn name(&self) -> &'static str {
        "scrape_token"
    }

    /// None of its own: the administrator token's Bearer challenge invites it too.
    fn challenge(&self) -> String {
        String::new()
    }

    /// Only the one Bearer credential whose hash is the token's; any other goes on to the
    /// administrator schemes.
    fn claims(&self, presented: &Presented<'_>) -> bool {
        match presented {
            Presented::Authorization {
                scheme,
                credentials,
            } if scheme.eq_ignore_ascii_case("bearer") => self.opens(credentials),
            _ => false,
        }
    }

    fn precheck(&self, _credentials: &str) -> Result<(), AuthError> {
        Ok(())
    }

    fn verification_is_costly(&self) -> bool {
        false
    }

    async fn verify(
        &self,
        _credentials: &str,
        _context: &Context<'_>,
    ) -> Result<AdminPrincipal, Failure> {
        Ok(AdminPrincipal::Scraper)
    }
}

/// The admin API's bindings of the organisation's provider's tokens (`[admin.issuer]`): the
/// active administrator bound to the token's subject.
struct AdminBindings(Arc<dyn CredentialStore>);

#[async_trait]
impl TokenBindings<AdminPrincipal> for AdminBindings {
    async fn bound(&self, verified: VerifiedToken<'_>) -> Result<AdminPrincipal, Failure> {
        let admin = self
            .0
            .find_bound_admin(verified.issuer, &verified.token.subject)
            .await
            .map_err(|e| {
                tracing::error!(error = %e, "identity look-up failed");
                AuthError::Unavailable
            })?
            .filter(|admin| admin.active)
            .ok_or_else(|| verified.unbound())?;
        Ok(administrator(admin))
    }
}

struct AdminLogins(Arc<dyn CredentialStore>);

fn administrator(login: crate::store::AdminLogin) -> AdminPrincipal {
    AdminPrincipal::Administrator {
        id: login.id,
        name: login.name.into(),
        auditor: login.auditor,
    }
}

#[async_trait]
impl Logins<AdminPrincipal> for AdminLogins {
    async fn login(&self, name: &str) -> Result<Option<Login<AdminPrincipal>>, StoreError> {
        Ok(self.0.find_admin_login(name).await?.map(|mut login| Login {
            password_hash: login.password_hash.take(),
            active: login.active,
            who: administrator(login),
        }))
    }
}

struct AdminTokens(Arc<dyn CredentialStore>);

#[async_trait]
impl TokenRecords<AdminPrincipal> for AdminTokens {
    async fn record(
        &self,
        token_id: &str,
    ) -> Result<Option<TokenRecord<AdminPrincipal>>, StoreError> {
        Ok(self
            .0
            .find_admin_token(token_id)
            .await?
            .map(|(admin, secret_hash)| TokenRecord {
                name: admin.name.clone(),
                secret_hash,
                active: admin.active,
                who: administrator(admin),
            }))
    }
}

/// What the admin API keeps on the side of authentication: its audit trail of failed sign-ins.
struct SignInAudit {
    service: AccountService,
    /// One audit record a minute per address for sign-ins refused by the budget, so a flood
    /// leaves a trace without growing the log.
    throttle_notes: LocalLimiter<IpAddr>,
}

#[async_trait]
impl Witness<AdminPrincipal> for SignInAudit {
    fn keeps_refusals(&self) -> bool {
        true
    }

    async fn refused(&self, attempt: Attempt<'_>, error: AuthError) {
        self.service
            .record_failed_login(
                &attempt.client.to_string(),
                (attempt.name, attempt.subject),
                error.code(),
            )
            .await;
    }

    async fn throttled(&self, client: IpAddr) {
        let note = self.throttle_notes.check(&client, Quota::per_minute(1));
        if note.ready().is_some_and(|d| d.is_allowed()) {
            self.service
                .record_failed_login(&client.to_string(), (None, None), "throttled: failed-attempt budget spent; further refusals this minute are not recorded")
                .await;
        }
    }
}

/// The admin API's authenticator: `(failed_per_minute, tracked_addresses)` is its
/// failed-attempt budget per client address, `passwords` the gateway's one Argon2 pool,
/// `scrape` the token that opens `GET /metrics`, and `provider` the organisation's identity
/// provider (`[admin.issuer]`), when configured.
pub fn admin_authenticator(
    service: AccountService,
    clock: Arc<dyn Clock>,
    (failed_per_minute, tracked_addresses): (u32, usize),
    passwords: PasswordChecker,
    (scrape, provider): (Option<ScrapeToken>, Option<Arc<IdentityProviders>>),
) -> Result<AdminAuthenticator, String> {
    let failures = FailedAttempts::new(
        Quota::per_minute(failed_per_minute),
        tracked_addresses,
        clock.clone(),
    )
    .map_err(|e| e.to_string())?;
    let store = service.store().credentials();
    let mut schemes: Vec<Box<dyn CredentialScheme<AdminPrincipal>>> = Vec::new();
    if let Some(scrape) = scrape {
        schemes.push(Box::new(scrape));
    }
    // Before the administrator tokens' scheme, which claims every Bearer credential.
    if let Some(providers) = provider {
        schemes.push(Box::new(IdentityProviderTokens::new(
            providers,
            Arc::new(AdminBindings(store.clone())),
            ADMIN_REALM,
        )));
    }
    // Administrators wait for a password slot rather than be refused: a flood of Basic logins
    // at the door must not lock them out of the admin API.
    schemes.push(Box::new(
        Basic::new(
            Arc::new(AdminLogins(store.clone())),
            passwords.clone(),
            ADMIN_REALM,
        )
        .waiting_for_a_slot()
        .announced_as_xbasic(),
    ));
    schemes.push(Box::new(
        GeneratedCredential::new(
            CredentialKind::AdminToken,
            Carrier::Bearer,
            Arc::new(AdminTokens(store)),
            ADMIN_REALM,
        )
        .refusing_foreign(&[CredentialKind::PeerToken, CredentialKind::ApiKey]),
    ));
    let listener = Listener {
        key_header: None,
        cache_ttl: Duration::ZERO,
        failures,
        known_ids: None,
        witness: Arc::new(SignInAudit {
            service,
            throttle_notes: LocalLimiter::new(tracked_addresses, clock.clone()),
        }),
        counted_as: RefusalReason::AdminUnauthenticated,
        takes_certificates: false,
        resource_metadata: None,
    };
    Ok(Authenticator::with_schemes(
        schemes, listener, passwords, clock,
    ))
}

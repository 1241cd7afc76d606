//! Who may use the admin API: an administrator, by Basic name and password or by an
//! administrator token (`Authorization: Bearer pga_…`). Nothing else opens it; a peer token or
//! API key is refused by its prefix before any look-up.
//!
//! [`AdminAuthLayer`] decides before the handler runs and puts an [`AuthenticatedAdmin`] in the
//! request, which only this module can construct. Failed sign-ins are counted per client
//! address against a budget of their own with the door's quota (spent before verifying, given
//! back on success), and each one is written to the audit log until the budget is spent; after
//! that the answer is 429 and one record a minute per address says so, so a flood leaves a trace
//! without growing the log without bound. On a loopback listener every tunnelled or proxied
//! client shares one address, so a local flood can hold every administrator's sign-ins at 429 for
//! its duration; the command line keeps working.
//!
//! ```
//! use axum::{Router, routing::get, body::Body, http::{Request, StatusCode}};
//! use peergate::admin::{AccountDefaults, AccountService, AdminAuthLayer, AdminAuthenticator, AuthenticatedAdmin};
//! use std::sync::Arc;
//! use tower::ServiceExt;
//! # tokio::runtime::Runtime::new().unwrap().block_on(async {
//! let dir = tempfile::tempdir().unwrap();
//! let store = peergate::store::Store::open(dir.path()).await.unwrap();
//! let clock = Arc::new(peergate::clock::SystemClock);
//! let defaults = AccountDefaults { default_owner: None, rate_per_minute: 30 };
//! let service = AccountService::new(store, clock.clone(), defaults);
//! let passwords = peergate::layers::auth::password::PasswordChecker::new(1).unwrap();
//! let auth = AdminAuthenticator::new(service, clock, 10, 1000, passwords).unwrap();
//! let app = Router::new()
//!     .route("/v1/me", get(|admin: AuthenticatedAdmin| async move { admin.name().to_owned() }))
//!     .layer(AdminAuthLayer::new(Arc::new(auth)));
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
use crate::guard::refusal::Refusal as HttpRefusal;
use crate::guard::unauthenticated::AdminAuthError;
use crate::layers::auth::basic::{Basic, Login, Logins};
use crate::layers::auth::generated::{Carrier, GeneratedCredential, TokenRecord, TokenRecords};
use crate::layers::auth::password::PasswordChecker;
use crate::layers::auth::scheme::{CredentialScheme, Failure, Presented};
use crate::layers::auth::{AuthError, FailedAttempts};
use crate::layers::client_addr::ClientAddr;
use crate::layers::limit::{Quota, RateLimited};
use crate::shared::rate_limit::{LocalLimiter, RateLimiter};
use crate::store::{CredentialStore, StoreError};
use crate::token::CredentialKind;
use async_trait::async_trait;
use axum::body::Body;
use axum::extract::{ConnectInfo, FromRequestParts};
use axum::http::request::Parts;
use axum::http::{HeaderMap, Request, header};
use axum::response::{IntoResponse, Response};
use std::future::Future;
use std::net::{IpAddr, Ipv4Addr, SocketAddr};
use std::pin::Pin;
use std::sync::Arc;
use std::task::{Context, Poll};
use tower::{Layer, Service};

/// An administrator whose credentials were verified for this request. Only this module
/// constructs it.
#[derive(Debug, Clone)]
pub struct AuthenticatedAdmin {
    id: String,
    name: String,
    client: IpAddr,
}

impl AuthenticatedAdmin {
    /// The administrator's id.
    pub fn id(&self) -> &str {
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

impl<S: Send + Sync> FromRequestParts<S> for AuthenticatedAdmin {
    type Rejection = AdminAuthError;

    async fn from_request_parts(parts: &mut Parts, _state: &S) -> Result<Self, Self::Rejection> {
        // Absent only when a route was mounted without the layer: fail closed.
        parts
            .extensions
            .get::<AuthenticatedAdmin>()
            .cloned()
            .ok_or(AdminAuthError::MissingCredentials)
    }
}

/// A refusal: bad credentials, or too many failed attempts.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Refusal {
    Unauthenticated(AdminAuthError),
    Limited(RateLimited),
}

impl IntoResponse for Refusal {
    fn into_response(self) -> Response {
        match self {
            Self::Unauthenticated(error) => error.into_response(),
            Self::Limited(limited) => HttpRefusal::RateLimited(limited).into_response(),
        }
    }
}

/// Verifies administrator credentials.
pub struct AdminAuthenticator {
    service: AccountService,
    failures: FailedAttempts,
    /// Basic (name and password) and Bearer (an administrator token), on the door's scheme
    /// seam and Argon2 pool.
    schemes: Vec<Box<dyn CredentialScheme<AdminIdentity>>>,
    /// One audit record a minute per address for sign-ins refused by the budget, so a flood
    /// leaves a trace without growing the log.
    throttle_notes: LocalLimiter<IpAddr>,
    /// The credential that opens `GET /metrics` and nothing else, when configured.
    scrape: Option<ScrapeToken>,
}

/// The credential a metrics scraper presents (`Authorization: Bearer …`), configured through
/// `server.metrics_token_env`. It opens `GET /metrics` and nothing else: the layer admits it on
/// that route only, and every other handler requires an [`AuthenticatedAdmin`], which it never
/// becomes. Kept as its SHA-256 and compared in constant time; an administrator's credentials
/// still open `/metrics` too.
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

    fn hash(secret: &str) -> [u8; 32] {
        use sha2::Digest as _;
        sha2::Sha256::digest(secret.as_bytes()).into()
    }

    /// Whether `headers` carry this token as their one Bearer credential (read by the same
    /// parser every scheme uses).
    fn presented_in(&self, headers: &HeaderMap) -> bool {
        use subtle::ConstantTimeEq as _;
        match Presented::from_headers(headers, None) {
            Ok(Some(Presented::Authorization {
                scheme,
                credentials,
            })) if scheme.eq_ignore_ascii_case("bearer") => {
                bool::from(Self::hash(credentials).ct_eq(&self.digest))
            }
            _ => false,
        }
    }
}

/// In a request the scrape token admitted (to `GET /metrics` only).
#[derive(Debug, Clone, Copy)]
pub struct Scraper;

impl std::fmt::Debug for AdminAuthenticator {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("AdminAuthenticator").finish_non_exhaustive()
    }
}

/// An administrator as a scheme verifies them: (id, name).
#[derive(Debug, Clone)]
struct AdminIdentity(String, String);

/// The realm of the admin API's challenges.
const ADMIN_REALM: &str = "peergate admin";

struct AdminLogins(Arc<dyn CredentialStore>);

#[async_trait]
impl Logins<AdminIdentity> for AdminLogins {
    async fn login(&self, name: &str) -> Result<Option<Login<AdminIdentity>>, StoreError> {
        Ok(self.0.find_admin_login(name).await?.map(|login| Login {
            password_hash: login.password_hash,
            active: login.active,
            who: AdminIdentity(login.id, login.name),
        }))
    }
}

struct AdminTokens(Arc<dyn CredentialStore>);

#[async_trait]
impl TokenRecords<AdminIdentity> for AdminTokens {
    async fn record(
        &self,
        token_id: &str,
    ) -> Result<Option<TokenRecord<AdminIdentity>>, StoreError> {
        Ok(self
            .0
            .find_admin_token(token_id)
            .await?
            .map(|(admin, secret_hash)| TokenRecord {
                name: admin.name.clone(),
                secret_hash,
                active: admin.active,
                who: AdminIdentity(admin.id, admin.name),
            }))
    }
}

/// How the admin API reads an authentication failure.
fn admin_error(error: AuthError) -> AdminAuthError {
    match error {
        AuthError::MissingCredentials => AdminAuthError::MissingCredentials,
        AuthError::ForeignCredential => AdminAuthError::PeerCredential,
        AuthError::Unavailable => AdminAuthError::Unavailable,
        AuthError::Busy => AdminAuthError::Busy,
        AuthError::MalformedToken | AuthError::InvalidToken | AuthError::InvalidCredentials => {
            AdminAuthError::InvalidCredentials
        }
        // Two headers, an unknown scheme word, undecodable Basic: one answer.
        _ => AdminAuthError::MalformedHeader,
    }
}

impl AdminAuthenticator {
    /// Allows `failed_per_minute` failed sign-ins per client address (tracking at most
    /// `tracked_addresses`), checking passwords with the gateway's one Argon2 pool.
    pub fn new(
        service: AccountService,
        clock: Arc<dyn Clock>,
        failed_per_minute: u32,
        tracked_addresses: usize,
        passwords: PasswordChecker,
    ) -> Result<Self, String> {
        let failures = FailedAttempts::new(
            Quota::per_minute(failed_per_minute),
            tracked_addresses,
            clock.clone(),
        )
        .map_err(|e| e.to_string())?;
        let store = service.store().credentials();
        let schemes: Vec<Box<dyn CredentialScheme<AdminIdentity>>> = vec![
            // Administrators wait for a password slot rather than be refused: a flood of
            // Basic logins at the door must not lock them out of the admin API.
            Box::new(
                Basic::new(Arc::new(AdminLogins(store.clone())), passwords, ADMIN_REALM)
                    .waiting_for_a_slot(),
            ),
            Box::new(
                GeneratedCredential::new(
                    CredentialKind::AdminToken,
                    Carrier::Bearer,
                    Arc::new(AdminTokens(store)),
                    ADMIN_REALM,
                )
                .refusing_foreign(&[CredentialKind::PeerToken, CredentialKind::ApiKey]),
            ),
        ];
        Ok(Self {
            service,
            throttle_notes: LocalLimiter::new(tracked_addresses, clock),
            failures,
            schemes,
            scrape: None,
        })
    }

    /// Also admits `token` to `GET /metrics`, and to nothing else.
    pub fn with_scrape_token(mut self, token: Option<ScrapeToken>) -> Self {
        self.scrape = token;
        self
    }

    async fn authenticate(
        &self,
        headers: &HeaderMap,
        client: IpAddr,
    ) -> Result<AuthenticatedAdmin, Refusal> {
        if !headers.contains_key(header::AUTHORIZATION) {
            return Err(Refusal::Unauthenticated(AdminAuthError::MissingCredentials));
        }
        // Every sign-in attempt is counted before any work, and given back when it succeeds.
        if let Err(limited) = self.failures.spend(client).await {
            let note = self.throttle_notes.check(&client, Quota::per_minute(1));
            if note.ready().is_some_and(|d| d.is_allowed()) {
                self.service
                    .record_failed_login(&client.to_string(), None, "throttled: failed-attempt budget spent; further refusals this minute are not recorded")
                    .await;
            }
            return Err(Refusal::Limited(limited));
        }
        match self.verify(headers).await {
            Ok(AdminIdentity(id, name)) => {
                self.failures.refund(client);
                Ok(AuthenticatedAdmin { id, name, client })
            }
            Err(failure) => {
                let error = admin_error(failure.error);
                if matches!(error, AdminAuthError::Unavailable | AdminAuthError::Busy) {
                    // Nothing was decided about the credentials: the attempt is given back.
                    self.failures.refund(client);
                } else {
                    self.service
                        .record_failed_login(
                            &client.to_string(),
                            failure.name.as_deref(),
                            error.code(),
                        )
                        .await;
                }
                Err(Refusal::Unauthenticated(error))
            }
        }
    }

    /// The administrator the request's one credential names.
    async fn verify(&self, headers: &HeaderMap) -> Result<AdminIdentity, Failure> {
        let presented =
            Presented::from_headers(headers, None)?.ok_or(AuthError::MissingCredentials)?;
        let scheme = self
            .schemes
            .iter()
            .find(|s| s.claims(&presented))
            .ok_or(AuthError::MalformedHeader)?;
        scheme.precheck(presented.credentials())?;
        scheme.verify(presented.credentials()).await
    }
}

/// Requires an administrator in front of the wrapped service.
#[derive(Clone, Debug)]
pub struct AdminAuthLayer {
    authenticator: Arc<AdminAuthenticator>,
}

impl AdminAuthLayer {
    /// A layer that authenticates with `authenticator`.
    pub fn new(authenticator: Arc<AdminAuthenticator>) -> Self {
        Self { authenticator }
    }
}

impl<S> Layer<S> for AdminAuthLayer {
    type Service = AdminAuth<S>;

    fn layer(&self, inner: S) -> Self::Service {
        AdminAuth {
            inner,
            authenticator: self.authenticator.clone(),
        }
    }
}

/// The service made by [`AdminAuthLayer`].
#[derive(Clone, Debug)]
pub struct AdminAuth<S> {
    inner: S,
    authenticator: Arc<AdminAuthenticator>,
}

/// The address a request's failed sign-ins count against. The admin listener has no proxies in
/// front, so it is the socket's, grouped like the door's: an IPv6 client by its /64, so one
/// subscriber's allocation is one budget and not 2^64 of them.
fn budget_key(request: &Request<Body>) -> IpAddr {
    request
        .extensions()
        .get::<ClientAddr>()
        .copied()
        .or_else(|| {
            request
                .extensions()
                .get::<ConnectInfo<SocketAddr>>()
                .map(|c| ClientAddr::of_socket(c.0.ip()))
        })
        .map_or(IpAddr::V4(Ipv4Addr::UNSPECIFIED), |client| {
            client.limit_key()
        })
}

impl<S> Service<Request<Body>> for AdminAuth<S>
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
        let clone = self.inner.clone();
        let mut inner = std::mem::replace(&mut self.inner, clone);
        let authenticator = self.authenticator.clone();
        let client = budget_key(&request);
        if request.method() == axum::http::Method::GET
            && request.uri().path() == "/metrics"
            && authenticator
                .scrape
                .as_ref()
                .is_some_and(|scrape| scrape.presented_in(request.headers()))
        {
            request.extensions_mut().insert(Scraper);
            return Box::pin(async move { inner.call(request).await });
        }
        Box::pin(async move {
            match authenticator.authenticate(request.headers(), client).await {
                Ok(admin) => {
                    request.extensions_mut().insert(admin);
                    inner.call(request).await
                }
                Err(refusal) => Ok(refusal.into_response()),
            }
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn an_ipv6_client_spends_one_budget_per_64() {
        let from = |address: &str| {
            let mut request = Request::new(Body::empty());
            request
                .extensions_mut()
                .insert(ConnectInfo(SocketAddr::new(address.parse().unwrap(), 4000)));
            budget_key(&request)
        };
        assert_eq!(from("2001:db8:1:2::1"), from("2001:db8:1:2:ffff::9"));
        assert_ne!(from("2001:db8:1:2::1"), from("2001:db8:1:3::1"));
        assert_eq!(from("192.0.2.7"), "192.0.2.7".parse::<IpAddr>().unwrap());
        assert_eq!(from("::ffff:192.0.2.7"), from("192.0.2.7"));
    }
}

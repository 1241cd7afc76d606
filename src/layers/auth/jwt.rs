//! Identity providers' JWT access tokens at the door (`"jwt"` in `auth.schemes`, one
//! `[[auth.issuers]]` each): a token opens the door for the one live peer its (issuer,
//! subject) is bound to, and for nothing when there is none.
//!
//! The rules a token must satisfy are in [`crate::jose::access_token`]; this module keeps the
//! issuers' keys and the tokens already verified:
//!
//! * Issuers are keyed by their exact `iss`; a token's `kid` is looked up among its own
//!   issuer's keys only.
//! * Keys come from a file, a configured URL, or the URL discovery names, fetched with the
//!   project's SSRF-safe fetcher and kept as [`JwksCache`] says: for the set's own cache
//!   lifetime within bounds, refetched early for a `kid` it lacks (a token's claims are
//!   checked first, so only a token naming this issuer and this door, unexpired, may ask), the
//!   last good set kept through failed refetches. A key that leaves the set is logged once. An
//!   issuer whose keys could never be fetched answers 503 (nothing was decided about the
//!   token), not 401.
//! * A verified token is remembered by its SHA-256 until it expires, so a busy partner costs
//!   one signature check per token, not per request; but only while the key set that held its
//!   key is still its issuer's current one, so a key the provider removed (or replaced under the
//!   same `kid`) stops its tokens within the set's cache lifetime. Who it names is read from the store through the authenticator's
//!   verdict cache, so a revocation, an expiry or an unbinding refuses the token on the next
//!   request like any other credential of the peer.
//! * A token bound to a client certificate (RFC 8705 `cnf.x5t#S256`) is taken only over a
//!   connection that presented that certificate.

use super::scheme::{Context, CredentialScheme, Failure, Presented};
use super::{AuthError, AuthenticatedPeer, Scheme, SignedInWith, peer};
use crate::clock::{Clock, Timestamp, elapsed, later};
use crate::guard::certificate::ClientCertificate;
use crate::guard::scopes::GrantedScopes;
use crate::jose::access_token::{self, AccessToken, AccessTokenRules, TokenRejected};
use crate::jose::fetch::{FetchPolicy, fetch_text};
use crate::jose::jwks_cache::{Asking, JwksCache};
use crate::jose::verify::TrustedKeys;
use crate::locks::{Locked, ReadWriteLocked};
use crate::store::{CredentialStore, IdentityKind, PeerIdentity};
use async_trait::async_trait;
use moka::future::Cache;
use serde_json::Value;
use sha2::{Digest, Sha256};
use std::collections::HashMap;
use std::sync::Arc;
use std::time::Duration;

/// Where an issuer's keys come from.
#[derive(Debug, Clone)]
pub enum KeySource {
    /// Discovery at the issuer's well-known documents.
    Discovery,
    /// This JWKS URL.
    Uri(String),
    /// This key set, read from a file at start.
    Fixed(String),
}

/// One `[[auth.issuers]]`, as the scheme needs it.
#[derive(Debug, Clone)]
pub struct IssuerSettings {
    /// The name bindings use.
    pub name: String,
    /// What its tokens must satisfy.
    pub rules: AccessTokenRules,
    /// Where its keys come from.
    pub keys: KeySource,
    /// Whether each operation needs its scope in the token.
    pub require_scopes: bool,
    /// DANGEROUS: `http://` on loopback addresses for discovery and keys.
    pub dangerous_allow_http_loopback: bool,
}

/// What discovery found about an issuer.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Discovered {
    /// `jwks_uri`.
    pub jwks_uri: String,
    /// `token_endpoint`, when the provider has one (the card's client-credentials flow).
    pub token_endpoint: Option<String>,
    /// The document's URL (the card's `oauth2MetadataUrl`).
    pub metadata_url: String,
}

/// One issuer and its keys.
struct Issuer {
    settings: IssuerSettings,
    /// Fetches key sets (and discovery documents) under the issuer's fetch policy.
    jwks: JwksCache,
    policy: FetchPolicy,
    /// The fixed set, when keys come from a file.
    fixed: Option<Arc<TrustedKeys>>,
    /// The last discovery and when it was tried (a failure is retried after the cooldown).
    discovered: tokio::sync::Mutex<(Option<Discovered>, Option<Timestamp>)>,
    /// The last fetched set, parsed.
    parsed: std::sync::Mutex<Option<ParsedSet>>,
}

/// An issuer's fetched key set, parsed, and until when it is used without asking the cache.
struct ParsedSet {
    text: Arc<str>,
    keys: Arc<TrustedKeys>,
    fresh_until: Timestamp,
}

/// The issuers by exact `iss`.
type Issuers = HashMap<String, Arc<Issuer>>;

/// A token whose signature and claims verified, with the key set that held its key.
struct Verified {
    issuer: Arc<Issuer>,
    token: AccessToken,
    keys: Arc<TrustedKeys>,
}

/// The identity providers whose tokens the door accepts: see the [module docs](self).
pub struct IdentityProviders {
    /// By exact `iss`; replaced whole when the policy is reloaded ([`Self::replace_with`]).
    issuers: std::sync::RwLock<Arc<Issuers>>,
    clock: Arc<dyn Clock>,
    /// Tokens whose signature and claims verified, by SHA-256, with their issuer and key.
    verified: Cache<[u8; 32], Arc<Verified>>,
}

impl std::fmt::Debug for IdentityProviders {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("IdentityProviders")
            .field("issuers", &self.current().keys().collect::<Vec<_>>())
            .finish_non_exhaustive()
    }
}

impl IdentityProviders {
    /// The providers of `settings`; a fixed key set that is unusable is refused here, at start.
    pub fn new(
        settings: Vec<IssuerSettings>,
        fetch: &FetchPolicy,
        clock: Arc<dyn Clock>,
    ) -> Result<Self, String> {
        let mut issuers = HashMap::new();
        for settings in settings {
            let policy = FetchPolicy {
                dangerous_allow_http_loopback: settings.dangerous_allow_http_loopback,
                ..fetch.clone()
            };
            let fixed = match &settings.keys {
                KeySource::Fixed(text) => {
                    let mut keys = TrustedKeys::new();
                    keys.add_issuer_jwks(text).map_err(|why| {
                        format!("auth.issuers {:?}: jwks_file: {why}", settings.name)
                    })?;
                    Some(Arc::new(keys))
                }
                _ => None,
            };
            let issuer = Issuer {
                jwks: JwksCache::new(policy.clone(), clock.clone()).for_issuer_keys(),
                policy,
                fixed,
                discovered: tokio::sync::Mutex::default(),
                parsed: std::sync::Mutex::default(),
                settings,
            };
            issuers.insert(issuer.settings.rules.issuer.clone(), Arc::new(issuer));
        }
        Ok(Self {
            issuers: std::sync::RwLock::new(Arc::new(issuers)),
            clock,
            verified: Cache::builder()
                .max_capacity(100_000)
                .time_to_live(Duration::from_secs(3600))
                .build(),
        })
    }

    /// The issuers in force.
    fn current(&self) -> Arc<Issuers> {
        self.issuers.read_locked().clone()
    }

    /// Takes `other`'s issuers in place of these (a policy reload): from the next token on,
    /// only they are trusted. Every token verified before is checked again, so a removed
    /// issuer's tokens are refused at once, not when their memory would have lapsed.
    pub fn replace_with(&self, other: &Self) {
        let issuers = other.current();
        *self.issuers.write_locked() = issuers;
        self.verified.invalidate_all();
    }

    /// The names of the issuers in force.
    pub fn names(&self) -> Vec<String> {
        let mut names: Vec<String> = self
            .current()
            .values()
            .map(|issuer| issuer.settings.name.clone())
            .collect();
        names.sort();
        names
    }

    /// Discovery for the issuer named `name` (for the card), fetching it if need be.
    pub async fn discovered(&self, name: &str) -> Option<Discovered> {
        let issuer = self
            .current()
            .values()
            .find(|i| i.settings.name == name)?
            .clone();
        issuer.discover(self.clock.now()).await.ok()
    }

    /// The token's issuer and verified claims: from memory when this token verified before
    /// and the key that signed it is still its issuer's, else checked, its signature with one
    /// of its issuer's keys.
    async fn verify(&self, token: &str) -> Result<Arc<Verified>, AuthError> {
        let key: [u8; 32] = Sha256::digest(token.as_bytes()).into();
        let now = self.clock.now();
        let issuers = self.current();
        if let Some(known) = self.verified.get(&key).await {
            // Remembered until it expires, by the gateway's clock, and while the key set that
            // held its key is the issuer's current one; a new set (a key removed, or replaced
            // under the same kid) has it checked again.
            // Only while its issuer is still the one in force: a reload that removed or
            // changed it has the token judged by the policy now in force.
            let unexpired = now < later(known.token.expires_at, known.issuer.settings.rules.skew);
            let in_force = issuers
                .get(&known.issuer.settings.rules.issuer)
                .is_some_and(|issuer| Arc::ptr_eq(issuer, &known.issuer));
            if unexpired && in_force && known.issuer.still_current(&known.keys, now).await? {
                return Ok(known);
            }
            self.verified.invalidate(&key).await;
        }
        let refused = |why: TokenRejected| {
            tracing::debug!(reason = %why, "an access token was refused");
            AuthError::InvalidToken
        };
        let parsed = access_token::parse(token, true).map_err(refused)?;
        let issuer = access_token::peek_issuer(&parsed)
            .ok()
            .and_then(|iss| issuers.get(iss))
            .ok_or_else(|| refused(TokenRejected::UnknownIssuer))?
            .clone();
        // The plain-JWT switch is the issuer's: parse again by its rule now that it is known.
        let parsed =
            access_token::parse(token, issuer.settings.rules.plain_jwt).map_err(refused)?;
        let mut keys = issuer.keys(Asking::Fresh, now).await?;
        if keys.algorithm_of(parsed.kid()).is_none() {
            // A kid the set lacks: the provider may have rotated. Only a token that would be
            // taken but for its key may ask the key server again (within the cache's bounds).
            access_token::check_claims(&parsed, &issuer.settings.rules, now).map_err(refused)?;
            keys = issuer.keys(Asking::ForKid(parsed.kid()), now).await?;
        }
        let verified =
            access_token::verify(&parsed, &keys, &issuer.settings.rules, now).map_err(refused)?;
        let entry = Arc::new(Verified {
            issuer,
            token: verified,
            keys,
        });
        self.verified.insert(key, entry.clone()).await;
        Ok(entry)
    }
}

impl Issuer {
    /// Whether `keys` are still the issuer's current set (the same parse of the same text).
    async fn still_current(
        &self,
        keys: &Arc<TrustedKeys>,
        now: Timestamp,
    ) -> Result<bool, AuthError> {
        Ok(Arc::ptr_eq(keys, &self.keys(Asking::Fresh, now).await?))
    }

    /// The issuer's keys, from its parsed set while that is fresh; `asking` why.
    async fn keys(
        &self,
        asking: Asking<'_>,
        now: Timestamp,
    ) -> Result<Arc<TrustedKeys>, AuthError> {
        if let Some(fixed) = &self.fixed {
            return Ok(fixed.clone());
        }
        if let Some(keys) = self.parsed_while_fresh(asking, now) {
            return Ok(keys);
        }
        let url = match &self.settings.keys {
            KeySource::Uri(url) => url.clone(),
            _ => self.discover(now).await?.jwks_uri,
        };
        // The cache logs a failed fetch once, where it happened.
        let set = self.jwks.get(&url, asking).await.map_err(|error| {
            tracing::debug!(issuer = %self.settings.name, %error, "the issuer's keys cannot be had");
            AuthError::Unavailable
        })?;
        let mut parsed = self.parsed.locked();
        if let Some(current) = parsed.as_mut()
            && (Arc::ptr_eq(&current.text, &set.text) || current.text == set.text)
        {
            current.fresh_until = set.fresh_until;
            return Ok(current.keys.clone());
        }
        let mut keys = TrustedKeys::new();
        // The cache only keeps sets with a usable key.
        keys.add_issuer_jwks(&set.text)
            .map_err(|_| AuthError::Unavailable)?;
        let keys = Arc::new(keys);
        if let Some(old) = parsed.as_ref() {
            self.log_removed(&old.keys, &keys);
        }
        *parsed = Some(ParsedSet {
            text: set.text,
            keys: keys.clone(),
            fresh_until: set.fresh_until,
        });
        Ok(keys)
    }

    /// The parsed set, while it is fresh and holds what `asking` looks for.
    fn parsed_while_fresh(&self, asking: Asking<'_>, now: Timestamp) -> Option<Arc<TrustedKeys>> {
        let parsed = self.parsed.locked();
        let current = parsed.as_ref().filter(|p| now < p.fresh_until)?;
        match asking {
            Asking::Fresh => Some(current.keys.clone()),
            Asking::ForKid(kid) if current.keys.algorithm_of(kid).is_some() => {
                Some(current.keys.clone())
            }
            _ => None,
        }
    }

    /// Says once, when a new set replaces `old`, which keys left it: the tokens they signed
    /// are refused from now on.
    fn log_removed(&self, old: &TrustedKeys, new: &TrustedKeys) {
        for kid in old.kids().filter(|kid| new.algorithm_of(kid).is_none()) {
            tracing::warn!(issuer = %self.settings.name, kid = %kid.escape_debug(), "the issuer removed a key from its set; tokens it signed are refused from now on");
        }
    }

    /// The provider's metadata: OpenID Connect discovery, else RFC 8414's. Its `issuer` must be
    /// the configured one exactly. A failure is retried after the key cache's cooldown.
    async fn discover(&self, now: Timestamp) -> Result<Discovered, AuthError> {
        let mut state = self.discovered.lock().await;
        if let Some(found) = &state.0 {
            return Ok(found.clone());
        }
        if state
            .1
            .is_some_and(|at| elapsed(at, now) < JwksCache::COOLDOWN)
        {
            return Err(AuthError::Unavailable);
        }
        state.1 = Some(now);
        match discover(&self.settings.rules.issuer, &self.policy).await {
            Ok(found) => {
                state.0 = Some(found.clone());
                Ok(found)
            }
            Err(reason) => {
                tracing::warn!(issuer = %self.settings.name, %reason, "the issuer's metadata cannot be read");
                Err(AuthError::Unavailable)
            }
        }
    }
}

/// An issuer's metadata, fetched under `policy`: OpenID Connect discovery, else RFC 8414's,
/// whose `issuer` must be `issuer` exactly; or why neither would do, each URL's reason named.
pub async fn discover(issuer: &str, policy: &FetchPolicy) -> Result<Discovered, String> {
    let mut reasons = Vec::new();
    for url in metadata_urls(issuer)? {
        let read = match fetch_text(&url, policy).await {
            Ok(text) => read_metadata(&text, issuer, &url),
            Err(error) => Err(error.to_string()),
        };
        match read {
            Ok(found) => return Ok(found),
            Err(why) => reasons.push(why),
        }
    }
    Err(reasons.join("; "))
}

/// Where an issuer's metadata may be: OpenID Connect's `<issuer>/.well-known/openid-configuration`
/// and RFC 8414's `<scheme://authority>/.well-known/oauth-authorization-server<path>`, which
/// differ in where an issuer's path goes.
pub(crate) fn metadata_urls(issuer: &str) -> Result<[String; 2], String> {
    let url = reqwest::Url::parse(issuer).map_err(|_| "the issuer is not a URL".to_owned())?;
    let path = url.path().trim_end_matches('/');
    let origin = url.origin().ascii_serialization();
    Ok([
        format!("{origin}{path}/.well-known/openid-configuration"),
        format!("{origin}/.well-known/oauth-authorization-server{path}"),
    ])
}

/// `jwks_uri` and `token_endpoint` from a metadata document whose `issuer` is `issuer`.
fn read_metadata(text: &str, issuer: &str, url: &str) -> Result<Discovered, String> {
    let document = crate::protocol::json::parse(text, crate::protocol::json::Integers::Any)
        .map_err(|e| format!("{url}: not strict JSON: {e}"))?;
    let named = document.get("issuer").and_then(Value::as_str);
    if named != Some(issuer) {
        return Err(format!(
            "{url} names issuer {:?}, not {issuer:?} (the issuer must match exactly, RFC 8414 §3.3)",
            named.unwrap_or_default()
        ));
    }
    let jwks_uri = document
        .get("jwks_uri")
        .and_then(Value::as_str)
        .ok_or_else(|| format!("{url}: no jwks_uri"))?
        .to_owned();
    Ok(Discovered {
        jwks_uri,
        token_endpoint: document
            .get("token_endpoint")
            .and_then(Value::as_str)
            .map(str::to_owned),
        metadata_url: url.to_owned(),
    })
}

/// A token whose signature and claims verified, as a listener's bindings read it.
#[derive(Debug, Clone, Copy)]
pub struct VerifiedToken<'a> {
    /// The issuer's name in the policy.
    pub issuer: &'a str,
    /// Whether the issuer's policy requires each operation's scope.
    pub require_scopes: bool,
    /// The token's claims.
    pub token: &'a AccessToken,
    /// Until when the token is taken: its `exp` and the issuer's clock skew.
    pub taken_until: Timestamp,
    /// The provider's `iss`.
    pub issuer_url: &'a str,
    /// The token as presented, whose SHA-256 a receipt names (never the token itself).
    pub presented: &'a str,
}

impl VerifiedToken<'_> {
    /// The refusal for a token bound to nobody: an invalid token, naming the subject it named
    /// (no secret) for the audit.
    pub fn unbound(&self) -> Failure {
        Failure {
            error: AuthError::InvalidToken,
            name: None,
            subject: Some(format!("{}:{}", self.issuer, self.token.subject)),
        }
    }
}

/// Who a verified token names on one listener (a peer at the door, an administrator on the
/// admin API): the one thing the providers' scheme leaves to the listener.
#[async_trait]
pub trait TokenBindings<Who>: Send + Sync {
    /// Who `verified` is bound to, or the refusal.
    async fn bound(&self, verified: VerifiedToken<'_>) -> Result<Who, Failure>;
}

/// Identity providers' access tokens as a scheme (`"jwt"` at the door, `[admin.issuer]` on the
/// admin API): verified by [`IdentityProviders`], checked against the connection's certificate
/// when bound to one (RFC 8705), and resolved by the listener's [`TokenBindings`].
pub struct IdentityProviderTokens<Who> {
    providers: Arc<IdentityProviders>,
    bindings: Arc<dyn TokenBindings<Who>>,
    realm: &'static str,
}

impl<Who> IdentityProviderTokens<Who> {
    /// The scheme over `providers`, finding who a token names with `bindings`.
    pub fn new(
        providers: Arc<IdentityProviders>,
        bindings: Arc<dyn TokenBindings<Who>>,
        realm: &'static str,
    ) -> Self {
        Self {
            providers,
            bindings,
            realm,
        }
    }
}

#[async_trait]
impl<Who: Send + Sync + 'static> CredentialScheme<Who> for IdentityProviderTokens<Who> {
    fn name(&self) -> &'static str {
        "jwt"
    }

    /// The listener's Bearer challenge (the same text as its other Bearer scheme's, sent once).
    fn challenge(&self) -> String {
        super::generated::bearer_challenge(self.realm)
    }

    /// A Bearer credential shaped like a JWT (peergate's own tokens never are).
    fn claims(&self, presented: &Presented<'_>) -> bool {
        matches!(presented, Presented::Authorization { scheme, credentials }
            if scheme.eq_ignore_ascii_case("bearer") && access_token::looks_like_jwt(credentials))
    }

    fn precheck(&self, credentials: &str) -> Result<(), AuthError> {
        if credentials.len() > access_token::MAX_TOKEN_BYTES {
            return Err(AuthError::MalformedToken);
        }
        Ok(())
    }

    fn refused(&self) -> AuthError {
        AuthError::InvalidToken
    }

    /// A signature check at most, and only for a token not seen before.
    fn verification_is_costly(&self) -> bool {
        false
    }

    async fn verify(&self, credentials: &str, context: &Context<'_>) -> Result<Who, Failure> {
        let verified = self.providers.verify(credentials).await?;
        let (issuer, token) = (&verified.issuer, &verified.token);
        // RFC 8705: a token bound to a certificate is taken only over a connection that
        // presented that certificate.
        if let Some(bound) = &token.certificate_thumbprint {
            let presented = context.certificate.map(ClientCertificate::x5t_s256);
            if presented.as_ref() != Some(bound) {
                tracing::debug!(issuer = %issuer.settings.name, "a certificate-bound token came without its certificate");
                return Err(AuthError::InvalidToken.into());
            }
        }
        self.bindings
            .bound(VerifiedToken {
                issuer: &issuer.settings.name,
                require_scopes: issuer.settings.require_scopes,
                token,
                taken_until: later(token.expires_at, issuer.settings.rules.skew),
                issuer_url: &issuer.settings.rules.issuer,
                presented: credentials,
            })
            .await
    }
}

/// The door's bindings: the live peer bound to the token's (issuer, subject).
pub struct PeerBindings {
    store: Arc<dyn CredentialStore>,
}

impl PeerBindings {
    /// Bindings read from `store`.
    pub fn new(store: Arc<dyn CredentialStore>) -> Self {
        Self { store }
    }
}

#[async_trait]
impl TokenBindings<AuthenticatedPeer> for PeerBindings {
    async fn bound(&self, verified: VerifiedToken<'_>) -> Result<AuthenticatedPeer, Failure> {
        let token = verified.token;
        let identity = PeerIdentity {
            kind: IdentityKind::Token,
            issuer: verified.issuer.to_owned(),
            subject: token.subject.clone(),
        };
        let login = self
            .store
            .find_bound_peer(&identity)
            .await
            .map_err(|e| {
                tracing::error!(error = %e, "identity look-up failed");
                AuthError::Unavailable
            })?
            .filter(|login| login.active)
            .ok_or_else(|| verified.unbound())?;
        // The earlier of the token's end (with the issuer's skew, as it was verified) and the
        // peer's.
        let taken_until = verified.taken_until;
        let valid_until = Some(
            login
                .valid_until
                .map_or(taken_until, |until| until.min(taken_until)),
        );
        let token_used = SignedInWith::AccessToken {
            issuer: verified.issuer_url.into(),
            ath: crate::jose::receipt::sha256_b64url(verified.presented.as_bytes()).into(),
        };
        let mut peer = peer(Scheme::Jwt, login, valid_until, token_used);
        peer.issuer = Some(verified.issuer.into());
        peer.subject = Some(token.subject.as_str().into());
        if !token.claims.is_empty() {
            peer.claims = Some(token.claims.clone());
        }
        if verified.require_scopes {
            peer.granted = Some(GrantedScopes::from_names(
                token.scopes.iter().map(String::as_str),
            ));
        }
        Ok(peer)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn an_issuer_with_a_path_is_discovered_at_both_specs_urls() {
        assert_eq!(
            metadata_urls("https://login.example.com").unwrap(),
            [
                "https://login.example.com/.well-known/openid-configuration",
                "https://login.example.com/.well-known/oauth-authorization-server",
            ]
        );
        assert_eq!(
            metadata_urls("https://login.example.com:8443/tenant/a/").unwrap(),
            [
                "https://login.example.com:8443/tenant/a/.well-known/openid-configuration",
                "https://login.example.com:8443/.well-known/oauth-authorization-server/tenant/a",
            ]
        );
    }

    #[test]
    fn metadata_naming_another_issuer_says_which() {
        let url = "https://idp.example/.well-known/openid-configuration";
        let why = read_metadata(
            r#"{"issuer": "https://evil.example", "jwks_uri": "https://evil.example/k"}"#,
            "https://idp.example",
            url,
        )
        .unwrap_err();
        assert!(why.contains(url), "{why}");
        assert!(
            why.contains(r#"names issuer "https://evil.example", not "https://idp.example""#),
            "{why}"
        );
        let found = read_metadata(
            r#"{"issuer": "https://idp.example", "jwks_uri": "https://idp.example/k"}"#,
            "https://idp.example",
            url,
        )
        .unwrap();
        assert_eq!(found.jwks_uri, "https://idp.example/k");
    }
}

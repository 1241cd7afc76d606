//! The one authenticator, for the A2A door and the admin API alike: what every listener does
//! with a presented credential, whoever it names.
//!
//! A listener brings its schemes (each a [`CredentialScheme`] verifying into its `Who`: a peer,
//! an administrator), its failed-attempt budget and a [`Witness`] for what it keeps on the side
//! (a peer's "last used", an administrator's audit trail). Everything else is here, once:
//!
//! * Exactly one credential per request, read by the one parser ([`Presented::from_headers`]);
//!   two are refused whole. Junk is refused by the scheme's precheck before any cache or store.
//! * An id no credential has is refused from memory when the listener keeps the set of known
//!   ids, before the verdict cache (a flood of made-up ids would only fill it) and the store.
//! * Every refusal costs the client's address an attempt; a costly verification (Argon2) is
//!   charged before the work and given back when it succeeds, so concurrent guesses cannot outrun
//!   the budget; once the budget is spent the answer is 429 before any work.
//! * Verdicts are cached for the configured time by a SHA-256 of the credential (or not at all
//!   when that time is zero); concurrent requests with one uncached credential share one
//!   verification; [`Authenticator::forget`] drops a principal's verdicts at once, also over
//!   verifications already under way. A credential past its `valid_until` is refused on every
//!   request by the gateway's clock, cached or not.

use super::FailedAttempts;
use super::known_ids::KnownCredentialIds;
use super::password::PasswordChecker;
use super::scheme::{Context, CredentialScheme, Failure, Presented};
use crate::clock::{Clock, Timestamp, elapsed};
use crate::guard::admission::Admission;
use crate::guard::certificate::ClientCertificate;
use crate::guard::limited::RateLimited;
use crate::guard::refusal::{Challenges, Refusal, RefusalReason};
use crate::guard::unauthenticated::AuthError;
use async_trait::async_trait;
use axum::http::{HeaderMap, HeaderName, header};
use moka::future::Cache;
use sha2::{Digest, Sha256};
use std::net::IpAddr;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::time::Duration;

/// Who a verified credential names, as the authenticator needs to know it.
pub trait Principal: Clone + Send + Sync + 'static {
    /// The id whose change drops its cached verdicts ([`Authenticator::forget`]).
    fn principal_id(&self) -> &str;

    /// The name an operator knows it by, for the access log (a peer's or an administrator's
    /// name; never a secret).
    fn principal_name(&self) -> &str;

    /// When the credential stops working (an expiry, the end of a rotation's grace).
    fn valid_until(&self) -> Option<Timestamp> {
        None
    }

    /// How it signed in, as a span names it (`bearer`, `jwt`, …).
    fn scheme_name(&self) -> &'static str {
        "-"
    }

    /// Whether its own trace context is continued rather than linked to.
    fn continues_trace(&self) -> bool {
        false
    }
}

/// What a listener keeps on the side of authentication. Every method has a default that does
/// nothing.
#[async_trait]
pub trait Witness<Who>: Send + Sync {
    /// A verdict admitted `who`; called once per verdict, not per request.
    async fn admitted(&self, who: &Who) {
        let _ = who;
    }

    /// Whether [`Witness::refused`] and [`Witness::throttled`] do anything: a witness that
    /// keeps no refusals says no, and refusals (the floods) cost no call at all.
    fn keeps_refusals(&self) -> bool {
        false
    }

    /// A presented credential was refused (not a missing one, and not one that could not be
    /// checked).
    async fn refused(&self, attempt: Attempt<'_>, error: AuthError) {
        let _ = (attempt, error);
    }

    /// The client's failed-attempt budget is spent: it was answered 429 without a check.
    async fn throttled(&self, client: IpAddr) {
        let _ = client;
    }
}

/// Who a refused attempt came from and claimed to be.
#[derive(Clone, Copy)]
pub struct Attempt<'a> {
    /// The client's address (its budget's key).
    pub client: IpAddr,
    /// The login name tried, if the scheme has one (possibly a password typed in the wrong
    /// field: never written down unless it names someone).
    pub name: Option<&'a str>,
    /// The identity a verified token named, when it opened nothing.
    pub subject: Option<&'a str>,
}

impl std::fmt::Debug for Attempt<'_> {
    /// Without the name (see [`Attempt::name`]).
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Attempt")
            .field("client", &self.client)
            .field("subject", &self.subject)
            .finish_non_exhaustive()
    }
}

/// A witness that keeps nothing.
#[derive(Debug, Clone, Copy, Default)]
pub struct NoWitness;

impl<Who> Witness<Who> for NoWitness {}

/// A refusal by an authenticator: bad credentials, or the failed-attempt budget.
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

/// How one listener authenticates, besides its schemes.
pub struct Listener<Who> {
    /// The header API keys come in, when a scheme takes them.
    pub key_header: Option<HeaderName>,
    /// How long a verdict is trusted (zero: never cached).
    pub cache_ttl: Duration,
    /// The failed-attempt budget per client address.
    pub failures: FailedAttempts,
    /// The credential ids the store holds, when kept (`None`: every id is looked up).
    pub known_ids: Option<Arc<KnownCredentialIds>>,
    /// What the listener keeps on the side.
    pub witness: Arc<dyn Witness<Who>>,
    /// The reason the listener's refusals are counted under.
    pub counted_as: RefusalReason,
    /// Whether a client certificate is a credential here (a scheme takes certificates).
    pub takes_certificates: bool,
    /// The URL of the listener's RFC 9728 metadata, named by its Bearer challenges.
    pub resource_metadata: Option<String>,
}

/// A verdict and when (by the gateway's clock) it was reached.
struct CachedVerdict<Who> {
    /// Who, or `None` for a credential that was refused.
    who: Option<Arc<Verified<Who>>>,
    at: Timestamp,
}

impl<Who> Clone for CachedVerdict<Who> {
    fn clone(&self) -> Self {
        Self {
            who: self.who.clone(),
            at: self.at,
        }
    }
}

struct Verified<Who> {
    who: Who,
    /// Whether the witness heard of this verdict; later hits skip it.
    witnessed: AtomicBool,
}

/// A credential the request presented, claimed by one scheme and past its precheck.
struct Claimed<'h> {
    scheme: usize,
    credentials: &'h str,
    context: Context<'h>,
}

/// Why a presented credential was refused, with the name it was made for and the subject a
/// verified token named, for the witness.
struct Refused {
    refusal: AuthRefusal,
    name: Option<String>,
    subject: Option<String>,
}

impl From<AuthRefusal> for Refused {
    fn from(refusal: AuthRefusal) -> Self {
        Self {
            refusal,
            name: None,
            subject: None,
        }
    }
}

impl From<AuthError> for Refused {
    fn from(error: AuthError) -> Self {
        AuthRefusal::from(error).into()
    }
}

impl From<RateLimited> for Refused {
    fn from(limited: RateLimited) -> Self {
        AuthRefusal::from(limited).into()
    }
}

/// Verifies a listener's credentials into its `Who`: see the [module docs](self).
pub struct Authenticator<Who: Principal> {
    clock: Arc<dyn Clock>,
    schemes: Vec<Box<dyn CredentialScheme<Who>>>,
    listener: Listener<Who>,
    challenges: Challenges,
    /// Recent verdicts by credential hash.
    verified: Option<Cache<[u8; 32], CachedVerdict<Who>>>,
    cache_ttl: Duration,
    /// Bumped by every `forget`: a verification that started before a revocation must not put
    /// its (now stale) verdict into the cache.
    generation: AtomicU64,
    passwords: PasswordChecker,
}

impl<Who: Principal> std::fmt::Debug for Authenticator<Who> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Authenticator")
            .field("schemes", &self.schemes.len())
            .field("cache_ttl", &self.cache_ttl)
            .finish_non_exhaustive()
    }
}

impl<Who: Principal> Authenticator<Who> {
    /// An authenticator over `schemes` (in the order their challenges are sent), checking
    /// passwords with `passwords`, the gateway's one Argon2 pool.
    pub fn with_schemes(
        schemes: Vec<Box<dyn CredentialScheme<Who>>>,
        listener: Listener<Who>,
        passwords: PasswordChecker,
        clock: Arc<dyn Clock>,
    ) -> Self {
        // A scheme with no challenge of its own, or the same as another's, adds none.
        let mut texts: Vec<String> = Vec::new();
        for text in schemes.iter().map(|s| s.challenge()) {
            if !text.is_empty() && !texts.contains(&text) {
                texts.push(text);
            }
        }
        if let Some(url) = &listener.resource_metadata {
            for text in texts.iter_mut().filter(|text| text.starts_with("Bearer ")) {
                text.push_str(&format!(r#", resource_metadata="{url}""#));
            }
        }
        let names = schemes.iter().map(|s| s.name()).collect();
        let challenges = Challenges::new(texts)
            .counted_as(listener.counted_as)
            .accepting(names);
        let verified = (!listener.cache_ttl.is_zero()).then(|| {
            Cache::builder()
                .max_capacity(100_000)
                .time_to_live(listener.cache_ttl)
                .support_invalidation_closures()
                .build()
        });
        Self {
            cache_ttl: listener.cache_ttl,
            clock,
            schemes,
            challenges,
            verified,
            generation: AtomicU64::new(0),
            passwords,
            listener,
        }
    }

    /// The `WWW-Authenticate` challenges, one per scheme.
    pub fn challenges(&self) -> &Challenges {
        &self.challenges
    }

    /// The refusal that answers `error` on this listener.
    pub fn refusal(&self, refusal: AuthRefusal) -> Refusal {
        match refusal {
            AuthRefusal::Unauthenticated(error) => error.refusal(&self.challenges),
            AuthRefusal::Limited(limited) => Refusal::RateLimited(limited),
        }
    }

    /// Whether a request carries anything that claims to be a credential: an `Authorization`
    /// header, or the API-key header when API keys are taken.
    pub fn carries_credentials(&self, headers: &HeaderMap) -> bool {
        headers.contains_key(header::AUTHORIZATION)
            || self
                .listener
                .key_header
                .as_ref()
                .is_some_and(|name| headers.contains_key(name))
    }

    /// The one Argon2 pool.
    pub fn passwords(&self) -> &PasswordChecker {
        &self.passwords
    }

    /// How many Argon2 verifications ran since start-up.
    pub fn password_verifications(&self) -> u64 {
        self.passwords.verifications()
    }

    /// The most Argon2 verifications that ever ran at once.
    pub fn password_peak_concurrency(&self) -> usize {
        self.passwords.peak_concurrency()
    }

    /// Drops every cached verdict naming `principal_id`, so a change made through this process
    /// (a revocation, a new quota) applies to the very next request, including over
    /// verifications already under way.
    pub fn forget(&self, principal_id: &str) {
        if let Some(cache) = &self.verified {
            self.generation.fetch_add(1, Ordering::SeqCst);
            let principal_id: Arc<str> = Arc::from(principal_id);
            let _ = cache.invalidate_entries_if(move |_, v| {
                v.who
                    .as_ref()
                    .is_some_and(|v| v.who.principal_id() == &*principal_id)
            });
        }
    }

    /// A credential was issued to `principal_id`: its id is known from now on, and the
    /// principal's cached verdicts are dropped.
    pub fn credential_issued(&self, principal_id: &str, token_id: &str) {
        if let Some(known) = &self.listener.known_ids {
            known.insert(token_id);
        }
        self.forget(principal_id);
    }

    /// The set of known credential ids, when there is one.
    pub fn known_ids(&self) -> Option<&Arc<KnownCredentialIds>> {
        self.listener.known_ids.as_ref()
    }

    /// Forgets every cached verdict (changes may have been missed).
    pub fn forget_everyone(&self) {
        if let Some(cache) = &self.verified {
            self.generation.fetch_add(1, Ordering::SeqCst);
            cache.invalidate_all();
        }
    }

    /// Drops failure budgets that are whole again (call periodically).
    pub fn purge(&self) {
        self.listener.failures.forget_rested();
    }

    /// Authenticates one request from `client` (see the [module docs](self)).
    pub async fn authenticate(
        &self,
        headers: &HeaderMap,
        client: IpAddr,
    ) -> Result<Who, AuthRefusal> {
        self.authenticate_with(headers, client, None).await
    }

    /// Authenticates one request from `client` that came over a connection with `certificate`.
    pub async fn authenticate_with(
        &self,
        headers: &HeaderMap,
        client: IpAddr,
        certificate: Option<&ClientCertificate>,
    ) -> Result<Who, AuthRefusal> {
        self.authenticate_admitted(headers, client, certificate, None)
            .await
    }

    /// Authenticates one request whose shared checks wait in `admission`: a failed attempt is
    /// counted in the same call as they are (see [`crate::guard::admission`]).
    pub async fn authenticate_admitted(
        &self,
        headers: &HeaderMap,
        client: IpAddr,
        certificate: Option<&ClientCertificate>,
        admission: Option<&Admission>,
    ) -> Result<Who, AuthRefusal> {
        match self.decide(headers, client, certificate, admission).await {
            Ok(verified) => {
                if !verified.witnessed.swap(true, Ordering::Relaxed) {
                    self.listener.witness.admitted(&verified.who).await;
                }
                Ok(verified.who.clone())
            }
            Err(Refused { refusal, .. }) if !self.listener.witness.keeps_refusals() => Err(refusal),
            Err(Refused {
                refusal,
                name,
                subject,
            }) => {
                match refusal {
                    AuthRefusal::Limited(_) => self.listener.witness.throttled(client).await,
                    AuthRefusal::Unauthenticated(
                        AuthError::MissingCredentials | AuthError::Unavailable | AuthError::Busy,
                    ) => {}
                    AuthRefusal::Unauthenticated(error) => {
                        let attempt = Attempt {
                            client,
                            name: name.as_deref(),
                            subject: subject.as_deref(),
                        };
                        self.listener.witness.refused(attempt, error).await;
                    }
                }
                Err(refusal)
            }
        }
    }

    async fn decide(
        &self,
        headers: &HeaderMap,
        client: IpAddr,
        certificate: Option<&ClientCertificate>,
        admission: Option<&Admission>,
    ) -> Result<Arc<Verified<Who>>, Refused> {
        // The handshake checked the certificate once; a connection kept alive past its
        // notAfter opens nothing more, whatever credential its requests carry.
        if certificate.is_some_and(|c| c.expired_at(self.clock.now())) {
            return Err(AuthError::CertificateExpired.into());
        }
        let presented = match self.claimed(headers, certificate) {
            Ok(presented) => presented,
            Err(AuthError::MissingCredentials) => return Err(AuthError::MissingCredentials.into()),
            Err(error) => {
                self.spend_attempt(client, admission).await?;
                return Err(error.into());
            }
        };
        let scheme = &self.schemes[presented.scheme];
        // An id no credential has: refused from memory, and it costs an attempt like any
        // refusal.
        if let Some(known) = &self.listener.known_ids
            && let Some(id) = scheme.credential_id(presented.credentials)
            && !known.holds(id)
        {
            self.spend_attempt(client, admission).await?;
            return Err(scheme.refused().into());
        }
        let Some(cache) = &self.verified else {
            // No cache: every attempt is verified and counted.
            let mut tried = (None, None);
            return match self
                .verify_counted(&presented, client, admission, &mut tried)
                .await?
            {
                Some(verified) if self.still_valid(&verified.who) => Ok(verified),
                _ => Err(Refused {
                    refusal: scheme.refused().into(),
                    name: tried.0,
                    subject: tried.1,
                }),
            };
        };
        let mut tried = (None, None);
        let (entry, verified_here) = self
            .verdict_through(cache, &presented, client, admission, &mut tried)
            .await?;
        match entry.who {
            Some(verified) if self.still_valid(&verified.who) => Ok(verified),
            // Refused, or expired (possibly while cached): a repeat costs an attempt like the
            // first one did.
            Some(_) | None => {
                if !verified_here {
                    self.spend_attempt(client, admission).await?;
                }
                Err(Refused {
                    refusal: scheme.refused().into(),
                    name: tried.0,
                    subject: tried.1,
                })
            }
        }
    }

    /// The cached verdict on `presented`, or one reached now (and cached unless a revocation
    /// arrived meanwhile); with whether it was reached by this call.
    async fn verdict_through(
        &self,
        cache: &Cache<[u8; 32], CachedVerdict<Who>>,
        presented: &Claimed<'_>,
        client: IpAddr,
        admission: Option<&Admission>,
        tried: &mut (Option<String>, Option<String>),
    ) -> Result<(CachedVerdict<Who>, bool), Refused> {
        let key = cache_key(presented);
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
                        let who = self
                            .verify_counted(presented, client, admission, tried)
                            .await?;
                        Ok::<_, Refused>(CachedVerdict {
                            who,
                            at: self.clock.now(),
                        })
                    })
                    .await
                    .map_err(|shared| Refused {
                        refusal: shared.refusal,
                        name: shared.name.clone(),
                        subject: shared.subject.clone(),
                    })?;
                if self.generation.load(Ordering::SeqCst) != generation {
                    // A revocation arrived while this verdict was being reached: keep it out.
                    cache.invalidate(&key).await;
                }
                entry
            }
        };
        Ok((entry, verified_here))
    }

    /// Counts one attempt against the client's budget; refuses when it is spent.
    async fn spend_attempt(
        &self,
        client: IpAddr,
        admission: Option<&Admission>,
    ) -> Result<(), RateLimited> {
        self.listener
            .failures
            .spend_admitted(client, admission)
            .await
    }

    /// Verifies, counting a failure against the client's budget: before the work for a costly
    /// scheme (given back on success), after it for a cheap one (see
    /// [`CredentialScheme::verification_is_costly`]). `Ok(None)` is a refused credential (a
    /// verdict worth caching, and `tried` the name it was tried for); errors are not cached.
    async fn verify_counted(
        &self,
        presented: &Claimed<'_>,
        client: IpAddr,
        admission: Option<&Admission>,
        tried: &mut (Option<String>, Option<String>),
    ) -> Result<Option<Arc<Verified<Who>>>, Refused> {
        let scheme = &self.schemes[presented.scheme];
        let costly = scheme.verification_is_costly();
        if costly {
            self.spend_attempt(client, admission).await?;
        }
        match scheme
            .verify(presented.credentials, &presented.context)
            .await
        {
            Ok(who) => {
                let expired = self.expired(who.valid_until());
                if costly && !expired {
                    self.listener.failures.refund(client);
                } else if !costly && expired {
                    // Kept with its principal (so a change drops it from the cache), but no
                    // success: it costs an attempt like a wrong one.
                    self.spend_attempt(client, admission).await?;
                }
                Ok(Some(Arc::new(Verified {
                    who,
                    witnessed: AtomicBool::new(false),
                })))
            }
            Err(Failure {
                error: AuthError::InvalidToken | AuthError::InvalidCredentials,
                name,
                subject,
            }) => {
                if !costly {
                    self.spend_attempt(client, admission).await?;
                }
                *tried = (name, subject);
                Ok(None)
            }
            // Nothing was decided about the credential (the password slots were busy, or the
            // store did not answer): the attempt is given back.
            Err(Failure {
                error: error @ (AuthError::Busy | AuthError::Unavailable),
                ..
            }) => {
                if costly {
                    self.listener.failures.refund(client);
                }
                Err(error.into())
            }
            Err(Failure {
                error,
                name,
                subject,
            }) => Err(Refused {
                refusal: error.into(),
                name,
                subject,
            }),
        }
    }

    /// Whether a credential that ends at `valid_until` has ended by the gateway's clock.
    fn expired(&self, valid_until: Option<Timestamp>) -> bool {
        valid_until.is_some_and(|until| self.clock.now() >= until)
    }

    fn still_valid(&self, who: &Who) -> bool {
        !self.expired(who.valid_until())
    }

    fn is_fresh(&self, entry: &CachedVerdict<Who>) -> bool {
        elapsed(entry.at, self.clock.now()) < self.cache_ttl
    }

    /// The request's one credential, claimed by a scheme and past its precheck.
    fn claimed<'h>(
        &self,
        headers: &'h HeaderMap,
        certificate: Option<&'h ClientCertificate>,
    ) -> Result<Claimed<'h>, AuthError> {
        let presented = Presented::from_request(
            headers,
            self.listener.key_header.as_ref(),
            certificate.filter(|_| self.listener.takes_certificates),
        )?
        .ok_or(AuthError::MissingCredentials)?;
        let scheme = self
            .schemes
            .iter()
            .position(|s| s.claims(&presented))
            .ok_or(AuthError::SchemeNotEnabled)?;
        let credentials = presented.credentials();
        // Junk and typos are refused here, before any cache or store.
        self.schemes[scheme].precheck(credentials)?;
        Ok(Claimed {
            scheme,
            credentials,
            context: Context { certificate },
        })
    }
}

/// The cache key of a presented credential: a hash, so no credential is kept in memory longer
/// than the request. The connection's certificate is part of it: a verdict on a token bound to
/// a certificate holds for that certificate only.
fn cache_key(presented: &Claimed<'_>) -> [u8; 32] {
    let mut hasher = Sha256::new();
    hasher.update((presented.scheme as u64).to_le_bytes());
    hasher.update(
        presented
            .context
            .certificate
            .map_or([0; 32], |certificate| certificate.sha256),
    );
    hasher.update(presented.credentials.as_bytes());
    hasher.finalize().into()
}

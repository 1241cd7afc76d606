//! HTTP Basic (RFC 7617): a name and a password a person chose, checked with Argon2id.
//!
//! The one Basic parser and the one Argon2 pool ([`PasswordChecker`]) serve peers on the door
//! and administrators on the admin API; only where logins come from differs ([`Logins`]). A
//! name without a password, or no such name, costs one dummy verification, so the answer's
//! timing does not tell which names exist.

use super::AuthError;
use super::password::PasswordChecker;
use super::scheme::{Context, CredentialScheme, Failure, Presented};
use crate::store::StoreError;
use async_trait::async_trait;
use base64::Engine as _;
use std::sync::Arc;

/// The peer name and password of Basic credentials: standard base64 of UTF-8 `name:password`,
/// split at the first colon. Anything else is a malformed header.
pub fn parse_basic(encoded: &str) -> Result<(String, String), AuthError> {
    let decoded = base64::engine::general_purpose::STANDARD
        .decode(encoded)
        .map_err(|_| AuthError::MalformedHeader)?;
    let decoded = String::from_utf8(decoded).map_err(|_| AuthError::MalformedHeader)?;
    let (name, password) = decoded.split_once(':').ok_or(AuthError::MalformedHeader)?;
    Ok((name.to_owned(), password.to_owned()))
}

/// A login as Basic needs it.
#[derive(Debug, Clone)]
pub struct Login<Who> {
    /// Who signs in.
    pub who: Who,
    /// Argon2id PHC string, if a password was set.
    pub password_hash: Option<String>,
    /// False once revoked or disabled.
    pub active: bool,
}

/// Where logins come from (peers for the door, administrators for the admin API).
#[async_trait]
pub trait Logins<Who>: Send + Sync {
    /// The login named `name`, if any.
    async fn login(&self, name: &str) -> Result<Option<Login<Who>>, StoreError>;
}

/// The Basic scheme over one source of logins.
pub struct Basic<Who> {
    logins: Arc<dyn Logins<Who>>,
    passwords: PasswordChecker,
    realm: &'static str,
    /// Whether a login past the password queue waits instead of being refused at once.
    waits: bool,
    /// Whether the challenge names `xBasic` instead of `Basic` (see [`Basic::announced_as_xbasic`]).
    xbasic: bool,
}

/// The challenge that invites Basic credentials in `realm`; as `xBasic`, a scheme no browser
/// handles, when `xbasic`.
pub fn basic_challenge(realm: &str, xbasic: bool) -> String {
    let word = if xbasic { "xBasic" } else { "Basic" };
    format!(r#"{word} realm="{realm}", charset="UTF-8""#)
}

impl<Who> Basic<Who> {
    /// Basic in `realm`, checking passwords with the shared pool.
    pub fn new(
        logins: Arc<dyn Logins<Who>>,
        passwords: PasswordChecker,
        realm: &'static str,
    ) -> Self {
        Self {
            logins,
            passwords,
            realm,
            waits: false,
            xbasic: false,
        }
    }

    /// Announces Basic as `xBasic`, a scheme no browser handles: a browser that reaches the
    /// listener never offers to collect a password and then keep sending it (to requests
    /// another site's page makes, too). Programs send Basic without being asked, and it is
    /// still `Basic` they send.
    pub fn announced_as_xbasic(mut self) -> Self {
        self.xbasic = true;
        self
    }

    /// Logins wait for a password slot however long the queue, instead of being refused when
    /// it is full (the admin API: a flood at the door must not lock administrators out).
    pub fn waiting_for_a_slot(mut self) -> Self {
        self.waits = true;
        self
    }
}

#[async_trait]
impl<Who: Send + Sync + 'static> CredentialScheme<Who> for Basic<Who> {
    fn name(&self) -> &'static str {
        "basic"
    }

    fn challenge(&self) -> String {
        basic_challenge(self.realm, self.xbasic)
    }

    fn claims(&self, presented: &Presented<'_>) -> bool {
        matches!(presented, Presented::Authorization { scheme, .. } if scheme.eq_ignore_ascii_case("basic"))
    }

    fn precheck(&self, _credentials: &str) -> Result<(), AuthError> {
        // Decoding is cheap but belongs to verification: a bad encoding is a refused attempt.
        Ok(())
    }

    async fn verify(&self, credentials: &str, _context: &Context<'_>) -> Result<Who, Failure> {
        let (name, password) = parse_basic(credentials)?;
        let login = self.logins.login(&name).await.map_err(|e| {
            tracing::error!(error = %e, "login look-up failed");
            AuthError::Unavailable
        })?;
        let phc = login.as_ref().and_then(|l| l.password_hash.as_deref());
        let checked = if self.waits {
            self.passwords.verify_waiting(phc, &password).await
        } else {
            self.passwords.verify(phc, &password).await
        };
        let matched = checked.map_err(|_| AuthError::Busy)?;
        match login {
            Some(login) if matched && login.active => Ok(login.who),
            _ => Err(Failure {
                error: AuthError::InvalidCredentials,
                name: Some(name),
                subject: None,
            }),
        }
    }
}

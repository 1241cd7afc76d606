//! The seam every authentication scheme sits behind, for the A2A door and the admin API alike.
//!
//! A scheme is one [`CredentialScheme`] implementation: it says whether a presented credential
//! is its own, refuses junk cheaply (format, checksum) before any cache or store is asked, and
//! verifies the rest. The authenticators around it own everything schemes share: the one
//! parser of the `Authorization` header ([`Presented::from_headers`]), the failed-attempt
//! budget, the verdict cache and the answers. Adding a scheme is a new module with one
//! implementation and one line where the authenticator registers its schemes.

use super::AuthError;
use crate::guard::certificate::ClientCertificate;
use async_trait::async_trait;
use axum::http::{HeaderMap, HeaderName, header};

/// A credential as presented, before any scheme looked at it.
#[derive(Clone, Copy, PartialEq, Eq)]
pub enum Presented<'h> {
    /// `Authorization: <scheme> <credentials>`.
    Authorization {
        /// The scheme word as sent (compared without regard to case).
        scheme: &'h str,
        /// The credentials, without surrounding spaces.
        credentials: &'h str,
    },
    /// A credential in a header of its own (an API key).
    Header(&'h str),
    /// No credential in the headers, and a client certificate the TLS handshake verified (on a
    /// listener that takes certificates).
    Certificate(&'h ClientCertificate),
}

/// What a scheme may know about the request besides the credential: the client certificate
/// the connection presented, if any (a certificate-bound token is checked against it).
#[derive(Debug, Clone, Copy, Default)]
pub struct Context<'r> {
    /// The verified client certificate.
    pub certificate: Option<&'r ClientCertificate>,
}

impl std::fmt::Debug for Presented<'_> {
    /// Names the carrier, never the credential.
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Self::Authorization { scheme, .. } => write!(f, "Authorization({scheme} …)"),
            Self::Header(_) => f.write_str("Header(…)"),
            Self::Certificate(_) => f.write_str("Certificate(…)"),
        }
    }
}

impl<'h> Presented<'h> {
    /// The one credential a request carries: exactly one `Authorization` header or (when
    /// `key_header` is given) exactly one key header, never both; `None` when neither is there.
    /// Two credentials are refused whole, so neither is tried.
    pub fn from_headers(
        headers: &'h HeaderMap,
        key_header: Option<&HeaderName>,
    ) -> Result<Option<Self>, AuthError> {
        Self::from_request(headers, key_header, None)
    }

    /// As [`Presented::from_headers`], and when the headers carry none, the client certificate
    /// (given only by listeners that take certificates).
    pub fn from_request(
        headers: &'h HeaderMap,
        key_header: Option<&HeaderName>,
        certificate: Option<&'h ClientCertificate>,
    ) -> Result<Option<Self>, AuthError> {
        let mut authorization = headers.get_all(header::AUTHORIZATION).iter();
        let first = authorization.next();
        if authorization.next().is_some() {
            return Err(AuthError::AmbiguousCredentials);
        }
        let key = match key_header {
            Some(name) => {
                let mut keys = headers.get_all(name).iter();
                let key = keys.next();
                if keys.next().is_some() {
                    return Err(AuthError::AmbiguousCredentials);
                }
                key
            }
            None => None,
        };
        match (first, key) {
            (Some(_), Some(_)) => Err(AuthError::AmbiguousCredentials),
            (None, None) => Ok(certificate.map(Self::Certificate)),
            (None, Some(key)) => {
                let key = key.to_str().map_err(|_| AuthError::InvalidCredentials)?;
                Ok(Some(Self::Header(key.trim())))
            }
            (Some(value), None) => {
                let value = value.to_str().map_err(|_| AuthError::MalformedHeader)?;
                let (scheme, rest) = value.split_once(' ').ok_or(AuthError::MalformedHeader)?;
                let credentials = rest.trim_matches(' ');
                if credentials.is_empty() || credentials.contains(' ') {
                    return Err(AuthError::MalformedHeader);
                }
                Ok(Some(Self::Authorization {
                    scheme,
                    credentials,
                }))
            }
        }
    }

    /// The credential text, whichever header carried it.
    pub fn credentials(&self) -> &'h str {
        match self {
            Self::Authorization { credentials, .. } => credentials,
            Self::Header(value) => value,
            Self::Certificate(certificate) => &certificate.sha256_hex,
        }
    }
}

/// Why a verification failed, and the name it was made for when one was given (the admin API
/// audits failed sign-ins by name; the door never shows it).
#[derive(Clone, PartialEq, Eq)]
pub struct Failure {
    /// What was wrong.
    pub error: AuthError,
    /// The login name tried, if any.
    pub name: Option<String>,
    /// The identity a verified token named (`issuer:subject`), when it opened nothing: not a
    /// secret, so the admin API's audit names it.
    pub subject: Option<String>,
}

impl std::fmt::Debug for Failure {
    /// Without the name: a password typed into the name field must not reach a log.
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Failure")
            .field("error", &self.error)
            .finish_non_exhaustive()
    }
}

impl From<AuthError> for Failure {
    fn from(error: AuthError) -> Self {
        Self {
            error,
            name: None,
            subject: None,
        }
    }
}

/// One way of presenting a credential, verified into a `Who` (a peer, an administrator).
#[async_trait]
pub trait CredentialScheme<Who>: Send + Sync {
    /// Its name as a 401 lists the accepted schemes (the policy's, `auth.schemes`).
    fn name(&self) -> &'static str;

    /// The `WWW-Authenticate` challenge that invites this scheme.
    fn challenge(&self) -> String;

    /// Whether the presented credential is this scheme's to judge.
    fn claims(&self, presented: &Presented<'_>) -> bool;

    /// Refuses a credential that cannot be valid without asking anything (its format, its
    /// checksum), so junk and typos cost no cache entry and no store read.
    fn precheck(&self, credentials: &str) -> Result<(), AuthError>;

    /// The public id inside a credential this scheme issued (a generated token's id), if it
    /// has one; called only after [`CredentialScheme::precheck`] passed.
    fn credential_id<'c>(&self, credentials: &'c str) -> Option<&'c str> {
        let _ = credentials;
        None
    }

    /// The error for a credential that was checked and found wrong.
    fn refused(&self) -> AuthError {
        AuthError::InvalidCredentials
    }

    /// Whether verifying a credential is work worth rationing (Argon2 for a password). Such a
    /// credential is charged to the client's failed-attempt budget *before* it is verified and
    /// refunded when it verifies, so concurrent guesses cannot outrun the budget. A cheap one
    /// (a generated token: a hash and a look-up) is verified first and charged only when it
    /// fails, so a credential that verifies is never charged, nor refused because its address's
    /// budget is spent. Unknown schemes are costly: the safe default.
    fn verification_is_costly(&self) -> bool {
        true
    }

    /// Verifies `credentials` (already prechecked), on a request of `context`.
    async fn verify(&self, credentials: &str, context: &Context<'_>) -> Result<Who, Failure>;
}

#[cfg(test)]
mod tests {
    use super::*;
    use axum::http::HeaderValue;

    fn headers(pairs: &[(&str, &str)]) -> HeaderMap {
        let mut map = HeaderMap::new();
        for (name, value) in pairs {
            map.append(
                HeaderName::from_bytes(name.as_bytes()).unwrap(),
                HeaderValue::from_str(value).unwrap(),
            );
        }
        map
    }

    #[test]
    fn one_credential_or_a_named_refusal() {
        let key = HeaderName::from_static("x-api-key");
        let parse = |pairs: &[(&str, &str)]| {
            Presented::from_headers(&headers(pairs), Some(&key))
                .map(|p| p.map(|p| p.credentials().to_owned()))
        };
        assert_eq!(parse(&[]), Ok(None));
        assert_eq!(
            parse(&[("authorization", "Bearer  abc ")]),
            Ok(Some("abc".into()))
        );
        assert_eq!(parse(&[("x-api-key", " k ")]), Ok(Some("k".into())));
        assert_eq!(
            parse(&[("authorization", "Bearer a"), ("x-api-key", "k")]),
            Err(AuthError::AmbiguousCredentials)
        );
        assert_eq!(
            parse(&[("authorization", "Bearer a"), ("authorization", "Bearer b")]),
            Err(AuthError::AmbiguousCredentials)
        );
        assert_eq!(
            parse(&[("authorization", "Bearer")]),
            Err(AuthError::MalformedHeader)
        );
        assert_eq!(
            parse(&[("authorization", "Bearer a b")]),
            Err(AuthError::MalformedHeader)
        );
    }
}

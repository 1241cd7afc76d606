//! Machine-generated credentials (peer tokens, API keys, administrator tokens), in the
//! `Authorization: Bearer` header or a header of their own.
//!
//! The checksum refuses typos and junk before any cache or store; the token id finds the row;
//! the secret's hash is compared in constant time. One implementation serves every kind; where
//! the records come from differs ([`TokenRecords`]).

use super::AuthError;
use super::scheme::{Context, CredentialScheme, Failure, Presented};
use crate::store::StoreError;
use crate::token::{self, CredentialKind, TokenSecretHash};
use async_trait::async_trait;
use std::sync::Arc;

/// A stored credential as verification needs it.
#[derive(Debug, Clone)]
pub struct TokenRecord<Who> {
    /// Whom it authenticates.
    pub who: Who,
    /// The secret's hash.
    pub secret_hash: TokenSecretHash,
    /// False once it or its holder is revoked or disabled.
    pub active: bool,
    /// The holder's name, for the audit of a failed sign-in.
    pub name: String,
}

/// Where credentials of one kind are found by token id.
#[async_trait]
pub trait TokenRecords<Who>: Send + Sync {
    /// The credential with this token id, whatever its state.
    async fn record(&self, token_id: &str) -> Result<Option<TokenRecord<Who>>, StoreError>;
}

/// Which header carries the credential.
#[derive(Debug, Clone)]
pub enum Carrier {
    /// `Authorization: Bearer <credential>`.
    Bearer,
    /// A header of its own; the label is the header as the operator spelled it.
    Header {
        /// For the challenge.
        label: String,
    },
}

/// One kind of generated credential.
pub struct GeneratedCredential<Who> {
    kind: CredentialKind,
    carrier: Carrier,
    records: Arc<dyn TokenRecords<Who>>,
    realm: &'static str,
    /// Credentials of these kinds are refused as foreign (a peer's token on the admin API).
    foreign: &'static [CredentialKind],
    /// The refusal for a credential that fails its format or checksum.
    malformed: AuthError,
    /// The refusal for a credential that was checked and found wrong.
    refused: AuthError,
}

/// The challenge that invites a Bearer credential in `realm`.
pub fn bearer_challenge(realm: &str) -> String {
    format!(r#"Bearer realm="{realm}""#)
}

impl<Who> GeneratedCredential<Who> {
    /// Credentials of `kind` carried by `carrier`, looked up in `records`.
    pub fn new(
        kind: CredentialKind,
        carrier: Carrier,
        records: Arc<dyn TokenRecords<Who>>,
        realm: &'static str,
    ) -> Self {
        let bearer = matches!(carrier, Carrier::Bearer);
        Self {
            kind,
            carrier,
            records,
            realm,
            foreign: &[],
            // RFC 6750: a bearer token that is not one is an invalid token.
            malformed: if bearer {
                AuthError::MalformedToken
            } else {
                AuthError::InvalidCredentials
            },
            refused: if bearer {
                AuthError::InvalidToken
            } else {
                AuthError::InvalidCredentials
            },
        }
    }

    /// Refuses credentials of the `foreign` kinds by name, and any other bad one as invalid
    /// credentials (the admin API's wording).
    pub fn refusing_foreign(mut self, foreign: &'static [CredentialKind]) -> Self {
        self.foreign = foreign;
        self.malformed = AuthError::InvalidCredentials;
        self.refused = AuthError::InvalidCredentials;
        self
    }
}

#[async_trait]
impl<Who: Send + Sync + 'static> CredentialScheme<Who> for GeneratedCredential<Who> {
    fn name(&self) -> &'static str {
        match self.kind {
            CredentialKind::PeerToken => "bearer",
            CredentialKind::ApiKey => "api_key",
            CredentialKind::AdminToken => "admin_token",
        }
    }

    fn verification_is_costly(&self) -> bool {
        false
    }

    fn challenge(&self) -> String {
        match &self.carrier {
            Carrier::Bearer => bearer_challenge(self.realm),
            Carrier::Header { label } => {
                format!(r#"ApiKey realm="{}", header="{label}""#, self.realm)
            }
        }
    }

    fn claims(&self, presented: &Presented<'_>) -> bool {
        match (&self.carrier, presented) {
            (Carrier::Bearer, Presented::Authorization { scheme, .. }) => {
                scheme.eq_ignore_ascii_case("bearer")
            }
            (Carrier::Header { .. }, Presented::Header(_)) => true,
            _ => false,
        }
    }

    fn credential_id<'c>(&self, credentials: &'c str) -> Option<&'c str> {
        token::parse(self.kind, credentials)
            .ok()
            .map(|parsed| parsed.token_id)
    }

    fn precheck(&self, credentials: &str) -> Result<(), AuthError> {
        if self
            .foreign
            .iter()
            .any(|kind| credentials.starts_with(kind.prefix()))
        {
            return Err(AuthError::ForeignCredential);
        }
        token::parse(self.kind, credentials)
            .map(|_| ())
            .map_err(|_| self.malformed)
    }

    fn refused(&self) -> AuthError {
        self.refused
    }

    async fn verify(&self, credentials: &str, _context: &Context<'_>) -> Result<Who, Failure> {
        let parsed = token::parse(self.kind, credentials).map_err(|_| self.malformed)?;
        let record = self
            .records
            .record(parsed.token_id)
            .await
            .map_err(|e| {
                tracing::error!(error = %e, "credential look-up failed");
                AuthError::Unavailable
            })?
            .ok_or(self.refused)?;
        if !parsed.matches(&record.secret_hash) || !record.active {
            return Err(Failure {
                error: self.refused,
                name: Some(record.name),
                subject: None,
            });
        }
        Ok(record.who)
    }
}
